package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// TestDemoFlaskAppServesTheCurrentMessage runs seed 000's Flask app for
// real (Debian's Python and Flask, installed by hack/test-deps.sh) with the
// chart's config.cfg, and checks it answers with MSG, re-read per request:
// the pods restarted by ConfigMonitor serve the new message.
func TestDemoFlaskAppServesTheCurrentMessage(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.cfg")
	writeConfig := func(content string) { require.NoError(t, os.WriteFile(cfg, []byte(content), 0o644)) }
	// The chart's ConfigMap, rendered with the default message.
	r := MustRender(t, "demo", Values(t, []string{ChartDir(t) + "/ci/demo-values.yaml"}))
	for _, o := range r.Kind("ConfigMap") {
		if o.GetName() == "flaskapp-config" {
			writeConfig(Into[corev1.ConfigMap](t, o).Data["config.cfg"])
		}
	}

	addr := freeAddress(t)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-m", "flask", "--app", "main", "run", "--host", host, "--port", port)
	cmd.Dir = filepath.Join(testenv.Root(t), "demo", "flask", "app")
	cmd.Env = append(os.Environ(), "CONFIG_FILE="+cfg)
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start(), "python3-flask missing? run hack/test-deps.sh")
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })

	get := func(ct require.TestingT) string {
		resp, err := http.Get("http://" + addr + "/")
		require.NoError(ct, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(ct, err)
		require.Equal(ct, http.StatusOK, resp.StatusCode, string(b))
		return string(b)
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, "Welcome to Kubernetes!", get(ct))
	}, 20*time.Second, 100*time.Millisecond, "app logs:\n%s", logs)

	writeConfig(`MSG="Welcome to Operators!"` + "\n")
	assert.Equal(t, "Welcome to Operators!", get(t))
}
