package jmxexporter_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	banzaiv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/banzaicloud/v1alpha1"
	blogv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/iximiuz/v1alpha1"
	"github.com/deckhand-dev/deckhand/operator/blogpost"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

const (
	wait = 90 * time.Second
	tick = 200 * time.Millisecond
)

func newExporter(ns, name, configMap string, port int) *banzaiv1alpha1.PrometheusJmxExporter {
	return &banzaiv1alpha1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: banzaiv1alpha1.PrometheusJmxExporterSpec{
			LabelSelector: map[string]string{"app": "java"},
			Config:        banzaiv1alpha1.ExporterConfig{ConfigMapName: configMap, ConfigMapKey: "config.yaml"},
			Port:          int32(port),
		},
	}
}

func problemOf(e *banzaiv1alpha1.PrometheusJmxExporter, pod string) *banzaiv1alpha1.PodProblem {
	for i := range e.Status.Problems {
		if e.Status.Problems[i].Pod == pod {
			return &e.Status.Problems[i]
		}
	}
	return nil
}

// eventFor finds an Event of reason about the named object.
func eventFor(ct require.TestingT, c client.Client, ns, reason, regarding string) *eventsv1.Event {
	var evs eventsv1.EventList
	require.NoError(ct, c.List(context.Background(), &evs, client.InNamespace(ns)))
	for i := range evs.Items {
		if evs.Items[i].Reason == reason && evs.Items[i].Regarding.Name == regarding {
			return &evs.Items[i]
		}
	}
	require.Fail(ct, "no Event "+reason+" about "+regarding)
	return nil
}

