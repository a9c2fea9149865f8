package postgres_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
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
	p := startWritingPrimary(t, h)
	primary, ch, host := p.server, p.ch, p.host

	thaw := primary.Freeze(t)
	// Sent to the hung server: it waits in the socket, unread.
	p.sendWrite(t)

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

	// Fenced again while still frozen (an operator resuming a failover
	// whose pass failed after the fence): it says what the first did.
	res, err = ch.client.Fence(context.Background(), host)
	require.NoError(t, err)
	assert.Equal(t, "fenced", res.Done)
	assert.False(t, res.WasRunning)
	assert.True(t, res.Killed, "SIGKILLed by the first fence, not dead yet")
	assert.False(t, res.CleanShutdown)

	thaw()
	p.checkWriteNeverAcknowledged(t, "the server hung")
	assert.FileExists(t, filepath.Join(h.volume("data-0"), instance.FenceMarker), "the marker that keeps a restart from serving")
	control := h.controlData(t, "data-0")
	assert.Regexp(t, `Database cluster state:\s+in production\n`, control, "killed, not shut down: its next start runs crash recovery (or pg_rewind does)")

	// Fenced again once thawed: nothing runs, nothing to do; it was not
	// shut down cleanly.
	res, err = ch.client.Fence(context.Background(), host)
	require.NoError(t, err)
	assert.Equal(t, "fenced", res.Done)
	assert.False(t, res.WasRunning)
	assert.False(t, res.Killed)
	assert.False(t, res.CleanShutdown, "its control file says in production")
}

// A primary whose disk takes no writes (its data volume's file system
// frozen with fsfreeze, as a stalled SAN or a failing disk does) still
// answers every read-only query, its status among them, but cannot
// acknowledge a commit. Its agent's status says so once the WAL has
// waited WALFlushStallAfter at one flush position (the operator counts
// such a primary unhealthy), and its fence does not wait on the disk:
// the marker's write goes on in the background, the server gets an
// immediate shutdown at once and then SIGKILL. The commit the
// application sent is never acknowledged; once the disk takes writes
// again the marker lands and the server is gone.
func TestAPrimaryWhoseDiskTakesNoWritesIsUnhealthyAndItsFenceKillsIt(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	data := h.volume("data-0")
	h.u.MountFilesystem(t, data, 256<<20)
	p := startWritingPrimary(t, h)
	ch, host := p.ch, p.host
	ctx := context.Background()
	st := statusOf(t, ch.client, host)
	assert.Nil(t, st.WALFlushStalledSince, "a disk that takes writes")

	thaw := pgtest.FreezeFilesystem(t, data)
	stalledAt := time.Now()
	p.sendWrite(t)
	var err error
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err = ch.client.Status(ctx, host)
		require.NoError(ct, err)
		assert.True(ct, st.ServerUp, "it still answers: %s", st.Error)
		assert.Equal(ct, instance.RolePrimary, st.Role)
		assert.True(ct, st.WALFlushStalled(), "stalled since %v", st.WALFlushStalledSince)
	}, 30*time.Second, 500*time.Millisecond)
	assert.False(t, st.WALFlushStalledSince.Before(stalledAt.Add(-time.Second)), "the stall counted from the write that waits, not before: %s", st.WALFlushStalledSince)

	res, err := ch.client.Fence(ctx, host)
	require.NoError(t, err, "the fence of a server whose disk takes no writes")
	assert.Equal(t, "fenced", res.Done)
	assert.True(t, res.Killed, "SIGKILLed: its processes wait on the disk")
	assert.True(t, res.MarkerPending, "the marker's write waits on the disk too")
	assert.False(t, res.CleanShutdown)
	marker := filepath.Join(data, instance.FenceMarker)

	thaw()
	p.checkWriteNeverAcknowledged(t, "the disk stalled")
	require.Eventually(t, func() bool { _, err := os.Stat(marker); return err == nil }, 30*time.Second, 100*time.Millisecond, "the marker landed")
	st = statusOf(t, ch.client, host)
	assert.True(t, st.Fenced)
	assert.False(t, st.ServerUp)
}

// writingPrimary is a primary on the volume data-0 with its agent, and an
// application session that has written row 2 of its table rows.
type writingPrimary struct {
	server  *pgtest.Server
	ch      *channel
	host    string
	session *appSession
}

func startWritingPrimary(t *testing.T, h *host) writingPrimary {
	t.Helper()
	primary := h.primary("data-0")
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)
	ch := newChannel(t, h, h.cluster.Name+"-0")
	p := writingPrimary{server: primary, ch: ch, host: ch.startAgent(t, h, 0, "data-0"), session: h.openAppSession(t, primary.Port)}
	assert.Equal(t, "2", p.session.query(t, "INSERT INTO rows VALUES (2) RETURNING id;"), "the session writes before the fault")
	return p
}

// sendWrite sends row 3 through the session without waiting for its
// answer.
func (p writingPrimary) sendWrite(t *testing.T) {
	t.Helper()
	_, err := io.WriteString(p.session.in, "INSERT INTO rows VALUES (3) RETURNING id;\n")
	require.NoError(t, err)
}

// checkWriteNeverAcknowledged: the session, its server killed during
// the fault (why), saw its connection close without the answer to row 3,
// and the postmaster is gone.
func (p writingPrimary) checkWriteNeverAcknowledged(t *testing.T, why string) {
	t.Helper()
	rest := p.session.rest(t)
	assert.NotContains(t, rest, "3", "the write sent while %s was never acknowledged", why)
	assert.Contains(t, rest, "closed the connection unexpectedly")
	require.Eventually(t, func() bool { return !processExists(p.server.Cmd.Process.Pid) }, 30*time.Second, 100*time.Millisecond, "the postmaster died after %s", why)
}

// processExists: pid is a process (EPERM: another user's).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
