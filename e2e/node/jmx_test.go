package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	jmxv1 "github.com/deckhand-dev/deckhand/operator/apis/banzaicloud/v1alpha1"
)

// The port the agent serves on in the tests' exporters.
const jmxPort = 9404

// A PrometheusJmxExporter on the real node: the chart's operator, from its
// image (with the test stand-in agent: docs/development/realnode.md), with the JMX
// controller on for the test's namespace, attaches the agent to a JDK 17
// application in a real container (deckhand-local/jdk-app, running as
// 10001 with the default capabilities) through the real exec path: the
// operator execs into the app container, copies the helper, the agent and
// the configuration, and the helper speaks HotSpot's attach protocol to
// the JVM. The metrics answer at the pod's address from another pod, the
// JVM keeps running in the same container, and after the JVM is killed
// (the container restarts) the new JVM is attached again.
func TestRealNodeAttachesTheJMXExporterToAJVM(t *testing.T) {
	parallel(t, 3*time.Minute) // see the package comment: its own namespace, the shared operator
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := jmxNamespace(ctx, t, cs)
	c := crClient(t, cfg)

	app := startJDKApp(ctx, t, cs, ns, "app", "jdk")
	first := app.Status.ContainerStatuses[0].ContainerID
	// An image whose entrypoint starts as root and drops to the app's
	// user (as gosu or su-exec do): the exec runs as root with a
	// container's default capabilities (no CAP_SYS_PTRACE), the JVM as
	// 10001, so the helper switches to the JVM's uid and gid to attach.
	root := int64(0)
	dropped := startJDKPod(ctx, t, cs, ns, "app-root-exec", "jdk", &corev1.SecurityContext{RunAsUser: &root},
		"setpriv", "--reuid=10001", "--regid=10001", "--clear-groups",
		"java", "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", "/app", "App")
	from := startPod(ctx, t, cs, ns, "client", nil, "exec sleep 3600")
	createExporter(ctx, t, c, ns, "jdk", "jdk")

	waitAttached(ctx, t, c, cs, ns, "jdk", "app-root-exec", dropped.Status.ContainerStatuses[0].ContainerID)
	ex := waitAttached(ctx, t, c, cs, ns, "jdk", "app", first)
	assert.Equal(t, int32(2), ex.Status.SelectedPods)
	assert.Equal(t, "2/2", ex.Status.Attached)
	assert.True(t, meta.IsStatusConditionTrue(ex.Status.Conditions, "Ready"), "Ready: %+v", ex.Status.Conditions)
	for _, e := range ex.Status.MetricsEndpoints {
		assert.Equal(t, int32(1), e.PID, "%s: the JVM is the container's PID 1", e.Pod)
	}
	out, err := tryExec(ctx, cfg, cs, dropped, "/bin/sh", "-c", "id -u; cat /proc/self/status /proc/1/status")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(out, "0\n"), "the exec runs as root: %s", out)
	assert.Contains(t, out, "Uid:\t10001\t10001\t10001\t10001", "the JVM runs as 10001")
	assert.Contains(t, out, "CapEff:\t00000000a80425fb", "the exec has a container's default capabilities, no CAP_SYS_PTRACE")
	metricsAnswer(ctx, t, cfg, cs, from, getPod(ctx, t, cs, ns, "app-root-exec"))
	jvmLivesOn(ctx, t, cfg, cs, from, ns, "app-root-exec", dropped.Status.ContainerStatuses[0].ContainerID, 0)

	app = getPod(ctx, t, cs, ns, "app")
	assert.Equal(t, "true", app.Annotations["prometheus.io/scrape"])
	assert.Equal(t, fmt.Sprint(jmxPort), app.Annotations["prometheus.io/port"])
	assert.Equal(t, "Attached", podJMXState(t, app)["result"], "the pod's state annotation")
	waitForEvent(ctx, t, "pod app", "Attached", func() string { return podEvents(ctx, t, cs, ns, "app") },
		func() string { return operatorLogMatching(ctx, cs, `"name":"app","namespace":"`+ns+`"`, "vent") })

	metricsAnswer(ctx, t, cfg, cs, from, app)
	jvmLivesOn(ctx, t, cfg, cs, from, ns, "app", first, 0)

	// Kill the JVM: the container restarts with a new JVM, which the
	// operator attaches again.
	_, _ = tryExec(ctx, cfg, cs, app, "/bin/sh", "-c", "kill 1")
	second := waitRestarted(ctx, t, cs, ns, "app", first)
	ex = waitAttached(ctx, t, c, cs, ns, "jdk", "app", second)
	assert.True(t, meta.IsStatusConditionTrue(ex.Status.Conditions, "Ready"), "Ready: %+v", ex.Status.Conditions)
	app = getPod(ctx, t, cs, ns, "app")
	assert.Equal(t, "Attached", podJMXState(t, app)["result"])
	assert.Equal(t, second, podJMXState(t, app)["containerID"], "the state names the new container")
	metricsAnswer(ctx, t, cfg, cs, from, app)
	jvmLivesOn(ctx, t, cfg, cs, from, ns, "app", second, 1)
}

