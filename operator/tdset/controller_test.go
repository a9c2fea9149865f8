package tdset

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
	"github.com/deckhand-dev/deckhand/operator/status"
)

// monday10 is inside the seed's 9-17 window (5 replicas).
var monday10 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func seedTDSet(t *testing.T) *schedulev1.TDSet {
	td := &schedulev1.TDSet{
		ObjectMeta: metav1.ObjectMeta{Name: "tdset-hello-world", Namespace: "temp", UID: "tdset-uid", Generation: 1},
		Spec:       seedSpec(t),
	}
	td.Spec.IntervalMint = 5 // the CRD default
	return td
}

type fixture struct {
	r      *Reconciler
	c      client.Client
	events *events.FakeRecorder
	now    time.Time
	writes int
	// stale are objects the cache still shows in an older version.
	stale map[client.ObjectKey]client.Object
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, schedulev1.AddToScheme(s))
	f := &fixture{events: events.NewFakeRecorder(100), now: monday10}
	count := func() { f.writes++ }
	f.c = fake.NewClientBuilder().WithScheme(s).
		WithStatusSubresource(&schedulev1.TDSet{}).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
				count()
				return c.Create(ctx, o, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
				count()
				return c.Update(ctx, o, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
				count()
				return c.Patch(ctx, o, p, opts...)
			},
			Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
				count()
				return c.Apply(ctx, o, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
				count()
				return c.Delete(ctx, o, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				count()
				return c.SubResource(sub).Patch(ctx, o, p, opts...)
			},
		}).Build()
	f.r = &Reconciler{Client: f.cacheView(), Reader: f.c, Recorder: f.events, Now: func() time.Time { return f.now }}
	return f
}

// cacheView is the API server as the operator's cache shows it: only
// deckhand-labelled Deployments and Services, no HorizontalPodAutoscalers
// in full (a List of them would start a cluster-wide informer), and the
// stale objects a test sets.
func (f *fixture) cacheView() client.Client {
	return interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if old, ok := f.stale[key]; ok && sameKind(old, o) {
				return f.c.Scheme().Convert(old.DeepCopyObject(), o, nil)
			}
			if err := c.Get(ctx, key, o, opts...); err != nil {
				return err
			}
			switch o.(type) {
			case *appsv1.Deployment, *corev1.Service:
				if o.GetLabels()["app.kubernetes.io/managed-by"] != "deckhand" {
					return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
				}
			}
			return nil
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*autoscalingv2.HorizontalPodAutoscalerList); ok {
				return fmt.Errorf("HorizontalPodAutoscalers are not cached in full: read them live")
			}
			return c.List(ctx, list, opts...)
		},
	})
}

func sameKind(a, b client.Object) bool { return fmt.Sprintf("%T", a) == fmt.Sprintf("%T", b) }

// reconcile runs one reconcile of the seed TDSet and returns it with the
// requeue delay.
func (f *fixture) reconcile(t *testing.T) (*schedulev1.TDSet, time.Duration) {
	t.Helper()
	key := client.ObjectKey{Namespace: "temp", Name: "tdset-hello-world"}
	events := len(f.events.Events)
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	require.NoError(t, err)
	if res.Priority != nil && *res.Priority == followUpPriority {
		// A scaling: the status and events follow in a second reconcile,
		// as the controller's queue would run it.
		assert.Equal(t, events, len(f.events.Events), "an event came before the follow-up")
		res, err = f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
		require.NoError(t, err)
	}
	var td schedulev1.TDSet
	require.NoError(t, f.c.Get(context.Background(), key, &td))
	return &td, res.RequeueAfter
}

func (f *fixture) deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: "temp", Name: "tdset-hello-world"}, &d))
	return &d
}

