// Command rootfsimage packs a root filesystem directory into a
// single-platform OCI image and writes it as an OCI archive (a tar of an
// OCI layout) that `ctr images import` reads. The node's images (the pod
// sandbox, busybox, later the databases) are assembled from this machine's
// Debian packages, because no image registry can be reached here.
//
//	rootfsimage --rootfs DIR --name deckhand-local/busybox:1.35.0 --out busybox.tar \
//	  [--entrypoint /bin/sh] [--cmd arg]... [--user 65532:65532] [--env K=V]...
package main

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// options say which image to build.
type options struct {
	rootfs, name, out, user, workdir, stopSignal string
	entrypoint, cmd, env                         listFlag
}

func main() {
	var o options
	flag.StringVar(&o.rootfs, "rootfs", "", "root filesystem directory")
	flag.StringVar(&o.name, "name", "", "image reference, e.g. deckhand-local/busybox:1.35.0")
	flag.StringVar(&o.out, "out", "", "OCI archive to write")
	flag.StringVar(&o.user, "user", "", "the image's user (uid:gid)")
	flag.StringVar(&o.workdir, "workdir", "/", "the image's working directory")
	flag.Var(&o.entrypoint, "entrypoint", "entrypoint element (repeat)")
	flag.Var(&o.cmd, "cmd", "cmd element (repeat)")
	flag.Var(&o.env, "env", "environment variable K=V (repeat)")
	flag.StringVar(&o.stopSignal, "stop-signal", "", "the signal that stops the image's process (default: the runtime's, SIGTERM)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "rootfsimage:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.rootfs == "" || o.name == "" || o.out == "" {
		return errors.New("--rootfs, --name and --out are required")
	}
	img, err := imageOf(o)
	if err != nil {
		return err
	}
	return writeArchive(img, o)
}

// epoch is every file's mtime and the image's creation time, so the same
// root filesystem always gives the same image digest.
var epoch = time.Unix(0, 0).UTC()

func imageOf(o options) (v1.Image, error) {
	layerTar, err := tarOfDir(o.rootfs)
	if err != nil {
		return nil, err
	}
	defer os.Remove(layerTar)
	layer, err := tarball.LayerFromFile(layerTar, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	// Read the layer once now: its temporary file is removed on return.
	if _, err := layer.Digest(); err != nil {
		return nil, err
	}
	layer, err = materialize(layer)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = o.entrypoint
	cfg.Config.Cmd = o.cmd
	cfg.Config.User = o.user
	cfg.Config.WorkingDir = o.workdir
	cfg.Config.Env = withDefaultPath(o.env)
	cfg.Config.StopSignal = o.stopSignal
	return mutate.ConfigFile(img, cfg)
}

// withDefaultPath is the image's environment: the variables given, and
// the usual PATH unless one of them is a PATH (the postgres image puts
// the server's directory first).
func withDefaultPath(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			return env
		}
	}
	return append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
}

// materialize keeps the compressed layer in memory, so it no longer needs
// the temporary uncompressed tar.
func materialize(l v1.Layer) (v1.Layer, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(string(b))), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// tarOfDir writes the directory's tree to a new temporary tar file.
func tarOfDir(dir string) (string, error) {
	f, err := os.CreateTemp("", "rootfsimage-*.tar")
	if err != nil {
		return "", err
	}
	err = writeTar(dir, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// writeTar writes the directory's tree (files, directories, symlinks, with
// their modes and numeric owners) as a tar stream.
func writeTar(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		return addEntry(tw, dir, p)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func addEntry(tw *tar.Writer, dir, p string) error {
	info, err := os.Lstat(p)
	if err != nil {
		return err
	}
	link := ""
	if info.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	if !info.Mode().IsRegular() && !info.IsDir() && link == "" {
		return nil // devices, sockets, fifos: the runtime provides /dev
	}
	h, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	rel, _ := filepath.Rel(dir, p)
	h.Name = filepath.ToSlash(rel)
	if info.IsDir() {
		h.Name += "/"
	}
	h.ModTime, h.AccessTime, h.ChangeTime = epoch, time.Time{}, time.Time{}
	h.Uname, h.Gname = "", ""
	h.Format = tar.FormatPAX
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// writeArchive writes the image as an OCI layout whose index names it the
// way containerd's importer reads (io.containerd.image.name, fully
// qualified as the kubelet asks for it) and tars that layout to o.out.
func writeArchive(img v1.Image, o options) error {
	dir, err := os.MkdirTemp("", "rootfsimage-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	tag := o.name[strings.LastIndex(o.name, ":")+1:]
	if err := l.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          qualified(o.name),
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return err
	}
	f, err := os.Create(o.out)
	if err != nil {
		return err
	}
	err = writeTar(dir, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// qualified is the reference as the kubelet normalizes it
// (deckhand-local/x:1 -> docker.io/deckhand-local/x:1).
func qualified(name string) string {
	first := strings.SplitN(name, "/", 2)[0]
	if !strings.Contains(name, "/") {
		return "docker.io/library/" + name
	}
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		return name
	}
	return "docker.io/" + name
}
