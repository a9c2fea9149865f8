package database

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/failover"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// A node takes no new pods like the server's when it is cordoned (kubectl
// drain), tainted NoSchedule or NoExecute by someone the pod does not
// tolerate (the cluster autoscaler, Karpenter), or gone; a taint the pod
// tolerates, a PreferNoSchedule one, or the node controller's (a node
// unwell, not emptied) is no drain.
func TestDrainingSaysWhyANodeTakesNoNewPods(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule},
	}}}
	node := func(unschedulable bool, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: unschedulable, Taints: taints}}
	}
	for _, c := range []struct {
		name string
		node *corev1.Node
		want string
	}{
		{"schedulable", node(false), ""},
		{"cordoned", node(true), "cordoned"},
		{"the cluster autoscaler's taint", node(false, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}),
			"tainted ToBeDeletedByClusterAutoscaler:NoSchedule"},
		{"unreachable", node(false, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}), ""},
		{"short of memory", node(false, corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}), ""},
		{"a tolerated taint", node(false, corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}), ""},
		{"PreferNoSchedule", node(false, corev1.Taint{Key: "busy", Effect: corev1.TaintEffectPreferNoSchedule}), ""},
		{"gone", nil, "the node does not exist"},
	} {
		assert.Equal(t, c.want, draining(c.node, pod), c.name)
	}
}

// A primary on a node being drained is switched over to the first healthy
// streaming standby (by name) whose own node takes pods; with none, the
// watch says why each standby cannot take over.
func TestADrainedPrimaryGoesToAStandbyOnANodeThatTakesPods(t *testing.T) {
	nodes := []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
	}
	r := &Reconciler{API: fake.NewClientBuilder().WithObjects(nodes...).Build(), Now: time.Now}
	pods := map[string]*corev1.Pod{
		"db-0": {ObjectMeta: metav1.ObjectMeta{Name: "db-0"}, Spec: corev1.PodSpec{NodeName: "n1"}},
		"db-1": {ObjectMeta: metav1.ObjectMeta{Name: "db-1"}, Spec: corev1.PodSpec{NodeName: "n1"}},
		"db-2": {ObjectMeta: metav1.ObjectMeta{Name: "db-2"}, Spec: corev1.PodSpec{NodeName: "n2"}},
		"db-3": {ObjectMeta: metav1.ObjectMeta{Name: "db-3"}, Spec: corev1.PodSpec{NodeName: "n2"}},
	}
	primary := failover.Observation{Pod: "db-0", PodReady: true, Status: &instance.Status{ServerUp: true, Role: instance.RolePrimary}}
	streaming := func(pod string) failover.Observation {
		return failover.Observation{Pod: pod, Status: &instance.Status{ServerUp: true, Role: instance.RoleStandby, Streaming: true, ReplayLSN: 1}}
	}
	notStreaming := func(pod string) failover.Observation {
		return failover.Observation{Pod: pod, Status: &instance.Status{ServerUp: true, Role: instance.RoleStandby, ReplayLSN: 1}}
	}
	ctx := context.Background()

	to, why, waiting := r.drainTarget(ctx, primary, pods, []failover.Observation{streaming("db-3"), streaming("db-1"), streaming("db-2")})
	assert.Equal(t, "db-2", to)
	assert.Equal(t, "its node n1 is being drained (cordoned)", why)
	assert.Empty(t, waiting)

	to, _, waiting = r.drainTarget(ctx, primary, pods, []failover.Observation{streaming("db-1"), notStreaming("db-2")})
	assert.Empty(t, to)
	assert.Equal(t, "no standby can take over: db-1: its node n1 is being drained (cordoned); db-2 does not stream from the primary", waiting)

	to, why, waiting = r.drainTarget(ctx, primary, map[string]*corev1.Pod{"db-0": pods["db-2"], "db-1": pods["db-1"]}, []failover.Observation{streaming("db-1")})
	assert.Empty(t, to+why+waiting, "a primary whose node takes pods stays")
}

