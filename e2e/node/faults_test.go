package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// The faults of the cluster's own parts during a failover: the operator
// killed, the API server stopped, the kubelet stopped. Each hurts what
// every test of the package shares (the one operator, the one API server,
// the one kubelet), so these tests do not call t.Parallel: they run in the
// serial phase, before the parallel tests start, and cannot break another
// test's failover or rollout in the middle (see the package comment).
//
// A failover is caught under way by hanging the primary: its PostgreSQL
// container frozen (ctr tasks pause: the cgroup freezer stops the
// postmaster and every backend, as a hung disk or a stopped VM would). Its
// agent, in another container, still answers: the server does not, so
// the operator declares the primary gone once primaryGoneAfter passes,
// records the failover (phase Fencing) and asks the agent to fence it. The
// agent finds a server that answers nothing, sends it an immediate
// shutdown and waits for it (instance.ImmediateStopWait, 5 s) before it
// SIGKILLs every process of it: the failover stays in phase Fencing that
// long, whatever the machine's load, which is when the tests strike.
// Thawing the container then lets the processes act on the SIGKILL: they
// die, and the fence marker keeps the server stopped.

// freezeServer pauses the pod's PostgreSQL container (every process in
// it) and returns a function that thaws it, once; the test's cleanup
// thaws it too.
func (f *failoverCluster) freezeServer(pod string) (thaw func()) {
	f.t.Helper()
	id, _ := f.containerID(pod, serverContainer)
	state := f.pauseTask(id)
	resume := func() error {
		if state != "" {
			return os.WriteFile(state, []byte("THAWED"), 0o644)
		}
		out, err := runCtr(context.Background(), "tasks", "resume", id)
		if err != nil {
			return fmt.Errorf("ctr tasks resume %s: %w: %s", id, err, out)
		}
		return nil
	}
	thawed := false
	thaw = func() {
		if !thawed {
			thawed = true
			require.NoError(f.t, resume())
		}
	}
	f.t.Cleanup(func() {
		if !thawed {
			_ = resume()
		}
	})
	return thaw
}

// pauseTask freezes a container with ctr tasks pause. On cgroup v1 runc
// gives up with "unable to freeze" (and thaws it again) when the freezer
// has not settled within its few milliseconds of retries, as happens on a
// busy node whose postmaster forks a backend for each of a writer's
// connections: then the container's freezer cgroup is asked directly,
// and waited for, until it reads FROZEN. It returns that cgroup's
// freezer.state when it froze it so (thaw writes THAWED there: containerd
// did not see a pause it could resume), else "".
func (f *failoverCluster) pauseTask(id string) (state string) {
	f.t.Helper()
	out, err := runCtr(f.ctx, "tasks", "pause", id)
	if err == nil {
		return ""
	}
	require.Contains(f.t, string(out), "unable to freeze", "hack/node.sh ctr tasks pause %s:\n%s", id, out)
	state = filepath.Join(freezerCgroupOf(f.t, f.taskPID(id)), "freezer.state")
	var now []byte
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		require.NoError(f.t, os.WriteFile(state, []byte("FROZEN"), 0o644))
		for until := time.Now().Add(500 * time.Millisecond); time.Now().Before(until); time.Sleep(20 * time.Millisecond) {
			if now, err = os.ReadFile(state); err == nil && strings.TrimSpace(string(now)) == "FROZEN" {
				return state
			}
		}
	}
	require.FailNow(f.t, "container not frozen", "%s still reads %q 30 s after FROZEN was written (ctr tasks pause: %s)", state, now, out)
	return ""
}

// taskPID is the host PID of the container's init process (ctr tasks ls).
func (f *failoverCluster) taskPID(id string) int {
	f.t.Helper()
	for _, line := range strings.Split(f.ctr("tasks", "ls"), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == id {
			pid, err := strconv.Atoi(fields[1])
			require.NoError(f.t, err, line)
			return pid
		}
	}
	require.FailNow(f.t, "no such task", "%s is not in ctr tasks ls", id)
	return 0
}

// freezerCgroupOf is the cgroup v1 freezer directory of process pid.
func freezerCgroupOf(t testing.TB, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "freezer") {
			return filepath.Join("/sys/fs/cgroup/freezer", parts[2])
		}
	}
	require.FailNow(t, "no freezer cgroup", "process %d: %s", pid, b)
	return ""
}

