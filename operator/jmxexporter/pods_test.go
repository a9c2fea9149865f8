package jmxexporter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	banzaiv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/banzaicloud/v1alpha1"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
)

// fakeContainer plays one container for the pod reconciler: it keeps the
// files copied into it, answers the probe and the helper's commands, and
// records which steps ran. The real exec, helper and JVM are proven by the
// integration tests; these tests pin the reconciler's decisions, fast.
type fakeContainer struct {
	mu     sync.Mutex
	files  map[string][]byte
	attach jvm.Result
	verify jvm.Result
	steps  []string
	// jvms are what discover finds, by container (several containers).
	jvms map[string][]jvm.JVM
	// copyStderr, when set, makes copies fail with it (exit code 1).
	copyStderr string
	// execErr, when set, fails every exec before it runs.
	execErr error
	// containers are the containers exec'd into, in order.
	containers []string
}

func newFakeContainer() *fakeContainer {
	return &fakeContainer{
		files:  map[string][]byte{},
		attach: jvm.Result{Result: jvm.Attached, Serving: true, JVM: &jvm.JVM{PID: 42}},
		verify: jvm.Result{Result: jvm.Serving, Serving: true},
	}
}

func (f *fakeContainer) Exec(_ context.Context, _ *corev1.Pod, container string, cmd []string, stdin []byte, _ time.Duration) (ExecResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.execErr != nil {
		return ExecResult{}, f.execErr
	}
	if len(f.containers) == 0 || f.containers[len(f.containers)-1] != container {
		f.containers = append(f.containers, container)
	}
	switch {
	case cmd[0] == "sh" && strings.Contains(cmd[2], "uname -m"):
		f.steps = append(f.steps, "probe")
		out := "x86_64\n"
		if _, ok := f.files[cmd[4]]; ok {
			out += f.checksums(cmd[6:])
		}
		return ExecResult{Stdout: out}, nil
	case cmd[0] == "sh" && strings.Contains(cmd[2], "head -c"):
		n, _ := strconv.Atoi(cmd[5])
		if len(stdin) != n {
			return ExecResult{ExitCode: 1, Stderr: "short read"}, nil
		}
		if f.copyStderr != "" {
			return ExecResult{ExitCode: 1, Stderr: f.copyStderr}, nil
		}
		f.steps = append(f.steps, "copy "+cmd[6])
		f.files[path.Join(cmd[4], cmd[6])] = append([]byte(nil), stdin...)
		return ExecResult{}, nil
	case path.Base(cmd[0]) == helperName:
		f.steps = append(f.steps, cmd[1])
		var r jvm.Result
		switch cmd[1] {
		case "checksum":
			return ExecResult{Stdout: f.checksums(cmd[2:])}, nil
		case "attach":
			r = f.attach
		case "verify":
			r = f.verify
		case "discover":
			r = jvm.Result{Result: "Discovered", JVMs: f.jvms[container]}
		}
		b, _ := json.Marshal(r)
		return ExecResult{Stdout: string(b) + "\n"}, nil
	}
	return ExecResult{ExitCode: 127, Stderr: "unexpected command " + strings.Join(cmd, " ")}, nil
}

func (f *fakeContainer) checksums(files []string) string {
	sums := map[string]string{}
	for _, name := range files {
		if b, ok := f.files[name]; ok {
			h := sha256.Sum256(b)
			sums[name] = hex.EncodeToString(h[:])
		} else {
			sums[name] = ""
		}
	}
	b, _ := json.Marshal(jvm.Result{Result: "Checksums", Checksums: sums})
	return string(b) + "\n"
}

// takeSteps returns the steps run since the last call.
func (f *fakeContainer) takeSteps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.steps
	f.steps = nil
	return s
}

type podFixture struct {
	t      *testing.T
	c      client.Client
	r      *PodReconciler
	box    *fakeContainer
	events *events.FakeRecorder
	now    time.Time
}