func updateExporter(t *testing.T, c client.Client, ns, name string, change func(*banzaiv1alpha1.PrometheusJmxExporter)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		e := getExporter(t, c, ns, name)
		change(e)
		return c.Update(context.Background(), e)
	}))
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// A configuration change reaches the running agent byte for byte (it
// re-reads its file); a second exporter selecting the same pod reports
// the conflict and changes nothing; a port change is reported as needing
// a restart, and the agent keeps serving where it was loaded.
func TestConfigChangesSecondExportersAndPortChangesOnARunningAgent(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	marker := jvmtest.Marker(t)
	workDir := t.TempDir()
	j := jvmtest.Start(t, workDir, nil, marker)
	target := startOperator(t, ns)
	routeExec(t, c, ns, "app", workDir, marker)
	pod := runPod(t, c, ns, "app", map[string]string{"app": "java"}, "containerd://one")

	first := "lowercaseOutputName: true\nrules:\n- pattern: 'java.lang<type=Memory><HeapMemoryUsage>used'\n  name: jvm_heap_used_bytes\n  type: GAUGE\n"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jmx"}, Data: map[string]string{"config.yaml": first}}
	require.NoError(t, c.Create(context.Background(), cm))
	port := jvmtest.FreePort(t)
	require.NoError(t, c.Create(context.Background(), newExporter(ns, "older", "jmx", port)))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.Equal(ct, "1/1", getExporter(ct, c, ns, "older").Status.Attached)
	}, wait, tick)
	assert.Regexp(t, `(?m)^jvm_heap_used_bytes [0-9.E]+$`, scrape(t, port))

	// A newer exporter selecting the same pod: it reports the conflict,
	// the older one keeps the pod, nothing is loaded again.
	time.Sleep(time.Second) // creation timestamps have a one-second resolution
	require.NoError(t, c.Create(context.Background(), newExporter(ns, "newer", "jmx", jvmtest.FreePort(t))))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		e := getExporter(ct, c, ns, "newer")
		p := problemOf(e, "app")
		require.NotNil(ct, p, "%+v", e.Status)
		require.Equal(ct, "SelectedByAnother", p.Reason)
		require.Contains(ct, p.Message, "PrometheusJmxExporter older")
		require.Equal(ct, "0/1", e.Status.Attached)
		require.False(ct, meta.IsStatusConditionTrue(e.Status.Conditions, jmxexporter.ConditionReady))
	}, wait, tick)
	assert.Equal(t, "1/1", getExporter(t, c, ns, "older").Status.Attached)
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod))
	assert.Equal(t, "older", pod.Labels[jmxexporter.LabelExporter])
	assert.Equal(t, strconv.Itoa(port), pod.Annotations[jmxexporter.AnnotationPort])

	// A new configuration, with a comment and a renamed metric: copied as
	// written, and the agent in the JVM serves the new name.
	second := "# renamed, kept as written\nlowercaseOutputName: true\nrules:\n- pattern: \"java.lang<type=Memory><HeapMemoryUsage>used\"\n  name: JVM_Heap_Bytes_Renamed\n  help: Renamed by the second configuration.\n  type: GAUGE\n"
	setConfig := func(text string) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(cm), cm))
			cm.Data["config.yaml"] = text
			return c.Update(context.Background(), cm)
		}))
	}
	setConfig(second)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		e := getExporter(ct, c, ns, "older")
		require.Len(ct, e.Status.MetricsEndpoints, 1)
		require.Equal(ct, sha(second), e.Status.MetricsEndpoints[0].ConfigHash)
	}, wait, tick)
	copied, err := os.ReadFile(filepath.Join(target, "config.yaml"))
	require.NoError(t, err)
	assert.Equal(t, second, string(copied), "byte for byte")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.Regexp(ct, `(?m)^jvm_heap_bytes_renamed [0-9.E]+$`, scrape(ct, port))
	}, 10*time.Second, tick)
	assert.Contains(t, scrape(t, port), "# HELP jvm_heap_bytes_renamed Renamed by the second configuration.")
	eventFor(t, c, ns, "ConfigUpdated", "app")
	assert.Equal(t, 1, countOf(j.Log.String(), "stand-in agent serving"), j.Log.String())

	// A change the agent would exit the JVM over (hostPort; it re-reads the
	// file on its next scrape): refused, not copied, the JVM lives on.
	setConfig(second + "hostPort: localhost:9999\n")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		valid := meta.FindStatusCondition(getExporter(ct, c, ns, "older").Status.Conditions, jmxexporter.ConditionConfigValid)
		require.NotNil(ct, valid)
		require.Equal(ct, metav1.ConditionFalse, valid.Status)
		require.Contains(ct, valid.Message, "hostPort")
		require.Contains(ct, eventFor(ct, c, ns, "ConfigRefused", "app").Note, "hostPort")
	}, wait, tick)
	copied, err = os.ReadFile(filepath.Join(target, "config.yaml"))
	require.NoError(t, err)
	assert.Equal(t, second, string(copied), "the agent's file is as it was")
	assert.Regexp(t, `(?m)^jvm_heap_bytes_renamed [0-9.E]+$`, scrape(t, port))
	assert.False(t, j.Exited(), j.Log.String())
	setConfig(second)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.True(ct, meta.IsStatusConditionTrue(getExporter(ct, c, ns, "older").Status.Conditions, jmxexporter.ConditionConfigValid))
	}, wait, tick)

	// A port change cannot move a loaded agent: reported, the scrape
	// annotations still pointing at the port the agent serves, the agent
	// still where it was.
	newPort := jvmtest.FreePort(t)
	updateExporter(t, c, ns, "older", func(e *banzaiv1alpha1.PrometheusJmxExporter) { e.Spec.Port = int32(newPort) })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		e := getExporter(ct, c, ns, "older")
		p := problemOf(e, "app")
		require.NotNil(ct, p, "%+v", e.Status)
		require.Equal(ct, "PortChangeNeedsRestart", p.Reason)
		require.Contains(ct, p.Message, "takes effect when the container restarts")
		require.Equal(ct, "0/1", e.Status.Attached)
	}, wait, tick)
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod))
	assert.Equal(t, strconv.Itoa(port), pod.Annotations[jmxexporter.AnnotationPort])
	assert.Equal(t, "true", pod.Annotations[jmxexporter.AnnotationScrape])
	assert.Contains(t, scrape(t, port), "jvm_heap_bytes_renamed")
	assert.False(t, j.Exited())
	assert.Equal(t, 1, countOf(j.Log.String(), "stand-in agent serving"), j.Log.String())
}

