package postgres_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// TestAnOldPrimaryCutOffFromTheOperatorFencesItselfAndRejoins: the
// primary's agent is cut off from the operator (its server still serves
// its clients): the operator fails over with the fence unreached and
// fo-0 keeps running as a primary. Once its pod names fo-1 (the kubelet's
// refresh of the mounted ConfigMap, done by hand here), fo-0's agent
// fences its own server. The operator, reaching the agent again, records
// it (the record's selfFenced, a Warning Event OldPrimaryFencedItself),
// lifts the fence, and fo-0 rejoins as fo-1's standby without the row it
// took alone.
func TestAnOldPrimaryCutOffFromTheOperatorFencesItselfAndRejoins(t *testing.T) {
	t.Parallel()
	f := newFailoverSetup(t)
	e := f.e
	restore := f.agents.Cut(instance.PodHosts("fo-0", "fo-headless", e.ns)[0])
	got := waitDatabase(t, e, "failed over", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotEmpty(ct, d.Status.Failovers)
		assert.Equal(ct, dbv1.FailoverCompleted, d.Status.Failovers[len(d.Status.Failovers)-1].Phase, "%+v", d.Status.Failovers)
	})
	rec := got.Status.Failovers[len(got.Status.Failovers)-1]
	require.Equal(t, "fo-1", rec.To)
	require.False(t, rec.Fenced, "the fence reached an agent cut off: %+v", rec)
	out, err := f.psql("fo-0", "INSERT INTO rows VALUES (-1)")
	require.NoError(t, err, "the old primary, cut off from the operator only, takes a write alone: %s", out)
	out, err = f.psql("fo-1", "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, "the new primary takes writes: %s", out)

	// Its pod reads the new name: its agent fences its server.
	named := filepath.Join(scriptsDir(e.root, "fo-0"), "primary")
	require.NoError(t, os.Remove(named))
	require.NoError(t, os.WriteFile(named, []byte("fo-1"), 0o444))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.FileExists(ct, filepath.Join(filepath.Dir(f.data["fo-0"]), instance.FenceMarker), "the fence marker keeps its restart from serving")
		assert.NoFileExists(ct, filepath.Join(f.data["fo-0"], "postmaster.pid"), "the server stopped")
	}, time.Minute, 200*time.Millisecond, "fo-0's agent did not fence its server")
	out, err = f.psql("fo-0", "INSERT INTO rows VALUES (-2)")
	require.Error(t, err, "the self-fenced old primary takes no write: %s", out)
	f.primary.Stop(t) // its process has ended with the server

	// The operator reaches it again: it records the fence, lifts it once
	// the restarted pod names fo-1, and fo-0 rejoins.
	restore()
	f.startServerAgain("fo-0")
	got = waitDatabase(t, e, "the old primary rejoined", func(ct *assert.CollectT, d *dbv1.Database) {
		rec := d.Status.Failovers[len(d.Status.Failovers)-1]
		assert.NotNil(ct, rec.SelfFenced)
		assert.NotNil(ct, rec.Rejoined)
	})
	rec = got.Status.Failovers[len(got.Status.Failovers)-1]
	assert.False(t, rec.Rejoined.Before(rec.SelfFenced), "%+v", rec)
	assertEventReason(t, e, "OldPrimaryFencedItself")
	f.waitRows("fo-0", "1,2")
	out, err = f.psql("fo-1", "SELECT count(*) FROM rows WHERE id < 0")
	require.NoError(t, err, out)
	assert.Equal(t, "0", out, "the new primary never had the row the old one took alone")
}