const testConfig = "lowercaseOutputName: true\nrules:\n- pattern: 'java.lang<type=Memory><HeapMemoryUsage>used'\n  name: jvm_heap_used_bytes\n"

func newPodFixture(t *testing.T, exporters ...*banzaiv1alpha1.PrometheusJmxExporter) *podFixture {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, banzaiv1alpha1.AddToScheme(scheme))
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "helper-amd64"), []byte("helper binary"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "agent.jar"), []byte("agent jar"), 0o644))
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"config.yaml": testConfig}},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-1", Labels: map[string]string{"app": "java"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "java"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
				Name: "app", ContainerID: "containerd://one", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			}}},
		},
	}
	for _, e := range exporters {
		objs = append(objs, e)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&corev1.Pod{}).WithReturnManagedFields().Build()
	f := &podFixture{t: t, c: c, box: newFakeContainer(), events: events.NewFakeRecorder(100), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.r = &PodReconciler{
		Client: c, Cache: c, Reader: c, Exec: f.box, Recorder: f.events,
		Files:     &artifacts{helperPath: filepath.Join(dir, "helper-{arch}"), agentPath: filepath.Join(dir, "agent.jar")},
		TargetDir: "/tmp/deckhand-jmx", Now: func() time.Time { return f.now },
	}
	return f
}

func exporter(name string, created time.Time, port int32) *banzaiv1alpha1.PrometheusJmxExporter {
	return &banzaiv1alpha1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(created)},
		Spec: banzaiv1alpha1.PrometheusJmxExporterSpec{
			LabelSelector: map[string]string{"app": "java"},
			Config:        banzaiv1alpha1.ExporterConfig{ConfigMapName: "cfg", ConfigMapKey: "config.yaml"},
			Port:          port, Path: "/metrics",
		},
	}
}

func (f *podFixture) reconcile() ctrl.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "app"}})
	require.NoError(f.t, err)
	return res
}

func (f *podFixture) pod() *corev1.Pod {
	f.t.Helper()
	var p corev1.Pod
	require.NoError(f.t, f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "app"}, &p))
	return &p
}

func (f *podFixture) state() *podState {
	f.t.Helper()
	st := readState(f.pod())
	require.NotNil(f.t, st, "the pod carries its state")
	return st
}

// restart gives the container a new ID and restart count, as a kubelet does.
func (f *podFixture) restart(id string, count int32) {
	f.t.Helper()
	p := f.pod()
	p.Status.ContainerStatuses[0].ContainerID = id
	p.Status.ContainerStatuses[0].RestartCount = count
	require.NoError(f.t, f.c.Status().Update(context.Background(), p))
}

