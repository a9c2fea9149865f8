package main

import (
	"archive/tar"
	"bufio"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// builtImage builds the image for this host's architecture (its binary
// must run here) and reads it back from the OCI layout, as a registry
// client would.
func builtImage(t *testing.T) (dir string, files map[string][]byte, cfg map[string]any) {
	t.Helper()
	return builtImageWith(t, Options{Version: "1.2.3-test"}, "1.2.3-test")
}

// binDir is where every build of this package's tests puts its binaries
// (Options.BinDir): the same sources and version, so only the first build
// links them, as make image's second build of unchanged sources does.
var binDir = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "deckhand-image-test-") })

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := binDir(); err == nil {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// builtImageWith is builtImage with more options; the layout must name the
// image wantTag.
func builtImageWith(t *testing.T, opts Options, wantTag string) (dir string, files map[string][]byte, cfg map[string]any) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "image")
	platform := "linux/" + runtime.GOARCH
	bins, err := binDir()
	require.NoError(t, err)
	opts.Root, opts.Out, opts.Platforms, opts.Created, opts.BinDir = testenv.Root(t), dir, []string{platform}, time.Unix(0, 0).UTC(), bins
	_, err = Build(opts)
	require.NoError(t, err)

	p, err := layout.FromPath(dir)
	require.NoError(t, err)
	top, err := p.ImageIndex()
	require.NoError(t, err)
	topManifest, err := top.IndexManifest()
	require.NoError(t, err)
	require.Len(t, topManifest.Manifests, 1)
	assert.Equal(t, wantTag, topManifest.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	idx, err := top.ImageIndex(topManifest.Manifests[0].Digest)
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1)
	assert.Equal(t, platform, im.Manifests[0].Platform.OS+"/"+im.Manifests[0].Platform.Architecture)
	img, err := idx.Image(im.Manifests[0].Digest)
	require.NoError(t, err)

	raw, err := img.RawConfigFile()
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &cfg))

	files = map[string][]byte{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files["/"+strings.TrimSuffix(h.Name, "/")] = b
	}
	return dir, files, cfg
}

// chartDefaults renders the chart's default Deployment and helm test Job.
func chartDefaults(t *testing.T) (*appsv1.Deployment, *batchv1.Job) {
	t.Helper()
	r, err := testenv.RenderChart(t, testenv.ChartDir(t), "deckhand", "deckhand-system", map[string]any{})
	require.NoError(t, err)
	d := testenv.Into[appsv1.Deployment](t, r.Operator(t, "Deployment"))
	require.Len(t, r.Tests, 1)
	return d, testenv.Into[batchv1.Job](t, r.Tests[0])
}

// TestImage builds the image once (two static binaries per platform) and
// checks it against the chart and by running it.
func TestImage(t *testing.T) {
	_, files, cfg := builtImage(t)
	t.Run("is what the chart runs", func(t *testing.T) { imageIsWhatTheChartRuns(t, files, cfg) })
	t.Run("binary starts", func(t *testing.T) { imageBinaryStarts(t, files) })
}

func imageIsWhatTheChartRuns(t *testing.T, files map[string][]byte, cfg map[string]any) {
	d, job := chartDefaults(t)
	config := cfg["config"].(map[string]any)

	// The user: numeric (runAsNonRoot can only check a number), the one
	// the chart's podSecurityContext runs as.
	pod := d.Spec.Template.Spec.SecurityContext
	require.NotNil(t, pod)
	require.True(t, *pod.RunAsNonRoot)
	user, group, _ := strings.Cut(config["User"].(string), ":")
	assert.Equal(t, strconv.FormatInt(*pod.RunAsUser, 10), user)
	assert.Equal(t, strconv.FormatInt(*pod.RunAsGroup, 10), group)

	// The entrypoint is the operator: the chart gives args, never a command.
	assert.Equal(t, []any{"/deckhand"}, config["Entrypoint"])
	assert.Nil(t, config["Cmd"])
	for _, c := range append(d.Spec.Template.Spec.Containers, job.Spec.Template.Spec.Containers...) {
		assert.Empty(t, c.Command, "container %s replaces the entrypoint", c.Name)
	}
	assert.Equal(t, "probe", job.Spec.Template.Spec.Containers[0].Args[0], "helm test runs the image's own binary")
	assert.Equal(t, "1.2.3-test", config["Labels"].(map[string]any)["org.opencontainers.image.version"])

	// Nothing but the binaries: no shell, no base image.
	var paths []string
	for p, b := range files {
		if len(b) > 0 {
			paths = append(paths, p)
		}
	}
	assert.ElementsMatch(t, []string{
		"/deckhand",
		"/usr/local/lib/deckhand/deckhand-instance",
		"/usr/local/lib/deckhand/deckhand-jmx-attach-linux-amd64",
		"/usr/local/lib/deckhand/deckhand-jmx-attach-linux-arm64",
	}, paths)
	for _, sh := range []string{"/bin/sh", "/bin/bash", "/bin/busybox", "/usr/bin/sh"} {
		assert.NotContains(t, files, sh)
	}

	// Every binary is static and built for its architecture.
	for p, machine := range map[string]elf.Machine{
		"/deckhand": map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH],
		"/usr/local/lib/deckhand/deckhand-instance":               map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH],
		"/usr/local/lib/deckhand/deckhand-jmx-attach-linux-amd64": elf.EM_X86_64,
		"/usr/local/lib/deckhand/deckhand-jmx-attach-linux-arm64": elf.EM_AARCH64,
	} {
		f, err := elf.NewFile(strings.NewReader(string(files[p])))
		require.NoError(t, err, p)
		assert.Equal(t, machine, f.Machine, p)
		for _, prog := range f.Progs {
			assert.NotEqual(t, elf.PT_INTERP, prog.Type, "%s is dynamically linked", p)
		}
	}
}

