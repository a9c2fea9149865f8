package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/failover"
)

// TestASwitchoverWhoseTargetDoesNotCatchUpIsAbortedAndTheOldPrimaryServesAgain:
// fo-1 receives WAL but its replay is paused before row 2 is committed,
// so after fo-0's clean shutdown it never replays fo-0's last record. Past switchoverTimeout
// (5 s here) the operator lifts fo-0's fence: its entrypoint (restarted
// as the kubelet restarts the container) starts it again as the
// primary, writes through fo-rw succeed, fo-1 was never promoted, and
// the record says Aborted and why (condition and Event
// SwitchoverAborted). It is not tried again on its own; the retry
// annotation, once fo-1 replays again, switches over and is removed.
func TestASwitchoverWhoseTargetDoesNotCatchUpIsAbortedAndTheOldPrimaryServesAgain(t *testing.T) {
	t.Parallel()
	f := newFailoverSetupWith(t, 2, func(db *dbv1.Database) {
		db.Spec.Failover.SwitchoverTimeout = &metav1.Duration{Duration: 5 * time.Second}
		// fo-0 back after the abort has a whole bound to serve again: a
		// generous one, so a loaded machine does not fail it over.
		db.Spec.Failover.PrimaryGoneAfter = &metav1.Duration{Duration: 30 * time.Second}
	})
	e := f.e
	out, err := f.psql("fo-1", "SELECT pg_wal_replay_pause()")
	require.NoError(t, err, out)
	// fo-1 receives row 2's WAL, and does not replay it.
	require.NoError(t, f.commitThroughReadWrite(2, time.Minute))
	updateDatabase(t, e, func(d *dbv1.Database) { d.Spec.Failover.SwitchoverTo = "fo-1" })

	waitDatabase(t, e, "fo-0 fenced for the switchover", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotEmpty(ct, d.Status.Failovers)
		assert.NotEmpty(ct, d.Status.Failovers[len(d.Status.Failovers)-1].FromLSN, "fenced, its last record known")
	})
	// Its server stopped: the kubelet restarts the container, whose
	// entrypoint waits on the fence; it returns once the server answers.
	f.startServerAgain("fo-0")

	got := waitDatabase(t, e, "the switchover aborted", func(ct *assert.CollectT, d *dbv1.Database) {
		rec := d.Status.Failovers[len(d.Status.Failovers)-1]
		assert.Equal(ct, dbv1.FailoverAborted, rec.Phase, "%+v", rec)
		c := conditionOf(d, database.ConditionFailover)
		require.NotNil(ct, c)
		assert.Equal(ct, "SwitchoverAborted", c.Reason, c.Message)
	})
	rec := got.Status.Failovers[0]
	assert.Len(t, got.Status.Failovers, 1)
	assert.Equal(t, dbv1.KindSwitchover, rec.Kind)
	assert.Contains(t, rec.AbortReason, "fo-1 had not replayed fo-0's last record")
	assert.NotNil(t, rec.FenceLifted)
	assert.Equal(t, "fo-0", got.Status.CurrentPrimary)
	assert.Contains(t, conditionOf(got, database.ConditionFailover).Message, failover.AnnotationRetrySwitchover)
	assertEventReason(t, e, "SwitchoverAborted")
	require.NoError(t, f.commitThroughReadWrite(3, time.Minute), "fo-0 takes writes again through fo-rw")
	inRecovery, err := f.psql("fo-1", "SELECT pg_is_in_recovery()")
	require.NoError(t, err, inRecovery)
	assert.Equal(t, "t", inRecovery, "fo-1 was never promoted")

	// fo-1 replays again; nothing is retried until asked.
	out, err = f.psql("fo-1", "SELECT pg_wal_replay_resume()")
	require.NoError(t, err, out)
	f.waitRows("fo-1", "1,2,3")
	var cur dbv1.Database
	require.NoError(t, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: "fo"}, &cur))
	require.Len(t, cur.Status.Failovers, 1, "not retried on its own")
	updateDatabase(t, e, func(d *dbv1.Database) {
		metav1.SetMetaDataAnnotation(&d.ObjectMeta, failover.AnnotationRetrySwitchover, "now")
		// The retry must not be aborted by a loaded machine's slow fence.
		d.Spec.Failover.SwitchoverTimeout = &metav1.Duration{Duration: 5 * time.Minute}
	})
	got = waitDatabase(t, e, "switched over on the retry", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Len(ct, d.Status.Failovers, 2)
		assert.Equal(ct, dbv1.FailoverCompleted, d.Status.Failovers[1].Phase, "%+v", d.Status.Failovers[1])
		assert.NotContains(ct, d.Annotations, failover.AnnotationRetrySwitchover, "the request is answered")
	})
	assert.Equal(t, "fo-1", got.Status.CurrentPrimary)
	assert.Equal(t, dbv1.KindSwitchover, got.Status.Failovers[1].Kind)
	have, err := f.psql("fo-1", "SELECT string_agg(id::text, ',' ORDER BY id) FROM rows")
	require.NoError(t, err, have)
	assert.Equal(t, "1,2,3", have)
}

// updateDatabase changes Database fo, retried on a conflict.
func updateDatabase(t *testing.T, e *endToEnd, change func(*dbv1.Database)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur dbv1.Database
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: "fo"}, &cur); err != nil {
			return err
		}
		change(&cur)
		return e.c.Update(context.Background(), &cur)
	}))
}