func (f *podFixture) drainEvents() []string {
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

func TestPodReconcilerAttachesOnceAndAgainAfterARestart(t *testing.T) {
	f := newPodFixture(t, exporter("exp", time.Now(), 9400))

	f.reconcile()
	assert.Equal(t, []string{"probe", "copy " + helperName, "copy " + agentName, "copy " + configName, "checksum", "attach"}, f.box.takeSteps())
	assert.Equal(t, []byte(testConfig), f.box.files["/tmp/deckhand-jmx/config.yaml"], "the configuration arrives byte for byte")
	p := f.pod()
	assert.Equal(t, "true", p.Annotations[AnnotationScrape])
	assert.Equal(t, "9400", p.Annotations[AnnotationPort])
	assert.Equal(t, "/metrics", p.Annotations[AnnotationPath])
	assert.Equal(t, "exp", p.Labels[LabelExporter])
	st := f.state()
	assert.Equal(t, jvm.Attached, st.Result)
	assert.Equal(t, "containerd://one", st.ContainerID)
	assert.Equal(t, 42, st.PID)
	assert.Contains(t, f.drainEvents(), "Normal Attached JMX exporter agent loaded into JVM 42; metrics on port 9400/metrics")

	// A resync of the same container does nothing: never attached twice.
	f.reconcile()
	assert.Empty(t, f.box.takeSteps())

	// A restarted container is a new JVM: the files are there, the attach
	// runs again.
	f.box.attach.JVM = &jvm.JVM{PID: 43}
	f.restart("containerd://two", 1)
	f.reconcile()
	assert.Equal(t, []string{"probe", "attach"}, f.box.takeSteps())
	st = f.state()
	assert.Equal(t, "containerd://two", st.ContainerID)
	assert.Equal(t, int32(1), st.RestartCount)
	assert.Equal(t, 43, st.PID)
}

func TestPodReconcilerNeverRetriesAnUnknownOutcome(t *testing.T) {
	f := newPodFixture(t, exporter("exp", time.Now(), 9400))
	f.box.attach = jvm.Result{Result: jvm.Unknown, Reason: jvm.ReasonNoResponse, Message: "the JVM did not answer"}

	f.reconcile()
	assert.Contains(t, f.box.takeSteps(), "attach")
	assert.Equal(t, jvm.Unknown, f.state().Result)
	assert.NotContains(t, f.pod().Annotations, AnnotationScrape)
	evs := f.drainEvents()
	require.NotEmpty(t, evs)
	assert.Contains(t, evs[0], "AttachOutcomeUnknown")

	f.now = f.now.Add(time.Hour)
	f.reconcile()
	assert.NotContains(t, f.box.takeSteps(), "attach", "an unknown outcome is never retried in the same container")

	f.restart("containerd://two", 1)
	f.box.attach = jvm.Result{Result: jvm.Attached, Serving: true, JVM: &jvm.JVM{PID: 7}}
	f.reconcile()
	assert.Contains(t, f.box.takeSteps(), "attach", "a restarted container starts afresh")
	assert.Equal(t, jvm.Attached, f.state().Result)
}

func TestPodReconcilerBacksOffFailuresThatLoadedNothing(t *testing.T) {
	f := newPodFixture(t, exporter("exp", time.Now(), 9400))
	f.box.attach = jvm.Result{Result: jvm.Failed, Reason: jvm.ReasonNoJVM, Message: "no Java process found", Retry: true}

	res := f.reconcile()
	assert.Equal(t, 10*time.Second, res.RequeueAfter)
	assert.Contains(t, f.box.takeSteps(), "attach")

	// Too early: nothing runs, the wait is what is left.
	f.now = f.now.Add(4 * time.Second)
	res = f.reconcile()
	assert.Empty(t, f.box.takeSteps())
	assert.Equal(t, 6*time.Second, res.RequeueAfter)

	f.now = f.now.Add(7 * time.Second)
	res = f.reconcile()
	assert.Contains(t, f.box.takeSteps(), "attach")
	assert.Equal(t, 20*time.Second, res.RequeueAfter, "the second failure waits twice as long")
	assert.Equal(t, 2, f.state().Attempts)

	// Once a JVM runs, the next try attaches.
	f.box.attach = jvm.Result{Result: jvm.Attached, Serving: true, JVM: &jvm.JVM{PID: 9}}
	f.now = f.now.Add(21 * time.Second)
	f.reconcile()
	assert.Equal(t, jvm.Attached, f.state().Result)
	assert.Equal(t, "true", f.pod().Annotations[AnnotationScrape])
}

func TestPodReconcilerCopiesANewConfigurationWithoutAttachingAgain(t *testing.T) {
	f := newPodFixture(t, exporter("exp", time.Now(), 9400))
	f.reconcile()
	f.box.takeSteps()
	f.drainEvents()

	changed := testConfig + "# a comment, kept as written\n"
	var cm corev1.ConfigMap
	require.NoError(t, f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "cfg"}, &cm))
	cm.Data["config.yaml"] = changed
	require.NoError(t, f.c.Update(context.Background(), &cm))

	f.reconcile()
	assert.Equal(t, []string{"probe", "copy " + configName, "checksum"}, f.box.takeSteps(), "only the configuration is copied; the agent re-reads it")
	assert.Equal(t, []byte(changed), f.box.files["/tmp/deckhand-jmx/config.yaml"])
	h := sha256.Sum256([]byte(changed))
	assert.Equal(t, hex.EncodeToString(h[:]), f.state().ConfigHash)
	assert.Equal(t, "true", f.pod().Annotations[AnnotationScrape])
	evs := f.drainEvents()
	require.Len(t, evs, 1)
	assert.Contains(t, evs[0], "ConfigUpdated")
}

