package configmonitor_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
	"github.com/deckhand-dev/deckhand/operator/configmonitor"
)

// setupIn registers the controller with its default options, its own
// cache limited to the test's namespace as the manager's is (cmd/deckhand
// gives both the same namespaces). Without it every test's operator would
// watch the pods, workloads and ConfigMaps of the whole shared cluster.
func setupIn(ns string) func(ctrl.Manager) error {
	return func(mgr ctrl.Manager) error {
		return configmonitor.Setup(mgr, configmonitor.Options{Namespaces: []string{ns}})
	}
}

// startOperator runs the ConfigMonitor controller in this process and
// counts the pod deletions it sends.
func startOperator(t *testing.T, ns string) (podDeletes *atomic.Int64) {
	t.Helper()
	rc, deletes := testenv.Counting(testenv.ChartRBACConfig(t, ns, configmonitor.Name), func(req *http.Request) bool {
		return req.Method == http.MethodDelete && filepath.Base(filepath.Dir(req.URL.Path)) == "pods"
	})
	testenv.StartController(t, rc, setupIn(ns), ns)
	return deletes
}

func kubectlApply(t *testing.T, ns, file string) {
	t.Helper()
	out, err := testenv.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(testenv.Root(t), "examples", "configmonitor", file))
	require.NoError(t, err, out)
}

func getMonitor(t require.TestingT, c client.Client, ns, name string) *magalixv1.ConfigMonitor {
	var m magalixv1.ConfigMonitor
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &m))
	return &m
}

// waitReason waits until the monitor's Ready condition has reason, for
// up to a minute: a full make test once kept the package's operator from
// reacting within 30 s (the package took 125 s against its usual 40).
func waitReason(t *testing.T, c client.Client, ns, name, reason string) *magalixv1.ConfigMonitor {
	t.Helper()
	var m *magalixv1.ConfigMonitor
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		m = getMonitor(ct, c, ns, name)
		ready := meta.FindStatusCondition(m.Status.Conditions, configmonitor.ConditionReady)
		require.NotNil(ct, ready)
		require.Equal(ct, reason, ready.Reason, ready.Message)
		require.Equal(ct, m.Generation, m.Status.ObservedGeneration)
	}, time.Minute, 50*time.Millisecond)
	return m
}

func generation(t require.TestingT, c client.Client, obj client.Object) int64 {
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	return obj.GetGeneration()
}

func setData(t *testing.T, c client.Client, ns, name, key, value string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = value
		return c.Update(context.Background(), &cm)
	}))
}

func deploymentOf(ns string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "frontend"}}
}

func TestSeedLabChangingMSGRollsTheFrontend(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	podDeletes := startOperator(t, ns)

	kubectlApply(t, ns, "configmap.yml")
	kubectlApply(t, ns, "deployment.yml")
	kubectlApply(t, ns, "configmonitor.yml")
	d := deploymentOf(ns)
	var oldPods []string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(d), d))
		require.EqualValues(ct, 1, d.Status.ReadyReplicas)
		oldPods = podNames(ct, c, ns)
		require.Len(ct, oldPods, 1)
	}, 60*time.Second, 100*time.Millisecond)
	baseline := waitReason(t, c, ns, "flakapp-config-monitor", "Baseline")
	assert.EqualValues(t, 1, generation(t, c, d), "creating the monitor restarted the frontend")

	changed := time.Now()
	kubectlApply(t, ns, "configmap-changed.yml")
	m := waitReason(t, c, ns, "flakapp-config-monitor", "Restarted")
	assert.NotEqual(t, baseline.Status.ObservedHash, m.Status.ObservedHash)
	assert.Equal(t, []magalixv1.WorkloadRef{{Kind: "Deployment", Name: "frontend"}}, m.Status.RestartedWorkloads)
	assert.WithinDuration(t, changed, m.Status.LastRestartTime.Time, 5*time.Second)

	// A new ReplicaSet replaced the old pod, by the Deployment's own rollout.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var rs appsv1.ReplicaSetList
		require.NoError(ct, c.List(context.Background(), &rs, client.InNamespace(ns), client.MatchingLabels{"app": "frontend"}))
		require.Len(ct, rs.Items, 2)
		now := podNames(ct, c, ns)
		require.Len(ct, now, 1)
		require.NotContains(ct, oldPods, now[0])
	}, 60*time.Second, 100*time.Millisecond)
	assert.Zero(t, podDeletes.Load(), "the operator deleted pods under RollingRestart")
	assert.EqualValues(t, 2, generation(t, c, d), "one change, one rollout")
	assert.Equal(t, m.Status.ObservedHash, d.Spec.Template.Annotations["deckhand.dev/configmap-flaskapp-config"])

	// Events on the monitor and on the Deployment, for kubectl describe.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Contains(ct, eventReasons(ct, c, ns, "flakapp-config-monitor"), "Restarted")
		assert.Contains(ct, eventReasons(ct, c, ns, "frontend"), "Restarted")
	}, 10*time.Second, 100*time.Millisecond)

	out, err := testenv.Kubectl(t, "get", "cmon", "-n", ns)
	require.NoError(t, err, out)
	assert.Regexp(t, `NAME\s+CONFIGMAP\s+SELECTOR\s+LAST RESTART\s+READY\s+AGE`, out)
	assert.Regexp(t, `flakapp-config-monitor\s+flaskapp-config\s+app=frontend\s+\d+s\s+True`, out)
}