func imageBinaryStarts(t *testing.T, files map[string][]byte) {
	bin := filepath.Join(t.TempDir(), "deckhand")
	require.NoError(t, os.WriteFile(bin, files["/deckhand"], 0o755))

	out, err := exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "1.2.3-test\n", string(out), "make image stamps its version")

	out, err = exec.Command(bin, "probe", "--help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "Usage: deckhand probe --health URL")

	out, err = exec.Command(bin, "--help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "--controllers")

	// The instance agent copies itself out of the image (a database pod's
	// init container does, into an emptyDir), and the copy runs.
	require.Equal(t, "/usr/local/lib/deckhand/deckhand-instance", instance.AgentImagePath)
	agent := filepath.Join(t.TempDir(), "deckhand-instance")
	require.NoError(t, os.WriteFile(agent, files[instance.AgentImagePath], 0o755))
	copied := filepath.Join(t.TempDir(), "bin", "deckhand-instance")
	require.NoError(t, os.MkdirAll(filepath.Dir(copied), 0o755))
	out, err = exec.Command(agent, "install", copied).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(copied, "serve", "--help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "-tls-dir")
}

// The real node's operator image (hack/node.sh operator) carries the JMX
// test stand-in agent where the Dockerfile puts upstream's jar, the
// chart's agentJar default, under a tag of its own and a label saying it
// is not upstream's.
func TestImageWithAnAgentJar(t *testing.T) {
	jar := filepath.Join(t.TempDir(), "stand-in-agent.jar")
	require.NoError(t, os.WriteFile(jar, []byte("PK stand-in"), 0o644))
	_, files, cfg := builtImageWith(t, Options{Version: "1.2.3-test", Tag: "1.2.3-test-standin-agent", AgentJar: jar},
		"1.2.3-test-standin-agent")
	assert.Equal(t, "PK stand-in", string(files[AgentJarPath]))
	raw, err := os.ReadFile(filepath.Join(testenv.ChartDir(t), "values.yaml"))
	require.NoError(t, err)
	var values struct {
		Controllers struct {
			JmxExporter struct {
				AgentJar string `json:"agentJar"`
			} `json:"jmxExporter"`
		} `json:"controllers"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &values))
	assert.Equal(t, AgentJarPath, values.Controllers.JmxExporter.AgentJar, "the chart's agentJar default is where the jar is")
	labels := cfg["config"].(map[string]any)["Labels"].(map[string]any)
	assert.Equal(t, "not upstream's jar: stand-in-agent.jar", labels[AgentJarLabel])
	assert.Equal(t, "1.2.3-test", labels["org.opencontainers.image.version"])
}

// The Dockerfile builds the same image for users with Docker: its final
// stage is scratch with the same user and entrypoint, and VERSION reaches
// the binary.
func TestDockerfileBuildsTheSameImage(t *testing.T) {
	f, err := os.Open(filepath.Join(testenv.Root(t), "Dockerfile"))
	require.NoError(t, err)
	defer f.Close()
	var final []string
	var buildLine, agentLine string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "FROM ") {
			final = nil
		}
		switch {
		case strings.Contains(line, "go build") && strings.HasSuffix(line, "./cmd/deckhand-instance"):
			agentLine = line
		case strings.Contains(line, "./cmd/deckhand") && strings.Contains(line, "go build") && !strings.Contains(line, "jmx"):
			buildLine = line
		}
		final = append(final, line)
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, "FROM scratch", final[0])
	assert.Contains(t, final, "USER "+User)
	assert.Contains(t, final, `ENTRYPOINT ["`+Entrypoint+`"]`)
	assert.Contains(t, final, "COPY --from=build /out/deckhand "+Entrypoint)
	assert.Contains(t, final, "COPY --from=build /out/lib/ "+LibDir+"/")
	assert.Contains(t, buildLine, "-X main.version=${VERSION}")
	assert.Contains(t, agentLine, "-o /out/lib/deckhand-instance ./cmd/deckhand-instance", "the instance agent is built into /out/lib")
	assert.Equal(t, LibDir+"/deckhand-instance", instance.AgentImagePath, "the build stage's /out/lib/deckhand-instance lands there")
}
