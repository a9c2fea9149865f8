package configmonitor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
)

const ns = "default"

func configMap(msg string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "flaskapp-config", Namespace: ns},
		Data:       map[string]string{"config.cfg": `MSG="` + msg + `"`},
	}
}

func TestHashIsTheDataOnly(t *testing.T) {
	a := configMap("Welcome to Kubernetes!")
	b := a.DeepCopy()
	b.Labels = map[string]string{"edited": "yes"}
	b.Annotations = map[string]string{"note": "x"}
	assert.Equal(t, Hash(a, nil), Hash(b, nil), "labels and annotations changed the hash")

	b.Data["config.cfg"] = `MSG="Welcome to Operators!"`
	assert.NotEqual(t, Hash(a, nil), Hash(b, nil))

	// Keys and values cannot run into each other.
	x := &corev1.ConfigMap{Data: map[string]string{"a": "bc"}}
	y := &corev1.ConfigMap{Data: map[string]string{"ab": "c"}}
	assert.NotEqual(t, Hash(x, nil), Hash(y, nil))
	// data and binaryData are told apart.
	z := &corev1.ConfigMap{BinaryData: map[string][]byte{"a": []byte("bc")}}
	assert.NotEqual(t, Hash(x, nil), Hash(z, nil))

	s1 := &corev1.Secret{Data: map[string][]byte{"password": []byte("one")}}
	s2 := &corev1.Secret{Data: map[string][]byte{"password": []byte("two")}}
	assert.NotEqual(t, Hash(a, s1), Hash(a, s2))
	assert.NotEqual(t, Hash(a, nil), Hash(a, &corev1.Secret{}), "adding an empty Secret is a different configuration")
	assert.Len(t, Hash(a, nil), 64)
}

func TestAnnotationKeyFitsAndIsShared(t *testing.T) {
	spec := magalixv1.ConfigMonitorSpec{Configmap: "flaskapp-config"}
	assert.Equal(t, "deckhand.dev/configmap-flaskapp-config", AnnotationKey(&spec))
	other := magalixv1.ConfigMonitorSpec{ConfigMap: "flaskapp-config"}
	assert.Equal(t, AnnotationKey(&spec), AnnotationKey(&other), "both spellings must share the key")
	spec.Secret = "db"
	assert.Equal(t, "deckhand.dev/configmap-flaskapp-config.secret-db", AnnotationKey(&spec))

	long := magalixv1.ConfigMonitorSpec{ConfigMap: strings.Repeat("a", 200), Secret: strings.Repeat("b", 200)}
	name := strings.TrimPrefix(AnnotationKey(&long), AnnotationPrefix)
	assert.LessOrEqual(t, len(name), 63)
	long.Secret = strings.Repeat("b", 199) + "c"
	assert.NotEqual(t, name, strings.TrimPrefix(AnnotationKey(&long), AnnotationPrefix))
}

// The seed's frontend: Deployment → ReplicaSet → Pod, as the API server
// would hold them.
func frontend() []client.Object {
	labels := map[string]string{"app": "frontend"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "frontend", Namespace: ns, UID: "deploy-uid"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}},
		},
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "frontend-7f8d89fb68", Namespace: ns, UID: "rs-uid",
		OwnerReferences: []metav1.OwnerReference{controllerRef("apps/v1", "Deployment", "frontend", "deploy-uid")}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "frontend-7f8d89fb68-77qv4", Namespace: ns, Labels: labels, UID: "pod-uid",
		OwnerReferences: []metav1.OwnerReference{controllerRef("apps/v1", "ReplicaSet", "frontend-7f8d89fb68", "rs-uid")}}}
	return []client.Object{d, rs, pod}
}

func controllerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: &yes}
}

func monitor(name string) *magalixv1.ConfigMonitor {
	return &magalixv1.ConfigMonitor{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Generation: 1},
		Spec: magalixv1.ConfigMonitorSpec{
			Configmap:   "flaskapp-config",
			PodSelector: map[string]string{"app": "frontend"},
			Strategy:    magalixv1.RollingRestart,
		},
	}
}