func TestPodReconcilerReportsAPortChangeAsNeedingARestart(t *testing.T) {
	e := exporter("exp", time.Now(), 9400)
	f := newPodFixture(t, e)
	f.reconcile()
	f.box.takeSteps()

	require.NoError(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(e), e))
	e.Spec.Port = 9500
	e.Generation++
	require.NoError(t, f.c.Update(context.Background(), e))

	f.reconcile()
	assert.Empty(t, f.box.takeSteps(), "a loaded agent cannot move: nothing is attached")
	st := f.state()
	assert.Equal(t, "PortChangeNeedsRestart", st.Reason)
	assert.Contains(t, st.Message, "serves on port 9400")
	assert.Contains(t, st.Message, "spec.port 9500 takes effect when the container restarts")
	assert.Equal(t, "9400", f.pod().Annotations[AnnotationPort], "the old agent still serves 9400: its scrape stays until the restart")
	assert.Equal(t, "true", f.pod().Annotations[AnnotationScrape])

	// After a restart the new port is used.
	f.restart("containerd://two", 1)
	f.reconcile()
	assert.Contains(t, f.box.takeSteps(), "attach")
	assert.Equal(t, "9500", f.pod().Annotations[AnnotationPort])
}

func TestPodReconcilerGivesAPodToTheOlderOfTwoExporters(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	f := newPodFixture(t, exporter("newer", now, 9500), exporter("older", now.Add(-time.Hour), 9400))
	f.reconcile()
	assert.Equal(t, "older", f.state().Exporter)
	assert.Equal(t, "older", f.pod().Labels[LabelExporter])
	assert.Equal(t, "9400", f.pod().Annotations[AnnotationPort])

	// The newer exporter's status names the pod as taken.
	newer := &banzaiv1alpha1.PrometheusJmxExporter{}
	require.NoError(t, f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "newer"}, newer))
	er := &ExporterReconciler{Client: f.c, Cache: f.c, Reader: f.c, Recorder: f.events}
	require.NoError(t, er.summarise(context.Background(), newer))
	require.Len(t, newer.Status.Problems, 1)
	assert.Equal(t, "SelectedByAnother", newer.Status.Problems[0].Reason)
	assert.Contains(t, newer.Status.Problems[0].Message, "PrometheusJmxExporter older")
	assert.Equal(t, "0/1", newer.Status.Attached)
}

func TestPodReconcilerReleasesAPodWhenItsExporterIsDeleted(t *testing.T) {
	e := exporter("exp", time.Now(), 9400)
	f := newPodFixture(t, e)
	f.reconcile()
	f.box.takeSteps()
	f.drainEvents()

	require.NoError(t, f.c.Delete(context.Background(), e))
	f.reconcile()
	assert.Empty(t, f.box.takeSteps())
	p := f.pod()
	assert.NotContains(t, p.Annotations, AnnotationScrape)
	assert.NotContains(t, p.Annotations, AnnotationPort)
	assert.NotContains(t, p.Annotations, AnnotationPath)
	assert.NotContains(t, p.Labels, LabelExporter)
	st := f.state()
	assert.Empty(t, st.Exporter)
	assert.Equal(t, jvm.Attached, st.Result, "the record of the loaded agent stays, so no later exporter loads a second one")
	evs := f.drainEvents()
	require.Len(t, evs, 1)
	assert.Contains(t, evs[0], "Released")
	assert.Contains(t, evs[0], "a Java agent cannot be unloaded")

	// A new exporter adopts the loaded agent instead of loading another.
	require.NoError(t, f.c.Create(context.Background(), exporter("again", time.Now(), 9400)))
	f.reconcile()
	assert.NotContains(t, f.box.takeSteps(), "attach")
	assert.Equal(t, "again", f.state().Exporter)
	assert.Equal(t, "true", f.pod().Annotations[AnnotationScrape])
}

