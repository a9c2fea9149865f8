package postgres_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// A primary that hangs (every process of its server frozen by the cgroup
// freezer, as a stalled disk or a stopped VM stops it) cannot run a
// shutdown: the agent's fence sends it an immediate one, and past
// instance.ImmediateStopWait SIGKILLs every process of it. The fence
// answers fenced (killed, not clean) while the server is still frozen,
// so a failover need not wait for the server or name the new primary
// first; a write the application sent while it hung is never
// acknowledged once it is thawed, because every process dies before it
// runs again.
func TestTheFenceKillsAHungPrimaryThatCannotShutDown(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary := h.primary("data-0")
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)
	ch := newChannel(t, h, h.cluster.Name+"-0")
	host := ch.startAgent(t, h, 0, "data-0")
	session := h.openAppSession(t, primary.Port)
	assert.Equal(t, "2", session.query(t, "INSERT INTO rows VALUES (2) RETURNING id;"), "the session writes before the hang")

	thaw := primary.Freeze(t)
	// Sent to the hung server: it waits in the socket, unread.
	_, err = io.WriteString(session.in, "INSERT INTO rows VALUES (3) RETURNING id;\n")
	require.NoError(t, err)

	res, err := ch.client.Fence(context.Background(), host)
	require.NoError(t, err, "the fence of a hung server")
	assert.Equal(t, "fenced", res.Done)
	assert.True(t, res.WasRunning)
	assert.True(t, res.Killed, "every process SIGKILLed")
	assert.False(t, res.CleanShutdown)
	assert.Zero(t, res.FinalLSN, "no shutdown checkpoint")
	st := statusOf(t, ch.client, host)
	assert.True(t, st.Fenced)
	assert.False(t, st.ServerUp)
	assert.True(t, processExists(primary.Cmd.Process.Pid), "still frozen: the processes are there, bound to die")

	thaw()
	rest := session.rest(t)
	assert.NotContains(t, rest, "3", "the write sent while the server hung was never acknowledged")
	assert.Contains(t, rest, "closed the connection unexpectedly")
	require.Eventually(t, func() bool { return !processExists(primary.Cmd.Process.Pid) }, 30*time.Second, 100*time.Millisecond, "the postmaster died once thawed")
	assert.FileExists(t, filepath.Join(h.volume("data-0"), instance.FenceMarker), "the marker that keeps a restart from serving")
	control, err := h.u.Command(map[string]string{"PATH": h.bin + ":/usr/bin:/bin"}, []string{filepath.Join(h.bin, "pg_controldata"), "-D", filepath.Join(h.volume("data-0"), "pgdata")}).CombinedOutput()
	require.NoError(t, err, "%s", control)
	assert.Regexp(t, `Database cluster state:\s+in production\n`, string(control), "killed, not shut down: its next start runs crash recovery (or pg_rewind does)")

	// Fenced again: nothing runs, nothing to do.
	res, err = ch.client.Fence(context.Background(), host)
	require.NoError(t, err)
	assert.Equal(t, "fenced", res.Done)
	assert.False(t, res.WasRunning)
	assert.False(t, res.Killed)
}

// processExists: pid is a process (EPERM: another user's).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