func (f *fixture) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func condition(td *schedulev1.TDSet, kind string) metav1.Condition {
	if c := meta.FindStatusCondition(td.Status.Conditions, kind); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func TestSeedExampleCreatesItsDeploymentWithTheCurrentWindow(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	td, requeue := f.reconcile(t)

	d := f.deployment(t)
	assert.EqualValues(t, 5, ptr.Deref(d.Spec.Replicas, 0))
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	c := d.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "crccheck/hello-world", c.Image)
	assert.EqualValues(t, 8000, c.Ports[0].ContainerPort)
	assert.True(t, metav1.IsControlledBy(d, td), "the Deployment is not owned by its TDSet")
	assert.Equal(t, "tdset-hello-world", d.Spec.Selector.MatchLabels[LabelName])

	assert.EqualValues(t, 5, td.Status.DesiredReplicas)
	assert.Equal(t, ptr.To[int32](0), td.Status.ActiveWindow)
	require.NotNil(t, td.Status.NextTransitionTime)
	assert.Equal(t, monday10.Add(7*time.Hour), td.Status.NextTransitionTime.UTC())
	assert.Equal(t, ptr.To[int32](3), td.Status.NextReplicas)
	assert.Equal(t, "Deployment/tdset-hello-world", td.Status.ScaleTarget)
	assert.EqualValues(t, 1, td.Status.ObservedGeneration)
	assert.Equal(t, metav1.ConditionTrue, condition(td, ConditionScheduleValid).Status)
	assert.Equal(t, "Scaling", condition(td, ConditionReady).Reason, "no pod is ready yet")
	assert.Equal(t, 5*time.Minute, requeue, "the next boundary is 7 h away: resync after intervalMint")
	assert.Empty(t, f.drainEvents(), "creating is not a transition")
}

func TestRequeueLandsJustPastTheNextBoundary(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	f.now = time.Date(2026, 11, 23, 16, 58, 30, 0, time.UTC)
	_, requeue := f.reconcile(t)
	assert.Equal(t, 90*time.Second+time.Millisecond, requeue)
}

func TestSteadyStateMakesNoWrites(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	f.reconcile(t)
	f.writes = 0
	f.now = monday10.Add(time.Minute)
	f.reconcile(t)
	assert.Zero(t, f.writes, "a reconcile between boundaries wrote to the API")
}

func TestBoundaryScalesAndSaysSo(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	f.now = time.Date(2026, 11, 23, 16, 59, 59, 999_000_000, time.UTC)
	f.reconcile(t)
	assert.EqualValues(t, 5, ptr.Deref(f.deployment(t).Spec.Replicas, 0))

	f.now = time.Date(2026, 11, 23, 17, 0, 0, 1_000_000, time.UTC)
	td, _ := f.reconcile(t)
	assert.EqualValues(t, 3, ptr.Deref(f.deployment(t).Spec.Replicas, 0))
	assert.Equal(t, ptr.To[int32](1), td.Status.ActiveWindow)
	assert.Equal(t, []string{"Normal Scaled schedulingConfig[1] (17:00-19:00) in force: Deployment/tdset-hello-world set to 3 replicas (was 5)"}, f.drainEvents())
}

func TestDefaultReplicaOutsideEveryWindow(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	f.now = time.Date(2026, 11, 23, 0, 30, 0, 0, time.UTC)
	td, _ := f.reconcile(t)
	assert.EqualValues(t, 3, ptr.Deref(f.deployment(t).Spec.Replicas, 0))
	assert.Nil(t, td.Status.ActiveWindow, "no window is active between 0:00 and 1:00")
}

func TestForeignDeploymentIsNotAdopted(t *testing.T) {
	foreign := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "tdset-hello-world", Namespace: "temp"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "theirs"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "theirs", Image: "nginx"}}},
			},
		},
	}
	f := newFixture(t, seedTDSet(t), foreign)
	before := f.deployment(t)
	td, _ := f.reconcile(t)
	f.reconcile(t)

	after := f.deployment(t)
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the foreign Deployment was changed")
	assert.Empty(t, after.OwnerReferences)
	ready := condition(td, ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, "DeploymentNotOwned", ready.Reason)
	assert.Contains(t, ready.Message, "not owned by this TDSet")
	events := f.drainEvents()
	require.Len(t, events, 1, "a lasting problem is announced once: %v", events)
	assert.Contains(t, events[0], "Warning DeploymentNotOwned")
}