func podNames(t require.TestingT, c client.Client, ns string) []string {
	var pods corev1.PodList
	require.NoError(t, c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": "frontend"}))
	var names []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() && p.Status.Phase == corev1.PodRunning {
			names = append(names, p.Name)
		}
	}
	return names
}

func eventReasons(t require.TestingT, c client.Client, ns, name string) []string {
	var evs eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &evs, client.InNamespace(ns)))
	var reasons []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// seedLab applies the seed's ConfigMap and frontend Deployment and waits
// for the frontend's pod to be ready. A change made before the pod exists
// rightly restarts nothing (the pod starts with the new configuration),
// which a test expecting a restart would take for a failure: on a loaded
// machine the controller manager has created the pod after the change.
func seedLab(t *testing.T, ns string) {
	t.Helper()
	kubectlApply(t, ns, "configmap.yml")
	kubectlApply(t, ns, "deployment.yml")
	c := testenv.Client(t)
	d := deploymentOf(ns)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(d), d))
		require.EqualValues(ct, 1, d.Status.ReadyReplicas)
	}, 60*time.Second, 100*time.Millisecond, "the frontend's pod is not ready")
}

func newMonitor(ns, name string) *magalixv1.ConfigMonitor {
	return &magalixv1.ConfigMonitor{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       magalixv1.ConfigMonitorSpec{ConfigMap: "flaskapp-config", PodSelector: map[string]string{"app": "frontend"}},
	}
}

// waitObservedHash waits until the monitor has recorded a configuration
// other than notHash.
func waitObservedHash(t *testing.T, c client.Client, ns, name, notHash string) *magalixv1.ConfigMonitor {
	t.Helper()
	var m *magalixv1.ConfigMonitor
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		m = getMonitor(ct, c, ns, name)
		require.NotEmpty(ct, m.Status.ObservedHash)
		require.NotEqual(ct, notHash, m.Status.ObservedHash)
	}, 30*time.Second, 50*time.Millisecond)
	return m
}

func TestLabelOnlyChangesRollNothing(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	seedLab(t, ns)
	require.NoError(t, c.Create(context.Background(), newMonitor(ns, "m")))
	waitReason(t, c, ns, "m", "Baseline")

	out, err := testenv.Kubectl(t, "label", "-n", ns, "configmap/flaskapp-config", "team=web")
	require.NoError(t, err, out)
	out, err = testenv.Kubectl(t, "annotate", "-n", ns, "configmap/flaskapp-config", "note=reviewed")
	require.NoError(t, err, out)
	// Then a data change: the events that follow the edits in the same
	// watch show they were delivered, and the change rolls exactly once.
	setData(t, c, ns, "flaskapp-config", "config.cfg", `MSG="after the label edits"`)
	waitReason(t, c, ns, "m", "Restarted")
	assert.EqualValues(t, 2, generation(t, c, deploymentOf(ns)), "the label or annotation edit rolled the Deployment")
}

func TestAChangeWhileTheOperatorIsDownRollsOnceOnReturn(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	seedLab(t, ns)
	require.NoError(t, c.Create(context.Background(), newMonitor(ns, "m")))
	var baseline string
	t.Run("first run records the baseline", func(t *testing.T) {
		startOperator(t, ns)
		baseline = waitReason(t, c, ns, "m", "Baseline").Status.ObservedHash
	}) // the operator stops here

	setData(t, c, ns, "flaskapp-config", "config.cfg", `MSG="changed while nobody watched"`)
	startOperator(t, ns)
	m := waitObservedHash(t, c, ns, "m", baseline)
	assert.Equal(t, []magalixv1.WorkloadRef{{Kind: "Deployment", Name: "frontend"}}, m.Status.RestartedWorkloads)
	// Once: later reconciles (a spec edit forces one) leave it alone.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getMonitor(t, c, ns, "m")
		m.Spec.Debounce = &metav1.Duration{Duration: time.Second}
		return c.Update(context.Background(), m)
	}))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		m := getMonitor(ct, c, ns, "m")
		require.Equal(ct, m.Generation, m.Status.ObservedGeneration)
	}, 30*time.Second, 50*time.Millisecond)
	assert.EqualValues(t, 2, generation(t, c, deploymentOf(ns)))
}

