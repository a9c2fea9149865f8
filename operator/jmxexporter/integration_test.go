package jmxexporter_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	banzaiv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/banzaicloud/v1alpha1"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

var (
	helperOnce sync.Once
	helperPath string
	helperErr  error
)

// helper builds the attach helper as the image does (static, no cgo),
// named with {arch} as the operator expects.
func helper(t *testing.T) string {
	t.Helper()
	helperOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deckhand-jmx-helper-")
		if err != nil {
			helperErr = err
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o",
			filepath.Join(dir, "deckhand-jmx-attach-linux-"+runtime.GOARCH), "./cmd/deckhand-jmx-attach")
		cmd.Dir = testenv.Root(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			helperErr = fmt.Errorf("building the helper: %w\n%s", err, out)
		}
		helperPath = filepath.Join(dir, "deckhand-jmx-attach-linux-{arch}")
	})
	require.NoError(t, helperErr)
	return helperPath
}

// startOperator runs the controller with the helper, the stand-in agent
// and a target directory of this test's own, which it returns. It runs
// as the chart's default least-privilege setup does: the namespace listed
// in controllers.jmxExporter.namespaces, pods/exec granted by a Role there.
func startOperator(t *testing.T, ns string) string {
	t.Helper()
	return startOperatorWith(t, listedRBAC(t, ns), []string{ns}, nil, ns)
}

// allNamespaces are the chart values that grant the controller's rights
// (pods/exec among them) cluster-wide, which the chart needs said
// explicitly.
var allNamespaces = map[string]map[string]any{"jmxExporter": {"allNamespaces": true}}

// listedRBAC is the chart's RBAC with ns listed in
// controllers.jmxExporter.namespaces.
func listedRBAC(t *testing.T, ns string) *rest.Config {
	t.Helper()
	return testenv.ChartRBACConfigWithValues(t, ns, map[string]map[string]any{"jmxExporter": {"namespaces": []any{ns}}}, jmxexporter.Name)
}

// startOperatorWith runs the controller (limited to limit, when set) and
// the other setups in one manager watching namespaces, as rc.
func startOperatorWith(t *testing.T, rc *rest.Config, limit []string, others []func(ctrl.Manager) error, namespaces ...string) string {
	t.Helper()
	target := filepath.Join(t.TempDir(), "target")
	o := jmxexporter.Options{HelperPath: helper(t), AgentJar: jvmtest.Compile(t).Agent, TargetDir: target, Namespaces: limit}
	testenv.StartController(t, rc, func(mgr ctrl.Manager) error {
		for _, setup := range others {
			if err := setup(mgr); err != nil {
				return err
			}
		}
		return jmxexporter.Setup(mgr, o)
	}, namespaces...)
	return target
}

// routeExec makes kwok run the pod's execs on this host, in workDir, with
// the test's marker in the environment: every fake pod's exec lands on the
// same host, so the helper must only see this pod's JVMs.
func routeExec(t *testing.T, c client.Client, ns, pod, workDir, marker string) {
	t.Helper()
	e := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec",
		"metadata": map[string]any{"name": pod, "namespace": ns},
		"spec": map[string]any{"execs": []any{map[string]any{"local": map[string]any{
			"workDir": workDir,
			"envs":    []any{map[string]any{"name": jvm.MatchEnv, "value": marker}},
		}}}},
	}}
	require.NoError(t, c.Create(context.Background(), e))
}

// runPod creates a one-container pod and waits until kwok runs it; then
// gives it the containerID a kubelet would (kwok sets none).
func runPod(t *testing.T, c client.Client, ns, name string, labels map[string]string, containerID string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/dummyapp:1"}}},
	}
	require.NoError(t, c.Create(context.Background(), pod))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod))
		require.Equal(ct, corev1.PodRunning, pod.Status.Phase)
		require.Len(ct, pod.Status.ContainerStatuses, 1)
	}, 60*time.Second, 100*time.Millisecond)
	restartContainer(t, c, pod, containerID, 0)
	return pod
}

