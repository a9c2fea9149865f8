package node

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// crashContainer kills the pod's first container from the node's side, as
// a crash or the kernel's OOM killer would: SIGKILL to its task through
// containerd (hack/node.sh ctr), so the server gets no chance to shut down
// cleanly. It returns the killed container's ID.
func crashContainer(ctx context.Context, t *testing.T, cs clientset, ns, name string) (killed string, restarts int32) {
	t.Helper()
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, pod.Status.ContainerStatuses, "pod %s has no container", name)
	status := pod.Status.ContainerStatuses[0]
	id, ok := strings.CutPrefix(status.ContainerID, "containerd://")
	require.True(t, ok, "pod %s container %q is not containerd's", name, status.ContainerID)
	out, err := exec.CommandContext(ctx, "../../hack/node.sh", "ctr", "tasks", "kill", "--signal", "SIGKILL", id).CombinedOutput()
	require.NoError(t, err, "killing container %s of %s:\n%s", id, name, out)
	return status.ContainerID, status.RestartCount
}

// waitContainerRestarted waits for the kubelet to have restarted the
// pod's first container after crashContainer (a new container ID, one
// more restart) and for it to be ready again.
func waitContainerRestarted(ctx context.Context, t *testing.T, cs clientset, ns, name, killed string, restarts int32) {
	t.Helper()
	var status corev1.ContainerStatus
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(pod.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		status = pod.Status.ContainerStatuses[0]
		return status.ContainerID != killed && status.RestartCount > restarts && status.Ready, nil
	})
	require.NoError(t, err, "container of %s not restarted and ready: %+v", name, status)
}
