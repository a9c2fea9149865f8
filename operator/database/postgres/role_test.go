package postgres_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// A server that its mounted file names the primary starts only once the
// operator confirms it, asked through the files the agent answers
// (instance/role.go): while it waits no server runs and the liveness
// probe passes (a restart would change nothing); told another pod is the
// primary it does not start and asks again; told it is, it starts.
func TestAPrimaryStartsOnlyOnceTheOperatorConfirmsIt(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	pod := postgres.Engine{}.ServerPod(h.cluster)
	roleDir := h.u.Dir(t, h.root, "role")
	withRole := map[string]string{instance.RoleDirEnv: roleDir}
	env := h.serverEnv(pod, 0, "data-0", "")
	env[instance.RoleDirEnv] = roleDir
	server := h.u.Command(env, pgtest.HostCommand(t, pod.Container, h.scripts))
	log := &syncbuf.Buffer{}
	server.Stdout, server.Stderr = log, log
	require.NoError(t, server.Start())
	t.Cleanup(func() { _ = syscall.Kill(-server.Process.Pid, syscall.SIGKILL); _, _ = server.Process.Wait() })

	asked := filepath.Join(roleDir, instance.RoleAskedFile)
	answer := func(token, primary string) {
		file := filepath.Join(roleDir, instance.RoleAnswerFile)
		require.NoError(t, os.WriteFile(file+".tmp", []byte(token+" "+primary+"\n"), 0o644))
		require.NoError(t, os.Rename(file+".tmp", file))
	}
	question := func(not string) string {
		t.Helper()
		var token string
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(asked)
			token = strings.TrimSpace(string(b))
			return err == nil && token != "" && token != not
		}, time.Minute, 50*time.Millisecond, "no question asked:\n%s", log)
		return token
	}

	first := question("")
	out, ok := h.probe(pod.Container.LivenessProbe, 0, "data-0", "", withRole)
	assert.True(t, ok, "waiting on purpose: alive (%s)", out)
	out, ok = h.probe(pod.Container.ReadinessProbe, 0, "data-0", "", withRole)
	assert.False(t, ok, "no server before the answer: %s", out)

	other := h.cluster.Name + "-1"
	answer(first, other)
	second := question(first)
	assert.Contains(t, log.String(), "the operator names "+other+" the primary, not this pod")
	out, ok = h.probe(pod.Container.ReadinessProbe, 0, "data-0", "", withRole)
	assert.False(t, ok, "told another pod is the primary: no server (%s)", out)

	answer(second, h.cluster.Name+"-0")
	require.Eventually(t, func() bool {
		_, ok := h.probe(pod.Container.ReadinessProbe, 0, "data-0", "", withRole)
		return ok
	}, 2*time.Minute, 500*time.Millisecond, "confirmed, the server never became ready:\n%s", log)
	assert.Contains(t, log.String(), "the operator confirmed this pod is the primary")
	_, err := os.Stat(asked)
	assert.True(t, os.IsNotExist(err), "no question left once answered")
}