type fixture struct {
	r      *Reconciler
	c      client.Client
	events *events.FakeRecorder
	now    time.Time
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, magalixv1.AddToScheme(s))
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&magalixv1.ConfigMonitor{}).WithObjects(objs...).
		WithIndex(&magalixv1.ConfigMonitor{}, indexConfigMap, func(o client.Object) []string {
			return []string{o.(*magalixv1.ConfigMonitor).Spec.ConfigMapName()}
		}).
		WithIndex(&corev1.Pod{}, indexPodLabel, podLabels).Build()
	f := &fixture{c: c, events: events.NewFakeRecorder(100), now: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)}
	f.r = &Reconciler{Client: c, Reader: c, Recorder: f.events, Limiter: rate.NewLimiter(rate.Inf, 1), Now: func() time.Time { return f.now }}
	return f
}

func (f *fixture) reconcile(t *testing.T, name string) (*magalixv1.ConfigMonitor, ctrl.Result) {
	t.Helper()
	key := client.ObjectKey{Namespace: ns, Name: name}
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	require.NoError(t, err)
	var m magalixv1.ConfigMonitor
	require.NoError(t, f.c.Get(context.Background(), key, &m))
	return &m, res
}

func (f *fixture) setMessage(t *testing.T, msg string) {
	t.Helper()
	var cm corev1.ConfigMap
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "flaskapp-config"}, &cm))
	cm.Data["config.cfg"] = `MSG="` + msg + `"`
	require.NoError(t, f.c.Update(context.Background(), &cm))
}

// templateHash is what the frontend's pod template carries, "" if nothing.
func (f *fixture) templateHash(t *testing.T) (string, string) {
	t.Helper()
	var d appsv1.Deployment
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "frontend"}, &d))
	return d.Spec.Template.Annotations["deckhand.dev/configmap-flaskapp-config"], d.ResourceVersion
}

// staleMonitors is the fixture's client as a cache that still holds
// snapshot for every ConfigMonitor: it has not seen the writes since.
func (f *fixture) staleMonitors(snapshot *magalixv1.ConfigMonitor) client.Client {
	return interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if m, ok := o.(*magalixv1.ConfigMonitor); ok {
				snapshot.DeepCopyInto(m)
				return nil
			}
			return c.Get(ctx, key, o, opts...)
		},
	})
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

func TestCreatingAMonitorRestartsNothing(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("Welcome to Kubernetes!"), monitor("flakapp-config-monitor"))...)
	_, rv := f.templateHash(t)
	m, _ := f.reconcile(t, "flakapp-config-monitor")

	hash, rvAfter := f.templateHash(t)
	assert.Empty(t, hash)
	assert.Equal(t, rv, rvAfter, "the Deployment was written at creation")
	assert.Equal(t, Hash(configMap("Welcome to Kubernetes!"), nil), m.Status.ObservedHash)
	assert.Equal(t, "Baseline", reason(m, ConditionReady))
	assert.Equal(t, "Found", reason(m, ConditionConfigFound))
	assert.Equal(t, "flaskapp-config", m.Status.ConfigMap)
	assert.Equal(t, "app=frontend", m.Status.Selector)
	assert.Empty(t, f.drainEvents())
}

func TestADataChangeRollsTheOwnerOnce(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("Welcome to Kubernetes!"), monitor("flakapp-config-monitor"))...)
	f.reconcile(t, "flakapp-config-monitor")
	f.setMessage(t, "Welcome to Operators!")
	m, _ := f.reconcile(t, "flakapp-config-monitor")

	want := Hash(configMap("Welcome to Operators!"), nil)
	hash, rv := f.templateHash(t)
	assert.Equal(t, want, hash, "the pod template does not carry the new configuration")
	assert.Equal(t, want, m.Status.ObservedHash)
	assert.Equal(t, []magalixv1.WorkloadRef{{Kind: "Deployment", Name: "frontend"}}, m.Status.RestartedWorkloads)
	require.NotNil(t, m.Status.LastRestartTime)
	assert.Equal(t, "Restarted", reason(m, ConditionReady))
	var pod corev1.Pod
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "frontend-7f8d89fb68-77qv4"}, &pod), "RollingRestart deleted a pod")
	evs := f.drainEvents()
	require.Len(t, evs, 2, "%v", evs)
	assert.Contains(t, evs[0], "Normal Restarted ConfigMap flaskapp-config changed")

	// Again: nothing to do, nothing written.
	f.reconcile(t, "flakapp-config-monitor")
	_, rvAgain := f.templateHash(t)
	assert.Equal(t, rv, rvAgain)
	assert.Empty(t, f.drainEvents())
}

