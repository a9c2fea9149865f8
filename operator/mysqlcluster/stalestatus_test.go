package mysqlcluster_test

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
	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/mysqlcluster"
)

// staleCache answers a Get of one MySQLCluster with an old copy of it, as
// an informer that has not yet seen the latest write does; everything else
// (every write included) goes to the real API server.
type staleCache struct {
	client.Client
	stale *grtlv1.MySQLCluster
}

func (s staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if mc, ok := obj.(*grtlv1.MySQLCluster); ok && key == client.ObjectKeyFromObject(s.stale) {
		s.stale.DeepCopyInto(mc)
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// A MySQLCluster's status goes through the core's locked write: a pass
// from a stale read does not write back conditions older than the
// object's (here: Initialized=True going back to not initialised).
func TestAStatusWrittenFromAStaleReadIsRefused(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	var mgr ctrl.Manager
	testenv.StartController(t, testenv.RESTConfig(t), func(m ctrl.Manager) error { mgr = m; return nil }, ns)

	mc := newCluster(ns, "stale", "stale-root", 1)
	mc.Finalizers = []string{mysqlcluster.Keys.FinalizerDeletionPolicy}
	require.NoError(t, c.Create(ctx, mc))
	t.Cleanup(func() {
		var cur grtlv1.MySQLCluster
		if c.Get(context.Background(), client.ObjectKeyFromObject(mc), &cur) == nil {
			cur.Finalizers = nil
			_ = c.Update(context.Background(), &cur)
		}
	})
	stale := mc.DeepCopy()

	var fresh grtlv1.MySQLCluster
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(mc), &fresh))
	meta.SetStatusCondition(&fresh.Status.Conditions, metav1.Condition{
		Type: database.ConditionInitialized, Status: metav1.ConditionTrue, Reason: "InitJobSucceeded",
		Message: "init Job stale-init reached the primary as root", ObservedGeneration: fresh.Generation,
	})
	require.NoError(t, c.Status().Update(ctx, &fresh))

	r := &database.Reconciler{Client: staleCache{Client: c, stale: stale}, Owned: c, API: c, Kind: mysqlcluster.Kind,
		Recorder: mgr.GetEventRecorder("deckhand-mysqlcluster")}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(mc)})
	require.NoError(t, err, "a refused stale write is no failure")
	assert.Positive(t, res.RequeueAfter, "the pass runs again, from the newer object")

	var now grtlv1.MySQLCluster
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(mc), &now))
	assert.True(t, meta.IsStatusConditionTrue(now.Status.Conditions, database.ConditionInitialized),
		"the stale pass wrote its status over the newer one: %+v", now.Status.Conditions)
	assert.Equal(t, fresh.ResourceVersion, now.ResourceVersion, "nothing of the stale pass's status was applied")
}
