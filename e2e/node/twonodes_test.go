package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// toleratesSecondNode is the toleration of the second node's taint.
func toleratesSecondNode() corev1.Toleration {
	return corev1.Toleration{Key: secondNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
}

// onFirstNode places a pod on the first node.
func onFirstNode(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: firstNode}
	return pod
}

// onSecondNode places a pod on the second node.
func onSecondNode(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: secondNode}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, toleratesSecondNode())
	return pod
}

// TestRealNodeSecondNode runs the tests of the second node one after the
// other, in one of the node's parallel slots: each powers the node off, cuts
// it off, stops its kubelet or needs it running, and no other test places a
// pod there (its taint), so the rest of the package runs beside them on the
// first node.
func TestRealNodeSecondNode(t *testing.T) {
	parallel(t, 11*time.Minute) // alone: 4 + 79 + 86 + 153 + 69 + 80 + 72 s
	_, cs := clientFor(t)
	_, err := cs.CoreV1().Nodes().Get(context.Background(), secondNode, metav1.GetOptions{})
	require.NoError(t, err, "no node %s: hack/node.sh up starts it (unless DECKHAND_NODES=1)", secondNode)
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"RunsPodsThatReachTheFirst", secondNodeRunsPodsThatReachTheFirst},
		{"FailsOverWhenThePrimarysNodeLosesPower", failsOverWhenThePrimarysNodeLosesPower},
		{"FencesAPrimaryWhoseNodeIsCutOff", fencesAPrimaryWhoseNodeIsCutOff},
		{"ReplacesAnInstanceWhoseNodeDoesNotComeBack", replacesAnInstanceWhoseNodeDoesNotComeBack},
		{"SwitchesOverBeforeADrainEvictsThePrimary", switchesOverBeforeADrainEvictsThePrimary},
		{"KeepsThePrimaryWhileItsKubeletIsStopped", keepsThePrimaryWhileItsKubeletIsStopped},
		{"FencesAPrimaryCutOffFromTheOperatorAndTheAPIServer", fencesAPrimaryCutOffFromTheOperatorAndTheAPIServer},
	} {
		t.Run(c.name, c.run)
	}
}

