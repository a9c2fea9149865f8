package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// BenchmarkNodeLoss measures the write outage when the primary's node
// loses its power (hack/node.sh power off: the second node's network,
// kubelet, containerd and containers killed at once), as a client that
// reconnects for every write sees it through <name>-rw and through the
// app Secret's multihost-uri (from its first failed write to its first
// acknowledged write after it), repeated DECKHAND_FAILOVER_RUNS times
// (default 10) on one two-instance Database spread over the two nodes
// (startTwoNodeCluster). Its spec.failover.switchoverTo names the
// instance on the second node, so once that node is powered on again and
// the old primary has rejoined as a standby, the operator hands the
// primary back to it, and the next run strikes the same way. It prints
// the median and worst outage, how long the old primary took to rejoin
// after the power came back, the acknowledged writes lost, and the
// moments two servers accepted writes (every pod's agent asked every
// 200 ms), next to the floor: the median time between two acknowledged
// writes with no fault. DECKHAND_FAILOVER_SYNC=1 runs it with
// synchronous replication. Skipped without the node; not part of make
// test:
//
//	DECKHAND_NODE_KUBECONFIG=$(hack/node.sh kubeconfig) make bench BENCH=NodeLoss
func BenchmarkNodeLoss(b *testing.B) {
	runs, minStandbys := benchRuns(b), benchMinStandbys(b)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	f := startTwoNodeCluster(ctx, b, withMinStandbys(minStandbys), func(db *dbv1.Database) {
		db.Spec.Failover.SwitchoverTo = db.Name + "-0"
	})
	home := f.primary()
	w := f.startWriter("writer")
	mw := f.startMultiHostWriter("multihost-writer")
	w.waitAcks(20)
	floor := medianAckInterval(w.log())
	watch := f.watchPrimaries()
	loadBefore := loadAverage()
	// A run that fails while the node is off powers it on.
	b.Cleanup(func() { _ = exec.Command("../../hack/node.sh", "power", "on", secondNode).Run() })
	var outages, multiOutages, rejoins []time.Duration
	var at []time.Time
	for i := 0; i < runs; i++ {
		f.waitPrimary(home)
		f.waitSteady()
		w.waitAcks(3)
		mw.waitAcks(3)
		nodeScript(ctx, b, "power", "off", secondNode)
		off := time.Now()
		down, _ := w.waitOutageOver(off)
		multiDown, _ := mw.waitOutageOver(off)
		rec := f.waitFailedOver(off.Add(-time.Second))
		nodeScript(ctx, b, "power", "on", secondNode)
		on := time.Now()
		// The record's rejoined time, not a look at the old primary's
		// agent: switchoverTo may already have made it the primary again.
		rejoins = append(rejoins, f.waitRejoined(rec).Sub(on))
		outages = append(outages, down)
		multiOutages = append(multiOutages, multiDown)
		at = append(at, off)
		logf(b, "node loss bench run %d: write outage %s through -rw, %s through multihost-uri; failover %s -> %s finished %.1fs after the power off; rejoined %.1fs after the power on",
			i+1, down.Round(100*time.Millisecond), multiDown.Round(100*time.Millisecond), rec.From, rec.To,
			rec.Finished.Sub(off).Seconds(), rejoins[len(rejoins)-1].Seconds())
	}
	waitDatabaseReady(ctx, b, f.c, f.ns, f.name)
	w.waitAcks(3)
	samples, two := watch.finish()
	lost := lostNear(w.committedIDs(), at, w.log(), mw.log())
	median, worst := reportMedianWorst(b, "outage", outages)
	multiMedian, multiWorst := reportMedianWorst(b, "multihost-outage", multiOutages)
	rejoinMedian, rejoinWorst := reportMedianWorst(b, "rejoin", rejoins)
	b.ReportMetric(float64(lost), "acked-rows-lost")
	b.ReportMetric(float64(len(two)), "two-writable-moments")
	logf(b, "node loss bench: 2 replicas on two nodes, synchronous minStandbys %d (0: asynchronous), %d runs: write outage through -rw median %s worst %s, through multihost-uri median %s worst %s (floor: one write %s); rejoined after the power on median %s worst %s; %d acknowledged writes lost; %d agent rounds with two servers accepting writes of %d; /proc/loadavg before %s, after %s",
		minStandbys, runs, median.Round(100*time.Millisecond), worst.Round(100*time.Millisecond),
		multiMedian.Round(100*time.Millisecond), multiWorst.Round(100*time.Millisecond), floor.Round(time.Millisecond),
		rejoinMedian.Round(100*time.Millisecond), rejoinWorst.Round(100*time.Millisecond), lost, len(two), samples, loadBefore, loadAverage())
	w.stop()
	mw.stop()
}