func TestTwoMonitorsOverOneWorkloadRollItOnce(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	seedLab(t, ns)
	a := newMonitor(ns, "a")
	b := newMonitor(ns, "b")
	b.Spec.ConfigMap, b.Spec.Configmap = "", "flaskapp-config" // the other spelling
	require.NoError(t, c.Create(context.Background(), a))
	require.NoError(t, c.Create(context.Background(), b))
	baseline := waitReason(t, c, ns, "a", "Baseline").Status.ObservedHash
	waitReason(t, c, ns, "b", "Baseline")

	for i := range 3 {
		setData(t, c, ns, "flaskapp-config", "config.cfg", fmt.Sprintf("MSG=%d", i))
		ma := waitObservedHash(t, c, ns, "a", baseline)
		mb := waitObservedHash(t, c, ns, "b", baseline)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			ma = getMonitor(ct, c, ns, "a")
			mb = getMonitor(ct, c, ns, "b")
			require.Equal(ct, ma.Status.ObservedHash, mb.Status.ObservedHash)
			require.Empty(ct, ma.Status.PendingHash)
			require.Empty(ct, mb.Status.PendingHash)
		}, 30*time.Second, 50*time.Millisecond)
		baseline = ma.Status.ObservedHash
		assert.EqualValues(t, 2+i, generation(t, c, deploymentOf(ns)), "change %d: the workload was not rolled exactly once", i)
		frontend := []magalixv1.WorkloadRef{{Kind: "Deployment", Name: "frontend"}}
		assert.Equal(t, frontend, ma.Status.RestartedWorkloads, "change %d: monitor a", i)
		assert.Equal(t, frontend, mb.Status.RestartedWorkloads, "change %d: monitor b", i)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			restarts := slices.DeleteFunc(eventReasons(ct, c, ns, "frontend"), func(r string) bool { return r != "Restarted" })
			assert.Len(ct, restarts, i+1, "one Restarted event on the Deployment per change")
		}, 10*time.Second, 100*time.Millisecond)
	}
}

func TestRestartsBeyondTheBudgetWaitInStatus(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	// One restart at once, the next after 1,000 s.
	testenv.StartController(t, testenv.ChartRBACConfig(t, ns, configmonitor.Name), func(mgr ctrl.Manager) error {
		return configmonitor.Setup(mgr, configmonitor.Options{RestartsPerSecond: 0.001, RestartBurst: 1, Namespaces: []string{ns}})
	}, ns)
	seedLab(t, ns)
	d := deploymentOf(ns)
	require.NoError(t, c.Create(context.Background(), newMonitor(ns, "m")))
	waitReason(t, c, ns, "m", "Baseline")

	setData(t, c, ns, "flaskapp-config", "config.cfg", `MSG="one"`)
	waitReason(t, c, ns, "m", "Restarted")
	setData(t, c, ns, "flaskapp-config", "config.cfg", `MSG="two"`)
	m := waitReason(t, c, ns, "m", "RateLimited")
	assert.Contains(t, meta.FindStatusCondition(m.Status.Conditions, "Ready").Message, "the next is allowed in")
	assert.NotEmpty(t, m.Status.PendingHash, "the change must stay pending")
	assert.EqualValues(t, 2, generation(t, c, d), "restarted beyond the budget")
	assert.NotContains(t, eventReasons(t, c, ns, "m"), "RestartFailed")
}

func TestMissingConfigMapThenItsAppearance(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	kubectlApply(t, ns, "deployment.yml")
	require.NoError(t, c.Create(context.Background(), newMonitor(ns, "m")))
	m := waitReason(t, c, ns, "m", "ConfigNotFound")
	found := meta.FindStatusCondition(m.Status.Conditions, configmonitor.ConditionConfigFound)
	require.NotNil(t, found)
	assert.Equal(t, metav1.ConditionFalse, found.Status)
	assert.Contains(t, found.Message, "ConfigMap flaskapp-config not found in namespace "+ns)

	kubectlApply(t, ns, "configmap.yml")
	waitReason(t, c, ns, "m", "Baseline")
	assert.EqualValues(t, 1, generation(t, c, deploymentOf(ns)), "the ConfigMap's appearance restarted the workload")
}