// Each node's pods reach the other's by address and through Services
// (each node's kube-proxy), the second node's pods resolve names through
// the cluster's DNS (on the first node) and reach the API server, at an
// address neither node holds, through
// the kubernetes Service, and only pods that tolerate the second node's
// taint are placed there.
func secondNodeRunsPodsThatReachTheFirst(t *testing.T) {
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	second := readyNode(ctx, t, cs, secondNode)
	assert.Contains(t, second.Spec.Taints, corev1.Taint{Key: secondNodeTaint, Effect: corev1.TaintEffectNoSchedule}, "the second node's taints")

	ns := namespace(ctx, t, cs)
	serve := `mkdir /tmp/www && echo "$BODY" >/tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`
	pods := map[string]*corev1.Pod{}
	bodies := map[string]string{}
	for _, name := range []string{"first", "second"} {
		bodies[name] = name + "-" + rand.String(8)
		pod := busyboxPod(t, ns, name, map[string]string{"app": name}, serve, corev1.EnvVar{Name: "BODY", Value: bodies[name]})
		if name == "second" {
			pod = onSecondNode(pod)
		}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": name},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for name := range bodies {
		pods[name] = runningPod(ctx, t, cs, ns, name)
	}
	assert.Equal(t, firstNode, pods["first"].Spec.NodeName)
	assert.Equal(t, secondNode, pods["second"].Spec.NodeName)
	assert.True(t, podRange.Contains(net.ParseIP(pods["first"].Status.PodIP)), "first pod's IP %s", pods["first"].Status.PodIP)
	assert.True(t, secondPodRange.Contains(net.ParseIP(pods["second"].Status.PodIP)), "second pod's IP %s", pods["second"].Status.PodIP)

	// An untolerating pod that asks for the second node stays Pending.
	_, err := cs.CoreV1().Pods(ns).Create(ctx, func() *corev1.Pod {
		p := busyboxPod(t, ns, "untolerated", nil, "exec sleep 3600")
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: secondNode}
		return p
	}(), metav1.CreateOptions{})
	require.NoError(t, err)

	for from, pod := range pods {
		for to, target := range pods {
			svc, err := cs.CoreV1().Services(ns).Get(ctx, to, metav1.GetOptions{})
			require.NoError(t, err)
			for _, addr := range []string{target.Status.PodIP + ":8080", svc.Spec.ClusterIP} {
				got := eventually(ctx, t, cfg, cs, pod, "timeout 5 wget -q -O- http://"+addr+"/", bodies[to])
				assert.Contains(t, got, bodies[to], "HTTP from the %s node's pod to %s (the %s node's)", from, addr, to)
			}
		}
	}
	name := "first." + ns + ".svc.cluster.local"
	got := eventually(ctx, t, cfg, cs, pods["second"], "nslookup "+name, "Address: ")
	assert.Contains(t, got, "Address: 198.19.", "the second node's pod resolving %s", name)
	// busybox's wget speaks no TLS: a TCP connection to the kubernetes
	// Service's address (kube-proxy's rule to the API server's port on
	// the control plane's address) shows the way is open.
	kubernetes, err := cs.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	got = eventually(ctx, t, cfg, cs, pods["second"], "nc -w 3 "+kubernetes.Spec.ClusterIP+" 443 </dev/null && echo connected", "connected")
	assert.Contains(t, got, "connected", "the API server through the kubernetes Service from the second node")
	slice, err := cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	nodes := []corev1.Node{readyNode(ctx, t, cs, firstNode), second}
	for _, e := range slice.Endpoints {
		for _, addr := range e.Addresses {
			for _, n := range nodes {
				for _, a := range n.Status.Addresses {
					assert.NotEqual(t, a.Address, addr, "the API server's address is node %s's", n.Name)
				}
			}
		}
	}

	untolerated, err := cs.CoreV1().Pods(ns).Get(ctx, "untolerated", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.PodPending, untolerated.Status.Phase, "a pod that does not tolerate the second node's taint ran there")
}

// The primary's node loses its power: the second node's network, kubelet,
// containerd and every container killed at once (hack/node.sh power off),
// while a client on the first node writes through <name>-rw. The Database
// (two instances, spread over the nodes by the operator's anti-affinity,
// its primary placed on the second node by a preferred node affinity in
// spec.podTemplate.affinity) fails over to the standby on the first node without the
// old primary's pod, which stays bound to the dead node. Powered on again,
// the old primary rejoins as a standby of the new one and never takes a
// write; the StatefulSet is whole again with no one deleting anything.
func failsOverWhenThePrimarysNodeLosesPower(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	f := startTwoNodeCluster(ctx, t)
	old := f.primary()
	standby := f.standbyOf(old)
	w := f.startWriter("writer")
	watch := f.watchPrimaries()
	w.waitAcks(5)

	nodeScript(ctx, t, "power", "off", secondNode)
	offAt := time.Now()
	// A test that fails while the node is off powers it on (an error
	// there says it is on already).
	t.Cleanup(func() { _ = exec.Command("../../hack/node.sh", "power", "on", secondNode).Run() })

	rec := f.waitFailedOver(offAt.Add(-time.Second))
	w.waitAcks(5)
	log := w.stop()
	down, firstFail := outage(log, offAt.Add(-time.Second))
	require.Positive(t, down, "writes failed from %+v and never came back", firstFail)
	assert.Equal(t, old, rec.From)
	assert.Equal(t, standby, rec.To)
	assert.Equal(t, standby, servedBy(ctx, t, f.cs, f.ns, f.name+"-rw"), "-rw selects the new primary")
	f.waitEvent("FailedOver")
	// The standby's replies to the dead node went unacknowledged from the
	// power cut on: the promotion owed the old primary no wait for their
	// silence once they were detached.
	assert.Contains(t, f.eventReasons()["StandbysDetached"], "promoted now", "the Event of the detach")
	lost := lostAcks(log, w.committedIDs())
	for _, o := range lost {
		assert.True(t, o.at.After(offAt.Add(-time.Second)), "write %d, acknowledged at %s (power off at %s), is not on the new primary", o.id, o.at, offAt)
	}
	oldPod, err := f.cs.CoreV1().Pods(f.ns).Get(ctx, old, metav1.GetOptions{})
	require.NoError(t, err)
	logf(t, "primary's node powered off (2 replicas, asynchronous): write outage %s (first failed write %.1fs after the power off: %s); failover started %.1fs and finished %.1fs after it, fenced %v (%s); %d acknowledged writes, %d lost; the old primary's pod then: phase %s, deleting %v",
		down.Round(100*time.Millisecond), firstFail.at.Sub(offAt).Seconds(), firstFail.fail,
		rec.Started.Sub(offAt).Seconds(), rec.Finished.Sub(offAt).Seconds(), rec.Fenced, rec.FenceMessage,
		countAcks(log), len(lost), oldPod.Status.Phase, oldPod.DeletionTimestamp != nil)

	// Power back: the old primary's pod starts again on its node, rejoins
	// as a standby of the new primary, and takes no write.
	nodeScript(ctx, t, "power", "on", secondNode)
	onAt := time.Now()
	readyNode(ctx, t, f.cs, secondNode)
	waitDatabaseReadyWithin(ctx, t, f.c, f.ns, f.name, 5*time.Minute, fmt.Sprintf("its node powered on (the old primary %s rejoining)", old))
	f.waitFollowing(old, standby)
	samples, two := watch.finish()
	assert.Empty(t, two, "two servers accepted writes at once (%d rounds asked)", samples)
	st, err := f.agentStatus(old)
	require.NoError(t, err)
	assert.Equal(t, instance.RoleStandby, st.Role, "the old primary after its node came back: %+v", st)
	assert.Equal(t, secondNode, f.nodeOf(old), "the old primary's pod runs on its own node again")
	logf(t, "the old primary rejoined as a standby %.1fs after its node powered on (%d agent rounds, %d with two writable)",
		time.Since(onAt).Seconds(), samples, len(two))
}

