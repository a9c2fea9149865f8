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

// A MySQLCluster's status goes through the core's locked write: a pass
// from a stale read does not write back conditions older than the
// object's (here: Initialized=True going back to not initialised).
func TestAStatusWrittenFromAStaleReadIsRefused(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	mc := newCluster(ns, "stale", "stale-root", 1)
	mc.Finalizers = []string{mysqlcluster.Keys.FinalizerDeletionPolicy}
	require.NoError(t, c.Create(ctx, mc))
	testenv.RemoveFinalizersOnCleanup(t, c, mc)
	stale := mc.DeepCopy()

	var fresh grtlv1.MySQLCluster
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(mc), &fresh))
	meta.SetStatusCondition(&fresh.Status.Conditions, metav1.Condition{
		Type: database.ConditionInitialized, Status: metav1.ConditionTrue, Reason: "InitJobSucceeded",
		Message: "init Job stale-init reached the primary as root", ObservedGeneration: fresh.Generation,
	})
	require.NoError(t, c.Status().Update(ctx, &fresh))

	r := &database.Reconciler{Client: testenv.StaleCache{Client: c, Stale: stale}, Owned: c, API: c, Kind: mysqlcluster.Kind,
		Recorder: testenv.EventRecorder(t, ns, "deckhand-mysqlcluster")}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(mc)})
	require.NoError(t, err, "a refused stale write is no failure")
	assert.Positive(t, res.RequeueAfter, "the pass runs again, from the newer object")

	var now grtlv1.MySQLCluster
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(mc), &now))
	assert.True(t, meta.IsStatusConditionTrue(now.Status.Conditions, database.ConditionInitialized),
		"the stale pass wrote its status over the newer one: %+v", now.Status.Conditions)
	assert.Equal(t, fresh.ResourceVersion, now.ResourceVersion, "nothing of the stale pass's status was applied")
}
