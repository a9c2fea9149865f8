// Package node checks the real-node cluster (hack/node.sh, make
// node-cluster): a kubelet and containerd on this machine that run real
// containers, unlike the kwok cluster every other test uses.
//
// The tests run only when DECKHAND_NODE_KUBECONFIG names that cluster's
// kubeconfig (hack/node.sh kubeconfig); make test starts the node and runs
// them (hack/gotest.sh's node group).
//
// Tests that change what others share run alone, before the rest: the
// operator's own checks, the node's basics, and the faults of the
// cluster's own parts during a failover (faults_test.go: the operator, the
// API server, the kubelet). The others (PostgreSQL, MariaDB, the JVMs,
// ConfigMonitor, TDSet, the instance agent, the failovers of
// failover_test.go, chart testing in a namespace the cluster's operator
// leaves alone, seed 000's demo, the second node's faults) call parallel
// (t.Parallel, then one of the node's slots, longest first: slots_test.go)
// first thing: each has a namespace of its own and mostly waits on
// containers, a server or the real clock, so together they take about as
// long as the longest of them.
package node

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
)

// KubeconfigEnv names the real-node cluster's kubeconfig.
const KubeconfigEnv = "DECKHAND_NODE_KUBECONFIG"

// The nodes hack/node.sh starts: the first in the machine's network
// namespace, the second in one of its own, tainted so that only pods that
// tolerate secondNodeTaint run there.
const (
	firstNode       = "dh-node"
	secondNode      = "dh-node2"
	secondNodeTaint = "deckhand.dev/second-node"
)

// The ranges hack/node.sh gives each node's pods (its CNI configuration)
// and Services.
var (
	_, podRange, _       = net.ParseCIDR("198.18.1.0/24")
	_, secondPodRange, _ = net.ParseCIDR("198.18.3.0/24")
	_, serviceRange, _   = net.ParseCIDR("198.19.0.0/16")
)

// onANode: ip is a pod's address on one of the nodes (the tests connect
// to no other).
func onANode(ip string) bool {
	return podRange.Contains(net.ParseIP(ip)) || secondPodRange.Contains(net.ParseIP(ip))
}

func TestRealNodeRunsAPod(t *testing.T) {
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	node := readyNode(ctx, t, cs, firstNode)
	assert.True(t, strings.HasPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "containerd://"),
		"runtime %q", node.Status.NodeInfo.ContainerRuntimeVersion)

	ns := namespace(ctx, t, cs)
	token := rand.String(12)
	pod := startPod(ctx, t, cs, ns, "hello", nil, `echo "started $TOKEN"; exec sleep 3600`,
		corev1.EnvVar{Name: "TOKEN", Value: token})

	assert.True(t, podRange.Contains(net.ParseIP(pod.Status.PodIP)), "pod IP %s outside %s", pod.Status.PodIP, podRange)
	require.Len(t, pod.Status.ContainerStatuses, 1)
	assert.True(t, strings.HasPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://"))

	logs := waitForLogs(ctx, t, cs, ns, pod.Name, "started "+token)
	assert.Contains(t, logs, "started "+token)

	// exec: the container's PID 1 is the command the pod asked for, and the
	// environment is the pod's.
	out := execIn(ctx, t, cfg, cs, pod, "/bin/sh", "-c", `tr '\0' ' ' </proc/1/cmdline; echo; echo "token=$TOKEN"; hostname`)
	assert.Contains(t, out, "sleep 3600")
	assert.Contains(t, out, "token="+token)
	assert.Contains(t, out, "hello")
}

// A Service's ClusterIP (kube-proxy) and its name (CoreDNS) reach a pod
// serving HTTP, from another pod and from the serving pod itself (hairpin);
// names outside the cluster do not resolve.
func TestRealNodeServicesByAddressAndName(t *testing.T) {
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := namespace(ctx, t, cs)
	body := "served-" + rand.String(8)
	web := startPod(ctx, t, cs, ns, "web", map[string]string{"app": "web"},
		`mkdir /tmp/www && echo "$BODY" >/tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`,
		corev1.EnvVar{Name: "BODY", Value: body})
	client := startPod(ctx, t, cs, ns, "client", nil, "exec sleep 3600")
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.True(t, serviceRange.Contains(net.ParseIP(svc.Spec.ClusterIP)), "ClusterIP %s outside %s", svc.Spec.ClusterIP, serviceRange)

	// Debian's static busybox cannot resolve names in wget (glibc's NSS
	// cannot be loaded into a static binary: it segfaults), so the name is
	// checked with nslookup, which has its own resolver, and HTTP by address.
	name := "web." + ns + ".svc.cluster.local"
	for _, from := range []*corev1.Pod{client, web} {
		got := eventually(ctx, t, cfg, cs, from, "timeout 5 wget -q -O- http://"+svc.Spec.ClusterIP+"/", body)
		assert.Contains(t, got, body, "HTTP from %s to the ClusterIP", from.Name)
		got = eventually(ctx, t, cfg, cs, from, "nslookup "+name, svc.Spec.ClusterIP)
		assert.Contains(t, got, "Address: "+svc.Spec.ClusterIP, "%s resolving %s", from.Name, name)
	}
	got := eventually(ctx, t, cfg, cs, client, "nslookup web", svc.Spec.ClusterIP)
	assert.Contains(t, got, svc.Spec.ClusterIP, "the short name through the pod's search path")
	out, err := tryExec(ctx, cfg, cs, client, "/bin/sh", "-c", "nslookup example.com 2>&1; echo rc=$?")
	require.NoError(t, err)
	assert.Contains(t, out, "rc=1", "a name outside the cluster resolved:\n%s", out)
}