func TestHPASetsMinReplicasAndLeavesReplicasToIt(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	f.reconcile(t) // creates the Deployment at 5
	d := f.deployment(t)
	d.Spec.Replicas = ptr.To[int32](8) // the HPA scaled it up
	require.NoError(t, f.c.Update(context.Background(), d))
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "temp"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "tdset-hello-world"},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    10,
		},
	}
	require.NoError(t, f.c.Create(context.Background(), hpa))

	td, _ := f.reconcile(t)
	assert.EqualValues(t, 8, ptr.Deref(f.deployment(t).Spec.Replicas, 0), "TDSet fought the HPA")
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(hpa), hpa))
	assert.EqualValues(t, 5, ptr.Deref(hpa.Spec.MinReplicas, 0))
	assert.Equal(t, "HorizontalPodAutoscaler/web", td.Status.ScaleTarget)
	assert.Equal(t, "ScalingHPA", condition(td, ConditionReady).Reason)

	// A window above maxReplicas is capped; HPAs cannot go below 1.
	f.now = time.Date(2026, 11, 23, 0, 30, 0, 0, time.UTC)
	td.Spec.DefaultReplica = 0
	require.NoError(t, f.c.Update(context.Background(), td))
	f.reconcile(t)
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(hpa), hpa))
	assert.EqualValues(t, 1, ptr.Deref(hpa.Spec.MinReplicas, 0))
}

func TestInvalidTimeZoneIsReportedAndScalesNothing(t *testing.T) {
	td := seedTDSet(t)
	td.Spec.TimeZone = "Mars/Olympus_Mons"
	f := newFixture(t, td)
	got, requeue := f.reconcile(t)

	var d appsv1.Deployment
	err := f.c.Get(context.Background(), client.ObjectKeyFromObject(td), &d)
	assert.True(t, apierrors.IsNotFound(err), "a Deployment was created from an invalid schedule")
	valid := condition(got, ConditionScheduleValid)
	assert.Equal(t, metav1.ConditionFalse, valid.Status)
	assert.Equal(t, "InvalidSchedule", valid.Reason)
	assert.Contains(t, valid.Message, `unknown time zone "Mars/Olympus_Mons"`)
	assert.Equal(t, metav1.ConditionFalse, condition(got, ConditionReady).Status)
	assert.Zero(t, requeue, "nothing to wait for until the spec changes")
}

func TestOverlapsAreReportedAndTheHighestCountWins(t *testing.T) {
	td := seedTDSet(t)
	td.Spec.SchedulingConfig = append(td.Spec.SchedulingConfig, clock("09:30", "10:30", 9))
	f := newFixture(t, td)
	got, _ := f.reconcile(t)

	assert.EqualValues(t, 9, ptr.Deref(f.deployment(t).Spec.Replicas, 0))
	valid := condition(got, ConditionScheduleValid)
	assert.Equal(t, metav1.ConditionFalse, valid.Status)
	assert.Equal(t, "OverlappingWindows", valid.Reason)
	assert.Contains(t, valid.Message, "schedulingConfig[0] (09:00-17:00) and schedulingConfig[5] (09:30-10:30) overlap")
	assert.Equal(t, ptr.To[int32](5), got.Status.ActiveWindow)
}

func TestSuspendKeepsTheReplicaCount(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	td, _ := f.reconcile(t)
	td.Spec.Suspend = true
	require.NoError(t, f.c.Update(context.Background(), td))

	f.now = time.Date(2026, 11, 23, 17, 30, 0, 0, time.UTC)
	got, _ := f.reconcile(t)
	assert.EqualValues(t, 5, ptr.Deref(f.deployment(t).Spec.Replicas, 0))
	assert.Equal(t, "Suspended", condition(got, ConditionReady).Reason)
	assert.Empty(t, f.drainEvents())
}