const podMonitorCRD = "podmonitors.monitoring.coreos.com"

// removePodMonitorCRD deletes the test's PodMonitor CRD and waits until
// the API server stops serving it.
func removePodMonitorCRD(t *testing.T, c client.Client) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: podMonitorCRD}}
	require.NoError(t, client.IgnoreNotFound(c.Delete(context.Background(), crd)))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(crd), crd)
		require.True(ct, apierrors.IsNotFound(err), "CRD still there: %v", err)
	}, 60*time.Second, tick)
}

func installPodMonitorCRD(t *testing.T, c client.Client) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "podmonitor-crd.yaml"))
	require.NoError(t, err)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.Unmarshal(b, crd))
	require.NoError(t, c.Create(context.Background(), crd))
	t.Cleanup(func() { removePodMonitorCRD(t, c) })
	testenv.WaitEstablished(t, c, podMonitorCRD)
}

func podMonitorCondition(ct require.TestingT, c client.Client, ns, name string) *metav1.Condition {
	return meta.FindStatusCondition(getExporter(ct, c, ns, name).Status.Conditions, jmxexporter.ConditionPodMonitor)
}

func TestPodMonitorWithoutItsCRDIsReported(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	removePodMonitorCRD(t, c)
	ns := testenv.Namespace(t, c)
	rc := testenv.ChartRBACConfigWithValues(t, ns, map[string]map[string]any{"jmxExporter": {"podMonitor": true, "allNamespaces": true}}, jmxexporter.Name)
	startOperatorWith(t, rc, nil, nil, ns)
	kubectlApply(t, ns, "configmap.yaml")
	e := newExporter(ns, "monitored", "prometheus-jmx-exporter-config", 9400)
	e.Spec.PodMonitor = true
	require.NoError(t, c.Create(context.Background(), e))

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cond := podMonitorCondition(ct, c, ns, "monitored")
		require.NotNil(ct, cond)
		require.Equal(ct, metav1.ConditionFalse, cond.Status)
		require.Equal(ct, "CRDNotInstalled", cond.Reason)
		require.Contains(ct, cond.Message, "prometheus.io annotations")
	}, wait, tick)
	// The rest of the exporter works on.
	e = getExporter(t, c, ns, "monitored")
	assert.True(t, meta.IsStatusConditionTrue(e.Status.Conditions, jmxexporter.ConditionReady))
	assert.True(t, meta.IsStatusConditionTrue(e.Status.Conditions, jmxexporter.ConditionConfigFound))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		eventFor(ct, c, ns, "PodMonitorCRDNotInstalled", "monitored")
	}, 30*time.Second, tick)
}