func TestPodReconcilerLeavesUnselectedAndPendingPodsAlone(t *testing.T) {
	e := exporter("exp", time.Now(), 9400)
	e.Spec.LabelSelector = map[string]string{"app": "other"}
	f := newPodFixture(t, e)
	f.reconcile()
	assert.Empty(t, f.box.takeSteps())
	assert.Empty(t, f.pod().Annotations)

	require.NoError(t, f.c.Create(context.Background(), exporter("selects", time.Now(), 9400)))
	p := f.pod()
	p.Status.Phase = corev1.PodPending
	require.NoError(t, f.c.Status().Update(context.Background(), p))
	f.reconcile()
	assert.Empty(t, f.box.takeSteps(), "a pod that is not running is not exec'd into")
}

func TestPodReconcilerFindsTheJVMAmongContainers(t *testing.T) {
	f := newPodFixture(t, exporter("exp", time.Now(), 9400))
	p := f.pod()
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "sidecar", ContainerID: "containerd://side", State: running},
		{Name: "app", ContainerID: "containerd://app", State: running},
	}
	require.NoError(t, f.c.Status().Update(context.Background(), p))
	f.box.jvms = map[string][]jvm.JVM{"app": {{PID: 42}}}

	f.reconcile()
	st := f.state()
	assert.Equal(t, "app", st.Container, "the one container running a JVM")
	assert.Equal(t, "containerd://app", st.ContainerID)
	assert.Equal(t, jvm.Attached, st.Result)

	// A JVM in each container is ambiguous: nothing is attached.
	g := newPodFixture(t, exporter("exp", time.Now(), 9400))
	require.NoError(t, g.c.Status().Update(context.Background(), withStatuses(g.pod(), p.Status.ContainerStatuses)))
	g.box.jvms = map[string][]jvm.JVM{"app": {{PID: 42}}, "sidecar": {{PID: 7}}}
	g.reconcile()
	assert.NotContains(t, g.box.takeSteps(), "attach")
	assert.Equal(t, jvm.ReasonAmbiguousJVM, g.state().Reason)
	assert.Contains(t, g.state().Message, "set spec.jvmMatch or spec.containers")

	// spec.containers picks one without looking into the others.
	h := newPodFixture(t, withContainers(exporter("exp", time.Now(), 9400), "app"))
	require.NoError(t, h.c.Status().Update(context.Background(), withStatuses(h.pod(), p.Status.ContainerStatuses)))
	h.reconcile()
	assert.Equal(t, []string{"app"}, h.box.containers)
	assert.Equal(t, "app", h.state().Container)
	assert.Equal(t, jvm.Attached, h.state().Result)
}

func withStatuses(p *corev1.Pod, s []corev1.ContainerStatus) *corev1.Pod {
	p.Status.ContainerStatuses = s
	return p
}

func withContainers(e *banzaiv1alpha1.PrometheusJmxExporter, names ...string) *banzaiv1alpha1.PrometheusJmxExporter {
	e.Spec.Containers = names
	return e
}