func TestImageAndPortChangesReachTheDeployment(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	td, _ := f.reconcile(t)
	td.Spec.Container.Image = "crccheck/hello-world:v2"
	td.Spec.Container.Port = 8080
	require.NoError(t, f.c.Update(context.Background(), td))
	f.reconcile(t)

	c := f.deployment(t).Spec.Template.Spec.Containers
	require.Len(t, c, 1)
	assert.Equal(t, "crccheck/hello-world:v2", c[0].Image)
	assert.EqualValues(t, 8080, c[0].Ports[0].ContainerPort)
}

func TestServiceFollowsSpecService(t *testing.T) {
	td := seedTDSet(t)
	td.Spec.Service = &schedulev1.Service{Port: 80}
	f := newFixture(t, td)
	got, _ := f.reconcile(t)

	var svc corev1.Service
	key := client.ObjectKeyFromObject(td)
	require.NoError(t, f.c.Get(context.Background(), key, &svc))
	require.Len(t, svc.Spec.Ports, 1)
	assert.EqualValues(t, 80, svc.Spec.Ports[0].Port)
	assert.EqualValues(t, 8000, svc.Spec.Ports[0].TargetPort.IntVal)
	assert.Equal(t, "tdset-hello-world", svc.Spec.Selector[LabelName])

	got.Spec.Service = nil
	require.NoError(t, f.c.Update(context.Background(), got))
	f.reconcile(t)
	assert.True(t, apierrors.IsNotFound(f.c.Get(context.Background(), key, &svc)), "the Service outlived spec.service")
}

func TestForeignServiceIsNotTouched(t *testing.T) {
	td := seedTDSet(t)
	td.Spec.Service = &schedulev1.Service{Port: 80}
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "tdset-hello-world", Namespace: "temp"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9999}}},
	}
	f := newFixture(t, td, theirs)
	got, _ := f.reconcile(t)

	var svc corev1.Service
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(td), &svc))
	assert.EqualValues(t, 9999, svc.Spec.Ports[0].Port)
	assert.Equal(t, "ServiceNotOwned", condition(got, ConditionReady).Reason)
}

func TestForeignServiceDoesNotDelayTheNextBoundary(t *testing.T) {
	td := seedTDSet(t)
	td.Spec.Service = &schedulev1.Service{Port: 80}
	theirs := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "tdset-hello-world", Namespace: "temp"}}
	f := newFixture(t, td, theirs)
	_, requeue := f.reconcile(t)
	// 10:00 in the 9-17 window: the next change is at 17:00, but the
	// resync (intervalMint, 5 min) comes first; never later than either.
	assert.Equal(t, 5*time.Minute, requeue)
	f.now = time.Date(2026, 11, 23, 16, 59, 0, 0, time.UTC)
	_, requeue = f.reconcile(t)
	assert.Equal(t, time.Minute+time.Millisecond, requeue, "the boundary at 17:00 waits for the resync")
	assert.EqualValues(t, 5, ptr.Deref(f.deployment(t).Spec.Replicas, 0), "the Deployment is scaled despite the foreign Service")
}

func TestAnHPACreatedBeforeABoundaryKeepsItsReplicas(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	f.reconcile(t) // creates the Deployment at 5
	require.NoError(t, f.c.Create(context.Background(), hpaFor("tdset-hello-world")))

	// 17:00: the window closes (5 -> 2). The HPA owns replicas now.
	f.now = time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)
	td, _ := f.reconcile(t)
	assert.EqualValues(t, 5, ptr.Deref(f.deployment(t).Spec.Replicas, 0), "TDSet overwrote the HPA's replicas")
	assert.Equal(t, "HorizontalPodAutoscaler/web", td.Status.ScaleTarget)
}