// restartContainer sets the container's ID and restart count, as a kubelet
// does when the container restarts.
func restartContainer(t *testing.T, c client.Client, pod *corev1.Pod, containerID string, restarts int32) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status.ContainerStatuses[0].ContainerID = containerID
		pod.Status.ContainerStatuses[0].RestartCount = restarts
		return c.Status().Update(context.Background(), pod)
	}))
}

func kubectlApply(t *testing.T, ns, file string) {
	t.Helper()
	out, err := testenv.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(testenv.Root(t), "examples", "jmxexporter", file))
	require.NoError(t, err, out)
}

func getExporter(t require.TestingT, c client.Client, ns, name string) *banzaiv1alpha1.PrometheusJmxExporter {
	var e banzaiv1alpha1.PrometheusJmxExporter
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &e))
	return &e
}

func scrape(t require.TestingT, port int) string {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func requirePortFree(t *testing.T, port int) {
	t.Helper()
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	require.NoError(t, err, "the seed's port %d must be free on this host for the test", port)
	require.NoError(t, l.Close())
}

func TestSeedExampleAttachesToARealJVMAndReattachesAfterARestart(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	requirePortFree(t, 9400)
	marker := jvmtest.Marker(t)
	workDir := t.TempDir()
	first := jvmtest.Start(t, workDir, nil, marker)
	startOperator(t, ns)

	routeExec(t, c, ns, "dummyapp", workDir, marker)
	routeExec(t, c, ns, "unlabelled", workDir, marker)
	pod := runPod(t, c, ns, "dummyapp", map[string]string{"app": "dummyapp"}, "containerd://first")
	other := runPod(t, c, ns, "unlabelled", map[string]string{"app": "something-else"}, "containerd://other")
	kubectlApply(t, ns, "configmap.yaml")
	kubectlApply(t, ns, "prometheusjmxexporter.yaml")

	var e *banzaiv1alpha1.PrometheusJmxExporter
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		e = getExporter(ct, c, ns, "example-prom-jmx-exp")
		require.Equal(ct, "1/1", e.Status.Attached, "%+v", e.Status)
	}, 90*time.Second, 200*time.Millisecond)
	assert.Equal(t, []banzaiv1alpha1.MetricsEndpoint{{Pod: "dummyapp", Port: 9400, Container: "app", PID: int32(first.PID),
		ContainerID: "containerd://first", ConfigHash: e.Status.ConfigHash}}, e.Status.MetricsEndpoints)
	assert.True(t, meta.IsStatusConditionTrue(e.Status.Conditions, jmxexporter.ConditionReady))
	assert.True(t, meta.IsStatusConditionTrue(e.Status.Conditions, jmxexporter.ConditionConfigFound))
	assert.Equal(t, "app=dummyapp", e.Status.Selector)
	// The printer columns: selector, port, attached n/m, ready.
	out, err := testenv.Kubectl(t, "get", "jmxexp", "-n", ns)
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^NAME\s+SELECTOR\s+PORT\s+ATTACHED\s+READY\s+AGE$`, out)
	assert.Regexp(t, `(?m)^example-prom-jmx-exp\s+app=dummyapp\s+9400\s+1/1\s+True\s`, out)

	// The agent runs in the JVM on the host, and the ConfigMap's rule (with
	// lowercaseOutputName) shaped what it serves.
	metrics := scrape(t, 9400)
	assert.Regexp(t, `(?m)^jvm_heap_used_bytes [0-9.E]+$`, metrics)
	assert.Contains(t, metrics, "# HELP jvm_heap_used_bytes Heap memory used by the JVM.")
	assert.Contains(t, first.Log.String(), "stand-in agent serving on port 9400")

	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod))
	assert.Equal(t, "true", pod.Annotations[jmxexporter.AnnotationScrape])
	assert.Equal(t, "9400", pod.Annotations[jmxexporter.AnnotationPort])
	assert.Equal(t, "/metrics", pod.Annotations[jmxexporter.AnnotationPath])
	assert.Equal(t, "example-prom-jmx-exp", pod.Labels[jmxexporter.LabelExporter])
	assert.Contains(t, pod.Annotations[jmxexporter.AnnotationState], `"containerID":"containerd://first"`)

	// The unlabelled pod is untouched.
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(other), other))
	assert.Empty(t, other.Annotations)
	assert.NotContains(t, other.Labels, jmxexporter.LabelExporter)

	// Nothing is attached twice: a resync leaves the JVM with one agent.
	time.Sleep(2 * time.Second)
	assert.Equal(t, 1, countOf(first.Log.String(), "stand-in agent"), first.Log.String())

	// The container restarts: a new JVM, a new containerID, attached again.
	first.Stop()
	second := jvmtest.Start(t, workDir, nil, marker)
	restartContainer(t, c, pod, "containerd://second", 1)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		e = getExporter(ct, c, ns, "example-prom-jmx-exp")
		require.Len(ct, e.Status.MetricsEndpoints, 1)
		require.Equal(ct, "containerd://second", e.Status.MetricsEndpoints[0].ContainerID)
		require.Equal(ct, int32(second.PID), e.Status.MetricsEndpoints[0].PID)
	}, 90*time.Second, 200*time.Millisecond)
	assert.Regexp(t, `(?m)^jvm_heap_used_bytes [0-9.E]+$`, scrape(t, 9400))
	assert.Contains(t, second.Log.String(), "stand-in agent serving on port 9400")
	assert.GreaterOrEqual(t, attachCount(t, jvm.Attached, ""), 2.0)

	// Deleting the exporter removes the scrape annotations and label; the
	// agent stays loaded, and an Event says so.
	require.NoError(t, c.Delete(context.Background(), e))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod))
		require.NotContains(ct, pod.Annotations, jmxexporter.AnnotationScrape)
		require.NotContains(ct, pod.Labels, jmxexporter.LabelExporter)
		require.Contains(ct, pod.Annotations, jmxexporter.AnnotationState)
	}, 30*time.Second, 200*time.Millisecond)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		ev := eventFor(ct, c, ns, "Released", "dummyapp")
		require.Contains(ct, ev.Note, "a Java agent cannot be unloaded")
		require.Contains(ct, ev.Note, "scrape annotations removed")
	}, 30*time.Second, 200*time.Millisecond)
	assert.False(t, second.Exited())
}

func TestZeroAndTwoJVMsAreReported(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	marker := jvmtest.Marker(t)
	workDir := t.TempDir()
	a := jvmtest.Start(t, workDir, nil, marker+"-two", "a")
	b := jvmtest.Start(t, workDir, nil, marker+"-two", "b")
	startOperator(t, ns)

	routeExec(t, c, ns, "none", workDir, marker+"-none")
	routeExec(t, c, ns, "two", workDir, marker+"-two")
	runPod(t, c, ns, "none", map[string]string{"app": "java"}, "containerd://none")
	runPod(t, c, ns, "two", map[string]string{"app": "java"}, "containerd://two")
	kubectlApply(t, ns, "configmap.yaml")
	port := jvmtest.FreePort(t)
	e := &banzaiv1alpha1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jvms"},
		Spec: banzaiv1alpha1.PrometheusJmxExporterSpec{
			LabelSelector: map[string]string{"app": "java"},
			Config:        banzaiv1alpha1.ExporterConfig{ConfigMapName: "prometheus-jmx-exporter-config", ConfigMapKey: "config.yaml"},
			Port:          int32(port),
		},
	}
	require.NoError(t, c.Create(context.Background(), e))

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		e = getExporter(ct, c, ns, "jvms")
		reasons := map[string]string{}
		for _, p := range e.Status.Problems {
			reasons[p.Pod] = p.Reason
		}
		require.Equal(ct, map[string]string{"none": jvm.ReasonNoJVM, "two": jvm.ReasonAmbiguousJVM}, reasons)
	}, 90*time.Second, 200*time.Millisecond)
	assert.Equal(t, "0/2", e.Status.Attached)
	assert.Empty(t, e.Status.MetricsEndpoints)
	ready := meta.FindStatusCondition(e.Status.Conditions, jmxexporter.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	for _, p := range e.Status.Problems {
		if p.Pod == "two" {
			assert.Contains(t, p.Message, "2 Java processes found")
			assert.Contains(t, p.Message, "spec.jvmMatch")
		}
	}
	assert.GreaterOrEqual(t, attachCount(t, jvm.Failed, jvm.ReasonNoJVM), 1.0)
	assert.GreaterOrEqual(t, attachCount(t, jvm.Failed, jvm.ReasonAmbiguousJVM), 1.0)
	assert.NotContains(t, a.Log.String()+b.Log.String(), "stand-in agent")

	// jvmMatch picks one of the two.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		e = getExporter(t, c, ns, "jvms")
		e.Spec.JVMMatch = " b"
		return c.Update(context.Background(), e)
	}))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		e = getExporter(ct, c, ns, "jvms")
		require.Len(ct, e.Status.MetricsEndpoints, 1)
		require.Equal(ct, int32(b.PID), e.Status.MetricsEndpoints[0].PID)
	}, 90*time.Second, 200*time.Millisecond)
	assert.Equal(t, "1/2", e.Status.Attached)
	assert.Contains(t, scrape(t, port), "jvm_heap_used_bytes")
}

func countOf(s, sub string) int {
	n := 0
	for i := 0; ; {
		j := indexFrom(s, sub, i)
		if j < 0 {
			return n
		}
		n++
		i = j + len(sub)
	}
}

func indexFrom(s, sub string, from int) int {
	for i := from; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// attachCount reads deckhand_jmxexporter_attaches_total{result,reason}.
func attachCount(t *testing.T, result, reason string) float64 {
	t.Helper()
	return testenv.CounterValue(t, "deckhand_jmxexporter_attaches_total", map[string]string{"result": result, "reason": reason})
}

func TestAdmissionRejectsBadSpecsWithReadableMessages(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	valid := func() *banzaiv1alpha1.PrometheusJmxExporter {
		return &banzaiv1alpha1.PrometheusJmxExporter{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bad-"},
			Spec: banzaiv1alpha1.PrometheusJmxExporterSpec{
				LabelSelector: map[string]string{"app": "x"},
				Config:        banzaiv1alpha1.ExporterConfig{ConfigMapName: "cm", ConfigMapKey: "config.yaml"},
				Port:          9400,
			},
		}
	}
	for want, mutate := range map[string]func(*banzaiv1alpha1.PrometheusJmxExporter){
		"labelSelector must name at least one label": func(e *banzaiv1alpha1.PrometheusJmxExporter) { e.Spec.LabelSelector = map[string]string{} },
		"path must start with /":                     func(e *banzaiv1alpha1.PrometheusJmxExporter) { e.Spec.Path = "metrics" },
		"configMapKey must be a ConfigMap key":       func(e *banzaiv1alpha1.PrometheusJmxExporter) { e.Spec.Config.ConfigMapKey = "a/b" },
		"should be less than or equal to 65535":      func(e *banzaiv1alpha1.PrometheusJmxExporter) { e.Spec.Port = 70000 },
	} {
		e := valid()
		mutate(e)
		err := c.Create(context.Background(), e)
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), want)
	}
	e := valid()
	require.NoError(t, c.Create(context.Background(), e))
	assert.Equal(t, "/metrics", e.Spec.Path, "path defaults to /metrics")
}