// What users hit in the field, each a reason on the pod, and retried only
// when that may help.
func TestPodReconcilerNamesFilesystemAndShellProblems(t *testing.T) {
	for _, tc := range []struct {
		name, stderr string
		execErr      error
		reason       string
		retry        bool
	}{
		{name: "read-only", stderr: "sh: can't create /tmp/deckhand-jmx/.x.part: Read-only file system", reason: jvm.ReasonReadOnlyFS},
		{name: "full", stderr: "head: write error: No space left on device", reason: jvm.ReasonNoSpace, retry: true},
		{name: "permission", stderr: "mkdir: can't create directory '/tmp/deckhand-jmx': Permission denied", reason: "PermissionDenied"},
		{name: "no shell", execErr: errors.New(`exec: "sh": executable file not found in $PATH`), reason: "NoShell"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPodFixture(t, exporter("exp", time.Now(), 9400))
			f.box.copyStderr, f.box.execErr = tc.stderr, tc.execErr
			res := f.reconcile()
			st := f.state()
			assert.Equal(t, jvm.Failed, st.Result)
			assert.Equal(t, tc.reason, st.Reason, st.Message)
			assert.Equal(t, tc.retry, st.Retry)
			assert.Equal(t, tc.retry, res.RequeueAfter > 0, "retried later only when it may help")
			assert.NotContains(t, f.box.takeSteps(), "attach")
			assert.NotContains(t, f.pod().Annotations, AnnotationScrape)
		})
	}
}

// The status stays small however many pods are selected: counts for all,
// at most 100 endpoints and 20 problems (300 pods keep the test fast).
func TestExporterStatusStaysSmallWithManyPods(t *testing.T) {
	e := exporter("exp", time.Now(), 9400)
	f := newPodFixture(t, e)
	for i := range 300 {
		st := podState{Exporter: "exp", PodUID: types.UID("u" + strconv.Itoa(i)), Port: 9400, Result: jvm.Attached, Serving: i%3 != 0,
			Reason: map[bool]string{true: jvm.ReasonMetricsNotServed}[i%3 == 0], Time: metav1.NewTime(f.now.Add(time.Duration(i) * time.Second))}
		require.NoError(t, f.c.Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "p" + strconv.Itoa(i), Labels: map[string]string{"app": "java"},
			Annotations: map[string]string{AnnotationState: st.encode()},
		}}))
	}
	er := &ExporterReconciler{Client: f.c, Cache: f.c, Reader: f.c, Recorder: f.events}
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(e), e))
	require.NoError(t, er.summarise(context.Background(), e))
	assert.Equal(t, int32(301), e.Status.SelectedPods, "300 and the fixture's own pod")
	assert.Equal(t, int32(200), e.Status.AttachedPods)
	assert.Equal(t, "200/301", e.Status.Attached)
	assert.Len(t, e.Status.MetricsEndpoints, maxEndpoints)
	assert.Len(t, e.Status.Problems, maxProblems)
	assert.Equal(t, "p297", e.Status.Problems[0].Pod, "the most recent problem first")
	b, err := json.Marshal(e.Status)
	require.NoError(t, err)
	assert.Less(t, len(b), 32<<10, "status of %d bytes", len(b))
}

func TestBoundedBufferKeepsTheStartAndNeverBlocks(t *testing.T) {
	b := &boundedBuffer{max: 8}
	n, err := b.Write([]byte("12345"))
	assert.Equal(t, 5, n)
	require.NoError(t, err)
	n, err = b.Write([]byte("6789abc"))
	assert.Equal(t, 7, n, "the writer is told everything was taken, so the stream goes on")
	require.NoError(t, err)
	assert.Equal(t, "12345678", b.String())
	assert.True(t, b.truncated)

	// io.Copy, as the exec stream writes, is bounded too (an embedded
	// bytes.Buffer's ReadFrom took it all).
	c := &boundedBuffer{max: 8}
	_, err = io.Copy(c, strings.NewReader("0123456789abcdef"))
	require.NoError(t, err)
	assert.Equal(t, "01234567", c.String())
}