// A JVM started with -Xrs never handles SIGQUIT, and SIGQUIT's default
// action would end it. Such a JVM opens its attach
// socket at start, so the operator attaches it without a signal; when the
// socket is gone (removed here, as a /tmp cleaner would), the operator
// reports SignalNotHandled and does not signal it. Both containers keep
// running, never restarted.
func TestRealNodeNeverKillsAJVMStartedWithXrs(t *testing.T) {
	parallel(t, 60*time.Second) // see the package comment: its own namespace, the shared operator
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := jmxNamespace(ctx, t, cs)
	c := crClient(t, cfg)

	// The JVM runs under a shell, as in many images' entrypoints: as the
	// container's PID 1 it would survive SIGQUIT anyway, since the kernel
	// delivers no signal to a PID namespace's init from inside it unless
	// init handles that signal (docs/development/realnode.md).
	xrs := []string{"/bin/sh", "-c", `java -Xrs -Xmx64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp /app App; echo "java exited: $?"`}
	open := startJDKApp(ctx, t, cs, ns, "xrs-open", "xrs", xrs...)
	gone := startJDKApp(ctx, t, cs, ns, "xrs-nosocket", "xrs", xrs...)
	// HotSpot's socket of the JVM, as a /tmp cleaner would remove it; the
	// JVM does not open it again.
	out, err := tryExec(ctx, cfg, cs, gone, "/bin/sh", "-c", "rm /tmp/.java_pid* && echo removed")
	require.NoError(t, err)
	require.Contains(t, out, "removed")
	from := startPod(ctx, t, cs, ns, "client", nil, "exec sleep 3600")
	createExporter(ctx, t, c, ns, "xrs", "xrs")

	waitAttached(ctx, t, c, cs, ns, "xrs", "xrs-open", open.Status.ContainerStatuses[0].ContainerID)
	metricsAnswer(ctx, t, cfg, cs, from, getPod(ctx, t, cs, ns, "xrs-open"))

	// Until the operator reports it, or the JVM is gone (signalled).
	var state map[string]any
	var restarts int32
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "xrs-nosocket", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		state, restarts = podJMXState(t, p), p.Status.ContainerStatuses[0].RestartCount
		return state["reason"] == "SignalNotHandled" || restarts > 0, nil
	})
	require.Zero(t, restarts, "the -Xrs JVM was killed: its container restarted; the JVM's last words:\n%s",
		previousLog(ctx, cs, ns, "xrs-nosocket"))
	require.NoError(t, err, "no SignalNotHandled for the -Xrs JVM without its socket; state %v\n%s", state, operatorLog(ctx, cs))
	assert.NotEqual(t, "Attached", state["result"])
	var ex jmxv1.PrometheusJmxExporter
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "xrs"}, &ex))
	assert.Contains(t, fmt.Sprint(ex.Status.Problems), "SignalNotHandled", "the exporter's problems list the pod")

	for _, name := range []string{"xrs-open", "xrs-nosocket"} {
		p := getPod(ctx, t, cs, ns, name)
		jvmLivesOn(ctx, t, cfg, cs, from, ns, name, p.Status.ContainerStatuses[0].ContainerID, 0)
	}
}

