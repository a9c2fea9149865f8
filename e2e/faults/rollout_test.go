package faults

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/deckhand-dev/deckhand/e2e"
	"github.com/deckhand-dev/deckhand/internal/testenv"
	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
	"github.com/deckhand-dev/deckhand/operator/configmonitor"
)

// workloads is the size of the rollout each fault interrupts.
const workloads = 100

// restartsPerSecond, with a burst of 1, paces the rollout so a fault lands
// in its middle: 100 workloads take about 10 s.
const restartsPerSecond = "10"

// release installs the chart (CRDs, RBAC, config; no operator pod: the
// local cluster runs no containers) into a new namespace, with only
// ConfigMonitor on, and returns what the operator processes need.
func release(t testing.TB, sets ...string) (client.Client, string, *e2e.Rendered) {
	t.Helper()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	vals := e2e.Values(t, nil, append([]string{
		"replicaCount=0", "demo.enabled=false",
		"controllers.tdset.enabled=false", "controllers.blogPost.enabled=false",
		"config.configmonitor-restarts-per-second=" + restartsPerSecond, "config.configmonitor-restart-burst=1",
	}, sets...)...)
	helm := e2e.NewHelm(t, ns)
	_, err := helm.Install("deckhand", e2e.ChartDir(t), vals)
	require.NoError(t, err)
	t.Cleanup(func() { _ = helm.Uninstall("deckhand") })
	return c, ns, e2e.MustRender(t, ns, vals)
}

// rollout is one ConfigMap used by `workloads` Deployments, a ConfigMonitor
// over them, and each Deployment's revision once the monitor took them in.
type rollout struct {
	c         client.Client
	ns        string
	configMap *corev1.ConfigMap
	monitor   *magalixv1.ConfigMonitor
	// baseline is each Deployment's revision before the change.
	baseline map[string]int
	// before is the monitor's hash of the configuration before the change,
	// and beforeStamp each Deployment's annotation then (empty when the
	// monitor took it in without a roll).
	before      string
	beforeStamp map[string]string
}

func newRollout(t *testing.T, c client.Client, ns string) *rollout {
	t.Helper()
	ctx := context.Background()
	r := &rollout{c: c, ns: ns, baseline: map[string]int{}, beforeStamp: map[string]string{}}
	r.configMap = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: ns}, Data: map[string]string{"v": "1"}}
	require.NoError(t, c.Create(ctx, r.configMap))
	for i := range workloads {
		name := fmt.Sprintf("w-%03d", i)
		labels := map[string]string{"app": "faulty", "workload": name}
		require.NoError(t, c.Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox",
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/config"}}}},
						Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
							ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}}},
				},
			},
		}))
	}
	r.monitor = &magalixv1.ConfigMonitor{
		ObjectMeta: metav1.ObjectMeta{Name: "faulty", Namespace: ns},
		Spec:       magalixv1.ConfigMonitorSpec{ConfigMap: "app-config", PodSelector: map[string]string{"app": "faulty"}},
	}
	require.NoError(t, c.Create(ctx, r.monitor))
	return r
}

// waitTakenIn waits until the monitor has every workload's pods and the
// current configuration, and records each Deployment's revision.
func (r *rollout) waitTakenIn(t *testing.T) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		m := &magalixv1.ConfigMonitor{}
		require.NoError(ct, r.c.Get(context.Background(), client.ObjectKeyFromObject(r.monitor), m))
		require.NotEmpty(ct, m.Status.ObservedHash)
		require.Empty(ct, m.Status.PendingWorkloads)
		for _, d := range r.deployments(ct) {
			require.Equal(ct, int32(1), d.Status.ReadyReplicas, d.Name)
			r.baseline[d.Name] = revision(d)
			r.beforeStamp[d.Name] = r.hashOf(d)
		}
		r.before = m.Status.ObservedHash
	}, 3*time.Minute, time.Second)
}

// change writes new data into the ConfigMap: one change for every workload.
func (r *rollout) change(t *testing.T, value string) {
	t.Helper()
	cm := r.configMap.DeepCopy()
	cm.Data = map[string]string{"v": value}
	require.NoError(t, r.c.Update(context.Background(), cm))
}