// The primary's node cut off (hack/node.sh network cut: its veth pair
// down, every process running on), with synchronous replication (one
// standby): the old primary loses the operator, the API server and its
// standby at once, while a client on its own node writes at its address.
// The operator's fence cannot reach it, so it names the standby first and
// promotes it once the old primary must have fenced itself; the old
// primary's agent, cut off from all three, fences its own server before
// the promotion (its marker is older than it), so no write the new primary
// lacks was acknowledged by the old one. Reconnected, it rejoins as a
// standby holding exactly the new primary's rows.
func fencesAPrimaryWhoseNodeIsCutOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	f := startTwoNodeCluster(ctx, t, func(db *dbv1.Database) {
		db.Spec.Replication = &dbv1.ReplicationSpec{Synchronous: &dbv1.SynchronousSpec{MinStandbys: 1}}
	})
	old := f.primary()
	w := f.startWriter("writer")
	pod, err := f.cs.CoreV1().Pods(f.ns).Get(ctx, old, metav1.GetOptions{})
	require.NoError(t, err)
	direct := f.startDirectWriter("direct", pod.Status.PodIP, onSecondNode)
	watch := f.watchPrimaries()

	nodeScript(ctx, t, "network", "cut", secondNode)
	cut := time.Now()
	t.Cleanup(func() { _ = exec.Command("../../hack/node.sh", "network", "restore", secondNode).Run() })
	rec := f.waitFailedOver(cut.Add(-time.Second))
	assert.False(t, rec.Fenced, "the fence reached an agent that was cut off: %+v", rec)
	marker := filepath.Join(filepath.Dir(f.dataDir(old)), instance.FenceMarker)
	reason, err := os.ReadFile(marker)
	require.NoError(t, err, "the cut-off old primary did not fence itself before the promotion")
	st, err := os.Stat(marker)
	require.NoError(t, err)
	// Status times are whole seconds: older than the promotion's second.
	assert.True(t, st.ModTime().Before(rec.Finished.Time), "the old primary fenced itself at %s, after the promotion (%s)",
		st.ModTime().Format(time.StampMilli), rec.Finished.Format(time.Stamp))
	w.waitAcks(3)

	nodeScript(ctx, t, "network", "restore", secondNode)
	restored := time.Now()
	readyNode(ctx, t, f.cs, secondNode)
	f.waitLogsServed(direct.pod.Name)
	f.waitEvent("OldPrimaryFencedItself")
	f.liftFence(old, rec.To)
	f.waitFollowing(old, rec.To)
	log, directLog := w.stop(), direct.stop()
	samples, two := watch.finish()
	assert.Empty(t, two, "two servers accepted writes at once (%d rounds asked)", samples)

	committed := w.committedIDs()
	alone := 0
	for _, o := range directLog {
		if o.ok && !committed[o.id] {
			alone++
		}
	}
	assert.Zero(t, alone, "the old primary acknowledged writes the new primary lacks")
	lost := checkNoAckLost(t, log, committed)
	served := psql(ctx, t, f.cfg, f.cs, w.pod, "rw", "SELECT count(*) FROM acks WHERE id < 0")
	out, err := tryExecIn(ctx, f.cfg, f.cs, pod, serverContainer, "psql", "-X", "-A", "-t", "-U", "postgres", "-d", "ledger", "-c", "SELECT count(*) FROM acks WHERE id < 0")
	require.NoError(t, err, out)
	assert.Equal(t, served, strings.TrimSpace(out), "the rejoined old primary holds rows the new primary does not")
	down, _ := outage(log, cut.Add(-time.Second))
	logf(t, "primary's node cut off (2 replicas, synchronous): failover finished %.1fs after the cut (named first %s), write outage through -rw %s; the old primary fenced itself %.1fs after the cut (%s); %d writes acknowledged through -rw, %d lost; %d at its own address acknowledged by it alone; rejoined %.1fs after the network was back; %d agent rounds, %d with two writable",
		rec.Finished.Sub(cut).Seconds(), sinceOr(rec.NamedFirst, cut), down.Round(100*time.Millisecond), st.ModTime().Sub(cut).Seconds(),
		strings.TrimSpace(string(reason)), countAcks(log), lost, alone, time.Since(restored).Seconds(), samples, len(two))
}