func TestPodMonitorIsKeptWhenItsCRDExistsAndTheChartAllowsIt(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	removePodMonitorCRD(t, c)
	installPodMonitorCRD(t, c)
	ns := testenv.Namespace(t, c)
	rc := testenv.ChartRBACConfigWithValues(t, ns, map[string]map[string]any{"jmxExporter": {"podMonitor": true, "allNamespaces": true}}, jmxexporter.Name)
	startOperatorWith(t, rc, nil, nil, ns)
	kubectlApply(t, ns, "configmap.yaml")
	e := newExporter(ns, "monitored", "prometheus-jmx-exporter-config", 9410)
	e.Spec.PodMonitor = true
	require.NoError(t, c.Create(context.Background(), e))

	pm := &unstructured.Unstructured{}
	pm.SetGroupVersionKind(jmxexporter.PodMonitorGVK)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "monitored"}, pm))
		cond := podMonitorCondition(ct, c, ns, "monitored")
		require.NotNil(ct, cond)
		require.Equal(ct, metav1.ConditionTrue, cond.Status, cond.Message)
	}, wait, tick)
	e = getExporter(t, c, ns, "monitored")
	assert.True(t, metav1.IsControlledBy(pm, e), "owned by the exporter, so deleting it deletes the PodMonitor")
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	assert.Equal(t, map[string]string{jmxexporter.LabelExporter: "monitored"}, sel)
	endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	require.Len(t, endpoints, 1)
	ep := endpoints[0].(map[string]any)
	assert.Equal(t, "/metrics", ep["path"])
	assert.Contains(t, ep["relabelings"], map[string]any{"action": "replace", "sourceLabels": []any{"__meta_kubernetes_pod_ip"},
		"regex": "(.+)", "replacement": "$1:9410", "targetLabel": "__address__"})
	eventFor(t, c, ns, "PodMonitorCreated", "monitored")

	// A port change follows into the PodMonitor.
	updateExporter(t, c, ns, "monitored", func(e *banzaiv1alpha1.PrometheusJmxExporter) { e.Spec.Port = 9411 })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "monitored"}, pm))
		endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
		require.Contains(ct, endpoints[0].(map[string]any)["relabelings"], map[string]any{"action": "replace",
			"sourceLabels": []any{"__meta_kubernetes_pod_ip"}, "regex": "(.+)", "replacement": "$1:9411", "targetLabel": "__address__"})
	}, wait, tick)

	// Switched off: the PodMonitor goes, and its condition with it.
	updateExporter(t, c, ns, "monitored", func(e *banzaiv1alpha1.PrometheusJmxExporter) { e.Spec.PodMonitor = false })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "monitored"}, pm)
		require.True(ct, apierrors.IsNotFound(err), "PodMonitor still there: %v", err)
		require.Nil(ct, podMonitorCondition(ct, c, ns, "monitored"))
	}, wait, tick)

	// A PodMonitor of the same name that is not the exporter's is left alone.
	foreign := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"selector": map[string]any{}}}}
	foreign.SetGroupVersionKind(jmxexporter.PodMonitorGVK)
	foreign.SetNamespace(ns)
	foreign.SetName("monitored")
	require.NoError(t, c.Create(context.Background(), foreign))
	updateExporter(t, c, ns, "monitored", func(e *banzaiv1alpha1.PrometheusJmxExporter) { e.Spec.PodMonitor = true })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cond := podMonitorCondition(ct, c, ns, "monitored")
		require.NotNil(ct, cond)
		require.Equal(ct, "NameTaken", cond.Reason)
	}, wait, tick)
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(foreign), foreign))
	assert.Empty(t, foreign.GetOwnerReferences())
	require.NoError(t, c.Delete(context.Background(), foreign))

	// Without the chart value the operator may not touch PodMonitors, and
	// says so.
	ns2 := testenv.Namespace(t, c)
	startOperatorWith(t, testenv.ChartRBACConfigWithValues(t, ns2, allNamespaces, jmxexporter.Name), nil, nil, ns2)
	kubectlApply(t, ns2, "configmap.yaml")
	e = newExporter(ns2, "unallowed", "prometheus-jmx-exporter-config", 9400)
	e.Spec.PodMonitor = true
	require.NoError(t, c.Create(context.Background(), e))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cond := podMonitorCondition(ct, c, ns2, "unallowed")
		require.NotNil(ct, cond)
		require.Equal(ct, "Forbidden", cond.Reason)
		require.Contains(ct, cond.Message, "controllers.jmxExporter.podMonitor=true")
	}, wait, tick)
}

