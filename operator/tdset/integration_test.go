package tdset_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
	"github.com/deckhand-dev/deckhand/operator/tdset"
)

// seedReplicasAt is the seed's own table, written out by hand so the
// integration test does not check the schedule code against itself.
func seedReplicasAt(t time.Time) int32 {
	switch h := t.UTC().Hour(); {
	case h >= 9 && h < 17:
		return 5
	case h >= 17 && h < 19:
		return 3
	case h >= 19:
		return 2
	case h == 0:
		return 3 // defaultReplica
	case h < 7:
		return 2
	default:
		return 3
	}
}

func newTDSet(ns, name string, windows ...schedulev1.Scheduling) *schedulev1.TDSet {
	return &schedulev1.TDSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: schedulev1.TDSetSpec{
			Container:        schedulev1.Container{Image: "crccheck/hello-world", Port: 8000},
			SchedulingConfig: windows,
			DefaultReplica:   1,
		},
	}
}

func deploymentOf(t *testing.T, c client.Client, td *schedulev1.TDSet) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), &d))
	}, 15*time.Second, 50*time.Millisecond, "no Deployment for TDSet %s", td.Name)
	return &d
}

func warningReasons(t *testing.T, c client.Client, ns, name string) []string {
	t.Helper()
	var evs eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &evs, client.InNamespace(ns)))
	var reasons []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// ensureTemp makes sure the seed's namespace, temp, exists for a server-side
// dry run of the example, and removes it afterwards only if it created it
// (make run's demo lives there).
func ensureTemp(t *testing.T, c client.Client) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "temp"}}
	// A previous run's temp may still be terminating: wait for it to go.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var old corev1.Namespace
		err := c.Get(context.Background(), client.ObjectKeyFromObject(ns), &old)
		require.True(ct, apierrors.IsNotFound(err) || (err == nil && old.DeletionTimestamp.IsZero()), "namespace temp is terminating")
	}, 2*time.Minute, 500*time.Millisecond)
	err := c.Create(context.Background(), ns)
	if apierrors.IsAlreadyExists(err) {
		return
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
}

func TestSeedExampleAppliedVerbatimRunsTheCurrentWindow(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	example := filepath.Join(testenv.Root(t), "examples", "tdset.yaml")

	// The file, as the seed wrote it (namespace temp), is accepted.
	ensureTemp(t, c)
	out, err := testenv.Kubectl(t, "apply", "--dry-run=server", "-f", example)
	require.NoError(t, err, out)
	assert.Contains(t, out, "tdset.schedule.rs/tdset-hello-world")

	// The same manifest runs in a namespace of this test's own.
	ns := testenv.Namespace(t, c)
	b, err := os.ReadFile(example)
	require.NoError(t, err)
	require.Contains(t, string(b), "namespace: temp\n")
	moved := filepath.Join(t.TempDir(), "tdset.yaml")
	require.NoError(t, os.WriteFile(moved, []byte(strings.Replace(string(b), "namespace: temp\n", "namespace: "+ns+"\n", 1)), 0o600))
	testenv.StartOperator(t, []string{tdset.Name}, ns)
	before := time.Now()
	out, err = testenv.Kubectl(t, "apply", "-f", moved)
	require.NoError(t, err, out)

	td := &schedulev1.TDSet{ObjectMeta: metav1.ObjectMeta{Name: "tdset-hello-world", Namespace: ns}}
	var d *appsv1.Deployment
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		d = &appsv1.Deployment{}
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), d))
		// The test may straddle an hour boundary: either side's count is right.
		want := []int32{seedReplicasAt(before), seedReplicasAt(time.Now())}
		require.Contains(ct, want, ptr.Deref(d.Spec.Replicas, 0))
		require.Equal(ct, ptr.Deref(d.Spec.Replicas, 0), d.Status.ReadyReplicas, "pods not Running yet")
	}, 60*time.Second, 200*time.Millisecond)
	assert.Equal(t, "crccheck/hello-world", d.Spec.Template.Spec.Containers[0].Image)

	var pods corev1.PodList
	require.NoError(t, c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{tdset.LabelName: td.Name}))
	running := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	assert.EqualValues(t, ptr.Deref(d.Spec.Replicas, 0), running)

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), td))
		require.True(ct, meta.IsStatusConditionTrue(td.Status.Conditions, tdset.ConditionReady), "Ready: %+v", td.Status.Conditions)
		require.True(ct, meta.IsStatusConditionTrue(td.Status.Conditions, tdset.ConditionScheduleValid))
		require.Equal(ct, td.Status.DesiredReplicas, td.Status.ReadyReplicas)
		require.NotNil(ct, td.Status.NextTransitionTime)
	}, 30*time.Second, 200*time.Millisecond)

	out, err = testenv.Kubectl(t, "get", "tdsets", "-n", ns)
	require.NoError(t, err, out)
	assert.Regexp(t, `NAME\s+DESIRED\s+READY\s+NEXT CHANGE\s+NEXT\s+AGE`, out)
	assert.Regexp(t, `tdset-hello-world\s+\d\s+\d\s+\d{4}-\d\d-\d\dT\d\d:00:00Z\s+\d\s+\d+s`, out)
}