// TestStatefulSetsDaemonSetsAndPausedDeploymentsRoll: a paused Deployment
// gets the change on its template and rolls when it is resumed, as users
// of `kubectl rollout pause` expect; the change is never lost.
func TestStatefulSetsDaemonSetsAndPausedDeploymentsRoll(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	kubectlApply(t, ns, "configmap.yml")
	labels := map[string]string{"tier": "data"}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}
	paused := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "paused"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}
	for _, o := range []client.Object{sts, ds, paused} {
		require.NoError(t, c.Create(context.Background(), o))
	}
	// Wait for the pods of all three, then pause the Deployment (a
	// Deployment created paused never gets pods).
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(sts), sts))
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(ds), ds))
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(paused), paused))
		require.EqualValues(ct, 1, sts.Status.ReadyReplicas)
		require.Positive(ct, ds.Status.NumberReady)
		require.EqualValues(ct, 1, paused.Status.ReadyReplicas)
	}, 60*time.Second, 200*time.Millisecond)
	require.NoError(t, c.Patch(context.Background(), paused, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`))))
	pausedGeneration := generation(t, c, paused)
	m := &magalixv1.ConfigMonitor{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"},
		Spec: magalixv1.ConfigMonitorSpec{ConfigMap: "flaskapp-config", PodSelector: labels}}
	require.NoError(t, c.Create(context.Background(), m))
	waitReason(t, c, ns, "m", "Baseline")

	setData(t, c, ns, "flaskapp-config", "config.cfg", "MSG=new")
	got := waitReason(t, c, ns, "m", "Restarted")
	assert.ElementsMatch(t, []magalixv1.WorkloadRef{{Kind: "StatefulSet", Name: "db"}, {Kind: "DaemonSet", Name: "agent"}, {Kind: "Deployment", Name: "paused"}},
		got.Status.RestartedWorkloads)
	assert.Empty(t, got.Status.PendingWorkloads)
	assert.Greater(t, generation(t, c, paused), pausedGeneration, "the paused Deployment's template did not get the change")

	// While paused nothing rolls; `kubectl rollout resume` rolls it.
	oldRS := replicaSetsOf(t, c, ns, labels)
	require.NoError(t, c.Patch(context.Background(), paused, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":false}}`))))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(paused), paused))
		assert.Equal(ct, paused.Generation, paused.Status.ObservedGeneration)
		assert.EqualValues(ct, 1, paused.Status.UpdatedReplicas)
		assert.Greater(ct, len(replicaSetsOf(t, c, ns, labels)), len(oldRS), "no new ReplicaSet after resume")
	}, 60*time.Second, 200*time.Millisecond)
}

// replicaSetsOf names the ReplicaSets whose pods carry labels.
func replicaSetsOf(t *testing.T, c client.Client, ns string, labels map[string]string) []string {
	t.Helper()
	var list appsv1.ReplicaSetList
	require.NoError(t, c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels(labels)))
	var names []string
	for _, rs := range list.Items {
		names = append(names, rs.Name)
	}
	return names
}

func TestDeletePodsStrategyDeletesBarePods(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	podDeletes := startOperator(t, ns)
	kubectlApply(t, ns, "configmap.yml")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lonely", Labels: map[string]string{"app": "frontend"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}
	require.NoError(t, c.Create(context.Background(), pod))
	m := newMonitor(ns, "m")
	m.Spec.Strategy = magalixv1.DeletePods
	require.NoError(t, c.Create(context.Background(), m))
	waitReason(t, c, ns, "m", "Baseline")

	setData(t, c, ns, "flaskapp-config", "config.cfg", "MSG=new")
	got := waitReason(t, c, ns, "m", "Restarted")
	assert.Equal(t, []magalixv1.WorkloadRef{{Kind: "Pod", Name: "lonely"}}, got.Status.RestartedWorkloads)
	assert.EqualValues(t, 1, podDeletes.Load())
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod)
		require.True(ct, apierrors.IsNotFound(err) || !pod.DeletionTimestamp.IsZero())
	}, 30*time.Second, 100*time.Millisecond)
}

func TestInvalidMonitorsAreRejectedAtAdmission(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	cases := map[string]struct {
		mutate func(*magalixv1.ConfigMonitor)
		want   string
	}{
		"neither spelling":  {func(m *magalixv1.ConfigMonitor) { m.Spec.ConfigMap = "" }, "set exactly one of configmap (the seed example's spelling) and configMap"},
		"both spellings":    {func(m *magalixv1.ConfigMonitor) { m.Spec.Configmap = "other" }, "set exactly one of configmap"},
		"empty selector":    {func(m *magalixv1.ConfigMonitor) { m.Spec.PodSelector = map[string]string{} }, "podSelector must name at least one label"},
		"no selector":       {func(m *magalixv1.ConfigMonitor) { m.Spec.PodSelector = nil }, "spec.podSelector: Required value"},
		"bad strategy":      {func(m *magalixv1.ConfigMonitor) { m.Spec.Strategy = "Reboot" }, `supported values: "RollingRestart", "DeletePods"`},
		"negative debounce": {func(m *magalixv1.ConfigMonitor) { m.Spec.Debounce = &metav1.Duration{Duration: -5 * time.Second} }, "debounce must be a non-negative duration"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := newMonitor(ns, "bad")
			tc.mutate(m)
			err := c.Create(context.Background(), m)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "%v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
