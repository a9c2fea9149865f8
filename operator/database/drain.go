package database

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/operator/database/failover"
)

// Drains. A node being drained (kubectl drain cordons it, the cluster
// autoscaler and Karpenter taint it) evicts its pods; the primary's
// eviction would cost a failover: its pod goes, and with a node-local
// volume it cannot come back anywhere else. So, with failover on and
// standbys, the PodDisruptionBudget <name>-primary (minAvailable 1 on the
// primary's role label) refuses the primary's eviction, and the watch,
// seeing the primary's node take no new pods, switches over to a healthy
// streaming standby on a node that does; the role label then moves, and
// the drain evicts the old primary as the standby it has become. No
// acknowledged write is lost (a switchover's handover), and the outage is
// a switchover's.
//
// Learning of a drain needs the primary's Node: one GET of it at most
// every nodeRecheck (not a watch: the operator caches no Node). Where the
// operator may not read Nodes (a namespaced install), it cannot act on a
// drain, so it keeps no primary budget either: a drain then evicts the
// primary, which fails over.

// nodeRecheck is how long a Node's state read is reused.
const nodeRecheck = 5 * time.Second

// nodes reads Nodes uncached, each at most every nodeRecheck, and
// remembers whether the operator may read them at all.
type nodes struct {
	mu        sync.Mutex
	seen      map[string]nodeSeen
	forbidden time.Time // the last read refused (RBAC)
}

type nodeSeen struct {
	node *corev1.Node // nil: not found
	at   time.Time
}

// node is the Node named (nil when it does not exist), read again when
// the last read is older than nodeRecheck; ok is false when it cannot be
// read.
func (r *Reconciler) node(ctx context.Context, name string) (node *corev1.Node, ok bool) {
	n, now := &r.nodes, r.now()
	n.mu.Lock()
	if s, hit := n.seen[name]; hit && now.Sub(s.at) < nodeRecheck {
		n.mu.Unlock()
		return s.node, true
	}
	n.mu.Unlock()
	if r.API == nil || name == "" {
		return nil, false
	}
	var got corev1.Node
	err := r.API.Get(ctx, types.NamespacedName{Name: name}, &got)
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case apierrors.IsForbidden(err):
		n.forbidden = now
		return nil, false
	case apierrors.IsNotFound(err):
		n.remember(name, nil, now)
		return nil, true
	case err != nil:
		return nil, false
	}
	n.forbidden = time.Time{}
	n.remember(name, &got, now)
	return &got, true
}

func (n *nodes) remember(name string, node *corev1.Node, now time.Time) {
	if n.seen == nil {
		n.seen = map[string]nodeSeen{}
	}
	n.seen[name] = nodeSeen{node: node, at: now}
}

// readable: the last read of a Node was not refused, or was refused long
// enough ago (ten minutes) to try again (the RBAC may have been granted).
func (n *nodes) readable(now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.forbidden.IsZero() || now.Sub(n.forbidden) > 10*time.Minute
}

// draining says why a node takes no new pods like pod ("": it does): it
// is cordoned, or it carries a NoSchedule or NoExecute taint the pod does
// not tolerate (the cluster autoscaler's, Karpenter's, a person's). The
// node controller's own taints (node.kubernetes.io/: not ready,
// unreachable, short of memory or disk) say the node is unwell, not that
// it is being emptied: a primary there that answers is kept, and one that
// does not is failed over. A node that does not exist takes no pods.
func draining(node *corev1.Node, pod *corev1.Pod) string {
	if node == nil {
		return "the node does not exist"
	}
	if node.Spec.Unschedulable {
		return "cordoned"
	}
	for _, taint := range node.Spec.Taints {
		if taint.Effect != corev1.TaintEffectNoSchedule && taint.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if strings.HasPrefix(taint.Key, "node.kubernetes.io/") {
			continue
		}
		if !toleratesTaint(pod.Spec.Tolerations, &taint) {
			return fmt.Sprintf("tainted %s:%s", taint.Key, taint.Effect)
		}
	}
	return ""
}

func toleratesTaint(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	for i := range tolerations {
		// Comparison operators (Gt, Lt) are a feature gate's; a toleration
		// using them is read as not matching.
		if tolerations[i].ToleratesTaint(logr.Discard(), taint, false) {
			return true
		}
	}
	return false
}

// nodeDraining says why the pod's node is being drained ("": it is not,
// or the operator cannot tell).
func (r *Reconciler) nodeDraining(ctx context.Context, pod *corev1.Pod) string {
	if pod == nil || pod.Spec.NodeName == "" {
		return ""
	}
	node, ok := r.node(ctx, pod.Spec.NodeName)
	if !ok {
		return ""
	}
	if why := draining(node, pod); why != "" {
		return fmt.Sprintf("its node %s is being drained (%s)", pod.Spec.NodeName, why)
	}
	return ""
}

