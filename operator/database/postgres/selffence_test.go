package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// startGuardedAgent runs ordinal's agent on dataVolume with the scripts
// mounted, as instance.AddAgent runs it in a pod: it reads the primary
// the pod names and guards its server's role.
func (c *channel) startGuardedAgent(t testing.TB, h *host, ordinal int, dataVolume string) string {
	t.Helper()
	env := h.serverEnv(postgres.Engine{}.ServerPod(h.cluster), ordinal, dataVolume, "")
	return c.startAgentFor(t, h, ordinal, env["PGDATA"], env["PGPORT"], "--scripts-dir", h.scripts)
}

// TestAnOldPrimaryTheFenceDidNotReachFencesItselfOnceItsPodNamesAnother:
// a failover whose fence did not reach the old primary (its agent cut off
// from the operator, not from its clients): the standby is promoted
// through its agent while the pods still name the old primary, and the
// old primary keeps running and taking writes. The promoted server is
// left alone while the pods still name the primary it replaced (the
// ConfigMap and the kubelet follow the failover's record later). Once
// the pods name the new primary, the old primary's agent fences its own
// server, as the operator's fence would: the marker, a clean shutdown,
// its sessions refused; its status says it fenced itself. The new
// primary keeps taking writes.
func TestAnOldPrimaryTheFenceDidNotReachFencesItselfOnceItsPodNamesAnother(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	old, standby := primaryAndStreamingStandby(t, h)
	ch := newChannel(t, h, h.cluster.Name+"-0", h.cluster.Name+"-1")
	oldHost := ch.startGuardedAgent(t, h, 0, "data-0")
	newHost := ch.startGuardedAgent(t, h, 1, "data-1")
	ctx := context.Background()

	// The failover, its fence unreached: the standby promoted while the
	// pods still name the old primary.
	st, err := ch.client.Promote(ctx, newHost)
	require.NoError(t, err)
	require.Equal(t, instance.RolePrimary, st.Role)
	note, err := os.ReadFile(filepath.Join(h.volume("data-1"), instance.PromotedMarker))
	require.NoError(t, err, "the promotion notes the primary the pod named")
	assert.Equal(t, h.cluster.Name+"-0\n", string(note))

	// Until the pods name the new primary, neither is fenced by the
	// guard (a guard looks every second; watched here for three).
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		for host, port := range map[string]string{oldHost: old.Port, newHost: standby.Port} {
			st, err := ch.client.Status(ctx, host)
			require.NoError(t, err)
			require.False(t, st.Fenced, "%s fenced while the pods still name the old primary: %+v", host, st)
			require.True(t, st.ServerUp && st.Role == instance.RolePrimary, "%s: %+v", host, st)
			out, err := h.appSQL(port, "SELECT 1")
			require.NoError(t, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, err := h.appSQL(old.Port, "INSERT INTO rows VALUES (-1)")
	require.NoError(t, err, "the old primary, unfenced, takes a write alone: %s", out)

	// The operator's record reaches the pods: the old primary fences
	// itself (its status says so from the marker on, its server gone
	// once the fast shutdown ends).
	h.namePrimary(1)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := ch.client.Status(ctx, oldHost)
		if assert.NoError(ct, err) {
			assert.True(ct, st.Fenced && st.SelfFenced && !st.ServerUp, "the old primary fenced itself: %+v", st)
		}
		assert.NoFileExists(ct, filepath.Join(h.volume("data-0"), "pgdata", "postmaster.pid"), "its server stopped")
	}, 60*time.Second, 200*time.Millisecond)
	marker, err := os.ReadFile(filepath.Join(h.volume("data-0"), instance.FenceMarker))
	require.NoError(t, err)
	assert.Contains(t, string(marker), "fenced by its own agent: its pod names name-of-database-1 the primary")
	out, err = h.appSQL(old.Port, "INSERT INTO rows VALUES (-2)")
	require.Error(t, err, "the self-fenced old primary takes no write: %s", out)
	control := h.controlData(t, "data-0")
	assert.Regexp(t, `Database cluster state:\s+shut down\n`, control, "stopped cleanly: pg_rewind's precondition")

	// The new primary, named now, is untouched and forgets its note.
	st = statusOf(t, ch.client, newHost)
	assert.True(t, st.ServerUp && st.Role == instance.RolePrimary && !st.Fenced, "the new primary: %+v", st)
	out, err = h.appSQL(standby.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, "the new primary takes writes: %s", out)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(h.volume("data-1"), instance.PromotedMarker))
		return os.IsNotExist(err)
	}, 30*time.Second, 100*time.Millisecond, "the promotion note, done with once the pod names it, stays")
}

// TestAStandbyPromotedThroughItsAgentIsReadyBeforeItsPodNamesIt: a
// failover promotes the standby through its agent, and the pods still
// name the old primary (the kubelet refreshes the mounted ConfigMap
// later: minutes after an API-server outage). The promoted primary is
// ready meanwhile, so <name>-rw can route to it once the operator labels
// it; before, its readiness failed until the new name reached the pod. A
// primary the pods name a third pod instead (a later failover replaced it
// too) is not ready.
func TestAStandbyPromotedThroughItsAgentIsReadyBeforeItsPodNamesIt(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	_, _ = primaryAndStreamingStandby(t, h)
	ready := postgres.Engine{}.ServerPod(h.cluster).Container.ReadinessProbe
	out, ok := h.probe(ready, 1, "data-1", "", nil)
	require.True(t, ok, "the streaming standby is ready: %s", out)

	ch := newChannel(t, h, h.cluster.Name+"-1")
	standbyHost := ch.startGuardedAgent(t, h, 1, "data-1")
	st, err := ch.client.Promote(context.Background(), standbyHost)
	require.NoError(t, err)
	require.Equal(t, instance.RolePrimary, st.Role)
	out, ok = h.probe(ready, 1, "data-1", "", nil)
	assert.True(t, ok, "promoted to replace the pod still named: ready: %s", out)

	// The pods name a third pod: not ready, whatever moment the probe
	// meets (the probe's own refusal; or, once the guard has looked,
	// every second, the fence, the shutdown, the server gone).
	h.namePrimary(2)
	out, ok = h.probe(ready, 1, "data-1", "", nil)
	assert.False(t, ok, "the pods name a third pod: not ready: %s", out)
}

// TestAServerThatRunsAlthoughFencedIsStoppedByItsAgent: a fence written
// while the server's entrypoint, already past its look at the marker,
// started the server (the fence found no postmaster to stop; a real-node
// run had a restarted primary serving beside the new one for a moment so).
// The marker is there and the server runs: its agent's guard stops it,
// and it takes no more writes.
func TestAServerThatRunsAlthoughFencedIsStoppedByItsAgent(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary, _ := primaryAndStreamingStandby(t, h)
	ch := newChannel(t, h, h.cluster.Name+"-0", h.cluster.Name+"-1")
	host := ch.startGuardedAgent(t, h, 0, "data-0")
	out, err := h.appSQL(primary.Port, "INSERT INTO rows VALUES (7)")
	require.NoError(t, err, out)

	require.NoError(t, os.WriteFile(filepath.Join(h.volume("data-0"), instance.FenceMarker), []byte("fenced by the operator (the test)\n"), 0o600))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoFileExists(ct, filepath.Join(h.volume("data-0"), "pgdata", "postmaster.pid"), "the fenced server stopped")
	}, 30*time.Second, 200*time.Millisecond)
	st := statusOf(t, ch.client, host)
	assert.True(t, st.Fenced && !st.ServerUp, "%+v", st)
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (8)")
	require.Error(t, err, "the fenced server takes no write: %s", out)
}