// A pass that reads the monitor from a cache that has not yet seen its
// recorded baseline must not record the changed data as the baseline: the
// change would be lost and nothing ever restarted.
func TestAChangeRightAfterTheBaselineIsNotTakenForIt(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("Welcome to Kubernetes!"), monitor("m"))...)
	var unseen magalixv1.ConfigMonitor
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, &unseen))
	f.reconcile(t, "m")
	f.setMessage(t, "Welcome to Operators!")

	f.r.Client = f.staleMonitors(&unseen)
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "m"}})
	require.NoError(t, err)
	f.r.Client = f.c
	got, _ := f.reconcile(t, "m")

	hash, _ := f.templateHash(t)
	assert.Equal(t, Hash(configMap("Welcome to Operators!"), nil), hash, "the change was taken for the baseline")
	assert.Equal(t, "Restarted", reason(got, ConditionReady))
}

func TestLabelsOnlyChangeRollsNothing(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("Welcome to Kubernetes!"), monitor("m"))...)
	f.reconcile(t, "m")
	var cm corev1.ConfigMap
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "flaskapp-config"}, &cm))
	cm.Labels = map[string]string{"team": "web"}
	require.NoError(t, f.c.Update(context.Background(), &cm))
	m, _ := f.reconcile(t, "m")
	hash, _ := f.templateHash(t)
	assert.Empty(t, hash)
	assert.Equal(t, "Baseline", reason(m, ConditionReady), "nothing happened since the baseline")
}

func TestTwoMonitorsOfOneConfigMapRollOnce(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("Welcome to Kubernetes!"), monitor("a"), monitor("b"))...)
	f.reconcile(t, "a")
	f.reconcile(t, "b")
	f.setMessage(t, "Welcome to Operators!")
	a, _ := f.reconcile(t, "a")
	_, rv := f.templateHash(t)
	b, _ := f.reconcile(t, "b")
	_, rvAfter := f.templateHash(t)

	assert.Len(t, a.Status.RestartedWorkloads, 1)
	assert.Equal(t, a.Status.RestartedWorkloads, b.Status.RestartedWorkloads, "both monitors name the workload that runs the change")
	assert.Equal(t, rv, rvAfter, "the second monitor restarted the workload again")
	assert.Equal(t, a.Status.ObservedHash, b.Status.ObservedHash)
}

func TestMissingConfigMapIsReportedAndItsReturnIsABaseline(t *testing.T) {
	f := newFixture(t, append(frontend(), monitor("m"))...)
	m, res := f.reconcile(t, "m")
	assert.Equal(t, "NotFound", reason(m, ConditionConfigFound))
	assert.Equal(t, "ConfigNotFound", reason(m, ConditionReady))
	assert.Contains(t, meta.FindStatusCondition(m.Status.Conditions, ConditionConfigFound).Message, "ConfigMap flaskapp-config not found")
	assert.Zero(t, res, "a missing ConfigMap must not loop: its watch wakes the monitor")

	require.NoError(t, f.c.Create(context.Background(), configMap("Welcome!")))
	m, _ = f.reconcile(t, "m")
	hash, _ := f.templateHash(t)
	assert.Empty(t, hash, "the ConfigMap's appearance restarted the workload")
	assert.Equal(t, "Baseline", reason(m, ConditionReady))
}

func TestPausedDeploymentIsStampedAndRollsWhenResumed(t *testing.T) {
	objs := frontend()
	objs[0].(*appsv1.Deployment).Spec.Paused = true
	f := newFixture(t, append(objs, configMap("one"), monitor("m"))...)
	f.reconcile(t, "m")
	f.setMessage(t, "two")
	m, _ := f.reconcile(t, "m")

	// The template carries the hash: the Deployment controller rolls it
	// on `kubectl rollout resume`, and the change is not forgotten.
	hash, _ := f.templateHash(t)
	assert.Equal(t, Hash(configMap("two"), nil), hash, "a paused Deployment was left without the change")
	assert.Equal(t, []magalixv1.WorkloadRef{{Kind: "Deployment", Name: "frontend"}}, m.Status.RestartedWorkloads)
	assert.Empty(t, m.Status.PendingWorkloads)
	assert.Contains(t, strings.Join(f.drainEvents(), "\n"), "the Deployment is paused and rolls when it is resumed")
}

