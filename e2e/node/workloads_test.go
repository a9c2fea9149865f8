package node

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
)

// A ConfigMonitor run by the chart's operator (from its image) on real
// pods: changing its ConfigMap's data restarts the selected Deployment's
// containers once (one rollout; every pod and container new, the old ones
// gone, and the new containers read the new data), and leaves a Deployment
// it does not select, using the same ConfigMap, alone.
func TestRealNodeConfigMonitorRestartsRealContainersOnce(t *testing.T) {
	parallel(t, 20*time.Second) // see the package comment: its own namespace, the shared operator
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	operatorDeployment(ctx, t, cs)
	c := crClient(t, cfg)
	ns := namespace(ctx, t, cs)
	first, second := "first-"+rand.String(6), "second-"+rand.String(6)

	_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns},
		Data:       map[string]string{"msg": first},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// Each container prints the configuration it started with.
	for _, name := range []string{"watched", "bystander"} {
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, configDeployment(t, ns, name), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	require.NoError(t, c.Create(ctx, &magalixv1.ConfigMonitor{
		ObjectMeta: metav1.ObjectMeta{Name: "settings-monitor", Namespace: ns},
		Spec:       magalixv1.ConfigMonitorSpec{ConfigMap: "settings", PodSelector: map[string]string{"app": "watched"}},
	}))
	baseline := waitMonitorSettled(ctx, t, c, ns, "settings-monitor", "")
	before := settledDeployment(ctx, t, cs, ns, "watched")
	bystander := settledDeployment(ctx, t, cs, ns, "bystander")
	for _, p := range before.pods {
		assert.Contains(t, waitForLogs(ctx, t, cs, ns, p.Name, first), first, "pod %s started with the first data", p.Name)
	}

	_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns},
		Data:       map[string]string{"msg": second},
	}, metav1.UpdateOptions{})
	require.NoError(t, err)
	changed := waitMonitorSettled(ctx, t, c, ns, "settings-monitor", baseline.Status.ObservedHash)
	assert.Contains(t, changed.Status.RestartedWorkloads, magalixv1.WorkloadRef{Kind: "Deployment", Name: "watched"})
	after := settledDeployment(ctx, t, cs, ns, "watched")

	assert.Equal(t, before.revision+1, after.revision, "one rollout of the watched Deployment")
	assert.Len(t, after.replicaSets, 2, "ReplicaSets of the watched Deployment: the first and one for the change")
	oldUIDs, oldContainers := podIdentities(before.pods)
	newUIDs, newContainers := podIdentities(after.pods)
	for i, uid := range newUIDs {
		assert.NotContains(t, oldUIDs, uid, "pod %s is new", after.pods[i].Name)
		assert.NotContains(t, oldContainers, newContainers[i], "pod %s runs a new container", after.pods[i].Name)
		assert.True(t, strings.HasPrefix(newContainers[i], "containerd://"), "a real container: %q", newContainers[i])
		assert.Contains(t, waitForLogs(ctx, t, cs, ns, after.pods[i].Name, second), second,
			"the new container of %s read the new data", after.pods[i].Name)
	}
	assertPodsGone(ctx, t, cs, ns, before.pods)

	untouched := settledDeployment(ctx, t, cs, ns, "bystander")
	assert.Equal(t, bystander.revision, untouched.revision, "the Deployment the monitor does not select did not roll")
	assert.Equal(t, podUIDs(bystander.pods), podUIDs(untouched.pods), "its pods are the same")
}