// The primary's node powered off for good: after the failover, a person
// follows the guide (docs/guides/database-failover.md, "A node that does
// not come back"): the lost instance's claim deleted, then its Node. The
// pod bound to the Node is removed, the StatefulSet makes it again with a
// new volume on the node that remains, where it clones the new primary,
// and the Database is Ready with both instances. Powered on afterwards,
// the node registers again, tainted as before.
func replacesAnInstanceWhoseNodeDoesNotComeBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	f := startTwoNodeCluster(ctx, t)
	old := f.primary()
	standby := f.standbyOf(old)
	w := f.startWriter("writer")

	nodeScript(ctx, t, "power", "off", secondNode)
	off := time.Now()
	// Whatever happens, the node is back for the tests after this one.
	t.Cleanup(func() {
		_ = exec.Command("../../hack/node.sh", "power", "on", secondNode).Run()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		readyNode(ctx, t, f.cs, secondNode)
	})
	rec := f.waitFailedOver(off.Add(-time.Second))
	require.Equal(t, standby, rec.To)
	// Once the cluster marks the node as not answering, the Database's
	// Ready condition names the pod, its node, and what to delete.
	f.waitReadyMessage("pod " + old + ": its node " + secondNode + " does not answer; the pod comes back with the node. If the node is gone for good, delete the pod's claim data-" + old + ", then the Node")

	// The guide's steps: the claim (it goes once its pod is gone), then
	// the Node.
	require.NoError(t, f.cs.CoreV1().PersistentVolumeClaims(f.ns).Delete(ctx, "data-"+old, metav1.DeleteOptions{}))
	require.NoError(t, f.cs.CoreV1().Nodes().Delete(ctx, secondNode, metav1.DeleteOptions{}))
	deleted := time.Now()
	waitDatabaseReadyWithin(ctx, t, f.c, f.ns, f.name, 6*time.Minute, fmt.Sprintf("its claim and Node were deleted (%s made again)", old))
	assert.Equal(t, firstNode, f.nodeOf(old), "the replaced instance's node")
	f.waitFollowing(old, standby)
	replaced := time.Since(deleted)
	w.waitAcks(3)
	log := w.stop()
	lost := lostAcks(log, w.committedIDs())
	for _, o := range lost {
		assert.True(t, o.at.After(off.Add(-time.Second)), "write %d, acknowledged at %s (power off at %s), is not on the new primary", o.id, o.at, off)
	}
	down, _ := outage(log, off.Add(-time.Second))
	logf(t, "primary's node lost for good (2 replicas): failover finished %.1fs after the power off, write outage %s; the lost instance replaced on the other node and streaming %.1fs after its claim and Node were deleted; %d acknowledged writes, %d lost",
		rec.Finished.Sub(off).Seconds(), down.Round(100*time.Millisecond), replaced.Seconds(), countAcks(log), len(lost))

	nodeScript(ctx, t, "power", "on", secondNode)
	node := readyNode(ctx, t, f.cs, secondNode)
	assert.Contains(t, node.Spec.Taints, corev1.Taint{Key: secondNodeTaint, Effect: corev1.TaintEffectNoSchedule}, "the node registered again")
}