// OperatorReplicasEnv sets how many operator replicas
// BenchmarkOperatorNodeLoss runs (default 2).
const OperatorReplicasEnv = "DECKHAND_OPERATOR_REPLICAS"

// LostNodeEnv names the node BenchmarkOperatorNodeLoss powers off:
// dh-node2 (the default) or dh-node, the first, which runs every other
// test's pods.
const LostNodeEnv = "DECKHAND_LOST_NODE"

// CoreDNSEnv places CoreDNS for BenchmarkOperatorNodeLoss: "survivor" (the
// default: its one replica on the node that is not lost) or "spread" (two
// replicas, one on each node, as clusters usually run it: the lost node
// takes one with it).
const CoreDNSEnv = "DECKHAND_COREDNS"

// BenchmarkOperatorNodeLoss measures the write outage when the node that
// loses its power (DECKHAND_LOST_NODE, the second by default) runs both
// the primary and the leading operator, as BenchmarkNodeLoss does for the
// primary alone. The chart's release is upgraded for it to
// DECKHAND_OPERATOR_REPLICAS operator replicas (default 2) that tolerate
// the second node's taint and prefer the node to be lost, spread one per
// node when there are two (the chart's topologySpreadConstraints), and
// rolled back to its values before at the end. CoreDNS runs as
// DECKHAND_COREDNS says, and as before at the end. The Database's
// switchoverTo names its instance on that node, and before each run the
// operator pod there is made the leader (the leader's pod on the other
// node deleted). The writer runs on the node that survives. It prints,
// per run and as median and worst: the write outage through <name>-rw,
// when the operator that survived took the leader Lease (with two
// replicas: the Lease running out; with one: the pod evicted from the
// lost node after Kubernetes' default 300 s toleration, made again and
// started), and when the failover finished. With one replica each run
// takes more than 6 minutes: set DECKHAND_FAILOVER_RUNS to at most 6 (the
// bench's limit is 55 minutes). Skipped without the node; not part of
// make test:
//
//	DECKHAND_NODE_KUBECONFIG=$(hack/node.sh kubeconfig) make bench BENCH=OperatorNodeLoss
//	DECKHAND_LOST_NODE=dh-node DECKHAND_NODE_KUBECONFIG=$(hack/node.sh kubeconfig) make bench BENCH=OperatorNodeLoss
func BenchmarkOperatorNodeLoss(b *testing.B) {
	runs, replicas, lostNode := benchRuns(b), operatorReplicas(b), nodeToLose(b)
	survivor := firstNode
	if lostNode == firstNode {
		survivor = secondNode
	}
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	_, cs := clientFor(b)
	operatorDeployment(ctx, b, cs)
	before := releaseRevision(ctx, b)
	// Back to the release's values before (an upgrade with
	// --reuse-values cannot take values away), registered first so that
	// an upgrade that fails half-way is undone too.
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		releaseMu.Lock()
		defer releaseMu.Unlock()
		out, err := exec.CommandContext(ctx, helmBinary(b), "--kubeconfig", kubeconfigPath(), "-n", operatorNamespace,
			"rollback", "deckhand", strconv.Itoa(before), "--wait", "--timeout", "5m").CombinedOutput()
		require.NoError(b, err, "helm rollback deckhand %d:\n%s", before, out)
	})
	spreadOperatorOverBothNodes(ctx, b, replicas, lostNode)
	dns := placeCoreDNS(ctx, b, cs, survivor)
	f := startTwoNodeCluster(ctx, b)
	home := f.primary()
	// The writer on the node that survives.
	place := onFirstNode
	if survivor == secondNode {
		home, place = f.standbyOf(home), onSecondNode
	}
	f.updateDatabase(func(db *dbv1.Database) { db.Spec.Failover.SwitchoverTo = home })
	w := f.startWriterScript("writer", writerScript, place)
	w.waitAcks(20)
	floor := medianAckInterval(w.log())
	b.Cleanup(func() { _ = exec.Command("../../hack/node.sh", "power", "on", lostNode).Run() })
	var outages, leads, failovers []time.Duration
	var at []time.Time
	for i := 0; i < runs; i++ {
		f.waitPrimary(home)
		f.waitSteady()
		w.waitAcks(3)
		lost := leadFrom(ctx, b, cs, lostNode)
		nodeScript(ctx, b, "power", "off", lostNode)
		off := time.Now()
		leader, led := waitNewLeader(ctx, b, cs, lost, 9*time.Minute)
		rec := f.waitFailedOver(off.Add(-time.Second))
		down, first := w.waitOutageOver(off)
		late := failuresBetween(w.log(), rec.Finished.Time, first.at.Add(down))
		nodeScript(ctx, b, "power", "on", lostNode)
		readyNode(ctx, b, cs, lostNode)
		f.waitRejoined(rec)
		outages = append(outages, down)
		leads = append(leads, led.Sub(off))
		failovers = append(failovers, rec.Finished.Sub(off))
		at = append(at, off)
		logf(b, "operator node loss bench run %d: write outage %s through -rw; the operator %s (on %s) led %.1fs after the power off (the lost leader: %s); failover %s -> %s finished %.1fs after it; the writes that failed after that: %s",
			i+1, down.Round(100*time.Millisecond), leader.Name, leader.Spec.NodeName, led.Sub(off).Seconds(), lost,
			rec.From, rec.To, rec.Finished.Sub(off).Seconds(), late)
	}
	waitDatabaseReady(ctx, b, f.c, f.ns, f.name)
	w.waitAcks(3)
	lost := lostNear(w.committedIDs(), at, w.log())
	median, worst := reportMedianWorst(b, "outage", outages)
	leadMedian, leadWorst := reportMedianWorst(b, "operator-led", leads)
	failoverMedian, failoverWorst := reportMedianWorst(b, "failover", failovers)
	b.ReportMetric(float64(lost), "acked-rows-lost")
	logf(b, "operator node loss bench: %d operator replicas, the primary and the leading operator on %s, powered off, CoreDNS %s, %d runs: write outage through -rw median %s worst %s (floor: one write %s); a surviving operator led after median %s worst %s; failover finished after median %s worst %s; %d acknowledged writes lost; /proc/loadavg %s",
		replicas, lostNode, dns, runs, median.Round(100*time.Millisecond), worst.Round(100*time.Millisecond), floor.Round(time.Millisecond),
		leadMedian.Round(100*time.Millisecond), leadWorst.Round(100*time.Millisecond),
		failoverMedian.Round(100*time.Millisecond), failoverWorst.Round(100*time.Millisecond), lost, loadAverage())
	w.stop()
}

