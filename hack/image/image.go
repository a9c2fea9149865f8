package main

import (
	"archive/tar"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// The image's contract with the chart (charts/deckhand/values.yaml
// podSecurityContext and templates/deployment.yaml): the operator binary is
// the entrypoint, the chart passes only args, and it runs as this numeric
// user and group, which runAsNonRoot can check without an /etc/passwd.
const (
	Entrypoint = "/deckhand"
	User       = "65532:65532"
	// LibDir holds the JMX exporter's attach helpers, which the operator
	// copies into Java containers of either architecture, the PostgreSQL
	// instance agent (deckhand-instance, this platform's), and, where it
	// can be fetched, the upstream agent jar (see the Dockerfile's pin).
	LibDir = "/usr/local/lib/deckhand"
)

// AgentJarLabel marks an image built with Options.AgentJar, so it cannot be
// taken for one carrying upstream's agent.
const AgentJarLabel = "dev.deckhand.jmx-agent-jar"

// helperArchs are the architectures of the JMX attach helper in every
// image: the operator copies the one matching the target container.
var helperArchs = []string{"amd64", "arm64"}

// Options say what to build.
type Options struct {
	Root      string   // the repository
	Out       string   // OCI layout directory, replaced
	Platforms []string // linux/amd64, linux/arm64
	Version   string   // stamped into the binary and the image labels
	// Created is the image's creation time and every file's mtime, so a
	// build of the same sources is the same image (SOURCE_DATE_EPOCH).
	Created time.Time
	// AgentJar, when set, is a JMX exporter agent jar put where the
	// operator looks for upstream's (AgentJarPath). Only the real node's
	// test image uses it, with the test stand-in (hack/node.sh operator):
	// upstream's jar cannot be fetched here, and the JMX controller cannot
	// attach without one.
	AgentJar string
	// Tag names the image in the layout's index.json (default: Version).
	Tag string
	// BinDir, when set, is where the binaries are built, kept between
	// builds: go build -o does not link a binary again when the one there
	// has the build's ID (linking is most of a rebuild's CPU). Default: a
	// temporary directory, removed after the build.
	BinDir string
}

// AgentJarPath is where the Dockerfile puts the upstream agent jar, the
// chart's controllers.jmxExporter.agentJar default.
const AgentJarPath = LibDir + "/jmx_prometheus_javaagent.jar"

// Build compiles the static binaries and writes a multi-platform image,
// from nothing (no base image), as an OCI layout at opts.Out whose
// index.json names it opts.Tag (default opts.Version).
func Build(opts Options) (v1.ImageIndex, error) {
	work := opts.BinDir
	if work == "" {
		tmp, err := os.MkdirTemp("", "deckhand-image-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		work = tmp
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}

	helpers := map[string]string{}
	for _, arch := range helperArchs {
		out := filepath.Join(work, "deckhand-jmx-attach-linux-"+arch)
		if err := goBuild(opts.Root, arch, "./cmd/deckhand-jmx-attach", out, ""); err != nil {
			return nil, err
		}
		helpers[path.Join(LibDir, filepath.Base(out))] = out
	}
	if opts.AgentJar != "" {
		helpers[AgentJarPath] = opts.AgentJar
	}
	helperLayer, err := layerOf(helpers, opts.Created)
	if err != nil {
		return nil, err
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range opts.Platforms {
		osName, arch, ok := strings.Cut(p, "/")
		if !ok || osName != "linux" {
			return nil, fmt.Errorf("platform %q: want linux/<arch>", p)
		}
		bin := filepath.Join(work, "deckhand-"+arch)
		if err := goBuild(opts.Root, arch, "./cmd/deckhand", bin, "-X main.version="+opts.Version); err != nil {
			return nil, err
		}
		// The instance agent, for this platform: a database pod's init
		// container copies it out of this image (instance.AgentImagePath).
		agent := filepath.Join(work, "deckhand-instance-"+arch)
		if err := goBuild(opts.Root, arch, "./cmd/deckhand-instance", agent, ""); err != nil {
			return nil, err
		}
		binLayer, err := layerOf(map[string]string{Entrypoint: bin, instance.AgentImagePath: agent}, opts.Created)
		if err != nil {
			return nil, err
		}
		img, err := imageOf(arch, opts, binLayer, helperLayer)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}

	if err := os.RemoveAll(opts.Out); err != nil {
		return nil, err
	}
	l, err := layout.Write(opts.Out, empty.Index)
	if err != nil {
		return nil, err
	}
	if err := l.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": cmp.Or(opts.Tag, opts.Version),
	})); err != nil {
		return nil, err
	}
	return idx, nil
}

// imageOf is one platform's image: the binary layer over the helpers'.
func imageOf(arch string, opts Options, layers ...v1.Layer) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Created = v1.Time{Time: opts.Created}
	cfg.Config.User = User
	cfg.Config.Entrypoint = []string{Entrypoint}
	cfg.Config.WorkingDir = "/"
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "deckhand",
		"org.opencontainers.image.version": opts.Version,
		"org.opencontainers.image.source":  "https://github.com/deckhand-dev/deckhand",
	}
	if opts.AgentJar != "" {
		cfg.Config.Labels[AgentJarLabel] = "not upstream's jar: " + filepath.Base(opts.AgentJar)
	}
	return mutate.ConfigFile(img, cfg)
}

// goBuild compiles a static linux binary, as the Dockerfile does.
func goBuild(root, arch, pkg, out, ldflags string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w "+ldflags), "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for linux/%s: %w\n%s", pkg, arch, err, b)
	}
	return nil
}

// layerOf is a layer holding files (image path -> local file), mode 0755,
// owned by root, with their parent directories, all at mtime.
func layerOf(files map[string]string, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	for _, p := range paths {
		for _, d := range parents(p) {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: mtime}); err != nil {
				return nil, err
			}
		}
		b, err := os.ReadFile(files[p])
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: 0o755, Size: int64(len(b)), ModTime: mtime}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// parents lists a path's directories, outermost first ("/usr/local/lib/x"
// -> /usr, /usr/local, /usr/local/lib).
func parents(p string) []string {
	var out []string
	for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}