// podsOnLostNodes says, for each pod not ready whose node does not answer
// (the node controller's unreachable or not-ready taint) or no longer
// exists, what that means and what a person may have to do: nothing when
// the node comes back; when it is gone for good, only a person can say so
// (docs/guides/database-failover.md, "A node that does not come back").
// The primary's claim is never named: its data may be the only copy.
func (r *Reconciler) podsOnLostNodes(ctx context.Context, primary string, pods map[string]*corev1.Pod) []string {
	var out []string
	for name, p := range pods {
		if p.Spec.NodeName == "" || (podReady(p) && p.DeletionTimestamp.IsZero()) {
			continue
		}
		node, ok := r.node(ctx, p.Spec.NodeName)
		if !ok || !nodeLost(node) {
			continue
		}
		msg := fmt.Sprintf("pod %s: its node %s does not answer; the pod comes back with the node", name, p.Spec.NodeName)
		advice := fmt.Sprintf(". If the node is gone for good, delete the pod's claim data-%s, then the Node: the standby is made again elsewhere and clones the primary", name)
		if node == nil {
			msg = fmt.Sprintf("pod %s: its node %s no longer exists", name, p.Spec.NodeName)
			advice = fmt.Sprintf(". If its volume was on that node, delete the pod's claim data-%s: the standby is made again elsewhere and clones the primary", name)
		}
		if name != primary {
			msg += advice
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

// evictedFromLostNodes counts the pods being deleted from nodes that do
// not answer (the node controller's eviction, 5 minutes after a node is
// lost): they stay Terminating until the node answers, and the
// StatefulSet counts them as not updated. Were that read as a rollout, a
// primary lost with its node (and the operator's) would never be failed
// over, nor any later primary while the pod stays.
func (r *Reconciler) evictedFromLostNodes(ctx context.Context, pods map[string]*corev1.Pod) int32 {
	var n int32
	for _, p := range pods {
		if !p.DeletionTimestamp.IsZero() && r.onLostNode(ctx, p) {
			n++
		}
	}
	return n
}

// onLostNode: the pod's node does not answer, or no longer exists.
func (r *Reconciler) onLostNode(ctx context.Context, p *corev1.Pod) bool {
	node, ok := r.node(ctx, p.Spec.NodeName)
	return ok && nodeLost(node)
}

// nodeLost: the node is gone, or the node controller marked it as not
// answering.
func nodeLost(node *corev1.Node) bool {
	if node == nil {
		return true
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady {
			return true
		}
	}
	return false
}

// drainTarget is the standby to switch over to because the primary's node
// is being drained, and why the primary must move ("" for both when it
// need not). waiting says why no standby can take over yet.
func (r *Reconciler) drainTarget(ctx context.Context, primary failover.Observation, pods map[string]*corev1.Pod, others []failover.Observation) (target, why, waiting string) {
	why = r.nodeDraining(ctx, pods[primary.Pod])
	if why == "" {
		return "", "", ""
	}
	var refused []string
	for _, o := range sortedByPod(others) {
		if not := failover.ReadyForSwitchover(primary, o); not != "" {
			refused = append(refused, not)
			continue
		}
		if also := r.nodeDraining(ctx, pods[o.Pod]); also != "" {
			refused = append(refused, fmt.Sprintf("%s: %s", o.Pod, also))
			continue
		}
		return o.Pod, why, ""
	}
	if len(refused) == 0 {
		refused = append(refused, "there is no standby")
	}
	return "", why, fmt.Sprintf("no standby can take over: %s", strings.Join(refused, "; "))
}

func sortedByPod(obs []failover.Observation) []failover.Observation {
	out := append([]failover.Observation(nil), obs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out
}

// wantsPrimaryPDB: the Database keeps the primary's budget: failover on
// (a switchover can move the primary), standbys to move it to, and an
// operator that can see a drain coming.
func (r *Reconciler) wantsPrimaryPDB(db *Cluster) bool {
	return failoverOn(db) && replicasOf(db) > 1 && r.nodes.readable(r.now())
}

// primaryDisruptionBudget refuses every voluntary eviction of the primary
// (minAvailable 1 of the one pod labelled primary): a drain waits for the
// switchover instead.
func primaryDisruptionBudget(db *Cluster) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: objectMeta(db, namesOf(db).PrimaryPDB, nil),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: withLabels(selectorLabels(db, componentServer),
				map[string]string{db.Kind.Keys.Role: rolePrimary})},
		},
	}
}