// Where the operator may not read Nodes (a namespaced install), it cannot
// see a drain coming, so it keeps no budget that would hold the drain
// back; it asks again ten minutes later (the RBAC may have changed).
func TestNoPrimaryBudgetWhereNodesCannotBeRead(t *testing.T) {
	now := time.Now()
	forbidden := interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", nil)
	}}
	r := &Reconciler{API: fake.NewClientBuilder().WithInterceptorFuncs(forbidden).Build(), Now: func() time.Time { return now }}
	db := &Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"},
		Kind:       DatabaseKind,
		Spec:       dbv1.DatabaseSpec{Replicas: 2, Failover: &dbv1.FailoverSpec{Enabled: ptr.To(true)}},
	}
	assert.True(t, r.wantsPrimaryPDB(db), "before any read")
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}}
	assert.Empty(t, r.nodeDraining(context.Background(), pod))
	assert.False(t, r.wantsPrimaryPDB(db), "after a refused read")
	now = now.Add(11 * time.Minute)
	assert.True(t, r.wantsPrimaryPDB(db), "ten minutes on")

	db.Spec.Replicas = 1
	assert.False(t, r.wantsPrimaryPDB(db), "one replica")
}

// A pod whose node does not answer (the node controller's taint) or is
// gone is named in the Ready condition with what to do; a standby's claim
// may be deleted to rebuild it elsewhere, the primary's never is.
func TestPodsOnLostNodesSayWhatToDo(t *testing.T) {
	nodes := []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute},
		}}},
	}
	r := &Reconciler{API: fake.NewClientBuilder().WithObjects(nodes...).Build(), Now: time.Now}
	notReady := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}}
	}
	ready := notReady("db-3", "n2")
	ready.Status.Conditions[0].Status = corev1.ConditionTrue
	pods := map[string]*corev1.Pod{
		"db-0": notReady("db-0", "n2"), // the primary, not failed over
		"db-1": notReady("db-1", "n2"),
		"db-2": notReady("db-2", "n1"), // its node answers: not this message's
		"db-3": ready,                  // ready: nothing to say
		"db-4": notReady("db-4", "gone"),
	}
	got := r.podsOnLostNodes(context.Background(), "db-0", pods)
	assert.Equal(t, []string{
		"pod db-0: its node n2 does not answer; the pod comes back with the node",
		"pod db-1: its node n2 does not answer; the pod comes back with the node. If the node is gone for good, delete the pod's claim data-db-1, then the Node: the standby is made again elsewhere and clones the primary",
		"pod db-4: its node gone no longer exists. If its volume was on that node, delete the pod's claim data-db-4: the standby is made again elsewhere and clones the primary",
	}, got)
}

// blockingLogs is a kubelet that never answers: each read ends only with
// its context.
type blockingLogs struct{ reads int }

func (b *blockingLogs) Tail(ctx context.Context, _, _, _ string, _ int64) (string, error) {
	b.reads++
	<-ctx.Done()
	return "", ctx.Err()
}