func TestUnsupportedTargetsAreReportedAndDoNotHoldReady(t *testing.T) {
	f := newFixture(t, append(frontend(), bare(), configMap("one"), monitor("m"))...)
	f.reconcile(t, "m")
	f.setMessage(t, "two")
	m, _ := f.reconcile(t, "m")
	assert.Equal(t, "Restarted", reason(m, ConditionReady), "a bare pod held the change back")
	supported := meta.FindStatusCondition(m.Status.Conditions, ConditionTargetsSupported)
	require.NotNil(t, supported)
	assert.Equal(t, metav1.ConditionFalse, supported.Status)
	assert.Contains(t, supported.Message, "Pod/lonely (BarePod")
	assert.Contains(t, f.drainEvents(), "Warning Skipped not restarted: Pod/lonely (BarePod: no controller to roll; strategy DeletePods restarts bare pods)")

	// The same targets again are not announced again.
	f.setMessage(t, "three")
	f.reconcile(t, "m")
	for _, e := range f.drainEvents() {
		assert.NotContains(t, e, "Skipped", "an unchanged list of unsupported targets was announced twice")
	}
}

func bare() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "lonely", Namespace: ns, Labels: map[string]string{"app": "frontend"},
		CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))}}
}

func TestBarePodsAreDeletedOnlyUnderDeletePods(t *testing.T) {
	f := newFixture(t, bare(), configMap("one"), monitor("m"))
	f.reconcile(t, "m")
	f.setMessage(t, "two")
	f.reconcile(t, "m")
	var pod corev1.Pod
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(bare()), &pod), "RollingRestart deleted a bare pod")
	assert.Contains(t, f.drainEvents(), "Warning Skipped not restarted: Pod/lonely (BarePod: no controller to roll; strategy DeletePods restarts bare pods)")

	m := monitor("seedlike")
	m.Spec.Strategy = magalixv1.DeletePods
	require.NoError(t, f.c.Create(context.Background(), m))
	f.reconcile(t, "seedlike")
	f.setMessage(t, "three")
	_, res := f.reconcile(t, "seedlike")
	require.Positive(t, res.RequeueAfter, "pods are deleted once the second of the change has passed")
	f.now = f.now.Add(res.RequeueAfter)
	got, _ := f.reconcile(t, "seedlike")
	assert.Error(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(bare()), &pod), "DeletePods left the pod")
	assert.Equal(t, []magalixv1.WorkloadRef{{Kind: "Pod", Name: "lonely"}}, got.Status.RestartedWorkloads)
}

func TestDebounceCoalescesABurst(t *testing.T) {
	m := monitor("m")
	m.Spec.Debounce = &metav1.Duration{Duration: 30 * time.Second}
	f := newFixture(t, append(frontend(), configMap("one"), m)...)
	f.reconcile(t, "m")

	f.setMessage(t, "two")
	got, res := f.reconcile(t, "m")
	assert.Equal(t, 30*time.Second, res.RequeueAfter)
	assert.Equal(t, "Debouncing", reason(got, ConditionReady))
	f.now = f.now.Add(20 * time.Second)
	f.setMessage(t, "three") // the burst goes on: the wait starts again
	_, res = f.reconcile(t, "m")
	assert.Equal(t, 30*time.Second, res.RequeueAfter)
	hash, _ := f.templateHash(t)
	assert.Empty(t, hash, "restarted inside the debounce period")

	f.now = f.now.Add(30 * time.Second)
	got, _ = f.reconcile(t, "m")
	hash, _ = f.templateHash(t)
	assert.Equal(t, Hash(configMap("three"), nil), hash)
	assert.Nil(t, got.Status.PendingSince)
}

func TestSuspendHoldsTheChangeUntilLifted(t *testing.T) {
	m := monitor("m")
	f := newFixture(t, append(frontend(), configMap("one"), m)...)
	f.reconcile(t, "m")
	got, _ := f.reconcile(t, "m")
	got.Spec.Suspend = true
	require.NoError(t, f.c.Update(context.Background(), got))
	f.setMessage(t, "two")
	got, _ = f.reconcile(t, "m")
	assert.Equal(t, "Suspended", reason(got, ConditionReady))
	hash, _ := f.templateHash(t)
	assert.Empty(t, hash)

	got.Spec.Suspend = false
	require.NoError(t, f.c.Update(context.Background(), got))
	f.reconcile(t, "m")
	hash, _ = f.templateHash(t)
	assert.Equal(t, Hash(configMap("two"), nil), hash)
}