// eventually runs a shell command in the pod until its output holds want
// (kube-proxy and CoreDNS pick up a new Service within a second or two).
func eventually(ctx context.Context, t testing.TB, cfg *rest.Config, cs *kubernetes.Clientset, pod *corev1.Pod, cmd, want string) string {
	t.Helper()
	var out string
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		o, err := tryExec(ctx, cfg, cs, pod, "/bin/sh", "-c", cmd+" 2>&1")
		out = o
		if err != nil {
			out += err.Error()
		}
		return strings.Contains(o, want), nil
	})
	return out
}

// clientset is the typed client the tests use.
type clientset = *kubernetes.Clientset

// startPod runs a busybox pod with a shell command and waits for it to run.
func startPod(ctx context.Context, t testing.TB, cs clientset, ns, name string, labels map[string]string, script string, env ...corev1.EnvVar) *corev1.Pod {
	t.Helper()
	_, err := cs.CoreV1().Pods(ns).Create(ctx, busyboxPod(t, ns, name, labels, script, env...), metav1.CreateOptions{})
	require.NoError(t, err)
	return runningPod(ctx, t, cs, ns, name)
}

// testPodResources is what the tests' own containers (clients, writers,
// apps, the object store) request. A pod with no request is BestEffort,
// and the kubelet gives the BestEffort pods together a CPU weight of 2
// against the sum of every other pod's requests: on a busy node they get
// almost nothing (hack/node/cpu-share.sh), and a writer's loop of psql
// calls slowed to one write per 40 s, measuring the node's load rather
// than the operator. 50m is what a Database's server requests by default.
func testPodResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}
}

// busyboxPod is a pod running a shell command in the node's busybox image.
func busyboxPod(t testing.TB, ns, name string, labels map[string]string, script string, env ...corev1.EnvVar) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:      "sh",
				Image:     busyboxImage(t),
				Env:       env,
				Command:   []string{"/bin/sh", "-c", script},
				Resources: testPodResources(),
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

func kubeconfigPath() string { return os.Getenv(KubeconfigEnv) }

func clientFor(t testing.TB) (*rest.Config, *kubernetes.Clientset) {
	t.Helper()
	path := kubeconfigPath()
	if path == "" {
		t.Skipf("%s is unset: no real-node cluster (start one with make node-cluster)", KubeconfigEnv)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	require.NoError(t, err, "kubeconfig %s", path)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cfg, cs
}

// busyboxImage is the busybox image hack/node.sh imports into the node.
func busyboxImage(t testing.TB) string { return imageRef(t, "busybox") }

// imageRef is the reference of one of the images hack/node.sh imports.
func imageRef(t testing.TB, name string) string {
	t.Helper()
	out, err := exec.Command("../../hack/node/images.sh", "ref", name).Output()
	require.NoError(t, err, "hack/node/images.sh ref %s", name)
	return strings.TrimSpace(string(out))
}

// readyNode waits until the node is Ready (until ctx ends): a fault test
// before this one may have stopped its kubelet or the API server, and the
// node is Ready again only once its kubelet has posted its status since.
func readyNode(ctx context.Context, t testing.TB, cs *kubernetes.Clientset, name string) corev1.Node {
	t.Helper()
	var node *corev1.Node
	var last string
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		if node, err = cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		last = "no Ready condition"
		return false, nil
	})
	require.NoError(t, err, "node %s is not Ready: %s", name, last)
	return *node
}