func TestHPAReplicasAreNotOverwrittenFromAStaleCache(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	f.reconcile(t) // creates the Deployment at 5
	require.NoError(t, f.c.Create(context.Background(), hpaFor("tdset-hello-world")))
	f.reconcile(t)

	// The cache still shows 5 replicas; the HPA has scaled to 8 since.
	d := f.deployment(t)
	f.stale = map[client.ObjectKey]client.Object{client.ObjectKeyFromObject(d): d.DeepCopy()}
	d.Spec.Replicas = ptr.To[int32](8)
	require.NoError(t, f.c.Update(context.Background(), d))
	// An image change makes TDSet apply the Deployment.
	var td schedulev1.TDSet
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: "temp", Name: "tdset-hello-world"}, &td))
	td.Spec.Container.Image = "nginx:1.27"
	require.NoError(t, f.c.Update(context.Background(), &td))
	f.reconcile(t)

	got := f.deployment(t)
	assert.Equal(t, "nginx:1.27", got.Spec.Template.Spec.Containers[0].Image)
	assert.EqualValues(t, 8, ptr.Deref(got.Spec.Replicas, 0), "TDSet wrote the stale replica count over the HPA's")
}

func TestSteadyStateWithoutHPAReadsNothingLive(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	f.reconcile(t)
	live := 0
	f.r.Reader = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			live++
			return c.Get(ctx, key, o, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			live++
			return c.List(ctx, list, opts...)
		},
	})
	f.reconcile(t)
	f.reconcile(t)
	assert.Zero(t, live, "a reconcile with nothing to change read the API server")
}

func hpaFor(target string) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "temp"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    10,
		},
	}
}

func TestMissingTDSetIsNotAnError(t *testing.T) {
	f := newFixture(t)
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "temp", Name: "gone"}})
	assert.NoError(t, err)
}

func TestBoundaryScalesFirstAndReportsInAFollowUp(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	f.now = time.Date(2026, 11, 23, 16, 59, 59, 999_000_000, time.UTC)
	f.reconcile(t)
	f.drainEvents()
	key := client.ObjectKey{Namespace: "temp", Name: "tdset-hello-world"}

	f.now = time.Date(2026, 11, 23, 17, 0, 0, 1_000_000, time.UTC)
	writes := f.writes
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	require.NoError(t, err)
	assert.EqualValues(t, 3, ptr.Deref(f.deployment(t).Spec.Replicas, 0))
	assert.Equal(t, writes+1, f.writes, "the boundary wrote more than the Deployment")
	var td schedulev1.TDSet
	require.NoError(t, f.c.Get(context.Background(), key, &td))
	assert.EqualValues(t, 5, td.Status.DesiredReplicas, "the status was written before the follow-up")
	require.NotNil(t, res.Priority)
	assert.Less(t, *res.Priority, 0, "the follow-up would not queue behind other TDSets' boundaries")
	assert.Empty(t, f.drainEvents())

	_, err = f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	require.NoError(t, err)
	assert.Equal(t, writes+2, f.writes, "the follow-up wrote more than the status")
	require.NoError(t, f.c.Get(context.Background(), key, &td))
	assert.EqualValues(t, 3, td.Status.DesiredReplicas)
	assert.Len(t, f.drainEvents(), 1, "no Scaled event")
}

func TestARefusedStatusWriteKeepsTheWakeWithoutAnError(t *testing.T) {
	f := newFixture(t, seedTDSet(t))
	f.r.Client = interceptor.NewClient(f.cacheView().(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			return apierrors.NewServiceUnavailable("etcd is slow")
		},
	})
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "temp", Name: "tdset-hello-world"}})
	require.NoError(t, err, "a wake returned with an error is dropped by controller-runtime, and the error grows the backoff")
	assert.Equal(t, status.RetryStatusAfter, res.RequeueAfter, "the status is written again soon, the boundary 7 h away is recomputed then")
	assert.EqualValues(t, 5, ptr.Deref(f.deployment(t).Spec.Replicas, 0), "the pass did its work")
}