// operatorReplicas is DECKHAND_OPERATOR_REPLICAS, or 2.
func operatorReplicas(b *testing.B) int {
	if s := os.Getenv(OperatorReplicasEnv); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(b, err, "%s=%q", OperatorReplicasEnv, s)
		require.True(b, n == 1 || n == 2, "%s: 1 or 2, not %d", OperatorReplicasEnv, n)
		return n
	}
	return 2
}

// failuresBetween says how many of log's writes failed from `from` to
// `to`, and why (the distinct errors, with their counts).
func failuresBetween(log []writeOutcome, from, to time.Time) string {
	count := map[string]int{}
	var order []string
	for _, o := range log {
		if o.ok || o.at.Before(from) || o.at.After(to) {
			continue
		}
		if count[o.fail] == 0 {
			order = append(order, o.fail)
		}
		count[o.fail]++
	}
	if len(order) == 0 {
		return "none"
	}
	var parts []string
	for _, f := range order {
		parts = append(parts, fmt.Sprintf("%d × %q", count[f], f))
	}
	return strings.Join(parts, ", ")
}

// placeCoreDNS runs CoreDNS as DECKHAND_COREDNS says, survivor being the
// node that is not lost, puts its Deployment back as it was at the end,
// and says where it runs.
func placeCoreDNS(ctx context.Context, b *testing.B, cs *kubernetes.Clientset, survivor string) string {
	b.Helper()
	before, err := cs.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(b, err)
	var where string
	var change func(spec *appsv1.DeploymentSpec)
	switch mode := os.Getenv(CoreDNSEnv); mode {
	case "", "survivor":
		where = "on " + survivor
		change = func(spec *appsv1.DeploymentSpec) {
			spec.Replicas = ptr.To[int32](1)
			spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: survivor}
		}
	case "spread":
		where = "on both nodes"
		change = func(spec *appsv1.DeploymentSpec) {
			spec.Replicas = ptr.To[int32](2)
			spec.Template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey:   corev1.LabelHostname,
					LabelSelector: before.Spec.Selector,
				}},
			}}
		}
	default:
		b.Fatalf("%s: survivor or spread, not %q", CoreDNSEnv, mode)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		rollCoreDNS(ctx, b, cs, func(spec *appsv1.DeploymentSpec) {
			spec.Replicas = before.Spec.Replicas
			spec.Template.Spec = before.Spec.Template.Spec
			spec.Strategy = before.Spec.Strategy
		})
	})
	rollCoreDNS(ctx, b, cs, func(spec *appsv1.DeploymentSpec) {
		spec.Template.Spec.Tolerations = append(spec.Template.Spec.Tolerations, toleratesSecondNode())
		// One pod at a time, the old one first: a new pod that may not
		// share a node with another of CoreDNS's would wait forever for
		// the old one's node while the default surge keeps it.
		spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromInt32(0)),
			}}
		change(spec)
	})
	return where
}