// jmxNamespace is a namespace of the test's with the JMX controller on for
// it (controllers.jmxExporter.namespaces: the chart's least-privilege way),
// on the chart's operator from the node's image, which carries the
// stand-in agent; a release of an image without it is installed again
// (hack/node.sh operator). The JMX tests run in parallel, so the release
// lists every JMX test's namespace at once (jmxNamespaces); when a test ends
// its namespace leaves the list, and the last one switches the controller
// off, before the namespace is deleted.
func jmxNamespace(ctx context.Context, t testing.TB, cs clientset) string {
	t.Helper()
	jmxMu.Lock()
	d := operatorDeployment(ctx, t, cs)
	if !strings.HasSuffix(d.Spec.Template.Spec.Containers[0].Image, "-standin-agent") {
		out, err := exec.CommandContext(ctx, "../../hack/node.sh", append([]string{"operator"}, clusterReleaseValues...)...).CombinedOutput()
		require.NoError(t, err, "hack/node.sh operator:\n%s", out)
	}
	jmxMu.Unlock()
	ns := namespace(ctx, t, cs)
	watchJMX(ctx, t, ns, true)
	t.Cleanup(func() { watchJMX(context.Background(), t, ns, false) })
	return ns
}

var (
	jmxMu      sync.Mutex
	jmxWatched = map[string]bool{} // the namespaces the release's JMX controller watches
)

// watchJMX adds ns to the JMX controller's namespaces (on) or takes it
// out, switching the controller off when none is left.
func watchJMX(ctx context.Context, t testing.TB, ns string, on bool) {
	t.Helper()
	jmxMu.Lock()
	defer jmxMu.Unlock()
	if on {
		jmxWatched[ns] = true
	} else {
		delete(jmxWatched, ns)
	}
	if len(jmxWatched) == 0 {
		// An empty list (--set-json: --set's {} is a list of one empty
		// name), not null: once an upgrade with null had failed (helm's
		// wait timed out), every later upgrade with --reuse-values that did
		// not set the list (other tests') was refused by the chart's
		// schema ("namespaces: got null, want array").
		helmUpgrade(ctx, t, "--set", "controllers.jmxExporter.enabled=false",
			"--set-json", "controllers.jmxExporter.namespaces=[]")
		return
	}
	names := make([]string, 0, len(jmxWatched))
	for n := range jmxWatched {
		names = append(names, n)
	}
	sort.Strings(names)
	helmUpgrade(ctx, t, "--set", "controllers.jmxExporter.enabled=true",
		"--set", "controllers.jmxExporter.namespaces={"+strings.Join(names, ",")+"}")
}

// waitForEvent waits until events (one "reason: message" line each) has
// one with reason: the operator records an Event after the act a test
// saw, and the recorder sends it on its own time, seconds later on a
// loaded machine.
func waitForEvent(ctx context.Context, t testing.TB, of, reason string, events func() string, more ...func() string) {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		got = events()
		return strings.HasPrefix(got, reason+":") || strings.Contains(got, "\n"+reason+":"), nil
	})
	if err != nil {
		for _, m := range more {
			got += "\n" + m()
		}
	}
	require.NoError(t, err, "no %s Event of %s; its Events:\n%s", reason, of, got)
}

// startJDKApp runs the node's JDK 17 app image (its own user, 10001, and
// the default capabilities), with another command when given, and waits
// until the JVM has started.
func startJDKApp(ctx context.Context, t testing.TB, cs clientset, ns, name, app string, command ...string) *corev1.Pod {
	t.Helper()
	nonRoot := true
	return startJDKPod(ctx, t, cs, ns, name, app, &corev1.SecurityContext{RunAsNonRoot: &nonRoot}, command...)
}

