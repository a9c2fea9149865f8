package postgres_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/failover"
)

// TestARestartedOperatorRefusesAFailoverThatCouldLoseASynchronousCommit:
// three instances, minStandbys 1: the primary's synchronous_standby_names
// is ANY 1 ("fo-1", "fo-2"), recorded in status.synchronous. The operator
// stops; the primary's server is killed, and fo-2's too; a new operator
// starts (nothing of the first one's memory). A commit acknowledged by
// fo-2 alone may be lost if fo-1 is promoted, so the failover is refused
// (condition Failover FailoverRefused, a Warning Event, the pending
// gauge) and fo-1 stays a standby. The force annotation fails over to
// fo-1, the record says it was forced, and the annotation is removed.
func TestARestartedOperatorRefusesAFailoverThatCouldLoseASynchronousCommit(t *testing.T) {
	t.Parallel()
	f := newFailoverSetupWith(t, 3, func(db *dbv1.Database) {
		db.Spec.Replication = &dbv1.ReplicationSpec{Synchronous: &dbv1.SynchronousSpec{MinStandbys: 1}}
	})
	e := f.e
	waitDatabase(t, e, "the synchronous standbys recorded", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotNil(ct, d.Status.Synchronous)
		assert.Equal(ct, dbv1.SynchronousStatus{Primary: "fo-0", Standbys: []string{"fo-1", "fo-2"}, Quorum: 1}, *d.Status.Synchronous)
	})
	// The set is recorded before the primary is told (syncrep.go), and a
	// configuration reload reaches new sessions a moment later still.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := f.psql("fo-0", "SELECT current_setting('synchronous_standby_names')")
		require.NoError(ct, err, out)
		assert.Equal(ct, `ANY 1 ("fo-1", "fo-2")`, out)
	}, time.Minute, 200*time.Millisecond, "the primary waits for either standby")
	require.NoError(t, f.commitThroughReadWrite(2, time.Minute))

	e.stopOperator()
	require.NoError(t, syscall.Kill(-f.primary.Cmd.Process.Pid, syscall.SIGKILL))
	f.primary.Stop(t)
	f.killServer("fo-2")
	e.startOperator()

	got := waitDatabase(t, e, "the failover refused", func(ct *assert.CollectT, d *dbv1.Database) {
		c := conditionOf(d, database.ConditionFailover)
		require.NotNil(ct, c)
		assert.Equal(ct, "FailoverRefused", c.Reason, c.Message)
	})
	msg := conditionOf(got, database.ConditionFailover).Message
	assert.Contains(t, msg, "2 of them must answer as healthy standbys, 1 do [fo-1]")
	assert.Contains(t, msg, failover.AnnotationForceFailover)
	assert.Empty(t, got.Status.Failovers, "nothing begun")
	assert.Equal(t, "fo-0", got.Status.CurrentPrimary)
	assertEventReason(t, e, "FailoverRefused")
	assert.Equal(t, 1.0, metricValue(t, "deckhand_database_failover_pending", map[string]string{"namespace": e.ns, "database": "fo"}))
	inRecovery, err := f.psql("fo-1", "SELECT pg_is_in_recovery()")
	require.NoError(t, err, inRecovery)
	assert.Equal(t, "t", inRecovery, "fo-1 is not promoted")

	updateDatabase(t, e, func(d *dbv1.Database) {
		metav1.SetMetaDataAnnotation(&d.ObjectMeta, failover.AnnotationForceFailover, "now")
	})
	got = waitDatabase(t, e, "failed over, forced", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Len(ct, d.Status.Failovers, 1)
		assert.Equal(ct, dbv1.FailoverCompleted, d.Status.Failovers[0].Phase, "%+v", d.Status.Failovers[0])
		assert.NotContains(ct, d.Annotations, failover.AnnotationForceFailover, "the request is answered")
	})
	rec := got.Status.Failovers[0]
	assert.Equal(t, "fo-1", rec.To)
	assert.Equal(t, []string{"fo-1", "fo-2"}, rec.SynchronousStandbys)
	assert.Equal(t, int32(1), rec.SynchronousQuorum)
	assert.Contains(t, rec.Reason, "forced")
	assert.Equal(t, "fo-1", got.Status.CurrentPrimary)
	// The record completes before the role label moves (as in the
	// synchronous failover test): writes resume once fo-rw routes to fo-1.
	f.waitReadWriteRoutesTo("fo-1")
	require.NoError(t, f.commitThroughReadWrite(3, time.Minute), "fo-1 takes writes")

	// A force asked while the primary is healthy is dropped: left in
	// place it would force some later failover nobody asked to force.
	updateDatabase(t, e, func(d *dbv1.Database) {
		metav1.SetMetaDataAnnotation(&d.ObjectMeta, failover.AnnotationForceFailover, "now")
	})
	waitDatabase(t, e, "the stale force dropped", func(ct *assert.CollectT, d *dbv1.Database) {
		assert.NotContains(ct, d.Annotations, failover.AnnotationForceFailover)
	})
	assertEventReason(t, e, "ForceFailoverDropped")
}

// killServer SIGKILLs pod's postmaster (its PID from postmaster.pid), as
// a container killed and not yet restarted.
func (f *failoverSetup) killServer(pod string) {
	t := f.e.t
	t.Helper()
	f.mu.Lock()
	data := f.data[pod]
	f.mu.Unlock()
	pidFile, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	require.NoError(t, err, "%s", pidFile)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Error(ct, syscall.Kill(pid, 0), "postmaster %d gone", pid)
	}, time.Minute, 100*time.Millisecond)
}
