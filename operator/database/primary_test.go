package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// roles are the role labels of a Database's server pods, by pod name.
func roles(ct *assert.CollectT, c client.Client, ns, name string) map[string]string {
	var pods corev1.PodList
	require.NoError(ct, c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{database.LabelDatabase: name, database.LabelComponent: "server"}))
	out := map[string]string{}
	for _, p := range pods.Items {
		out[p.Name] = p.Labels[database.LabelRole]
	}
	return out
}

// The primary is the pod status.currentPrimary names (ordinal 0 when the
// Database is created), never an ordinal: the role labels (which the
// read-write Service selects), the scripts ConfigMap's "primary" key (from
// which the servers take their role), status.primary and the messages
// follow it when it names another pod, as a failover will; the app
// Secret's host stays the read-write Service.
func TestThePrimaryIsThePodTheStatusNames(t *testing.T) {
	t.Parallel()
	c, ns, db := readyDatabase(t, "named", 3)
	// It failed once in CI (2026-11-27) with its output cut: what the
	// pods and the StatefulSet showed is logged if it fails again.
	dumpOnFailure(t, c, ns)
	got := waitFor(t, c, db, "currentPrimary recorded", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "named-0", d.Status.CurrentPrimary)
	})
	assert.Equal(t, "named-0", got.Status.Primary)
	var app corev1.Secret
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "named-app"}, &app))
	host := string(app.Data["host"])
	require.Equal(t, "named-rw."+ns+".svc", host)
	assert.EventuallyWithT(t, func(ct *assert.CollectT) {
		var cm corev1.ConfigMap
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "named-scripts"}, &cm))
		assert.Equal(ct, "named-0", cm.Data[engine.ScriptsPrimaryKey])
		assert.Equal(ct, map[string]string{"named-0": "primary", "named-1": "standby", "named-2": "standby"}, roles(ct, c, ns, "named"))
	}, wait, 100*time.Millisecond)
	var rw corev1.Service
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "named-rw"}, &rw))
	assert.Equal(t, "primary", rw.Spec.Selector[database.LabelRole])

	// What a failover will write: another pod named primary.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur dbv1.Database
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(db), &cur); err != nil {
			return err
		}
		cur.Status.CurrentPrimary = "named-2"
		return c.Status().Update(context.Background(), &cur)
	}))
	assert.EventuallyWithT(t, func(ct *assert.CollectT) {
		var cm corev1.ConfigMap
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "named-scripts"}, &cm))
		assert.Equal(ct, "named-2", cm.Data[engine.ScriptsPrimaryKey])
		assert.Equal(ct, map[string]string{"named-0": "standby", "named-1": "standby", "named-2": "primary"}, roles(ct, c, ns, "named"))
	}, wait, 100*time.Millisecond, "the pods' roles and the ConfigMap follow status.currentPrimary")
	waitFor(t, c, db, "status.primary follows", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "named-2", d.Status.CurrentPrimary, "the operator keeps the name it was given")
		require.Equal(ct, "named-2", d.Status.Primary)
	})

	// Ordinal 0 is now a standby like any other: its readiness failing
	// degrades the Database while the named primary serves.
	setServerReady(t, c, ns, "named-0", false)
	waitFor(t, c, db, "Degraded", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, dbv1.PhaseDegraded, d.Status.Phase, "conditions: %+v", d.Status.Conditions)
		require.Contains(ct, condition(d, database.ConditionReady).Message,
			"the primary named-2 serves, but standby named-0 started and is not ready")
	})
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "named-app"}, &app))
	assert.Equal(t, host, string(app.Data["host"]), "the app Secret's host never changes")
}