// rollCoreDNS changes CoreDNS's Deployment and waits until every replica
// runs the change and is ready.
func rollCoreDNS(ctx context.Context, b *testing.B, cs *kubernetes.Clientset, change func(*appsv1.DeploymentSpec)) {
	b.Helper()
	deployments := cs.AppsV1().Deployments(metav1.NamespaceSystem)
	d, err := deployments.Get(ctx, "coredns", metav1.GetOptions{})
	require.NoError(b, err)
	change(&d.Spec)
	d, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
	require.NoError(b, err)
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := deployments.Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		s := got.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == *d.Spec.Replicas &&
			s.Replicas == *d.Spec.Replicas && s.AvailableReplicas == *d.Spec.Replicas, nil
	})
	require.NoError(b, err, "CoreDNS's rollout")
}

// nodeToLose is DECKHAND_LOST_NODE, or the second node.
func nodeToLose(b *testing.B) string {
	switch s := os.Getenv(LostNodeEnv); s {
	case "":
		return secondNode
	case firstNode, secondNode:
		return s
	default:
		b.Fatalf("%s: %s or %s, not %q", LostNodeEnv, firstNode, secondNode, s)
		return ""
	}
}

// spreadOperatorOverBothNodes upgrades the release to replicas operator
// pods that tolerate the second node's taint and prefer the node
// preferred, at most one per node.
func spreadOperatorOverBothNodes(ctx context.Context, b *testing.B, replicas int, preferred string) {
	b.Helper()
	tolerations, err := json.Marshal([]corev1.Toleration{toleratesSecondNode()})
	require.NoError(b, err)
	affinity, err := json.Marshal(corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{preferred},
			}}},
		}},
	}})
	require.NoError(b, err)
	// An empty labelSelector: the chart fills in the operator's own; the
	// pod-template-hash key counts this ReplicaSet's pods only, or the
	// rollout's new pods, counting the old one on the first node, would
	// both go to the other.
	spread := `[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule","matchLabelKeys":["pod-template-hash"]}]`
	helmUpgrade(ctx, b, "--set", fmt.Sprintf("replicaCount=%d", replicas), "--set-json", "tolerations="+string(tolerations),
		"--set-json", "affinity="+string(affinity), "--set-json", "topologySpreadConstraints="+spread)
}

