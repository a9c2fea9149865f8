// Package node checks the real-node cluster (hack/node.sh, make
// node-cluster): a kubelet and containerd on this machine that run real
// containers, unlike the kwok cluster every other test uses.
//
// The tests run only when DECKHAND_NODE_KUBECONFIG names that cluster's
// kubeconfig (hack/node.sh kubeconfig); make test does not start the node
// yet, so it does not run them.
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// podRange is where hack/node.sh's CNI configuration puts pods.
var _, podRange, _ = net.ParseCIDR("198.18.1.0/24")

func TestRealNodeRunsAPod(t *testing.T) {
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	node := readyNode(ctx, t, cs)
	assert.True(t, strings.HasPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "containerd://"),
		"runtime %q", node.Status.NodeInfo.ContainerRuntimeVersion)

	ns := namespace(ctx, t, cs)
	token := rand.String(12)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:    "sh",
				Image:   busyboxImage(t),
				Env:     []corev1.EnvVar{{Name: "TOKEN", Value: token}},
				Command: []string{"/bin/sh", "-c", `echo "started $TOKEN"; exec sleep 3600`},
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	pod = runningPod(ctx, t, cs, ns, pod.Name)

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

func clientFor(t *testing.T) (*rest.Config, *kubernetes.Clientset) {
	t.Helper()
	path := os.Getenv(KubeconfigEnv)
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
func busyboxImage(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../../hack/node/images.sh", "ref", "busybox").Output()
	require.NoError(t, err, "hack/node/images.sh ref busybox")
	return strings.TrimSpace(string(out))
}

func readyNode(ctx context.Context, t *testing.T, cs *kubernetes.Clientset) corev1.Node {
	t.Helper()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return n
			}
		}
	}
	require.FailNow(t, "no Ready node", "nodes: %d", len(nodes.Items))
	return corev1.Node{}
}

func namespace(ctx context.Context, t *testing.T, cs *kubernetes.Clientset) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// runningPod waits for the pod to run, and fails with its events if it
// does not, since they say why (image, sandbox, CNI).
func runningPod(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
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

func waitForLogs(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, ns, name, want string) string {
	t.Helper()
	var logs string
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		logs = string(b)
		return strings.Contains(logs, want), nil
	})
	return logs
}

// execIn runs a command in the pod's first container through the API
// server and the kubelet, as kubectl exec does.
func execIn(ctx context.Context, t *testing.T, cfg *rest.Config, cs *kubernetes.Clientset, pod *corev1.Pod, cmd ...string) string {
	t.Helper()
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: pod.Spec.Containers[0].Name, Command: cmd, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	require.NoError(t, err)
	var stdout, stderr bytes.Buffer
	err = ws.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	require.NoError(t, err, "exec %v: stderr %s", cmd, stderr.String())
	return stdout.String()
}