// startJDKPod is startJDKApp with the container's security context given.
func startJDKPod(ctx context.Context, t testing.TB, cs clientset, ns, name, app string, sc *corev1.SecurityContext, command ...string) *corev1.Pod {
	t.Helper()
	_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:            "app",
				Image:           imageRef(t, "jdk-app"),
				ImagePullPolicy: corev1.PullNever,
				Command:         command,
				SecurityContext: sc,
				Resources:       testPodResources(),
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	runningPod(ctx, t, cs, ns, name)
	waitJVMStarted(ctx, t, cs, ns, name)
	return getPod(ctx, t, cs, ns, name)
}

// waitJVMStarted waits for the app's first line, generously: a JVM may
// take many seconds to start on a loaded machine.
func waitJVMStarted(ctx context.Context, t testing.TB, cs clientset, ns, name string) {
	t.Helper()
	var logs string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		logs = string(b)
		return err == nil && strings.Contains(logs, "app started"), nil
	})
	require.NoError(t, err, "the JVM in %s did not start: %s", name, logs)
}

// createExporter makes a PrometheusJmxExporter selecting app=<app>, with a
// ConfigMap holding the configuration (every MBean attribute).
func createExporter(ctx context.Context, t testing.TB, c client.Client, ns, name, app string) {
	t.Helper()
	require.NoError(t, c.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-jmx", Namespace: ns},
		Data:       map[string]string{"config.yaml": "lowercaseOutputName: true\nrules:\n  - pattern: \".*\"\n"},
	}))
	require.NoError(t, c.Create(ctx, &jmxv1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: jmxv1.PrometheusJmxExporterSpec{
			LabelSelector: map[string]string{"app": app},
			Config:        jmxv1.ExporterConfig{ConfigMapName: name + "-jmx", ConfigMapKey: "config.yaml"},
			Port:          jmxPort,
		},
	}))
}

// waitAttached waits until the exporter lists the pod's container
// instance containerID as a metrics endpoint, and returns the exporter.
// On failure it shows the status, the pod's Events and the operator's log.
func waitAttached(ctx context.Context, t testing.TB, c client.Client, cs clientset, ns, name, pod, containerID string) jmxv1.PrometheusJmxExporter {
	t.Helper()
	var ex jmxv1.PrometheusJmxExporter
	err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ex); err != nil {
			return false, nil
		}
		for _, e := range ex.Status.MetricsEndpoints {
			if e.Pod == pod && e.ContainerID == containerID {
				return true, nil
			}
		}
		return false, nil
	})
	if err == nil {
		t.Logf("%s attached in %s (%s): %+v; pod events: %q", name, pod, containerID, ex.Status.MetricsEndpoints,
			podEvents(ctx, t, cs, ns, pod))
	} else {
		status, _ := json.MarshalIndent(ex.Status, "", "  ")
		require.FailNow(t, "not attached", "pod %s container %s\nstatus %s\npod events:\n%s\n%s",
			pod, containerID, status, podEvents(ctx, t, cs, ns, pod), operatorLog(ctx, cs))
	}
	return ex
}

// metricsAnswer fetches the agent's metrics at the pod's address from
// another pod on the node.
func metricsAnswer(ctx context.Context, t testing.TB, cfg *rest.Config, cs clientset, from, app *corev1.Pod) {
	t.Helper()
	url := fmt.Sprintf("http://%s:%d/metrics", app.Status.PodIP, jmxPort)
	got := eventually(ctx, t, cfg, cs, from, "timeout 10 wget -q -O- "+url, "jmx_exporter_build_info")
	assert.Contains(t, got, "jmx_exporter_build_info", "metrics at %s", url)
	assert.Contains(t, got, "java_lang_", "the JVM's own MBeans at %s", url)
	t.Logf("%s from %s: %d lines", url, from.Name, strings.Count(got, "\n"))
}