// A failure that loaded nothing (PortNotAllowed, DifferentUser, ...) is
// not retried while nothing changes, but a fixed spec is attached at once:
// only an attach that may have loaded the agent is final.
func TestPodReconcilerRetriesAFailureThatLoadedNothingOnceTheSpecChanges(t *testing.T) {
	e := exporter("exp", time.Now(), 80)
	f := newPodFixture(t, e)
	f.box.attach = jvm.Result{Result: jvm.Failed, Reason: jvm.ReasonPortNotAllowed, Message: "port 80 is privileged"}
	f.reconcile()
	assert.Contains(t, f.box.takeSteps(), "attach")
	assert.Equal(t, jvm.ReasonPortNotAllowed, f.state().Reason)

	f.now = f.now.Add(time.Hour)
	res := f.reconcile()
	assert.NotContains(t, f.box.takeSteps(), "attach", "the same spec fails the same way")
	assert.Zero(t, res.RequeueAfter)

	require.NoError(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(e), e))
	e.Spec.Port = 9400
	e.Generation++
	require.NoError(t, f.c.Update(context.Background(), e))
	f.box.attach = jvm.Result{Result: jvm.Attached, Serving: true, JVM: &jvm.JVM{PID: 42}}
	f.reconcile()
	assert.Contains(t, f.box.takeSteps(), "attach", "the fixed spec is attached without a container restart")
	assert.Equal(t, jvm.Attached, f.state().Result)
	assert.Equal(t, "9400", f.pod().Annotations[AnnotationPort])
}

// An agent that failed to start was loaded: its classes stay in the JVM,
// so it is never loaded again into the same container, whatever changes.
func TestPodReconcilerNeverRetriesAnAgentThatFailedAfterLoading(t *testing.T) {
	e := exporter("exp", time.Now(), 9400)
	f := newPodFixture(t, e)
	f.box.attach = jvm.Result{Result: jvm.Failed, Reason: jvm.ReasonAgentFailed, Message: "Agent_OnAttach returned -1"}
	f.reconcile()
	assert.Contains(t, f.box.takeSteps(), "attach")

	require.NoError(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(e), e))
	e.Spec.Port = 9500
	e.Generation++
	require.NoError(t, f.c.Update(context.Background(), e))
	f.reconcile()
	assert.NotContains(t, f.box.takeSteps(), "attach")
	assert.Equal(t, jvm.ReasonAgentFailed, f.state().Reason)
}

// A Spring Boot pod already scraped on 8080 keeps its scrape: the operator
// never overwrites prometheus.io annotations it did not set, says why on
// the pod's state, the exporter's status and an Event, and releasing the
// pod leaves them as the user wrote them.
func TestPodReconcilerNeverTakesAUsersScrapeAnnotations(t *testing.T) {
	e := exporter("exp", time.Now(), 9400)
	f := newPodFixture(t, e)
	p := f.pod()
	user := map[string]string{AnnotationScrape: "true", AnnotationPort: "8080", AnnotationPath: "/actuator/prometheus"}
	p.Annotations = maps.Clone(user)
	require.NoError(t, f.c.Update(context.Background(), p, client.FieldOwner("kubectl-edit")))

	f.reconcile()
	assert.Contains(t, f.box.takeSteps(), "attach")
	p = f.pod()
	for k, v := range user {
		assert.Equal(t, v, p.Annotations[k], k)
	}
	st := f.state()
	assert.True(t, st.Serving, "the agent serves; only the annotations are not ours to set")
	assert.Contains(t, st.ScrapeConflict, "prometheus.io/path is /actuator/prometheus")
	var conflict string
	for _, ev := range f.drainEvents() {
		if strings.Contains(ev, "ScrapeAnnotationConflict") {
			conflict = ev
		}
	}
	assert.Contains(t, conflict, "spec.podMonitor")

	er := &ExporterReconciler{Client: f.c, Cache: f.c, Reader: f.c, Recorder: f.events}
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(e), e))
	require.NoError(t, er.summarise(context.Background(), e))
	require.Len(t, e.Status.Problems, 1)
	assert.Equal(t, "ScrapeAnnotationConflict", e.Status.Problems[0].Reason)

	// A resync reports nothing new.
	f.reconcile()
	assert.Empty(t, f.drainEvents())

	require.NoError(t, f.c.Delete(context.Background(), e))
	f.reconcile()
	p = f.pod()
	for k, v := range user {
		assert.Equal(t, v, p.Annotations[k], "releasing must not delete %s", k)
	}
}