// reached counts the Deployments whose template changed since before the
// change: those the rollout reached.
func (r *rollout) reached(t require.TestingT) int {
	n := 0
	for _, d := range r.deployments(t) {
		if r.hashOf(d) != r.beforeStamp[d.Name] {
			n++
		}
	}
	return n
}

// status is the monitor's status as YAML, for failure messages.
func (r *rollout) status(t *testing.T) string {
	m := &magalixv1.ConfigMonitor{}
	require.NoError(t, r.c.Get(context.Background(), client.ObjectKeyFromObject(r.monitor), m))
	b, err := yaml.Marshal(m.Status)
	require.NoError(t, err)
	return string(b)
}

func (r *rollout) hashOf(d appsv1.Deployment) string {
	return d.Spec.Template.Annotations[configmonitor.AnnotationKey(&r.monitor.Spec)]
}

// waitDone waits until the monitor reports the change handled and every
// workload carries its hash.
func (r *rollout) waitDone(t *testing.T, within time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		m := &magalixv1.ConfigMonitor{}
		require.NoError(ct, r.c.Get(context.Background(), client.ObjectKeyFromObject(r.monitor), m))
		require.NotEqual(ct, r.before, m.Status.ObservedHash)
		require.Empty(ct, m.Status.PendingWorkloads)
		for _, d := range r.deployments(ct) {
			require.Equal(ct, m.Status.ObservedHash, r.hashOf(d), d.Name)
		}
	}, within, 200*time.Millisecond)
}

// rolledExactlyOnce checks what users care about: each Deployment made
// exactly one new revision for the one change: none missed, none twice.
func (r *rollout) rolledExactlyOnce(t *testing.T) {
	t.Helper()
	// The Deployment controller sets the revision after the template
	// changes: the controller manager's pace, not the operator's. With
	// the suite's other groups deleting namespaces beside it, one of 100
	// Deployments still had no new revision after a minute.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, d := range r.deployments(ct) {
			require.Equal(ct, r.baseline[d.Name]+1, revision(d), "%s: revisions before the change %d, after %d", d.Name, r.baseline[d.Name], revision(d))
		}
	}, 3*time.Minute, 500*time.Millisecond)
	// And no later roll comes: a second one would show up within the
	// restart pacing.
	time.Sleep(2 * time.Second)
	for _, d := range r.deployments(t) {
		assert.Equal(t, r.baseline[d.Name]+1, revision(d), "%s rolled again", d.Name)
	}
}

func (r *rollout) deployments(t require.TestingT) []appsv1.Deployment {
	list := &appsv1.DeploymentList{}
	require.NoError(t, r.c.List(context.Background(), list, client.InNamespace(r.ns), client.MatchingLabels{}))
	var out []appsv1.Deployment
	for _, d := range list.Items {
		if strings.HasPrefix(d.Name, "w-") {
			out = append(out, d)
		}
	}
	require.Len(t, out, workloads)
	return out
}

func revision(d appsv1.Deployment) int {
	n, _ := strconv.Atoi(d.Annotations["deployment.kubernetes.io/revision"])
	return n
}

// waitMidway waits until the rollout has reached some workloads but not
// all: the moment the fault is meant for.
func (r *rollout) waitMidway(t *testing.T) int {
	t.Helper()
	var n int
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		n = r.reached(ct)
		require.GreaterOrEqual(ct, n, workloads/5)
	}, time.Minute, 50*time.Millisecond)
	require.Less(t, n, workloads, "the rollout finished before the fault: pace it slower")
	return n
}

// leaseHolder is the holder of the operator's leader-election Lease.
func leaseHolder(t require.TestingT, c client.Client, ns string) string {
	leases := &coordinationv1.LeaseList{}
	require.NoError(t, c.List(context.Background(), leases, client.InNamespace(ns)))
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil {
			return *l.Spec.HolderIdentity
		}
	}
	return ""
}