func TestSecretChangesRollToo(t *testing.T) {
	m := monitor("m")
	m.Spec.Secret = "db"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Data: map[string][]byte{"password": []byte("hunter2")}}
	f := newFixture(t, append(frontend(), configMap("one"), secret, m)...)
	f.reconcile(t, "m")
	secret.Data["password"] = []byte("correct horse")
	require.NoError(t, f.c.Update(context.Background(), secret))
	got, _ := f.reconcile(t, "m")
	assert.Len(t, got.Status.RestartedWorkloads, 1)
	for _, e := range f.drainEvents() {
		assert.NotContains(t, e, "correct horse", "an event leaked the Secret")
	}
}

// withoutSecretAccess makes the Reconciler's reads of Secrets fail as they
// would without RBAC on them, and ignore Secrets as the operator then must.
func (f *fixture) withoutSecretAccess() {
	f.r.IgnoreSecrets = true
	f.r.Reader = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if _, ok := o.(*corev1.Secret); ok {
				return apierrors.NewForbidden(corev1.Resource("secrets"), key.Name, errors.New("no RBAC on Secrets"))
			}
			return c.Get(ctx, key, o, opts...)
		},
	})
}

func TestIgnoredSecretsAreReportedAndTheBaselineKept(t *testing.T) {
	withSecret := monitor("with-secret")
	withSecret.Spec.Secret = "db"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Data: map[string][]byte{"password": []byte("hunter2")}}
	f := newFixture(t, append(frontend(), configMap("one"), secret, withSecret, monitor("configmap-only"))...)
	f.reconcile(t, "with-secret")
	f.reconcile(t, "configmap-only")
	baseline := Hash(configMap("one"), secret)

	f.withoutSecretAccess()
	m, _ := f.reconcile(t, "with-secret")
	assert.Equal(t, "SecretsIgnored", reason(m, ConditionReady))
	assert.Equal(t, "SecretsIgnored", reason(m, ConditionConfigFound))
	assert.Contains(t, meta.FindStatusCondition(m.Status.Conditions, ConditionReady).Message, "controllers.configMonitor.secrets")
	assert.Equal(t, baseline, m.Status.ObservedHash, "ignoring Secrets lost the baseline")
	f.reconcile(t, "with-secret")
	evs := f.drainEvents()
	require.Len(t, evs, 1, "one Warning when the monitor starts being ignored, not one per reconcile: %v", evs)
	assert.Contains(t, evs[0], "Warning SecretsIgnored")

	// A monitor of a ConfigMap alone still rolls; one naming a Secret does not.
	f.setMessage(t, "two")
	f.reconcile(t, "with-secret")
	hash, _ := f.templateHash(t)
	assert.Empty(t, hash, "a monitor whose Secret is ignored restarted the workload")
	m, _ = f.reconcile(t, "configmap-only")
	assert.Equal(t, "Restarted", reason(m, ConditionReady))
	hash, _ = f.templateHash(t)
	assert.Equal(t, Hash(configMap("two"), nil), hash)

	// Secrets back on: the ConfigMap change made meanwhile rolls once.
	f.r.IgnoreSecrets, f.r.Reader = false, f.c
	m, _ = f.reconcile(t, "with-secret")
	assert.Equal(t, "Restarted", reason(m, ConditionReady))
	assert.Equal(t, Hash(configMap("two"), secret), m.Status.ObservedHash)
}

func TestRestartLimiterDefaults(t *testing.T) {
	l := restartLimiter(Options{})
	assert.EqualValues(t, DefaultRestartsPerSecond, l.Limit())
	assert.Equal(t, DefaultRestartBurst, l.Burst())
	l = restartLimiter(Options{RestartsPerSecond: 0.5, RestartBurst: 3})
	assert.EqualValues(t, 0.5, l.Limit())
	assert.Equal(t, 3, l.Burst())
}

