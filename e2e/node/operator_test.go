package node

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

const operatorNamespace = "deckhand-system"

// The chart as users install it, on the real node, in a namespace that
// enforces the restricted Pod Security Standard: the operator's own
// image (make image, imported by hack/node.sh operator, which this test
// runs when the release is missing) runs as the chart's Deployment, passes
// its probes, holds the leader Lease, and `helm test` succeeds.
func TestRealNodeRunsTheOperatorFromItsImage(t *testing.T) {
	_, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	deploy := operatorDeployment(ctx, t, cs)
	ns, err := cs.CoreV1().Namespaces().Get(ctx, operatorNamespace, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "restricted", ns.Labels["pod-security.kubernetes.io/enforce"], "the release namespace's Pod Security")
	require.Len(t, deploy.Spec.Template.Spec.Containers, 1)
	assert.True(t, strings.HasPrefix(deploy.Spec.Template.Spec.Containers[0].Image, "deckhand-local/deckhand:"),
		"image %s", deploy.Spec.Template.Spec.Containers[0].Image)

	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(operatorNamespace).Get(ctx, deploy.Name, metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 1, nil
	})
	require.NoError(t, err, "the operator Deployment never became Available (probes passing)")

	pods, err := cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: metav1.FormatLabelSelector(deploy.Spec.Selector),
	})
	require.NoError(t, err)
	require.NotEmpty(t, pods.Items)
	pod := pods.Items[0]
	assert.True(t, strings.HasPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://"), "a real container")
	assert.True(t, podRange.Contains(net.ParseIP(pod.Status.PodIP)), "pod IP %s", pod.Status.PodIP)

	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		leases, err := cs.CoordinationV1().Leases(operatorNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, l := range leases.Items {
			// Held by the pod's name (POD_NAME): a restarted container takes it back at once.
			if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == pod.Name {
				return true, nil
			}
		}
		return false, nil
	})
	assert.NoError(t, err, "pod %s never held a leader Lease", pod.Name)

	out, err := exec.CommandContext(ctx, helmBinary(t), "--kubeconfig", kubeconfigPath(), "-n", operatorNamespace,
		"test", "deckhand", "--timeout", "3m").CombinedOutput()
	require.NoError(t, err, "helm test:\n%s", out)
	assert.Contains(t, string(out), "Phase:          Succeeded")
}

// ctNamespace is where hack/node/ct-install.sh installs its releases.
const ctNamespace = "deckhand-ct"

// clusterReleaseValues are the cluster release's own values: every CRD
// (ct's releases install none) and ct's namespace left to ct's operators,
// so ct runs beside the other tests instead of pausing this operator.
var clusterReleaseValues = []string{"--set", "crds.installAll=true", "--set", "excludeNamespaces={" + ctNamespace + "}"}

// operatorDeployment is the chart's operator Deployment, installed first
// (hack/node.sh operator: image build, import, helm upgrade --install) if
// the release is not there. Parallel tests that each find it missing
// install it once: the install holds the release's lock (releaseMu), as
// an upgrade does.
func operatorDeployment(ctx context.Context, t testing.TB, cs *kubernetes.Clientset) *appsv1.Deployment {
	t.Helper()
	releaseMu.Lock()
	defer releaseMu.Unlock()
	d, err := cs.AppsV1().Deployments(operatorNamespace).Get(ctx, "deckhand", metav1.GetOptions{})
	if err == nil {
		return d
	}
	require.True(t, apierrors.IsNotFound(err), "get the operator Deployment: %v", err)
	out, err := exec.CommandContext(ctx, "../../hack/node.sh", append([]string{"operator"}, clusterReleaseValues...)...).CombinedOutput()
	require.NoError(t, err, "hack/node.sh operator:\n%s", out)
	d, err = cs.AppsV1().Deployments(operatorNamespace).Get(ctx, "deckhand", metav1.GetOptions{})
	require.NoError(t, err)
	return d
}

func helmBinary(t testing.TB) string {
	t.Helper()
	return pinnedTool(t, "helm", "helm")
}

// pinnedTool is the binary name of the pinned tool (hack/tools.sh dir).
func pinnedTool(t testing.TB, tool, name string) string {
	t.Helper()
	out, err := exec.Command("../../hack/tools.sh", "dir", tool).Output()
	require.NoError(t, err, "hack/tools.sh dir %s", tool)
	return strings.TrimSpace(string(out)) + "/" + name
}