// waitFailoverUnderway waits for a failover begun after `since` that is
// recorded and not completed, and returns its record.
func (f *failoverCluster) waitFailoverUnderway(since time.Time) dbv1.FailoverRecord {
	f.t.Helper()
	var db dbv1.Database
	var rec dbv1.FailoverRecord
	err := wait.PollUntilContextTimeout(f.ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.name}, &db); err != nil {
			return false, nil
		}
		recs := failoversSince(db.Status.Failovers, since)
		if len(recs) == 0 {
			return false, nil
		}
		rec = recs[len(recs)-1]
		return true, nil
	})
	require.NoError(f.t, err, "no failover recorded: %+v, conditions %+v", db.Status.Failovers, db.Status.Conditions)
	return rec
}

// operatorContainer is the chart's operator pod on the node and
// containerd's ID of its container.
func (f *failoverCluster) operatorContainer() (pod, id string) {
	f.t.Helper()
	pods, err := f.operatorPods(f.ctx)
	require.NoError(f.t, err)
	for _, p := range pods {
		if p.DeletionTimestamp != nil || len(p.Status.ContainerStatuses) == 0 {
			continue
		}
		id, ok := strings.CutPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
		if ok && p.Status.ContainerStatuses[0].State.Running != nil {
			return p.Name, id
		}
	}
	require.FailNow(f.t, "no running operator pod", "%d pods", len(pods))
	return "", ""
}