func TestASpentRestartBudgetIsReportedAndRetriedLater(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("one"), monitor("m"))...)
	f.r.Limiter = rate.NewLimiter(rate.Every(time.Hour), 1)
	f.reconcile(t, "m")
	f.setMessage(t, "two")
	m, _ := f.reconcile(t, "m")
	require.Equal(t, "Restarted", reason(m, ConditionReady), "the burst allows the first restart")
	f.drainEvents()

	f.setMessage(t, "three")
	m, res := f.reconcile(t, "m")
	hash, _ := f.templateHash(t)
	assert.Equal(t, Hash(configMap("two"), nil), hash, "restarted beyond the budget")
	assert.Equal(t, "RateLimited", reason(m, ConditionReady))
	assert.Contains(t, meta.FindStatusCondition(m.Status.Conditions, ConditionReady).Message, "paced at 0.000277")
	assert.Equal(t, Hash(configMap("two"), nil), m.Status.ObservedHash, "the change must stay pending")
	assert.Equal(t, Hash(configMap("three"), nil), m.Status.PendingHash)
	assert.InDelta(t, time.Hour.Seconds(), res.RequeueAfter.Seconds(), 1, "come back when the next restart is allowed")
	assert.Empty(t, f.drainEvents(), "a paced restart is not a failure")

	assert.Equal(t, []magalixv1.WorkloadRef{{Kind: "Deployment", Name: "frontend"}}, m.Status.PendingWorkloads, "status names what the change has not reached")

	f.r.Limiter = rate.NewLimiter(rate.Inf, 1)
	m, _ = f.reconcile(t, "m")
	assert.Equal(t, "Restarted", reason(m, ConditionReady))
	assert.Empty(t, m.Status.PendingWorkloads)
	hash, _ = f.templateHash(t)
	assert.Equal(t, Hash(configMap("three"), nil), hash)
}

func TestASpentRestartBudgetKeepsTheSkipsItFound(t *testing.T) {
	f := newFixture(t, append(frontend(), bare(), configMap("one"), monitor("m"))...)
	f.r.Limiter = rate.NewLimiter(rate.Every(time.Hour), 1)
	f.r.Limiter.Allow() // the budget is spent
	f.reconcile(t, "m")
	f.setMessage(t, "two")
	m, _ := f.reconcile(t, "m")
	require.Equal(t, "RateLimited", reason(m, ConditionReady))
	assert.Equal(t, "Unsupported", reason(m, ConditionTargetsSupported), "the rate limit dropped the skips it had found")
	assert.Contains(t, strings.Join(f.drainEvents(), "\n"), "Pod/lonely (BarePod")
}

// replacementPod is what the ReplicaSet creates after a pod was deleted.
func replacementPod(created time.Time) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "lonely-2", Namespace: ns, Labels: map[string]string{"app": "frontend"},
		CreationTimestamp: metav1.NewTime(created)}}
}

// deletePodsBaseline is a DeletePods monitor "m" over the bare pod, its
// configuration "one" recorded as the baseline.
func deletePodsBaseline(t *testing.T) *fixture {
	t.Helper()
	m := monitor("m")
	m.Spec.Strategy = magalixv1.DeletePods
	f := newFixture(t, bare(), configMap("one"), m)
	f.reconcile(t, "m")
	return f
}

func TestDeletePodsDeletesOncePerChangeEvenFromAStaleCache(t *testing.T) {
	f := deletePodsBaseline(t)
	var stale magalixv1.ConfigMonitor
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, &stale))

	f.now = f.now.Add(300 * time.Millisecond)
	f.setMessage(t, "two")
	_, res := f.reconcile(t, "m")
	f.now = f.now.Add(res.RequeueAfter)
	got, _ := f.reconcile(t, "m")
	require.Equal(t, []magalixv1.WorkloadRef{{Kind: "Pod", Name: "lonely"}}, got.Status.RestartedWorkloads)
	// The replacement starts in the same second the change was made in.
	require.NoError(t, f.c.Create(context.Background(), replacementPod(f.now.Add(-200*time.Millisecond))))

	// A reconcile from a cache that has not seen the status written above.
	f.r.Client = f.staleMonitors(&stale)
	f.now = f.now.Add(2 * time.Second)
	f.reconcile(t, "m")
	var pod corev1.Pod
	assert.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "lonely-2"}, &pod), "the replacement pod was deleted for the same change")
}