// releaseRevision is the cluster release's current revision.
func releaseRevision(ctx context.Context, b *testing.B) int {
	b.Helper()
	out, err := exec.CommandContext(ctx, helmBinary(b), "--kubeconfig", kubeconfigPath(), "-n", operatorNamespace,
		"status", "deckhand", "-o", "json").Output()
	require.NoError(b, err, "helm status deckhand")
	var status struct {
		Version int `json:"version"`
	}
	require.NoError(b, json.Unmarshal(out, &status))
	return status.Version
}

// leadFrom makes the operator pod on node the leader: while the leader
// runs on the other node, that pod is deleted (with one replica, its
// replacement goes to node, which it prefers; with two, the other replica
// takes the Lease once it runs out). It returns the leader's pod name.
func leadFrom(ctx context.Context, b *testing.B, cs *kubernetes.Clientset, node string) string {
	b.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		pod = operatorLeader(ctx, cs)
		if pod == nil || pod.DeletionTimestamp != nil {
			return false, nil
		}
		if pod.Spec.NodeName == node {
			return true, nil
		}
		_ = cs.CoreV1().Pods(operatorNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
		return false, nil
	})
	require.NoError(b, err, "no operator on %s took the leader Lease (last leader: %v)", node, pod)
	return pod.Name
}

// waitNewLeader waits until an operator pod other than lost holds the
// leader Lease, and returns it and when it took the Lease.
func waitNewLeader(ctx context.Context, b *testing.B, cs *kubernetes.Clientset, lost string, within time.Duration) (*corev1.Pod, time.Time) {
	b.Helper()
	var pod *corev1.Pod
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, time.Second, within, true, func(ctx context.Context) (bool, error) {
		lease := operatorLease(ctx, cs)
		if lease == nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == lost || lease.Spec.AcquireTime == nil {
			return false, nil
		}
		p, err := cs.CoreV1().Pods(operatorNamespace).Get(ctx, *lease.Spec.HolderIdentity, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod, at = p, lease.Spec.AcquireTime.Time
		return true, nil
	})
	require.NoError(b, err, "no operator took the leader Lease from %s within %s", lost, within)
	return pod, at
}

// operatorLeader is the pod that holds the operator's leader Lease, or
// nil.
func operatorLeader(ctx context.Context, cs *kubernetes.Clientset) *corev1.Pod {
	lease := operatorLease(ctx, cs)
	if lease == nil || lease.Spec.HolderIdentity == nil {
		return nil
	}
	pod, err := cs.CoreV1().Pods(operatorNamespace).Get(ctx, *lease.Spec.HolderIdentity, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return pod
}

// operatorLease is the operator's leader Lease (the chart names it
// <fullname>.deckhand.dev: the release deckhand's is deckhand), or nil.
func operatorLease(ctx context.Context, cs *kubernetes.Clientset) *coordinationv1.Lease {
	lease, err := cs.CoordinationV1().Leases(operatorNamespace).Get(ctx, "deckhand.deckhand.dev", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return lease
}