// A TDSet run by the chart's operator on the real node, on the wall clock:
// a window that opens a minute or so after the test starts raises the
// number of running containers from the default to the window's count, at
// that boundary and not before.
func TestRealNodeTDSetBoundaryChangesRunningContainers(t *testing.T) {
	parallel(t, 100*time.Second) // see the package comment: its own namespace, the shared operator
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	operatorDeployment(ctx, t, cs)
	c := crClient(t, cfg)
	ns := namespace(ctx, t, cs)

	// The window opens at the first whole minute at least 45 s away (time
	// for the default's pod to start and be seen running before it, on a
	// loaded machine too), and lasts ten minutes.
	boundary := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	if time.Until(boundary) < 45*time.Second {
		boundary = boundary.Add(time.Minute)
	}
	td := &schedulev1.TDSet{
		ObjectMeta: metav1.ObjectMeta{Name: "shifts", Namespace: ns},
		Spec: schedulev1.TDSetSpec{
			Container: schedulev1.Container{Image: imageRef(t, "demo-flask"), Port: 8080},
			SchedulingConfig: []schedulev1.Scheduling{{
				StartTime: intstr.FromString(boundary.Format("15:04")),
				EndTime:   intstr.FromString(boundary.Add(10 * time.Minute).Format("15:04")),
				Replica:   3,
			}},
			DefaultReplica: 1,
			TimeZone:       "UTC",
		},
	}
	require.NoError(t, c.Create(ctx, td))

	deploy := waitTDSetTarget(ctx, t, c, ns, td.Name, boundary)
	beforeBoundary := waitRunningContainers(ctx, t, cs, deploy, 1)
	require.True(t, time.Now().Before(boundary), "the default's container ran only after the boundary; the test cannot tell them apart")
	require.Len(t, beforeBoundary, 1, "running containers before the window opens")

	inWindow := waitRunningContainers(ctx, t, cs, deploy, 3)
	assert.False(t, time.Now().Before(boundary), "three containers ran before the window opened at %s", boundary)
	assert.Len(t, inWindow, 3, "running containers once the window is open")
	assert.Subset(t, inWindow, beforeBoundary, "the container that ran before is kept")
}

// configDeployment runs two busybox pods that print the ConfigMap's msg
// they started with, labelled app=<name>.
func configDeployment(t testing.TB, ns, name string) *appsv1.Deployment {
	pod := busyboxPod(t, ns, name, map[string]string{"app": name}, `echo "config: $(cat /config/msg)"; exec sleep 3600`)
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/config"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}},
	}}}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: pod.Labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}
}

// waitMonitorSettled waits for the ConfigMonitor to be Ready with an
// observed hash other than previous and nothing pending: the change has
// been rolled out to every workload it selects.
func waitMonitorSettled(ctx context.Context, t testing.TB, c client.Client, ns, name, previous string) magalixv1.ConfigMonitor {
	t.Helper()
	var m magalixv1.ConfigMonitor
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &m); err != nil {
			return false, nil
		}
		ready := metaConditionTrue(m.Status.Conditions, "Ready")
		return ready && m.Status.ObservedHash != "" && m.Status.ObservedHash != previous &&
			m.Status.PendingHash == "" && len(m.Status.PendingWorkloads) == 0, nil
	})
	require.NoError(t, err, "ConfigMonitor %s did not settle: %+v", name, m.Status)
	return m
}

func metaConditionTrue(conditions []metav1.Condition, kind string) bool {
	for _, c := range conditions {
		if c.Type == kind {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// deploymentState is a Deployment's revision, its running pods and its
// ReplicaSets once its rollout has finished.
type deploymentState struct {
	revision    int
	pods        []corev1.Pod
	replicaSets []string
	status      string // the Deployment's last status, for a failure's message
}

// settledDeployment waits for the Deployment's rollout in progress (if
// any) to finish, every pod of it running and no old one terminating.
func settledDeployment(ctx context.Context, t testing.TB, cs clientset, ns, name string) deploymentState {
	t.Helper()
	var s deploymentState
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		s.revision, _ = strconv.Atoi(d.Annotations["deployment.kubernetes.io/revision"])
		selector := metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, selector)
		if err != nil {
			return false, nil
		}
		rss, err := cs.AppsV1().ReplicaSets(ns).List(ctx, selector)
		if err != nil {
			return false, nil
		}
		s.replicaSets = nil
		for _, rs := range rss.Items {
			s.replicaSets = append(s.replicaSets, rs.Name)
		}
		// Every pod listed, terminating ones too: settled means the old
		// ones are gone, not only that the new ones run.
		s.pods = pods.Items
		s.status = fmt.Sprintf("generation %d observed %d, replicas %d: %d updated, %d available, %d in status",
			d.Generation, d.Status.ObservedGeneration, *d.Spec.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.Replicas)
		done := d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == *d.Spec.Replicas &&
			d.Status.AvailableReplicas == *d.Spec.Replicas && d.Status.Replicas == *d.Spec.Replicas &&
			len(s.pods) == int(*d.Spec.Replicas) && allRunning(s.pods)
		return done, nil
	})
	require.NoError(t, err, "Deployment %s/%s did not settle: %s; its pods: %s", ns, name, s.status, podStates(s.pods))
	return s
}

