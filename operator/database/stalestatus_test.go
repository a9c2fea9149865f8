package database_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// A pass that read the Database from a stale cache must not write its
// status back over a newer one: here the stale copy predates
// Initialized=True, and writing it would say the database was never
// initialised (the next pass would make an init Job again). Whichever of
// the pass's writes meets the newer object first, its metadata (the
// failover default it records on a Database that has none) or its status,
// is refused, and the pass looks again without an error.
func TestAStatusWrittenFromAStaleReadIsRefused(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	for _, tc := range []struct {
		name        string
		annotations map[string]string
	}{
		{"stale-status", map[string]string{database.AnnotationFailoverDefault: "false"}},
		{"stale-metadata", nil},
	} {
		db := newDatabase(ns, tc.name, 1)
		db.Finalizers = []string{database.FinalizerDeletionPolicy}
		db.Annotations = tc.annotations
		require.NoError(t, c.Create(ctx, db))
		testenv.RemoveFinalizersOnCleanup(t, c, db)
		stale := db.DeepCopy()

		// Meanwhile another pass recorded the database as initialised.
		var fresh dbv1.Database
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), &fresh))
		meta.SetStatusCondition(&fresh.Status.Conditions, metav1.Condition{
			Type: database.ConditionInitialized, Status: metav1.ConditionTrue, Reason: "InitJobSucceeded",
			Message: "init Job " + tc.name + "-init created database", ObservedGeneration: fresh.Generation,
		})
		require.NoError(t, c.Status().Update(ctx, &fresh))

		rec := testenv.EventRecorder(t, ns, "deckhand-database")
		r := &database.Reconciler{Client: testenv.StaleCache{Client: c, Stale: stale}, Owned: c, API: c, Kind: database.DatabaseKind, Recorder: rec}
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
		require.NoError(t, err, "%s: a refused stale write is no failure", tc.name)
		assert.Positive(t, res.RequeueAfter, "%s: the pass runs again, from the newer object", tc.name)

		var now dbv1.Database
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), &now))
		assert.True(t, meta.IsStatusConditionTrue(now.Status.Conditions, database.ConditionInitialized),
			"%s: the stale pass wrote its status over the newer one: %+v", tc.name, now.Status.Conditions)
		assert.Equal(t, fresh.ResourceVersion, now.ResourceVersion, "%s: nothing of the stale pass was applied", tc.name)

		// The next pass reads the newer object and writes; Initialized stays.
		r.Client = c
		_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
		require.NoError(t, err)
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), &now))
		assert.True(t, meta.IsStatusConditionTrue(now.Status.Conditions, database.ConditionInitialized), tc.name)
		assert.Equal(t, now.Generation, now.Status.ObservedGeneration, "%s: the pass from the newer object wrote its status", tc.name)
		assert.Contains(t, now.Annotations, database.AnnotationFailoverDefault, tc.name)
	}
}