// kubectl drain of the primary's node, as a person does before
// maintenance, while a client writes through <name>-rw: the primary's
// PodDisruptionBudget refuses its eviction, the operator sees the node
// cordoned and switches over to the standby on the other node (a
// switchover: nothing lost), and the drain then evicts the old primary as
// a standby and completes. Its volume is on the drained node, so its new
// pod waits there until the node is uncordoned, and then rejoins.
func switchesOverBeforeADrainEvictsThePrimary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := startTwoNodeCluster(ctx, t)
	old := f.primary()
	standby := f.standbyOf(old)
	budget, err := f.cs.PolicyV1().PodDisruptionBudgets(f.ns).Get(ctx, f.name+"-primary", metav1.GetOptions{})
	require.NoError(t, err, "the primary's PodDisruptionBudget")
	assert.Equal(t, intstr.FromInt32(1), *budget.Spec.MinAvailable)
	w := f.startWriter("writer")
	watch := f.watchPrimaries()

	t.Cleanup(func() {
		_ = exec.Command(kubectlBinary(t), "--kubeconfig", kubeconfigPath(), "uncordon", secondNode).Run()
	})
	start := time.Now()
	out, err := exec.CommandContext(ctx, kubectlBinary(t), "--kubeconfig", kubeconfigPath(), "drain", secondNode,
		"--ignore-daemonsets", "--delete-emptydir-data", "--timeout", "4m").CombinedOutput()
	require.NoError(t, err, "kubectl drain %s:\n%s", secondNode, out)
	drained := time.Since(start)
	recs := failoversSince(f.database().Status.Failovers, start.Add(-time.Second))
	require.Len(t, recs, 1, "one switchover: %+v", recs)
	rec := recs[0]
	assert.Equal(t, dbv1.KindSwitchover, rec.Kind)
	assert.Equal(t, old, rec.From)
	assert.Equal(t, standby, rec.To)
	assert.Contains(t, rec.Reason, "ahead of a drain")
	f.waitEvent("DrainSwitchover")
	assert.Equal(t, standby, servedBy(ctx, t, f.cs, f.ns, f.name+"-rw"), "-rw selects the new primary")
	w.waitAcks(5)

	require.NoError(t, exec.CommandContext(ctx, kubectlBinary(t), "--kubeconfig", kubeconfigPath(), "uncordon", secondNode).Run())
	uncordoned := time.Now()
	waitDatabaseReadyWithin(ctx, t, f.c, f.ns, f.name, 5*time.Minute, fmt.Sprintf("the uncordon (%s rejoining)", old))
	f.waitFollowing(old, standby)
	assert.Equal(t, secondNode, f.nodeOf(old), "the old primary's pod went back to its volume's node")
	log := w.stop()
	samples, two := watch.finish()
	assert.Empty(t, two, "two servers accepted writes at once (%d rounds asked)", samples)
	lost := checkNoAckLost(t, log, w.committedIDs())
	down, _ := outage(log, start)
	logf(t, "kubectl drain of the primary's node (2 replicas): drained in %.1fs; switchover started %.1fs after the drain began and took %.0fs; write outage through -rw %s; %d acknowledged writes, %d lost; the old primary rejoined %.1fs after the uncordon; %d agent rounds, %d with two writable",
		drained.Seconds(), rec.Started.Sub(start).Seconds(), rec.Finished.Sub(rec.Started.Time).Seconds(), down.Round(100*time.Millisecond),
		countAcks(log), lost, time.Since(uncordoned).Seconds(), samples, len(two))
}