// podStates says, for each pod, what keeps it from counting as settled:
// its phase, a deletion under way, and its containers' states.
func podStates(pods []corev1.Pod) string {
	var out []string
	for _, p := range pods {
		st := fmt.Sprintf("%s %s", p.Name, p.Status.Phase)
		if p.DeletionTimestamp != nil {
			st += " deleted at " + p.DeletionTimestamp.UTC().Format(time.TimeOnly)
		}
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Running != nil:
				st += fmt.Sprintf(" %s running since %s", c.Name, c.State.Running.StartedAt.UTC().Format(time.TimeOnly))
			case c.State.Waiting != nil:
				st += fmt.Sprintf(" %s waiting (%s: %s)", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
			case c.State.Terminated != nil:
				st += fmt.Sprintf(" %s terminated (%s, exit %d)", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode)
			}
		}
		out = append(out, st)
	}
	return strings.Join(out, "; ")
}

func allRunning(pods []corev1.Pod) bool {
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || runningContainerID(p) == "" {
			return false
		}
	}
	return true
}

// runningContainerID is the ID of the pod's first container while it
// runs, "" otherwise.
func runningContainerID(p corev1.Pod) string {
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
		return ""
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

func podIdentities(pods []corev1.Pod) (uids []types.UID, containers []string) {
	for _, p := range pods {
		uids = append(uids, p.UID)
		containers = append(containers, runningContainerID(p))
	}
	return uids, containers
}

func podUIDs(pods []corev1.Pod) []types.UID {
	uids, _ := podIdentities(pods)
	slices.Sort(uids)
	return uids
}

// assertPodsGone checks that none of the pods exists any more.
func assertPodsGone(ctx context.Context, t testing.TB, cs clientset, ns string, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err == nil && got.UID == p.UID {
			assert.Failf(t, "an old pod is still there", "pod %s (%s), phase %s", p.Name, p.UID, got.Status.Phase)
		}
	}
}

// waitTDSetTarget waits for the TDSet to run its Deployment and to report
// the window's boundary as its next transition, and returns the Deployment.
func waitTDSetTarget(ctx context.Context, t testing.TB, c client.Client, ns, name string, boundary time.Time) *appsv1.Deployment {
	t.Helper()
	var td schedulev1.TDSet
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &td); err != nil {
			return false, nil
		}
		return td.Status.ScaleTarget != "" && td.Status.NextTransitionTime != nil, nil
	})
	require.NoError(t, err, "TDSet %s has no scale target or next transition: %+v", name, td.Status)
	assert.True(t, td.Status.NextTransitionTime.Time.Equal(boundary), "next transition %s, want %s", td.Status.NextTransitionTime, boundary)
	assert.Equal(t, int32(3), ptrValue(td.Status.NextReplicas), "replicas from the boundary on")
	kind, target, _ := strings.Cut(td.Status.ScaleTarget, "/")
	require.Equal(t, "Deployment", kind, "scale target %q", td.Status.ScaleTarget)
	var d appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: target}, &d))
	return &d
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}

// waitRunningContainers waits until exactly want of the Deployment's pods
// run a container (and none is starting or stopping), and returns their
// container IDs.
func waitRunningContainers(ctx context.Context, t testing.TB, cs clientset, d *appsv1.Deployment, want int) []string {
	t.Helper()
	var ids []string
	var seen string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		if err != nil {
			return false, nil
		}
		ids = nil
		var states []string
		for _, p := range pods.Items {
			states = append(states, fmt.Sprintf("%s %s", p.Name, p.Status.Phase))
			if id := runningContainerID(p); id != "" && p.DeletionTimestamp == nil {
				ids = append(ids, id)
			}
		}
		seen = strings.Join(states, ", ")
		return len(ids) == want && len(pods.Items) == want, nil
	})
	require.NoError(t, err, "want %d running containers of %s; pods: %s", want, d.Name, seen)
	return ids
}