// operatorPods are the pods of the operator's Deployment.
func (f *failoverCluster) operatorPods(ctx context.Context) ([]corev1.Pod, error) {
	d := operatorDeployment(ctx, f.t, f.cs)
	pods, err := f.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// waitOperatorRestarted waits for the operator pod's container to be a
// new one (not killed) and ready.
func (f *failoverCluster) waitOperatorRestarted(pod, killed string) {
	f.t.Helper()
	var st corev1.ContainerStatus
	err := wait.PollUntilContextTimeout(f.ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := f.cs.CoreV1().Pods(operatorNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		st = p.Status.ContainerStatuses[0]
		return st.ContainerID != "containerd://"+killed && st.Ready, nil
	})
	require.NoError(f.t, err, "the operator's container was not restarted: %+v", st)
}

// operatorRestarts is the kubelet's restart count of the operator pod's
// container.
func (f *failoverCluster) operatorRestarts(pod string) int32 {
	f.t.Helper()
	p, err := f.cs.CoreV1().Pods(operatorNamespace).Get(f.ctx, pod, metav1.GetOptions{})
	require.NoError(f.t, err)
	require.NotEmpty(f.t, p.Status.ContainerStatuses, "the operator pod %s has no container status", pod)
	return p.Status.ContainerStatuses[0].RestartCount
}

// operatorPreviousLog is the end of the log of the operator container's
// previous run (why it ended).
func (f *failoverCluster) operatorPreviousLog(pod string) string {
	tail := int64(40)
	b, err := f.cs.CoreV1().Pods(operatorNamespace).GetLogs(pod, &corev1.PodLogOptions{Previous: true, TailLines: &tail}).DoRaw(f.ctx)
	if err != nil {
		return "(not read: " + err.Error() + ")"
	}
	return string(b)
}

// podIP is the address of one of the Database's pods.
func (f *failoverCluster) podIP(pod string) string {
	f.t.Helper()
	p, err := f.cs.CoreV1().Pods(f.ns).Get(f.ctx, pod, metav1.GetOptions{})
	require.NoError(f.t, err)
	return p.Status.PodIP
}

// replaceOperatorPod deletes the operator's pod gracefully (it releases
// its leader Lease as it stops) and waits for the Deployment's next pod to
// run ready.
func (f *failoverCluster) replaceOperatorPod(pod string) {
	f.t.Helper()
	require.NoError(f.t, f.cs.CoreV1().Pods(operatorNamespace).Delete(f.ctx, pod, metav1.DeleteOptions{}))
	err := wait.PollUntilContextTimeout(f.ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := f.operatorPods(ctx)
		if err != nil {
			return false, nil
		}
		for _, p := range pods {
			if p.Name != pod && p.DeletionTimestamp == nil && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Ready {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(f.t, err, "no new operator pod ready after %s was deleted", pod)
}

// checkOneFailover: exactly one failover began after `since`, completed,
// its old primary `from` fenced, and it is the record first seen under
// way (resumed, not begun again).
func (f *failoverCluster) checkOneFailover(since time.Time, from string, underway dbv1.FailoverRecord) dbv1.FailoverRecord {
	f.t.Helper()
	recs := failoversSince(f.database().Status.Failovers, since)
	require.Len(f.t, recs, 1, "failovers since the fault: %+v", recs)
	f.checkFailoversClean(recs)
	rec := recs[0]
	assert.Equal(f.t, from, rec.From)
	assert.NotEqual(f.t, from, rec.To)
	assert.True(f.t, rec.Started.Equal(&underway.Started), "the failover under way (begun %s) was resumed, not another begun (%s)", underway.Started, rec.Started)
	assert.Equal(f.t, rec.To, f.primary(), "status.currentPrimary names the promoted standby")
	return rec
}

// The operator killed in the middle of a failover (SIGKILL to its
// container from the node, with the record saved in phase Fencing and
// the fence under way): the kubelet restarts it, the new process takes
// the leader Lease back at once (held under the pod's name), reads the
// record and resumes it. Exactly one standby is promoted, -rw takes writes again, no
// two servers accepted writes at any moment the agents were asked, and no
// write acknowledged more than a second before the primary hung is lost.
func TestRealNodeResumesAFailoverWhenTheOperatorIsKilled(t *testing.T) {
	// Serial (no t.Parallel): the operator is every test's.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f := startFailoverCluster(ctx, t, 2, 0)
	w := f.startWriter("writer")
	watch := f.watchPrimaries()
	old := f.primary()

	hungAt := time.Now()
	thaw := f.freezeServer(old)
	underway := f.waitFailoverUnderway(hungAt.Add(-time.Second))
	opPod, opID := f.operatorContainer()
	f.ctr("tasks", "kill", "--signal", "SIGKILL", opID)
	killedAt := time.Now()
	require.Equal(t, dbv1.FailoverFencing, underway.Phase, "the failover was caught while fencing: %+v", underway)
	// Seen after the kill: the record as the killed operator left it.
	left := failoversSince(f.database().Status.Failovers, hungAt.Add(-time.Second))
	require.Len(t, left, 1)
	assert.NotEqual(t, dbv1.FailoverCompleted, left[0].Phase, "the failover completed before the operator was killed")
	thaw()

	f.waitOperatorRestarted(opPod, opID)
	rec := f.waitFailedOver(hungAt.Add(-time.Second))
	down, _ := w.waitOutageOver(hungAt)
	w.waitAcks(3)
	log := w.stop()
	samples, two := watch.finish()

	rec = f.checkOneFailover(hungAt.Add(-time.Second), old, underway)
	assert.Equal(t, rec.To, servedBy(ctx, t, f.cs, f.ns, f.name+"-rw"), "-rw selects the new primary")
	assert.Empty(t, two, "two servers accepted writes at once (%d rounds asked)", samples)
	lost := checkNoAckLost(t, log, w.committedIDs(), hungAt)
	logf(t, "operator killed during a failover (2 replicas, primaryGoneAfter 10s, killed in phase %s %.1fs after the primary hung): failover finished %.1fs after the kill; write outage %s; %d acknowledged writes, %d lost; %d agent rounds, %d with two writable",
		left[0].Phase, killedAt.Sub(hungAt).Seconds(), rec.Finished.Sub(killedAt).Seconds(), down.Round(100*time.Millisecond), countAcks(log), lost, samples, len(two))
}

// nodeScript runs hack/node.sh with args (the fault subcommands).
func nodeScript(ctx context.Context, t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "../../hack/node.sh", args...).CombinedOutput()
	require.NoError(t, err, "hack/node.sh %v:\n%s", args, out)
}

// The node cluster's API server killed in the middle of a failover (the
// record saved in phase Fencing, the fence under way) and started again
// 20 s later (hack/node.sh apiserver stop|start). Without it the operator
// cannot save the next step, and nothing is done after a save that
// failed: no standby is promoted while it is down (every agent asked),
// and no server accepts writes beside another. Once it is back the
// failover completes, once, and -rw takes writes again; how long after
// the API server's return is measured.
func TestRealNodeFinishesAFailoverOnceTheAPIServerIsBack(t *testing.T) {
	// Serial (no t.Parallel): the API server is every test's.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f := startFailoverCluster(ctx, t, 2, 0)
	w := f.startWriter("writer")
	watch := f.watchPrimaries()
	old := f.primary()
	standby := f.standbyOf(old)

	operatorPod, _ := f.operatorContainer()
	restarts := f.operatorRestarts(operatorPod)
	endpoints := f.watchRWEndpoints()

	hungAt := time.Now()
	thaw := f.freezeServer(old)
	underway := f.waitFailoverUnderway(hungAt.Add(-time.Second))
	require.Equal(t, dbv1.FailoverFencing, underway.Phase, "the failover was caught while fencing: %+v", underway)
	nodeScript(ctx, t, "apiserver", "stop")
	stoppedAt := time.Now()
	t.Cleanup(func() { _ = exec.Command("../../hack/node.sh", "apiserver", "start").Run() })
	// The fence can end now (the postmaster acts on its shutdown); the
	// operator cannot record its choice.
	thaw()
	var promoted []string
	for time.Since(stoppedAt) < 20*time.Second {
		if st, err := f.agentStatus(standby); err == nil && st.ServerUp && st.Role == instance.RolePrimary {
			promoted = append(promoted, time.Now().Format(time.RFC3339Nano))
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	assert.Empty(t, promoted, "the standby %s was promoted while the API server was down (the failover's choice cannot be recorded)", standby)
	startedAt := time.Now()
	nodeScript(ctx, t, "apiserver", "start")
	t.Logf("hack/node.sh apiserver start (the API server ready, the controller manager and scheduler leading again) took %.1fs", time.Since(startedAt).Seconds())

	rec := f.waitFailedOver(hungAt.Add(-time.Second))
	down, firstFail := w.waitOutageOver(hungAt)
	backAt := firstFail.at.Add(down)
	w.waitAcks(3)
	log := w.stop()
	samples, two := watch.finish()

	rec = f.checkOneFailover(hungAt.Add(-time.Second), old, underway)
	assert.Equal(t, standby, rec.To)
	assert.Empty(t, two, "two servers accepted writes at once (%d rounds asked)", samples)
	lost := checkNoAckLost(t, log, w.committedIDs(), hungAt)
	// The operator lost its Lease in the outage and started afresh; it
	// waited for the API server in its process rather than exiting, so
	// the kubelet counted no restart (each would grow its back-off, and
	// the operator would come back long after the API server).
	if now := f.operatorRestarts(operatorPod); now != restarts {
		assert.Fail(t, "the operator's container restarted during the API server's outage",
			"restarts %d before, %d after; the end of its previous run's log:\n%s", restarts, now, f.operatorPreviousLog(operatorPod))
	}
	named := f.rwNamedAlone(endpoints, rec.To, startedAt)
	endpoints.finish()
	logf(t, "API server stopped during a failover for %.0fs (2 replicas, primaryGoneAfter 10s, stopped %.1fs after the primary hung): after the API server was started again, the failover finished %.1fs, -rw's EndpointSlice named the new primary alone %.1fs and -rw took writes %.1fs later; write outage %s; %d acknowledged writes, %d lost; %d agent rounds, %d with two writable",
		startedAt.Sub(stoppedAt).Seconds(), stoppedAt.Sub(hungAt).Seconds(), rec.Finished.Sub(startedAt).Seconds(), named.Sub(startedAt).Seconds(), backAt.Sub(startedAt).Seconds(),
		down.Round(100*time.Millisecond), countAcks(log), lost, samples, len(two))
}

// waitLogsServed waits for the kubelet to serve the pod's log. After the
// kubelet's restart the Node may read Ready throughout (its status is
// the last the kubelet wrote): the kubelet is back once it serves logs.
func (f *failoverCluster) waitLogsServed(pod string) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(f.ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := f.cs.CoreV1().Pods(f.ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		return err == nil, nil
	})
	require.NoError(f.t, err, "the kubelet does not serve the log of %s again", pod)
}

// The primary's node's kubelet stopped for 30 s, three times
// primaryGoneAfter (hack/node.sh kubelet stop|start on the second node,
// where startTwoNodeCluster places the primary; the writer runs on the
// first): its containers keep running, the primary's agent keeps
// answering, kube-proxy keeps routing, and the Pod objects keep their last
// status (the node is marked NotReady only after the controller manager's
// node-monitor-grace-period). The operator must not fail over a primary
// that is healthy: no failover, writes acknowledged through -rw while the
// kubelet is down, no two servers accepting writes; the node is Ready
// again once the kubelet is back. Failed writes and agent answers that
// were not healthy are counted, not required to be none: on a loaded
// machine a single one may time out.
func keepsThePrimaryWhileItsKubeletIsStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f := startTwoNodeCluster(ctx, t)
	w := f.startWriter("writer")
	watch := f.watchPrimaries()
	primary := f.primary()

	nodeScript(ctx, t, "kubelet", "stop", secondNode)
	stoppedAt := time.Now()
	t.Cleanup(func() { _ = exec.Command("../../hack/node.sh", "kubelet", "start", secondNode).Run() })
	// For 30 s (the fault's length) no failover begins; the primary's
	// agent is asked every second.
	var unhealthy []string
	asked := 0
	for time.Since(stoppedAt) < 30*time.Second {
		asked++
		st, err := f.agentStatus(primary)
		if err != nil || !st.ServerUp || st.Role != instance.RolePrimary || st.Fenced {
			unhealthy = append(unhealthy, fmt.Sprintf("%s: %+v %v", time.Now().Format(time.RFC3339Nano), st, err))
		}
		require.Empty(t, failoversSince(f.database().Status.Failovers, stoppedAt.Add(-time.Second)), "a failover began while the kubelet was stopped")
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(time.Second):
		}
	}
	during := f.database().Status
	nodeScript(ctx, t, "kubelet", "start", secondNode)
	startedAt := time.Now()
	readyNode(ctx, t, f.cs, secondNode)

	w.waitAcks(3)
	f.waitWatching()
	log := w.stop()
	samples, two := watch.finish()
	after := f.database().Status
	assert.Empty(t, failoversSince(after.Failovers, stoppedAt.Add(-time.Second)), "a failover of a healthy primary whose kubelet stopped")
	assert.Equal(t, primary, after.CurrentPrimary)
	assert.Empty(t, two, "two servers accepted writes at once (%d rounds asked)", samples)
	var failed []writeOutcome
	acksWhileStopped := 0
	for _, o := range log {
		switch {
		case !o.ok && o.at.After(stoppedAt):
			failed = append(failed, o)
		case o.ok && o.at.After(stoppedAt) && o.at.Before(startedAt):
			acksWhileStopped++
		}
	}
	assert.Positive(t, acksWhileStopped, "no write acknowledged through -rw while the kubelet was stopped")
	if len(failed) > 0 || len(unhealthy) > 0 {
		t.Logf("failed writes: %+v\nagent answers not healthy: %s", failed, strings.Join(unhealthy, "\n"))
	}
	lost := checkNoAckLost(t, log, w.committedIDs())
	var cond string
	for _, c := range during.Conditions {
		if c.Type == "Failover" {
			cond = c.Reason + ": " + c.Message
		}
	}
	logf(t, "the primary's node's kubelet stopped for %.0fs (2 replicas on two nodes, primaryGoneAfter 10s): %d failovers, %d writes acknowledged while it was stopped, %d failed after the stop, %d acknowledged in all, %d lost; %d of %d agent answers not healthy; %d agent rounds, %d with two writable; Failover condition during: %s",
		startedAt.Sub(stoppedAt).Seconds(), len(failoversSince(after.Failovers, stoppedAt.Add(-time.Second))), acksWhileStopped, len(failed), countAcks(log), lost, len(unhealthy), asked, samples, len(two), cond)
}

// A network partition around the primary's pod that leaves the database's
// own traffic alone, with synchronous replication (one standby), the
// primary on the second node and its standby on the first
// (startTwoNodeCluster): its node's kubelet stopped (the node cut off from
// the API server: no new name reaches the pod, and the Pod keeps showing
// its server running), and inside the pod's network namespace its agent's
// port and the API server's address dropped. Its standby still streams
// from it, and a client writes at the pod's own address. The operator's
// fence does not reach it, so it names the standby first; past the 5 s
// wait the Pod still shows the old server running, so it detaches the
// standby and promotes it after instance.IsolationFenceWithin more. The
// old primary's agent, cut off from the operator past its bound (half
// primaryGoneAfter) and from the API server, sees its standby stop
// replying and fences its own server before the promotion: its marker says
// so and is older than the promotion, and no write the direct client had
// acknowledged is missing from the new primary. Healed, it rejoins.
// (The same partition cutting the standby off as well is the host test
// TestAPrimaryCutOffFromTheOperatorTheAPIServerAndItsStandbyFencesItselfFirst;
// on this node it fenced 5.4-6.1 s after the cut, docs/performance.md.)
func fencesAPrimaryCutOffFromTheOperatorAndTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	f := startTwoNodeCluster(ctx, t, func(db *dbv1.Database) {
		db.Spec.Replication = &dbv1.ReplicationSpec{Synchronous: &dbv1.SynchronousSpec{MinStandbys: 1}}
	})
	w := f.startWriter("writer")
	old := f.primary()
	pod, err := f.cs.CoreV1().Pods(f.ns).Get(ctx, old, metav1.GetOptions{})
	require.NoError(t, err)
	direct := f.startDirectWriter("direct", pod.Status.PodIP)
	direct.waitAcks(3)
	api, err := f.cs.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	agent := f.agentTask(pod)
	rules := [][]string{
		{"INPUT", "-p", "tcp", "--dport", fmt.Sprint(instance.DefaultPort), "-j", "DROP"},
		{"OUTPUT", "-d", api.Spec.ClusterIP, "-p", "tcp", "--dport", fmt.Sprint(api.Spec.Ports[0].Port), "-j", "DROP"},
	}

	nodeScript(ctx, t, "kubelet", "stop", secondNode)
	t.Cleanup(func() { _ = exec.Command("../../hack/node.sh", "kubelet", "start", secondNode).Run() })
	for _, r := range rules {
		require.NoError(t, podRule(ctx, agent, "-I", r[0], r[1:]...))
		t.Cleanup(func() { _ = podRule(context.Background(), agent, "-D", r[0], r[1:]...) })
	}
	cut := time.Now()
	rec := f.waitFailedOver(cut.Add(-time.Second))
	assert.False(t, rec.Fenced, "the fence reached an agent that was cut off: %+v", rec)
	require.NotNil(t, rec.NamedFirst, "the new primary was not named first (the Pod still shows the old one's server running): %+v", rec)

	marker := filepath.Join(filepath.Dir(f.dataDir(old)), instance.FenceMarker)
	reason, err := os.ReadFile(marker)
	require.NoError(t, err, "the isolated old primary did not fence itself before the promotion")
	st, err := os.Stat(marker)
	require.NoError(t, err)
	// Status times are whole seconds: older than the promotion's second.
	assert.True(t, st.ModTime().Before(rec.Finished.Time), "the old primary fenced itself at %s, after the promotion (%s)", st.ModTime().Format(time.StampMilli), rec.Finished.Format(time.Stamp))
	assert.Contains(t, string(reason), "cut off from the operator and from the API server")
	assert.Contains(t, f.eventReasons()["StandbysDetached"], "standbys "+rec.To+" no longer stream", "the standby was detached before the promotion")
	require.NotNil(t, rec.StandbysDetached)

	// Healed: its kubelet and its network back, it rejoins.
	for _, r := range rules {
		require.NoError(t, podRule(ctx, agent, "-D", r[0], r[1:]...))
	}
	nodeScript(ctx, t, "kubelet", "start", secondNode)
	readyNode(ctx, t, f.cs, secondNode)
	f.waitEvent("OldPrimaryFencedItself")
	f.liftFence(old, rec.To)
	f.waitFollowing(old, rec.To)
	w.waitAcks(3)
	log, directLog := w.stop(), direct.stop()

	committed := w.committedIDs()
	alone := 0
	for _, o := range directLog {
		if o.ok && !committed[o.id] {
			alone++
		}
	}
	assert.Zero(t, alone, "the old primary acknowledged writes the new primary lacks")
	down := outageSpan(log, cut)
	logf(t, "primary partitioned (its kubelet stopped; its agent and the API server cut off, its standby not; synchronous, 2 replicas): it fenced itself %.1fs after the cut, named first %.1fs, standby detached %.1fs and promoted %.1fs after it; write outage through -rw %s (first failed write to the first acknowledged after the last failed one); %d writes at its own address acknowledged by it alone",
		st.ModTime().Sub(cut).Seconds(), rec.NamedFirst.Sub(cut).Seconds(), rec.StandbysDetached.Sub(cut).Seconds(), rec.Finished.Sub(cut).Seconds(), down.Round(100*time.Millisecond), alone)
}
