package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// A primary that serves but answers slowly (every answer of its agent
// comes 1.2 s late, longer than the operator's one-second status bound,
// as on a node whose cores are all busy) for many times the Database's
// bound (2 s) is not failed over: the operator's second look
// (instance.ConfirmTimeout) finds it healthy, says so (condition Failover
// PrimarySlow, a Warning Event PrimarySlow) and keeps it; its clients
// write throughout. Answering in time again, it is PrimaryHealthy.
func TestASlowPrimaryIsNotFailedOver(t *testing.T) {
	t.Parallel()
	f := newFailoverSetup(t)
	e := f.e
	restore := f.agents.Slow(instance.PodHosts("fo-0", "fo-headless", e.ns)[0], 1200*time.Millisecond)

	waitDatabase(t, e, "the primary seen slow", func(ct *assert.CollectT, d *dbv1.Database) {
		c := conditionOf(d, database.ConditionFailover)
		require.NotNil(ct, c)
		assert.Equal(ct, "PrimarySlow", c.Reason, c.Message)
	})
	assertEventReason(t, e, "PrimarySlow")
	// Ten times the bound, slow all along: never failed over.
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		d := e.get("fo")
		require.Empty(t, d.Status.Failovers, "a slow primary was failed over: %+v", d.Status.Failovers)
		require.Equal(t, "fo-0", d.Status.CurrentPrimary)
	}
	out, err := f.psql("fo-0", "INSERT INTO rows VALUES (2) RETURNING id")
	require.NoError(t, err, "the slow primary takes writes: %s", out)

	restore()
	waitDatabase(t, e, "the primary healthy again", func(ct *assert.CollectT, d *dbv1.Database) {
		c := conditionOf(d, database.ConditionFailover)
		require.NotNil(ct, c)
		assert.Equal(ct, "PrimaryHealthy", c.Reason, c.Message)
	})
	assert.Empty(t, e.get("fo").Status.Failovers)
}