// shiftedClock is the wall clock plus an offset a test moves.
type shiftedClock struct{ offset atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// readAheadOf sets the clock so that boundary is lead away in real time and
// returns the real instant the clock reaches boundary. Both come from one
// reading of the wall clock: a second reading taken later would put the
// instant late by however long the test was descheduled in between.
func (c *shiftedClock) readAheadOf(boundary time.Time, lead time.Duration) (realBoundary time.Time) {
	realNow := time.Now()
	c.offset.Store(int64(boundary.Add(-lead).Sub(realNow)))
	return realNow.Add(lead)
}

func TestAWindowStartingAMinuteAheadScalesOnTime(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	// The operator's clock reads 11:59:57: the 12:00 window is 3 s away.
	boundary := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	lead := 3 * time.Second
	var clock shiftedClock
	realBoundary := clock.readAheadOf(boundary, lead)
	testenv.StartController(t, testenv.ChartRBACConfig(t, ns, tdset.Name), func(mgr ctrl.Manager) error { return tdset.SetupWithClock(mgr, clock.Now) }, ns)

	td := newTDSet(ns, "noon", schedulev1.Scheduling{StartTime: intstr.FromString("12:00"), EndTime: intstr.FromString("12:30"), Replica: 4})
	require.NoError(t, c.Create(context.Background(), td))
	d := deploymentOf(t, c, td)
	require.EqualValues(t, 1, ptr.Deref(d.Spec.Replicas, 0), "scaled before the window began")

	var scaledAt time.Time
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), d))
		require.EqualValues(ct, 4, ptr.Deref(d.Spec.Replicas, 0))
		scaledAt = time.Now()
	}, lead+10*time.Second, 20*time.Millisecond)
	assert.False(t, scaledAt.Before(realBoundary), "scaled %v before the boundary", realBoundary.Sub(scaledAt))
	t.Logf("boundary lag (observed by polling every 20 ms): %v", scaledAt.Sub(realBoundary))

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), td))
		require.EqualValues(ct, 4, td.Status.DesiredReplicas)
		require.Equal(ct, ptr.To[int32](0), td.Status.ActiveWindow)
		require.NotNil(ct, td.Status.NextTransitionTime)
		require.Equal(ct, boundary.Add(30*time.Minute), td.Status.NextTransitionTime.UTC())
	}, 10*time.Second, 50*time.Millisecond)
}

func TestHPAGetsTheWindowAsMinReplicas(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	testenv.StartOperator(t, []string{tdset.Name}, ns)

	td := newTDSet(ns, "web", schedulev1.Scheduling{StartTime: intstr.FromInt32(0), EndTime: intstr.FromString("24:00"), Replica: 3})
	require.NoError(t, c.Create(context.Background(), td))
	deploymentOf(t, c, td)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web-hpa", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    10,
		},
	}
	require.NoError(t, c.Create(context.Background(), hpa))

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(hpa), hpa))
		require.EqualValues(ct, 3, ptr.Deref(hpa.Spec.MinReplicas, 0))
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), td))
		require.Equal(ct, "HorizontalPodAutoscaler/web-hpa", td.Status.ScaleTarget)
	}, 15*time.Second, 100*time.Millisecond)

	// Replicas now belong to the HPA: a change by someone else stays.
	d := appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: td.Name}}
	require.NoError(t, c.Patch(context.Background(), &d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":6}}`))))
	setImage(t, c, td, "crccheck/hello-world:latest") // forces a reconcile
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), &d))
		require.Equal(ct, "crccheck/hello-world:latest", d.Spec.Template.Spec.Containers[0].Image)
	}, 15*time.Second, 100*time.Millisecond)
	assert.EqualValues(t, 6, ptr.Deref(d.Spec.Replicas, 0), "TDSet overwrote the replicas an HPA owns")
}

func TestAForeignDeploymentIsLeftAlone(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	testenv.StartOperator(t, []string{tdset.Name}, ns)

	labels := map[string]string{"app": "theirs"}
	theirs := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
			},
		},
	}
	require.NoError(t, c.Create(context.Background(), theirs))
	td := newTDSet(ns, "web", schedulev1.Scheduling{StartTime: intstr.FromInt32(0), EndTime: intstr.FromString("24:00"), Replica: 7})
	require.NoError(t, c.Create(context.Background(), td))

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), td))
		ready := meta.FindStatusCondition(td.Status.Conditions, tdset.ConditionReady)
		require.NotNil(ct, ready)
		require.Equal(ct, "DeploymentNotOwned", ready.Reason)
		require.Equal(ct, metav1.ConditionFalse, ready.Status)
		require.Contains(ct, warningReasons(t, c, ns, "web"), "DeploymentNotOwned")
	}, 15*time.Second, 100*time.Millisecond)

	var d appsv1.Deployment
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(theirs), &d))
	assert.EqualValues(t, 2, ptr.Deref(d.Spec.Replicas, 0))
	assert.Empty(t, d.OwnerReferences)
	assert.Equal(t, "nginx", d.Spec.Template.Spec.Containers[0].Image)
	for _, m := range d.ManagedFields {
		assert.NotEqual(t, tdset.FieldManager, m.Manager, "TDSet wrote to a Deployment it does not own")
	}
}

