package postgres_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// TestAfterAFailoverTheOtherStandbyStreamsFromTheNewPrimaryThroughItsSlot:
// three instances on the host (the primary fo-0, standbys fo-1 and fo-2
// following fo-rw), the reconciler on kwok. The primary's server is
// killed and not restarted; the operator promotes one standby, which then
// holds a replication slot for each other instance (PostgreSQL 15 copies
// none to a standby): the remaining standby reconnects through fo-rw,
// follows the new timeline, streams through its own slot (active on the
// new primary, listed in pg_stat_replication) and receives a row
// committed on the new primary; the old primary's slot waits for it,
// inactive.
func TestAfterAFailoverTheOtherStandbyStreamsFromTheNewPrimaryThroughItsSlot(t *testing.T) {
	t.Parallel()
	f := newFailoverSetupOf(t, 3)
	e := f.e
	require.NoError(t, syscall.Kill(-f.primary.Cmd.Process.Pid, syscall.SIGKILL))
	f.primary.Stop(t)

	got := waitDatabase(t, e, "failed over", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotEmpty(ct, d.Status.Failovers)
		assert.Equal(ct, dbv1.FailoverCompleted, d.Status.Failovers[len(d.Status.Failovers)-1].Phase, "%+v", d.Status.Failovers)
	})
	promoted := got.Status.Failovers[len(got.Status.Failovers)-1].To
	other := map[string]string{"fo-1": "fo-2", "fo-2": "fo-1"}[promoted]
	require.NotEmpty(t, other, "a standby was promoted: %q", promoted)
	otherOrdinal := other[len(other)-1:]

	out, err := f.psql(promoted, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, "the new primary takes writes: %s", out)
	f.waitRows(other, "1,2")

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		slots, err := f.psql(promoted, "SELECT string_agg(slot_name || ' ' || active, ',' ORDER BY slot_name) FROM pg_replication_slots")
		require.NoError(ct, err, slots)
		assert.Equal(ct, "deckhand_standby_0 false,deckhand_standby_"+otherOrdinal+" true", slots)
		streaming, err := f.psql(promoted, "SELECT string_agg(application_name || ' ' || state, ',') FROM pg_stat_replication")
		require.NoError(ct, err, streaming)
		assert.Equal(ct, other+" streaming", streaming)
	}, time.Minute, 200*time.Millisecond, "%s streams from %s through its slot", other, promoted)
	timeline, err := f.psql(other, "SELECT received_tli FROM pg_stat_wal_receiver")
	require.NoError(t, err, timeline)
	assert.Equal(t, "2", timeline, "%s follows the new primary's timeline", other)
	assert.Equal(t, 1.0, metricValue(t, "deckhand_database_failovers_total", map[string]string{"namespace": e.ns, "database": "fo", "kind": "failover"}))
}
