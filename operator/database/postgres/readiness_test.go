package postgres_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// In a pod with the agent the kubelet asks the agent for the server's
// readiness (instance.AddAgent turns the server's exec probe into an HTTP
// GET), and the agent runs the server's own check, probe.sh ready, with
// the environment and mounts AddAgent gives its container: no password,
// the server asked over its socket. A running primary is ready; fenced,
// or no longer the pod the operator names, it is not, the answer says
// why and the agent's log says it once; the fence lifted, it is ready
// again.
func TestTheAgentAnswersTheReadinessProbeWithTheServersOwnCheck(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary := h.primary("data-0")
	pod := h.cluster.Name + "-0"
	ch := newChannel(t, h, pod)

	server := postgres.Engine{}.ServerPod(h.cluster)
	spec := corev1.PodSpec{Containers: []corev1.Container{server.Container}, Volumes: server.Volumes}
	require.NoError(t, instance.AddAgent(&spec, instance.PodOptions{OperatorImage: "deckhand", TLSSecret: "tls",
		Server: server.Container.Name, ScriptsVolume: engine.ScriptsVolume}))
	agent := spec.Containers[1]
	require.NotNil(t, spec.Containers[0].ReadinessProbe.HTTPGet, "the kubelet asks the agent")

	// The agent's container on the host: its environment (paths under
	// the data volume moved to the test's), its readiness command (the
	// scripts moved to the test's directory). The agent is not given the
	// scripts directory, so its role guard (selffence.go, tested apart)
	// stays off: renamed below, the primary would otherwise be fenced
	// within a guard tick, and the probe could meet a server shutting
	// down instead of the name it checks.
	env := h.env(engine.Pod{Container: agent}, pod, primary.Port, map[string]string{engine.DataVolume: h.volume("data-0")})
	assert.NotContains(t, env, "PGPASSWORD", "no password in the agent's container")
	var command []string
	require.NoError(t, json.Unmarshal([]byte(flagValue(t, agent.Command, "--readiness-command")), &command))
	hostCommand, err := json.Marshal(pgtest.HostCommand(t, corev1.Container{Command: command, VolumeMounts: agent.VolumeMounts}, h.scripts))
	require.NoError(t, err)
	probeAddr := "127.0.0.1:" + pgtest.FreePort(t)
	_, log := ch.startAgentWith(t, h, 0, env, "--probe-listen", probeAddr,
		"--readiness-command", string(hostCommand), "--readiness-timeout", flagValue(t, agent.Command, "--readiness-timeout"))

	ready := func() (int, string) {
		t.Helper()
		res, err := http.Get("http://" + probeAddr + instance.ReadyPath)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := ready()
		assert.Equal(c, http.StatusOK, code, body)
	}, 30*time.Second, 200*time.Millisecond, "a running primary is ready; the agent's log:\n%s", log)

	marker := filepath.Join(filepath.Dir(env["PGDATA"]), instance.FenceMarker)
	require.NoError(t, os.WriteFile(marker, []byte("test"), 0o644))
	for range 2 {
		code, body := ready()
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Contains(t, body, "fenced: not ready")
	}
	require.NoError(t, os.Remove(marker))
	code, body := ready()
	assert.Equal(t, http.StatusOK, code, body)
	// The agent's log reaches the test through a pipe, a moment after
	// its answer; it is read in order, so once the return is there, both
	// failed checks' lines are too.
	assert.Eventually(t, func() bool { return strings.Contains(log.String(), "the server is ready again") }, 10*time.Second, 50*time.Millisecond,
		"the return is logged:\n%s", log)
	assert.Equal(t, 1, strings.Count(log.String(), "fenced: not ready"), "said once, not at every probe:\n%s", log)

	// The name the agent reads is the scripts ConfigMap's, as the server's
	// container would read it.
	h.namePrimary(1)
	code, body = ready()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "names "+h.cluster.Name+"-1 the primary")
}

// flagValue is the word after name in argv.
func flagValue(t *testing.T, argv []string, name string) string {
	t.Helper()
	i := slices.Index(argv, name)
	require.True(t, i >= 0 && i+1 < len(argv), "%s is not in %q", name, argv)
	return argv[i+1]
}