func TestAnImageChangeRollsTheDeployment(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	testenv.StartOperator(t, []string{tdset.Name}, ns)

	td := newTDSet(ns, "web", schedulev1.Scheduling{StartTime: intstr.FromInt32(0), EndTime: intstr.FromString("24:00"), Replica: 2})
	td.Spec.Service = &schedulev1.Service{Port: 80}
	require.NoError(t, c.Create(context.Background(), td))
	first := deploymentOf(t, c, td)
	var svc corev1.Service
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), &svc))
	}, 15*time.Second, 100*time.Millisecond)
	assert.EqualValues(t, 8000, svc.Spec.Ports[0].TargetPort.IntVal)

	setImage(t, c, td, "crccheck/hello-world:v2")

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var rs appsv1.ReplicaSetList
		require.NoError(ct, c.List(context.Background(), &rs, client.InNamespace(ns), client.MatchingLabels{tdset.LabelName: "web"}))
		images := map[string]bool{}
		for _, r := range rs.Items {
			images[r.Spec.Template.Spec.Containers[0].Image] = true
		}
		require.True(ct, images["crccheck/hello-world:v2"], "no ReplicaSet for the new image: %v", images)
		require.True(ct, images["crccheck/hello-world"], "the old ReplicaSet vanished: %v", images)
	}, 30*time.Second, 100*time.Millisecond)
	var d appsv1.Deployment
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(td), &d))
	assert.Greater(t, d.Generation, first.Generation)
}

// setImage changes the TDSet's image, retrying while the operator writes
// its status.
func setImage(t *testing.T, c client.Client, td *schedulev1.TDSet, image string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(td), td); err != nil {
			return err
		}
		td.Spec.Container.Image = image
		return c.Update(context.Background(), td)
	}))
}

func TestInvalidTDSetsAreRejectedAtAdmission(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	window := func(start, end intstr.IntOrString) schedulev1.Scheduling {
		return schedulev1.Scheduling{StartTime: start, EndTime: end, Replica: 1}
	}
	cases := map[string]struct {
		mutate func(*schedulev1.TDSet)
		want   string
	}{
		"hour 24 as a start": {func(td *schedulev1.TDSet) {
			td.Spec.SchedulingConfig = []schedulev1.Scheduling{window(intstr.FromInt32(24), intstr.FromInt32(2))}
		}, "startTime must be an hour from 0 to 23"},
		"minute 60": {func(td *schedulev1.TDSet) {
			td.Spec.SchedulingConfig = []schedulev1.Scheduling{window(intstr.FromString("10:60"), intstr.FromInt32(12))}
		}, `startTime must be an hour from 0 to 23 or a time "HH:MM"`},
		"end 25:00": {func(td *schedulev1.TDSet) {
			td.Spec.SchedulingConfig = []schedulev1.Scheduling{window(intstr.FromInt32(1), intstr.FromString("25:00"))}
		}, "endTime must be an hour from 0 to 23"},
		"start equals end": {func(td *schedulev1.TDSet) {
			td.Spec.SchedulingConfig = []schedulev1.Scheduling{window(intstr.FromInt32(9), intstr.FromString("09:00"))}
		}, "startTime and endTime must differ"},
		"negative replica": {func(td *schedulev1.TDSet) {
			td.Spec.SchedulingConfig = []schedulev1.Scheduling{{StartTime: intstr.FromInt32(1), EndTime: intstr.FromInt32(2), Replica: -1}}
		}, "replica in body should be greater than or equal to 0"},
		"negative default": {func(td *schedulev1.TDSet) { td.Spec.DefaultReplica = -1 }, "defaultReplica in body should be greater than or equal to 0"},
		"empty image":      {func(td *schedulev1.TDSet) { td.Spec.Container.Image = " " }, "container.image must not be empty"},
		"port 70000":       {func(td *schedulev1.TDSet) { td.Spec.Container.Port = 70000 }, "port in body should be less than or equal to 65535"},
		"unknown weekday": {func(td *schedulev1.TDSet) {
			td.Spec.SchedulingConfig = []schedulev1.Scheduling{{StartTime: intstr.FromInt32(1), EndTime: intstr.FromInt32(2), Days: []schedulev1.Weekday{"Funday"}}}
		}, `supported values: "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			td := newTDSet(ns, "bad")
			tc.mutate(td)
			err := c.Create(context.Background(), td)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "%v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
