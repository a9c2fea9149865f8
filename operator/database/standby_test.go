package database_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// setServerReady writes what the kubelet writes when a started server's
// readiness probe fails (a standby that stopped streaming) or passes again.
func setServerReady(t *testing.T, c client.Client, ns, name string, ready bool) {
	t.Helper()
	status := map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[ready]
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var pod corev1.Pod
		require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pod))
		require.NotEmpty(t, pod.Status.ContainerStatuses, "pod %s has not started", name)
		cs := &pod.Status.ContainerStatuses[0]
		cs.Ready, cs.Started = ready, ptr.To(true)
		testenv.SetPodReadyConditions(&pod, status)
		return c.Status().Update(context.Background(), &pod)
	}))
}

// A standby whose readiness fails while the primary serves (its probe
// needs an active WAL receiver) leaves the Database Degraded, with the
// pod's name, and a Warning; once it is ready again, so is the Database.
func TestAStandbyThatIsNotReadyWhileThePrimaryIsLeavesTheDatabaseDegraded(t *testing.T) {
	t.Parallel()
	c, ns, db := readyDatabase(t, "pair", 3)

	setServerReady(t, c, ns, "pair-2", false)
	// The count comes from the StatefulSet's status, which the
	// controller manager updates after the pod's: wait for both.
	got := waitFor(t, c, db, "Degraded", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, dbv1.PhaseDegraded, d.Status.Phase, "conditions: %+v", d.Status.Conditions)
		require.Contains(ct, condition(d, database.ConditionReady).Message,
			"2/3 replicas ready; the primary pair-0 serves, but standby pair-2 started and is not ready")
	})
	cond := condition(got, database.ConditionReady)
	assert.Equal(t, "StandbyNotReady", cond.Reason)
	assert.NotContains(t, cond.Message, "pair-1")
	assertEvent(t, c, ns, "pair", corev1.EventTypeWarning, "StandbyNotReady")

	setServerReady(t, c, ns, "pair-2", true)
	waitFor(t, c, db, "Ready again", ready)
}
