package postgres_test

import (
	"context"
	"database/sql"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// TestWithSynchronousReplicationAFailoverLosesNoCommittedRow: minStandbys
// 1 on two instances; the operator sets the primary's
// synchronous_standby_names to ANY 1 ("fo-1"). The standby's WAL receiver
// is stopped (SIGSTOP): a commit through fo-rw is then not acknowledged
// (it waits for fo-1). The primary's server is killed, the stopped WAL
// receiver too (what it had not written is gone, as with a standby cut
// off from the primary), and the operator fails over to fo-1: every row
// whose commit was acknowledged is there, and after the failover the new
// primary's synchronous_standby_names is rewritten (no standby streams:
// asynchronous, writes not blocked by a list naming itself).
func TestWithSynchronousReplicationAFailoverLosesNoCommittedRow(t *testing.T) {
	t.Parallel()
	f := newFailoverSetupWith(t, 2, func(db *dbv1.Database) {
		db.Spec.Replication = &dbv1.ReplicationSpec{Synchronous: &dbv1.SynchronousSpec{MinStandbys: 1}}
	})
	e := f.e
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := f.psql("fo-0", "SELECT current_setting('synchronous_standby_names') || ' ' || (SELECT string_agg(application_name || ':' || sync_state, ',') FROM pg_stat_replication)")
		require.NoError(ct, err, out)
		assert.Equal(ct, `ANY 1 ("fo-1") fo-1:quorum`, out)
	}, time.Minute, 200*time.Millisecond, "the primary replicates synchronously to fo-1")
	acknowledged := []int{1}
	for id := 2; id <= 20; id++ {
		require.NoError(t, f.commitThroughReadWrite(id, time.Minute), "row %d", id)
		acknowledged = append(acknowledged, id)
	}

	receiver, err := f.psql("fo-1", "SELECT pid FROM pg_stat_wal_receiver")
	require.NoError(t, err, receiver)
	pid, err := strconv.Atoi(receiver)
	require.NoError(t, err, receiver)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	// It waits for fo-1 (asynchronous, it would be acknowledged at once,
	// and lost below). Never cancelled: PostgreSQL tells a client that
	// cancels its wait for the standbys that its commit succeeded (with
	// a warning drivers drop); only the primary's death ends it here.
	result := make(chan error, 1)
	go func() { result <- f.commitThroughReadWrite(500, 5*time.Minute) }()
	select {
	case err := <-result:
		result <- err
	case <-time.After(3 * time.Second): // a bound on waiting for an answer, not a synchronisation
	}

	require.NoError(t, syscall.Kill(-f.primary.Cmd.Process.Pid, syscall.SIGKILL))
	f.primary.Stop(t)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	_ = syscall.Kill(pid, syscall.SIGCONT)
	if err := <-result; err == nil {
		acknowledged = append(acknowledged, 500)
	}

	got := waitDatabase(t, e, "failed over", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotEmpty(ct, d.Status.Failovers)
		assert.Equal(ct, dbv1.FailoverCompleted, d.Status.Failovers[len(d.Status.Failovers)-1].Phase, "%+v", d.Status.Failovers)
	})
	assert.Equal(t, "fo-1", got.Status.CurrentPrimary)
	assert.Equal(t, []string{"fo-1"}, got.Status.Failovers[0].SynchronousStandbys, "the record names the synchronous standbys, the only ones that may be promoted")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := f.psql("fo-1", "SELECT current_setting('synchronous_standby_names')")
		require.NoError(ct, err, out)
		assert.Equal(ct, "", out, "rewritten: no standby streams from fo-1")
	}, time.Minute, 200*time.Millisecond)
	// The operator records the failover before it moves the role label
	// that fo-rw selects: a client's writes resume once fo-rw routes to
	// fo-1, as a Service's endpoints follow the label.
	f.waitReadWriteRoutesTo("fo-1")
	require.NoError(t, f.commitThroughReadWrite(600, time.Minute), "writes resume on fo-1")
	acknowledged = append(acknowledged, 600)
	have, err := f.psql("fo-1", "SELECT string_agg(id::text, ',' ORDER BY id) FROM rows")
	require.NoError(t, err, have)
	present := map[string]bool{}
	for _, id := range splitComma(have) {
		present[id] = true
	}
	for _, id := range acknowledged {
		assert.True(t, present[strconv.Itoa(id)], "row %d was acknowledged and is lost (rows: %s)", id, have)
	}
}

// commitThroughReadWrite commits row id through fo-rw within bound: nil
// once the commit is acknowledged.
func (f *failoverSetup) commitThroughReadWrite(id int, bound time.Duration) error {
	db, err := sql.Open("postgres", f.readWriteDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_, err = db.ExecContext(ctx, "INSERT INTO rows VALUES ($1)", id)
	return err
}