// DeletePods records the change's instant on the server before deleting
// (persistCutoff), so the pass's own status write comes after a write of
// its own; from a cache that has seen neither, that write must still land
// and name the pods deleted.
func TestDeletePodsRecordsWhatItDeletedEvenFromAStaleCache(t *testing.T) {
	f := deletePodsBaseline(t)
	f.setMessage(t, "two")
	var cached magalixv1.ConfigMonitor
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, &cached))
	f.r.Client = f.staleMonitors(&cached)
	for range 3 {
		res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "m"}})
		require.NoError(t, err)
		f.now = f.now.Add(res.RequeueAfter)
	}
	f.r.Client = f.c
	got, _ := f.reconcile(t, "m")
	assert.Equal(t, "Restarted", reason(got, ConditionReady))
	assert.Equal(t, []magalixv1.WorkloadRef{{Kind: "Pod", Name: "lonely"}}, got.Status.RestartedWorkloads)
}

func TestDeletePodsRetriedAfterALostStatusWriteSparesReplacements(t *testing.T) {
	f := deletePodsBaseline(t)
	f.setMessage(t, "two")
	_, res := f.reconcile(t, "m")
	f.now = f.now.Add(res.RequeueAfter)
	// The pods are deleted, then the status write that records it fails.
	f.r.Client = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			return apierrors.NewServiceUnavailable("etcd is slow")
		},
	})
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "m"}})
	require.Error(t, err)
	require.NoError(t, f.c.Create(context.Background(), replacementPod(f.now)))

	f.r.Client = f.c
	f.now = f.now.Add(time.Minute)
	got, _ := f.reconcile(t, "m")
	var pod corev1.Pod
	assert.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "lonely-2"}, &pod), "the retry deleted the replacement pod")
	assert.Equal(t, "Restarted", reason(got, ConditionReady))
}

func TestInvalidSelectorIsReported(t *testing.T) {
	m := monitor("m")
	m.Spec.PodSelector = map[string]string{"app": "has spaces"}
	f := newFixture(t, configMap("one"), m)
	got, _ := f.reconcile(t, "m")
	assert.Equal(t, "InvalidSelector", reason(got, ConditionReady))
}

func TestAFailedRestartIsReportedOnBothAndRetried(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("one"), monitor("m"))...)
	f.reconcile(t, "m")
	f.setMessage(t, "two")
	f.r.Client = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			return apierrors.NewForbidden(appsv1.Resource("deployments"), o.GetName(), errors.New("denied"))
		},
	})
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "m"}})
	require.Error(t, err, "a failed restart must be retried")
	var m magalixv1.ConfigMonitor
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, &m))
	assert.Equal(t, "RestartFailed", reason(&m, ConditionReady))
	assert.Equal(t, Hash(configMap("one"), nil), m.Status.ObservedHash, "the change must stay pending")
	evs := f.drainEvents()
	require.Len(t, evs, 2, "%v", evs)
	assert.Contains(t, evs[0], "Warning RestartFailed restarting Deployment/frontend")
	assert.Contains(t, evs[1], "Warning RestartFailed restart for ConfigMonitor m failed")
}

// reactionSeconds is the count and sum of the reaction histogram, as
// /metrics shows them.
func reactionSeconds(t *testing.T) (uint64, float64) {
	t.Helper()
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "deckhand_configmonitor_reaction_seconds" {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatal("deckhand_configmonitor_reaction_seconds is not registered")
	return 0, 0
}

// configMapEvent is the ConfigMap watch event reaching the controller.
func (f *fixture) configMapEvent(t *testing.T) {
	t.Helper()
	reqs := f.r.monitorsNaming(indexConfigMap)(context.Background(), configMap(""))
	require.NotEmpty(t, reqs, "the event woke no monitor")
}

func TestReactionTimeLeavesOutTheDebounce(t *testing.T) {
	m := monitor("m")
	m.Spec.Debounce = &metav1.Duration{Duration: 30 * time.Second}
	f := newFixture(t, append(frontend(), configMap("one"), m)...)
	f.reconcile(t, "m")

	f.setMessage(t, "two")
	f.configMapEvent(t)
	_, res := f.reconcile(t, "m")
	require.Equal(t, 30*time.Second, res.RequeueAfter)
	count, sum := reactionSeconds(t)

	f.now = f.now.Add(res.RequeueAfter + 250*time.Millisecond)
	got, _ := f.reconcile(t, "m")
	require.Equal(t, "Restarted", reason(got, ConditionReady))
	count2, sum2 := reactionSeconds(t)
	assert.Equal(t, count+1, count2, "one restart, one observation")
	assert.InDelta(t, 0.25, sum2-sum, 0.001, "the reaction is counted from the end of the debounce the user asked for")
}
