package manager_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	"github.com/deckhand-dev/deckhand/operator/manager"
	"github.com/deckhand-dev/deckhand/operator/tdset"
)

// The operator's container SIGKILLed and restarted by the kubelet in the
// same pod: the Lease the dead process held, renewed a moment before and
// never released, is taken back at once by the new one (it is held by the
// pod's name), where an operator in another pod waits for it to expire.
func TestARestartInTheSamePodTakesTheLeaseBackAtOnce(t *testing.T) {
	c := testenv.Client(t)
	testenv.InstallCRDs(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	const pod = "deckhand-6c9f8b7d5-x2k4q"
	leaseName := "deckhand.deckhand.dev"
	acquired := metav1.NewMicroTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	require.NoError(t, c.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: ns},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(pod),
			// Far longer than the test: only its holder may take it.
			LeaseDurationSeconds: ptr.To[int32](300),
			AcquireTime:          &acquired,
			RenewTime:            ptr.To(metav1.NewMicroTime(time.Now())),
			LeaseTransitions:     ptr.To[int32](3),
		},
	}))

	start := func(t *testing.T, podName string) ctrl.Manager {
		t.Setenv("POD_NAME", podName)
		mgr, _, err := manager.New(manager.Config{
			Controllers: []string{tdset.Name}, WatchNamespaces: []string{ns},
			LeaderElect: true, LeaderElectionID: leaseName, LeaderElectionNamespace: ns,
			MetricsBindAddress: "0", HealthProbeBindAddress: "0", KubeAPIQPS: 50, KubeAPIBurst: 100,
			GracefulShutdownTimeout: 5 * time.Second, ManyPerProcess: true,
		}, testenv.RESTConfig(t))
		require.NoError(t, err)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(runCtx) }()
		t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
		return mgr
	}

	t.Run("another pod waits", func(t *testing.T) {
		other := start(t, "deckhand-6c9f8b7d5-zzzzz")
		select {
		case <-other.Elected():
			t.Fatal("an operator in another pod took a Lease that had not expired")
		case <-time.After(3 * time.Second): // a retry period and more
		}
	})

	t.Run("the same pod does not", func(t *testing.T) {
		began := time.Now()
		same := start(t, pod)
		select {
		case <-same.Elected():
		case <-time.After(30 * time.Second):
			t.Fatal("the restarted operator waited for its own Lease (held for 300 s) to expire")
		}
		t.Logf("leader %.2f s after the start", time.Since(began).Seconds())

		var lease coordinationv1.Lease
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, &lease))
		assert.Equal(t, pod, ptr.Deref(lease.Spec.HolderIdentity, ""))
		assert.EqualValues(t, 3, ptr.Deref(lease.Spec.LeaseTransitions, 0), "the lead stayed with the pod: no transition")
		assert.True(t, lease.Spec.AcquireTime.Equal(&acquired), "acquired when the pod first took it, not now: %v", lease.Spec.AcquireTime)
		assert.EqualValues(t, manager.DefaultLeaseDuration.Seconds(), ptr.Deref(lease.Spec.LeaseDurationSeconds, 0), "renewed with the operator's own lease duration")

		// The Events controller-runtime's own lock records.
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var events corev1.EventList
			require.NoError(ct, c.List(ctx, &events, client.InNamespace(ns)))
			var messages []string
			for _, e := range events.Items {
				if e.InvolvedObject.Kind == "Lease" && e.InvolvedObject.Name == leaseName && e.Reason == "LeaderElection" {
					messages = append(messages, e.Message)
				}
			}
			assert.Contains(ct, strings.Join(messages, "\n"), pod+" became leader")
		}, 15*time.Second, 200*time.Millisecond)
	})
}