// A supervisor (a shell loop, tini, supervisord) may restart the JVM inside
// the same container: a new PID without a new container ID. The operator
// looks again every JVMRecheck and attaches the new JVM.
func TestPodReconcilerAttachesAJVMRestartedInsideTheSameContainer(t *testing.T) {
	f := newPodFixture(t, exporter("exp", time.Now(), 9400))
	f.reconcile()
	f.box.takeSteps()
	f.drainEvents()
	assert.Equal(t, 42, f.state().PID)

	f.now = f.now.Add(JVMRecheck / 2)
	res := f.reconcile()
	assert.Empty(t, f.box.takeSteps(), "no exec before the recheck is due")
	assert.Equal(t, JVMRecheck/2, res.RequeueAfter)

	// Same JVM: the helper says so, nothing changes.
	f.box.attach = jvm.Result{Result: jvm.AlreadyAttached, Serving: true, JVM: &jvm.JVM{PID: 42}}
	f.now = f.now.Add(JVMRecheck)
	res = f.reconcile()
	assert.Equal(t, []string{"attach"}, f.box.takeSteps())
	assert.Equal(t, JVMRecheck, res.RequeueAfter)
	assert.Empty(t, f.drainEvents())

	// The JVM was restarted by a supervisor: a new PID in the same container.
	f.box.attach = jvm.Result{Result: jvm.Attached, Serving: true, JVM: &jvm.JVM{PID: 77}}
	f.now = f.now.Add(JVMRecheck)
	f.reconcile()
	assert.Equal(t, []string{"attach"}, f.box.takeSteps())
	st := f.state()
	assert.Equal(t, 77, st.PID)
	assert.Equal(t, jvm.Attached, st.Result)
	assert.Equal(t, "9400", f.pod().Annotations[AnnotationPort])
	assert.Contains(t, f.drainEvents(), "Normal Attached JMX exporter agent loaded into JVM 77; metrics on port 9400/metrics")
}

// An agent loaded by an attach whose record on the pod was lost (its state
// write failed, or the operator restarted mid-attach) is found by the next
// attach: the pod is Attached and the user gets the Attached Event.
func TestPodReconcilerReportsAnAgentAlreadyLoadedAsAttached(t *testing.T) {
	f := newPodFixture(t, exporter("exp", time.Now(), 9400))
	f.box.attach = jvm.Result{Result: jvm.AlreadyAttached, Serving: true, JVM: &jvm.JVM{PID: 42}}
	f.reconcile()
	st := f.state()
	assert.Equal(t, jvm.Attached, st.Result)
	assert.Equal(t, 42, st.PID)
	assert.Equal(t, "9400", f.pod().Annotations[AnnotationPort])
	assert.Contains(t, f.drainEvents(), "Normal Attached JMX exporter agent already loaded in JVM 42 (by an earlier attach); metrics on port 9400/metrics")
}

// With a scrape conflict a resync writes nothing: the user's annotations
// are not the operator's to compare.
func TestPodReconcilerDoesNotRewriteAPodWithAScrapeConflict(t *testing.T) {
	f := newPodFixture(t, exporter("exp", time.Now(), 9400))
	p := f.pod()
	p.Annotations = map[string]string{AnnotationPort: "8080"}
	require.NoError(t, f.c.Update(context.Background(), p))
	f.reconcile()
	before := f.pod().ResourceVersion
	writes := 0
	f.r.Client = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes++
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	f.reconcile()
	assert.Zero(t, writes)
	assert.Equal(t, before, f.pod().ResourceVersion)
}