// kubectlBinary is the pinned kubectl (hack/tools.sh).
func kubectlBinary(t testing.TB) string {
	t.Helper()
	return pinnedTool(t, "kube", "kubectl")
}

// startTwoNodeCluster starts a failover cluster of two instances on both
// nodes: they tolerate the second node's taint, the operator's preferred
// anti-affinity spreads them, and a preferred node affinity (weight 50,
// below the anti-affinity's 100) places the first, the primary, on the
// second node, which a test can power off or cut.
func startTwoNodeCluster(ctx context.Context, t testing.TB, change ...func(*dbv1.Database)) *failoverCluster {
	t.Helper()
	place := func(db *dbv1.Database) {
		db.Spec.PodTemplate = &dbv1.PodTemplate{
			Tolerations: []corev1.Toleration{toleratesSecondNode()},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
					Weight: 50,
					Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{secondNode},
					}}},
				}},
			}},
		}
	}
	f := startFailoverCluster(ctx, t, 2, 0, append([]func(*dbv1.Database){place}, change...)...)
	primary := f.primary()
	standby := f.standbyOf(primary)
	require.Equal(t, secondNode, f.nodeOf(primary), "the primary %s's node", primary)
	require.Equal(t, firstNode, f.nodeOf(standby), "the standby %s's node (the operator's anti-affinity)", standby)
	return f
}

// waitReadyMessage waits until the Database's Ready condition's message
// holds want.
func (f *failoverCluster) waitReadyMessage(want string) {
	f.t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(f.ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var db dbv1.Database
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.name}, &db); err != nil {
			return false, nil
		}
		for _, c := range db.Status.Conditions {
			if c.Type == "Ready" {
				msg = c.Message
			}
		}
		return strings.Contains(msg, want), nil
	})
	require.NoError(f.t, err, "the Ready condition does not say %q: %q", want, msg)
}

// waitRejoined waits until the failover's record says its old primary
// rejoined as a standby, and returns when it did (whole seconds).
func (f *failoverCluster) waitRejoined(rec dbv1.FailoverRecord) time.Time {
	f.t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(f.ctx, time.Second, 6*time.Minute, true, func(context.Context) (bool, error) {
		for _, r := range f.database().Status.Failovers {
			if r.Started.Equal(&rec.Started) && r.Rejoined != nil {
				at = r.Rejoined.Time
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(f.t, err, "the old primary %s did not rejoin: %+v", rec.From, f.database().Status.Failovers)
	return at
}

// waitPrimary waits until the Database's primary is pod (a switchover
// back to it done).
func (f *failoverCluster) waitPrimary(pod string) {
	f.t.Helper()
	var db dbv1.Database
	err := wait.PollUntilContextTimeout(f.ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.name}, &db); err != nil {
			return false, nil
		}
		return db.Status.CurrentPrimary == pod, nil
	})
	require.NoError(f.t, err, "the primary is %s, not %s: failovers %+v", db.Status.CurrentPrimary, pod, db.Status.Failovers)
}

// sinceOr is how long after `at` t was, or "never" for none.
func sinceOr(t *metav1.Time, at time.Time) string {
	if t == nil {
		return "never"
	}
	return fmt.Sprintf("%.1fs after it", t.Sub(at).Seconds())
}

// nodeOf is the node the pod is bound to.
func (f *failoverCluster) nodeOf(pod string) string {
	f.t.Helper()
	p, err := f.cs.CoreV1().Pods(f.ns).Get(f.ctx, pod, metav1.GetOptions{})
	require.NoError(f.t, err)
	return p.Spec.NodeName
}
