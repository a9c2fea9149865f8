package database_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// staleCache answers a Get of one object with an old copy of it, as an
// informer that has not yet seen the latest write does; everything else
// (every write included) goes to the real API server.
type staleCache struct {
	client.Client
	stale client.Object
}

func (s staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if key == client.ObjectKeyFromObject(s.stale) {
		if db, ok := obj.(*dbv1.Database); ok {
			s.stale.(*dbv1.Database).DeepCopyInto(db)
			return nil
		}
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// eventRecorder is a real Event recorder (a manager that runs no
// controller), for a Reconciler the test drives one pass at a time.
func eventRecorder(t *testing.T, ns string) events.EventRecorder {
	t.Helper()
	var mgr ctrl.Manager
	testenv.StartController(t, testenv.RESTConfig(t), func(m ctrl.Manager) error { mgr = m; return nil }, ns)
	return mgr.GetEventRecorder("deckhand-database")
}

// reconcilerOver is the Database Reconciler reading and writing through c.
func reconcilerOver(c client.Client, rec events.EventRecorder) *database.Reconciler {
	return &database.Reconciler{Client: c, Owned: c, API: c, Kind: database.DatabaseKind, Recorder: rec}
}

// removeFinalizerOnCleanup lets the namespace go without an operator.
func removeFinalizerOnCleanup(t *testing.T, c client.Client, db *dbv1.Database) {
	t.Cleanup(func() {
		var cur dbv1.Database
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(db), &cur); err == nil {
			cur.Finalizers = nil
			_ = c.Update(context.Background(), &cur)
		}
	})
}

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
	removeFinalizerOnCleanup(t, c, db)
	stale := db.DeepCopy()

	// Meanwhile another pass recorded the database as initialised.
	var fresh dbv1.Database
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), &fresh))
	meta.SetStatusCondition(&fresh.Status.Conditions, metav1.Condition{
		Type: database.ConditionInitialized, Status: metav1.ConditionTrue, Reason: "InitJobSucceeded",
		Message: "init Job stale-init created database", ObservedGeneration: fresh.Generation,
	})
	require.NoError(t, c.Status().Update(ctx, &fresh))

	rec := eventRecorder(t, ns)
	r := reconcilerOver(staleCache{Client: c, stale: stale}, rec)
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
	require.NoError(t, err, "a refused stale write is no failure")
	assert.Positive(t, res.RequeueAfter, "the pass runs again, from the newer object")

	var now dbv1.Database
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), &now))
	assert.True(t, meta.IsStatusConditionTrue(now.Status.Conditions, database.ConditionInitialized),
		"the stale pass wrote its status over the newer one: %+v", now.Status.Conditions)
	assert.Equal(t, fresh.ResourceVersion, now.ResourceVersion, "nothing of the stale pass's status was applied")

	// The next pass reads the newer object and writes; Initialized stays.
	r = reconcilerOver(c, rec)
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)})
	require.NoError(t, err)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), &now))
	assert.True(t, meta.IsStatusConditionTrue(now.Status.Conditions, database.ConditionInitialized))
	assert.Equal(t, now.Generation, now.Status.ObservedGeneration, "the pass from the newer object wrote its status")
}
