package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// crashContainer kills the pod's first container from the node's side, as
// a crash or the kernel's OOM killer would: SIGKILL to its task through
// containerd (hack/node.sh ctr), so the server gets no chance to shut down
// cleanly. It returns the killed container's ID.
func crashContainer(ctx context.Context, t testing.TB, cs clientset, ns, name string) (killed string, restarts int32) {
	t.Helper()
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, pod.Status.ContainerStatuses, "pod %s has no container", name)
	status := pod.Status.ContainerStatuses[0]
	id, ok := strings.CutPrefix(status.ContainerID, "containerd://")
	require.True(t, ok, "pod %s container %q is not containerd's", name, status.ContainerID)
	out, err := runCtr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
	require.NoError(t, err, "killing container %s of %s:\n%s", id, name, out)
	return status.ContainerID, status.RestartCount
}

// waitContainerRestarted waits for the kubelet to have restarted the
// pod's first container after crashContainer (a new container ID, one
// more restart) and for it to be ready again.
func waitContainerRestarted(ctx context.Context, t testing.TB, cs clientset, ns, name, killed string, restarts int32) {
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

// replicatedStore is how the crash checks talk to one engine's primary
// and standby (PostgreSQL's Database, MariaDB's MySQLCluster), through the
// <name>-rw and <name>-ro Services.
type replicatedStore struct {
	ns, name string
	// query runs sql through "rw" or "ro" and fails the test on an error;
	// eventually runs it until it prints want (and returns what it printed).
	query      func(service, sql string) string
	eventually func(service, sql, want string) string
	// insert is the SQL adding one row; selectRows prints every row,
	// comma-separated, in byte order.
	insert     func(row string) string
	selectRows string
	// standbySQL prints standbyWant on a read-only standby.
	standbySQL, standbyWant string
	waitReady               func()
}

// survivesPrimaryCrash kills the primary's container (SIGKILL from the
// node: no clean shutdown), waits for the kubelet to restart it and the
// cluster to be Ready again, and checks that every committed row is there
// and that the primary takes writes again. It returns the rows now.
func survivesPrimaryCrash(ctx context.Context, t testing.TB, cs clientset, s replicatedStore, token, rows string) string {
	t.Helper()
	primary := servedBy(ctx, t, cs, s.ns, s.name+"-rw")
	killed, restarts := crashContainer(ctx, t, cs, s.ns, primary)
	waitContainerRestarted(ctx, t, cs, s.ns, primary, killed, restarts)
	s.waitReady()
	require.Equal(t, rows, s.eventually("rw", s.selectRows, rows), "every committed row, after the primary's container was killed")
	s.query("rw", s.insert("after-primary-crash "+token))
	return sortedRows(rows + ",after-primary-crash " + token)
}

// standbyCatchesUpAfterCrash kills the standby's container, commits a row
// on the primary while the standby is down, and checks that the restarted
// standby has every row, read through <name>-ro.
func standbyCatchesUpAfterCrash(ctx context.Context, t testing.TB, cs clientset, s replicatedStore, token, rows string) string {
	t.Helper()
	standby := servedBy(ctx, t, cs, s.ns, s.name+"-ro")
	killed, restarts := crashContainer(ctx, t, cs, s.ns, standby)
	s.query("rw", s.insert("while-standby-down "+token))
	rows = sortedRows(rows + ",while-standby-down " + token)
	waitContainerRestarted(ctx, t, cs, s.ns, standby, killed, restarts)
	s.waitReady()
	assert.Equal(t, s.standbyWant, s.eventually("ro", s.standbySQL, s.standbyWant), "<name>-ro answers from the standby again")
	require.Equal(t, rows, s.eventually("ro", s.selectRows, rows), "the restarted standby caught up, read through <name>-ro")
	return rows
}

// servedBy names the one pod the Service selects (<name>-rw: the
// primary; <name>-ro: the standby of a two-replica cluster).
func servedBy(ctx context.Context, t testing.TB, cs clientset, ns, service string) string {
	t.Helper()
	svc, err := cs.CoreV1().Services(ns).Get(ctx, service, metav1.GetOptions{})
	require.NoError(t, err)
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}),
	})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1, "pods behind Service %s", service)
	return pods.Items[0].Name
}

// sortedRows sorts a comma-separated list as the engines' ORDER BY prints
// it (the tests' rows are ASCII and start with distinct words).
func sortedRows(rows string) string {
	list := strings.Split(rows, ",")
	slices.Sort(list)
	return strings.Join(list, ",")
}