// controllers.jmxExporter.namespaces: the JMX exporter works in its
// namespaces with Roles there only, and ignores the others; a controller
// next to it in the same operator still sees every watched namespace.
func TestNamespaceLimitedModeNarrowsOnlyTheJMXExporter(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	mine, other := testenv.Namespace(t, c), testenv.Namespace(t, c)
	rc := testenv.ChartRBACConfigWithValues(t, mine, map[string]map[string]any{"jmxExporter": {"namespaces": []any{mine}}},
		jmxexporter.Name, blogpost.Name)
	startOperatorWith(t, rc, []string{mine}, []func(ctrl.Manager) error{blogpost.Setup}, mine, other)

	marker := jvmtest.Marker(t)
	for _, ns := range []string{mine, other} {
		routeExec(t, c, ns, "app", t.TempDir(), marker)
		runPod(t, c, ns, "app", map[string]string{"app": "java"}, "containerd://"+ns)
		kubectlApply(t, ns, "configmap.yaml")
		require.NoError(t, c.Create(context.Background(), newExporter(ns, "exp", "prometheus-jmx-exporter-config", jvmtest.FreePort(t))))
	}
	out, err := testenv.Kubectl(t, "apply", "-n", other, "-f", filepath.Join(testenv.Root(t), "examples", "blogpost.yaml"))
	require.NoError(t, err, out)

	// In its namespace the controller runs (no JVM there: reported as such).
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := problemOf(getExporter(ct, c, mine, "exp"), "app")
		require.NotNil(ct, p)
		require.Equal(ct, jvm.ReasonNoJVM, p.Reason)
	}, wait, tick)
	// The BlogPost controller is not narrowed: it publishes in the other one.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var post blogv1alpha1.BlogPost
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: other, Name: "blog-post-1"}, &post))
		require.NotNil(ct, post.Status.PublishedAt)
	}, wait, tick)
	// The JMX exporter never looked there.
	e := getExporter(t, c, other, "exp")
	assert.Empty(t, e.Status.Conditions)
	assert.Empty(t, e.Status.Attached)
	var pod corev1.Pod
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: other, Name: "app"}, &pod))
	assert.NotContains(t, pod.Annotations, jmxexporter.AnnotationState)
	assert.NotContains(t, pod.Labels, jmxexporter.LabelExporter)
}

// A supervisor restarts the JVM inside the same container: a new PID, no
// new container ID. The operator's recheck finds it and attaches it.
func TestAJVMRestartedInsideItsContainerIsAttachedAgain(t *testing.T) {
	recheck := jmxexporter.JVMRecheck
	jmxexporter.JVMRecheck = 2 * time.Second
	t.Cleanup(func() { jmxexporter.JVMRecheck = recheck }) // runs after the operator stopped
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	marker := jvmtest.Marker(t)
	workDir := t.TempDir()
	first := jvmtest.Start(t, workDir, nil, marker)
	startOperator(t, ns)
	routeExec(t, c, ns, "app", workDir, marker)
	runPod(t, c, ns, "app", map[string]string{"app": "java"}, "containerd://one")
	kubectlApply(t, ns, "configmap.yaml")
	port := jvmtest.FreePort(t)
	require.NoError(t, c.Create(context.Background(), newExporter(ns, "exp", "prometheus-jmx-exporter-config", port)))
	endpointPID := func(ct *assert.CollectT) int32 {
		e := getExporter(ct, c, ns, "exp")
		require.Len(ct, e.Status.MetricsEndpoints, 1, "%+v", e.Status)
		return e.Status.MetricsEndpoints[0].PID
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) { require.Equal(ct, int32(first.PID), endpointPID(ct)) }, wait, tick)

	first.Stop()
	second := jvmtest.Start(t, workDir, nil, marker)
	require.EventuallyWithT(t, func(ct *assert.CollectT) { require.Equal(ct, int32(second.PID), endpointPID(ct)) }, wait, tick)
	assert.Contains(t, scrape(t, port), "jvm_heap_used_bytes")
	assert.Equal(t, 1, countOf(second.Log.String(), "stand-in agent serving"), second.Log.String())
	eventFor(t, c, ns, "Attached", "app")
}