// A standby's log is read through its node's kubelet: a node that does
// not answer must not hold the reconcile (and the failover watch in it).
// The read gives up after cloneLogWait, a pod on a node marked as not
// answering is not read at all, and the clone's last known state stays.
func TestAStandbyOnALostNodeDoesNotHoldTheReconcile(t *testing.T) {
	nodes := []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "silent"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule},
		}}},
	}
	logs := &blockingLogs{}
	r := &Reconciler{API: fake.NewClientBuilder().WithObjects(nodes...).Build(), Now: time.Now, Logs: logs, Recorder: events.NewFakeRecorder(10)}
	starting := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "postgres"}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "postgres", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	}
	db := &Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"},
		Kind:       DatabaseKind,
		Spec:       dbv1.DatabaseSpec{Replicas: 3},
		Status: dbv1.DatabaseStatus{CurrentPrimary: "db-0", Clones: []dbv1.StandbyClone{
			{Pod: "db-1", CopiedBytes: 10, TotalBytes: 100},
			{Pod: "db-2", CopiedBytes: 20, TotalBytes: 100},
		}},
	}
	pods := map[string]*corev1.Pod{"db-1": starting("db-1", "silent"), "db-2": starting("db-2", "lost")}
	start := time.Now()
	r.observeClones(context.Background(), db, DatabaseKind.Engines[dbv1.EnginePostgreSQL], pods)
	took := time.Since(start)
	assert.Less(t, took, cloneLogWait+time.Second, "the reconcile waited on a kubelet that does not answer")
	assert.Equal(t, 1, logs.reads, "only the pod whose node is not marked lost is read")
	assert.Equal(t, []dbv1.StandbyClone{{Pod: "db-1", CopiedBytes: 10, TotalBytes: 100}, {Pod: "db-2", CopiedBytes: 20, TotalBytes: 100}},
		db.Status.Clones, "what was known of each clone stays")
}

// The budgets: the primary's refuses its eviction; beside it, <name>'s
// covers the standbys only (the eviction API refuses a pod two budgets
// select) and lets one go at a time, as a minAvailable, since a
// maxUnavailable over part of a StatefulSet's pods counts all its
// replicas and would never let the one standby of two go.
func TestTheBudgetsLetADrainTakeOneStandbyAndNeverThePrimary(t *testing.T) {
	db := &Cluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}, Kind: DatabaseKind, Spec: dbv1.DatabaseSpec{Replicas: 3}}
	role := DatabaseKind.Keys.Role
	primary := primaryDisruptionBudget(db)
	assert.Equal(t, "db-primary", primary.Name)
	assert.Equal(t, intstr.FromInt32(1), *primary.Spec.MinAvailable)
	assert.Equal(t, "primary", primary.Spec.Selector.MatchLabels[role])

	standbys := podDisruptionBudget(db, true)
	assert.Equal(t, "db", standbys.Name)
	assert.Nil(t, standbys.Spec.MaxUnavailable)
	assert.Equal(t, intstr.FromInt32(1), *standbys.Spec.MinAvailable, "two of three replicas are standbys: one stays")
	assert.Equal(t, "standby", standbys.Spec.Selector.MatchLabels[role])
	assert.Equal(t, policyv1.AlwaysAllow, *standbys.Spec.UnhealthyPodEvictionPolicy, "a standby that is not ready may go")
	db.Spec.Replicas = 2
	assert.Equal(t, intstr.FromInt32(0), *podDisruptionBudget(db, true).Spec.MinAvailable, "the one standby of two may go")

	all := podDisruptionBudget(db, false)
	assert.Equal(t, intstr.FromInt32(1), *all.Spec.MaxUnavailable)
	assert.NotContains(t, all.Spec.Selector.MatchLabels, role, "without the primary's budget, every server pod")
}

// Five minutes after a node is lost its pods are marked for deletion and
// stay Terminating; the StatefulSet then counts them as not updated. That
// is no rollout: the primary stays watched (a primary lost with the
// operator's node is failed over once an operator runs again), while a
// replica missing for any other reason still reads as one.
func TestPodsEvictedFromALostNodeAreNoRollout(t *testing.T) {
	db := DatabaseKind.Clusters.View(&dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "ns"},
		Spec:       dbv1.DatabaseSpec{Replicas: 2},
	})
	l := &live{statefulSet: appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Generation: 1},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "postgres"}, {Name: instance.AgentContainer}},
		}}},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 1, CurrentRevision: "r1", UpdateRevision: "r1"},
	}}
	l.exists = map[string]bool{"StatefulSet/shop": true}
	assert.Empty(t, notWatchedNow(db, l, 1), "one pod evicted from a lost node")
	assert.Contains(t, notWatchedNow(db, l, 0), "a rollout is restarting the pods")
}
