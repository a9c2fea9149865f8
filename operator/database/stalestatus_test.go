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
// initialised (the next pass would make an init Job again).
func TestAStatusWrittenFromAStaleReadIsRefused(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	db := newDatabase(ns, "stale", 1)
	db.Finalizers = []string{database.FinalizerDeletionPolicy}
	require.NoError(t, c.Create(ctx, db))
	testenv.RemoveFinalizersOnCleanup(t, c, db)
	stale := db.DeepCopy()

	// Meanwhile another pass recorded the database as initialised.
	var fresh dbv1.Database
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), &fresh))
	meta.SetStatusCondition(&fresh.Status.Conditions, metav1.Condition{
		Type: database.ConditionInitialized, Status: metav1.ConditionTrue, Reason: "InitJobSucceeded",
		Message: "init Job stale-init created database", ObservedGeneration: fresh.Generation,
	})
	require.NoError(t, c.Status().Update(ctx, &fresh))

	rec := testenv.EventRecorder(t, ns, "deckhand-database")
	r := &database.Reconciler{Client: testenv.StaleCache{Client: c, Stale: stale}, Owned: c, API: c, Kind: database.DatabaseKind, Recorder: rec}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
	require.NoError(t, err, "a refused stale write is no failure")
	assert.Positive(t, res.RequeueAfter, "the pass runs again, from the newer object")

	var now dbv1.Database
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), &now))
	assert.True(t, meta.IsStatusConditionTrue(now.Status.Conditions, database.ConditionInitialized),
		"the stale pass wrote its status over the newer one: %+v", now.Status.Conditions)
	assert.Equal(t, fresh.ResourceVersion, now.ResourceVersion, "nothing of the stale pass's status was applied")

	// The next pass reads the newer object and writes; Initialized stays.
	r.Client = c
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
	require.NoError(t, err)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), &now))
	assert.True(t, meta.IsStatusConditionTrue(now.Status.Conditions, database.ConditionInitialized))
	assert.Equal(t, now.Generation, now.Status.ObservedGeneration, "the pass from the newer object wrote its status")
}