func namespace(ctx context.Context, t testing.TB, cs *kubernetes.Clientset) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	// Registered after the deletion, so it runs before it: a failed test
	// prints what its containers logged (a server's own account of a crash
	// is in its log, and the node is removed when make test ends).
	t.Cleanup(func() {
		if t.Failed() {
			// What explains a refused connection comes first (CI shows the
			// head of a failed test's output): the namespace's Events (probe
			// failures, the operator's steps), each pod's readiness and
			// labels, what the EndpointSlices route to, and what the
			// operator logged about the namespace; then the containers' logs.
			t.Logf("the namespace %s at the failure:\n%s", ns.Name, namespaceState(cs, ns.Name))
			t.Logf("the containers of namespace %s logged:\n%s", ns.Name, containerLogs(cs, ns.Name, 30))
		}
	})
	return ns.Name
}

// containerLogs is the last lines of every container of every pod in the
// namespace, and of each container's previous run when it was restarted.
func containerLogs(cs *kubernetes.Clientset, ns string, lines int64) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "listing pods: " + err.Error()
	}
	var b strings.Builder
	for _, pod := range pods.Items {
		for _, st := range pod.Status.ContainerStatuses {
			runs := []bool{false}
			if st.RestartCount > 0 {
				runs = []bool{true, false}
			}
			for _, previous := range runs {
				raw, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{
					Container: st.Name, Previous: previous, TailLines: &lines,
				}).DoRaw(ctx)
				fmt.Fprintf(&b, "--- %s/%s (previous run: %t, restarts %d):\n", pod.Name, st.Name, previous, st.RestartCount)
				if err != nil {
					fmt.Fprintf(&b, "(%v)\n", err)
					continue
				}
				b.Write(raw)
			}
		}
	}
	return b.String()
}

// runningPod waits for the pod to run, and fails with its events if it
// does not, since they say why (image, sandbox, CNI). It waits up to 4
// minutes: when the parallel tests start their databases together on a
// loaded machine, a container has taken over a minute from Created to
// Started.
func runningPod(ctx context.Context, t testing.TB, cs *kubernetes.Clientset, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
	})
	if err != nil {
		events, _ := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		var msgs []string
		for _, e := range events.Items {
			msgs = append(msgs, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
		}
		require.FailNow(t, "pod not Running", "phase %s: %v\nevents:\n%s", pod.Status.Phase, err, strings.Join(msgs, "\n"))
	}
	return pod
}

func waitForLogs(ctx context.Context, t testing.TB, cs *kubernetes.Clientset, ns, name, want string) string {
	t.Helper()
	var logs string
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			logs = fmt.Sprintf("(the log of %s could not be read: %v)", name, err)
			return false, nil
		}
		logs = string(b)
		return strings.Contains(logs, want), nil
	})
	return logs
}

// execIn runs a command in the pod's first container through the API
// server and the kubelet, as kubectl exec does.
func execIn(ctx context.Context, t testing.TB, cfg *rest.Config, cs *kubernetes.Clientset, pod *corev1.Pod, cmd ...string) string {
	t.Helper()
	out, err := tryExec(ctx, cfg, cs, pod, cmd...)
	require.NoError(t, err, "exec %v", cmd)
	return out
}

func tryExec(ctx context.Context, cfg *rest.Config, cs *kubernetes.Clientset, pod *corev1.Pod, cmd ...string) (string, error) {
	return tryExecIn(ctx, cfg, cs, pod, pod.Spec.Containers[0].Name, cmd...)
}

// tryExecIn runs a command in the pod's container of that name.
func tryExecIn(ctx context.Context, cfg *rest.Config, cs *kubernetes.Clientset, pod *corev1.Pod, container string, cmd ...string) (string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: container, Command: cmd, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	if err := ws.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("exec %v: %w (stderr %s)", cmd, err, stderr.String())
	}
	return stdout.String(), nil
}

// An image that was never imported is not fetched from anywhere: every
// registry is 127.0.0.1:1 (hack/node.sh registry_hosts), so the pull fails
// there, at once, with no DNS lookup or connection off the machine.
// Without that, containerd would ask the machine's resolver for
// registry-1.docker.io.
func TestRealNodePullsNoImageFromOffTheMachine(t *testing.T) {
	_, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := namespace(ctx, t, cs)
	pod := busyboxPod(t, ns, "missing", nil, "true")
	pod.Spec.Containers[0].Image = "deckhand-local/never-imported:" + rand.String(6)
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)

	var message string
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=missing,reason=Failed"})
		if err != nil || len(events.Items) == 0 {
			return false, nil
		}
		message = events.Items[0].Message
		return true, nil
	})
	require.NoError(t, err, "no pull failure reported")
	assert.Contains(t, message, "127.0.0.1:1", "the pull went to the closed local port")
	assert.NotContains(t, message, "docker.io/v2", "a registry off the machine was asked")
	assert.NotContains(t, message, "lookup", "a name was looked up")
}