// jvmLivesOn checks that the pod's container is still the instance
// containerID, restarted restarts times, and that its JVM answers on the
// app's port from another pod.
func jvmLivesOn(ctx context.Context, t testing.TB, cfg *rest.Config, cs clientset, from *corev1.Pod, ns, name, containerID string, restarts int32) {
	t.Helper()
	p := getPod(ctx, t, cs, ns, name)
	st := p.Status.ContainerStatuses[0]
	assert.Equal(t, containerID, st.ContainerID, "%s: the same container", name)
	assert.Equal(t, restarts, st.RestartCount, "%s: restart count", name)
	assert.NotNil(t, st.State.Running, "%s: running", name)
	got := eventually(ctx, t, cfg, cs, from, fmt.Sprintf("timeout 10 wget -q -O- http://%s:8080/", p.Status.PodIP), "jdk-app pid ")
	assert.Contains(t, got, "jdk-app pid ", "%s: the application answers", name)
}

// waitRestarted waits for the pod's container to run again as another
// instance than before, and returns its ID.
func waitRestarted(ctx context.Context, t testing.TB, cs clientset, ns, name, before string) string {
	t.Helper()
	var id string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		st := p.Status.ContainerStatuses[0]
		id = st.ContainerID
		return st.State.Running != nil && st.ContainerID != before && st.RestartCount == 1, nil
	})
	require.NoError(t, err, "the killed JVM's container did not restart; events:\n%s", podEvents(ctx, t, cs, ns, name))
	waitJVMStarted(ctx, t, cs, ns, name)
	return id
}

func getPod(ctx context.Context, t testing.TB, cs clientset, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	return p
}

// podJMXState is the operator's record on the pod
// (jmxexporter.deckhand.dev/state), as JSON fields.
func podJMXState(t testing.TB, p *corev1.Pod) map[string]any {
	t.Helper()
	state := map[string]any{}
	if raw, ok := p.Annotations["jmxexporter.deckhand.dev/state"]; ok {
		require.NoError(t, json.Unmarshal([]byte(raw), &state))
	}
	return state
}

// podEvents lists the pod's Events, one "Reason: message" a line.
func podEvents(ctx context.Context, t testing.TB, cs clientset, ns, name string) string {
	t.Helper()
	events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	require.NoError(t, err)
	var lines []string
	for _, e := range events.Items {
		lines = append(lines, e.Reason+": "+e.Message)
	}
	return strings.Join(lines, "\n")
}

// previousLog is the log of the pod's previous container (a restarted one).
func previousLog(ctx context.Context, cs clientset, ns, name string) string {
	b, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Previous: true}).DoRaw(ctx)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// operatorLogMatching is the operator's log lines (its last 40) that hold
// any of subs: what it did for one pod, and the Events it could not write,
// which a tail of the whole log would have scrolled out.
func operatorLogMatching(ctx context.Context, cs clientset, subs ...string) string {
	return operatorLogs(ctx, cs, &corev1.PodLogOptions{}, func(pod string, log []byte) string {
		var lines []string
		for _, l := range strings.Split(string(log), "\n") {
			if slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(l, sub) }) {
				lines = append(lines, l)
			}
		}
		lines = lines[max(0, len(lines)-40):]
		return fmt.Sprintf("operator %s log lines with %q", pod, subs) + ":\n" + strings.Join(lines, "\n")
	})
}

// operatorLog is the tail of the operator's log, for failure messages.
func operatorLog(ctx context.Context, cs clientset) string {
	tail := int64(60)
	return operatorLogs(ctx, cs, &corev1.PodLogOptions{TailLines: &tail}, func(pod string, log []byte) string {
		return fmt.Sprintf("operator %s log:\n%s", pod, log)
	})
}

// operatorLogs reads each operator pod's log with opts and shows it with
// show, or says why it could not.
func operatorLogs(ctx context.Context, cs clientset, opts *corev1.PodLogOptions, show func(pod string, log []byte) string) string {
	pods, err := cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator"})
	if err != nil || len(pods.Items) == 0 {
		return fmt.Sprintf("no operator pod: %v", err)
	}
	var out []string
	for _, p := range pods.Items {
		b, err := cs.CoreV1().Pods(operatorNamespace).GetLogs(p.Name, opts).DoRaw(ctx)
		if err != nil {
			out = append(out, fmt.Sprintf("operator %s log: %v", p.Name, err))
			continue
		}
		out = append(out, show(p.Name, b))
	}
	return strings.Join(out, "\n")
}
