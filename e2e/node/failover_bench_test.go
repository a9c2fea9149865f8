package node

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// RunsEnv sets how many times BenchmarkFailover repeats each fault
// (default 10).
const RunsEnv = "DECKHAND_FAILOVER_RUNS"

// SyncEnv, when set to k > 0, runs BenchmarkFailover with synchronous
// replication (spec.replication.synchronous.minStandbys k), whose target
// is no acknowledged write lost.
const SyncEnv = "DECKHAND_FAILOVER_SYNC"

// BenchmarkFailover measures the write outage through <name>-rw, as a
// client that reconnects for every write sees it (from its first failed
// write to its first acknowledged write after it), for each fault
// repeated DECKHAND_FAILOVER_RUNS times on one 3-replica Database with
// failover on (primaryGoneAfter 10s, the default), on the real node:
//
//   - PrimaryHung: the primary's PostgreSQL container frozen (ctr tasks
//     pause: the cgroup freezer, as a stalled disk or a stopped VM stops
//     it) while its pod and agent stay up, and thawed once the failover
//     has completed. The agent's fence finds a server that answers
//     nothing, and SIGKILLs it past its immediate shutdown's bound
//     (instance.ImmediateStopWait).
//   - ContainerKilledOnce: the primary's PostgreSQL container SIGKILLed
//     from the node; the kubelet restarts it.
//   - PodDeleted: the primary's pod deleted; the StatefulSet makes it
//     again.
//   - PrimaryCannotComeBack: its data directory made unreadable, then its
//     container SIGKILLed: the operator fails over. Between runs the
//     directory is made readable and the fence lifted, and the old
//     primary rejoins as a standby.
//   - OperatorKilled: the primary hung (its server container frozen),
//     and the operator's container SIGKILLed once the failover is
//     recorded and fencing (faults_test.go): a crash. The kubelet
//     restarts it in the same pod, whose name is its leader identity, so
//     it takes its Lease back at once and resumes the failover. After
//     each run the operator's pod is replaced gracefully (it releases its
//     Lease), so that every run's kill is its container's first: ten
//     kills of one container would meet the kubelet's CrashLoopBackOff.
//   - OperatorPodLost: the same, but the operator's pod is also deleted
//     at once (grace 0), as when its node is lost: the new pod's process
//     is another identity and waits for the killed one's Lease to expire
//     (leaseDuration, 10 s by default) before it resumes.
//   - KubeletStopped: the node's kubelet stopped for 30 s (three times
//     the bound) and started again: no failover is expected, and no
//     outage (0 when no write failed).
//   - APIServerStopped: the primary hung, and the API server killed once
//     the failover is fencing, started again 20 s later. Its runs are
//     long (kube-proxy's watch backs off): select it alone with -bench
//     'Failover/APIServerStopped'. The fault itself keeps the operator
//     from recording or promoting for 30 s (the bound, then the 20 s
//     without an API server), so it also prints how long after the API
//     server's return the failover finished, -rw's EndpointSlice named
//     the new primary alone, and writes came back.
//
// A second client writes through the app Secret's multihost-uri (every
// instance's name, target_session_attrs=read-write: no Service, no
// kube-proxy), and its outage is printed beside -rw's.
//
// It prints the median and worst outage, the acknowledged writes lost,
// and the moments two servers accepted writes (every pod's agent asked
// every 200 ms), next to the floor: the median time between two
// acknowledged writes with no fault (one psql connection and insert).
// Skipped without the node (DECKHAND_NODE_KUBECONFIG); not part of make
// test:
//
//	DECKHAND_NODE_KUBECONFIG=$(hack/node.sh kubeconfig) make bench BENCH=Failover
//
// DECKHAND_FAILOVER_SYNC=1 runs it with synchronous replication.
func BenchmarkFailover(b *testing.B) {
	runs, minStandbys := benchRuns(b), benchMinStandbys(b)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	f := startFailoverCluster(ctx, b, 3, 0, withMinStandbys(minStandbys))
	logf(b, "failover bench: 3 replicas, synchronous minStandbys %d (0: asynchronous)", minStandbys)
	w := f.startWriter("writer")
	mw := f.startMultiHostWriter("multihost-writer")
	w.waitAcks(20)
	floor := medianAckInterval(w.log())

	// A fault returns when it struck and a function that ends it; a fault
	// that may cause no outage says so (wantOutage false): its outage is
	// read from the writer's log once it is over, 0 when no write failed.
	type fault struct {
		name       string
		wantOutage bool
		strike     func() (at time.Time, recover func())
		// ended, when set, is when strike ended the fault (the API
		// server started again): the outage's end is also measured from
		// it.
		ended *time.Time
	}
	var apiServerBack time.Time
	hang := func(then func()) (time.Time, func()) {
		at := time.Now()
		thaw := f.freezeServer(f.primary())
		underway := f.waitFailoverUnderway(at.Add(-time.Second))
		require.Equal(b, dbv1.FailoverFencing, underway.Phase)
		then()
		thaw()
		return at, func() { f.waitFailedOver(at.Add(-time.Second)) }
	}
	faults := []fault{
		{"PrimaryHung", true, func() (time.Time, func()) {
			at := time.Now()
			thaw := f.freezeServer(f.primary())
			return at, func() {
				f.waitFailedOver(at.Add(-time.Second))
				thaw()
			}
		}, nil},
		{"OperatorKilled", true, func() (time.Time, func()) {
			var pod, id string
			at, recover := hang(func() {
				pod, id = f.operatorContainer()
				f.ctr("tasks", "kill", "--signal", "SIGKILL", id)
			})
			return at, func() {
				recover()
				f.waitOperatorRestarted(pod, id)
				f.replaceOperatorPod(pod)
			}
		}, nil},
		{"OperatorPodLost", true, func() (time.Time, func()) {
			return hang(func() {
				pod, id := f.operatorContainer()
				f.ctr("tasks", "kill", "--signal", "SIGKILL", id)
				zero := int64(0)
				require.NoError(b, f.cs.CoreV1().Pods(operatorNamespace).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
			})
		}, nil},
		{"KubeletStopped", false, func() (time.Time, func()) {
			nodeScript(ctx, b, "kubelet", "stop")
			at := time.Now()
			b.Cleanup(func() { nodeScript(context.Background(), b, "kubelet", "start") })
			return at, func() {
				waitFor(ctx, at.Add(30*time.Second)) // the fault's length
				nodeScript(ctx, b, "kubelet", "start")
				f.waitLogsServed(w.pod.Name)
			}
		}, nil},
		{"ContainerKilledOnce", true, func() (time.Time, func()) {
			at := time.Now()
			f.killServer(f.primary())
			return at, func() {}
		}, nil},
		{"PodDeleted", true, func() (time.Time, func()) {
			at := time.Now()
			require.NoError(b, f.cs.CoreV1().Pods(f.ns).Delete(ctx, f.primary(), metav1.DeleteOptions{}))
			return at, func() {}
		}, nil},
		{"PrimaryCannotComeBack", true, func() (time.Time, func()) {
			old := f.primary()
			data := f.dataDir(old)
			require.NoError(b, os.Chmod(data, 0))
			at := time.Now()
			f.killServer(old)
			return at, func() {
				f.waitFailedOver(at.Add(-time.Second))
				require.NoError(b, os.Chmod(data, 0o700))
			}
		}, nil},
		{"APIServerStopped", true, func() (time.Time, func()) {
			// The fault ends before it returns: the writer's log is read
			// through the API server.
			var stopped time.Time
			at, recover := hang(func() {
				nodeScript(ctx, b, "apiserver", "stop")
				stopped = time.Now()
				b.Cleanup(func() { nodeScript(context.Background(), b, "apiserver", "start") })
			})
			waitFor(ctx, stopped.Add(20*time.Second)) // the fault's length
			// The fault ends as the API server is started: its own boot,
			// and the controller manager's return, count as the outage's.
			apiServerBack = time.Now()
			nodeScript(ctx, b, "apiserver", "start")
			// The operator keeps its pod from run to run: it starts
			// afresh in its process when the outage costs it its Lease,
			// and waits there for the API server, so the kubelet counts
			// no restart and grows no back-off.
			return at, recover
		}, &apiServerBack},
	}
	for _, fc := range faults {
		b.Run(fc.name, func(b *testing.B) {
			f.t = b
			loadBefore := loadAverage()
			watch := f.watchPrimaries()
			var outages, multiOutages, afterEnd, finishedAfterEnd, namedAfterEnd []time.Duration
			// multiAfterFailover: the multi-host writer's first
			// acknowledged write after the failover's end.
			var multiAfterFailover []time.Duration
			var endpoints *endpointsWatch
			if fc.ended != nil {
				endpoints = f.watchRWEndpoints()
				defer endpoints.finish()
			}
			var at []time.Time
			began := time.Now()
			for i := 0; i < runs; i++ {
				f.waitSteady()
				w.waitAcks(3)
				mw.waitAcks(3)
				t0, recover := fc.strike()
				var down, multiDown time.Duration
				var multiBack time.Time
				if fc.wantOutage {
					var first, multiFirst writeOutcome
					down, first = w.waitOutageOver(t0)
					multiDown, multiFirst = mw.waitOutageOver(t0)
					multiBack = multiFirst.at.Add(multiDown)
					if fc.ended != nil {
						afterEnd = append(afterEnd, first.at.Add(down).Sub(*fc.ended))
						logf(b, "failover bench %s run %d: writes came back %s after the fault ended", fc.name, i+1, afterEnd[len(afterEnd)-1].Round(100*time.Millisecond))
					}
					recover()
				} else {
					recover()
					w.waitAcks(3)
					mw.waitAcks(3)
					down, _ = outage(w.log(), t0)
					multiDown, _ = outage(mw.log(), t0)
				}
				// A failover's old primary stays fenced: it rejoins as a
				// standby once the fence is lifted (as a person does).
				recs := failoversSince(f.database().Status.Failovers, t0.Add(-time.Second))
				for _, rec := range recs {
					logf(b, "failover bench %s run %d: %s %s -> %s, %s, started %s, finished %v: %s; %s", fc.name, i+1,
						rec.Kind, rec.From, rec.To, rec.Phase, rec.Started.Format(time.RFC3339), rec.Finished, rec.Reason, rec.FenceMessage)
				}
				if !multiBack.IsZero() && len(recs) == 1 && recs[0].Finished != nil {
					multiAfterFailover = append(multiAfterFailover, multiBack.Sub(recs[0].Finished.Time))
				}
				if fc.ended != nil && len(recs) == 1 && recs[0].Finished != nil {
					// What came back when, after the fault's end: the
					// operator's part (the failover finished), the
					// Service's (its EndpointSlice naming the new primary
					// alone), and kube-proxy's (the writes, above).
					finishedAfterEnd = append(finishedAfterEnd, recs[0].Finished.Sub(*fc.ended))
					namedAfterEnd = append(namedAfterEnd, f.rwNamedAlone(endpoints, recs[0].To, *fc.ended).Sub(*fc.ended))
					logf(b, "failover bench %s run %d: after the fault ended, the failover finished %s, -rw named the new primary alone %s", fc.name, i+1,
						finishedAfterEnd[len(finishedAfterEnd)-1].Round(100*time.Millisecond), namedAfterEnd[len(namedAfterEnd)-1].Round(100*time.Millisecond))
				}
				for _, rec := range recs {
					f.liftFence(rec.From, rec.To)
				}
				outages = append(outages, down)
				multiOutages = append(multiOutages, multiDown)
				at = append(at, t0)
				logf(b, "failover bench %s run %d: write outage %s through -rw, %s through multihost-uri", fc.name, i+1, down.Round(100*time.Millisecond), multiDown.Round(100*time.Millisecond))
			}
			waitDatabaseReady(ctx, b, f.c, f.ns, f.name)
			w.waitAcks(3)
			samples, two := watch.finish()
			lost := lostNear(w.committedIDs(), at, w.log(), mw.log())
			median, worst := reportMedianWorst(b, "outage", outages)
			multiMedian, multiWorst := reportMedianWorst(b, "multihost-outage", multiOutages)
			failovers := len(failoversSince(f.database().Status.Failovers, began))
			b.ReportMetric(float64(lost), "acked-rows-lost")
			b.ReportMetric(float64(len(two)), "two-writable-moments")
			logf(b, "failover bench %s: through multihost-uri, write outage median %s worst %s", fc.name, multiMedian.Round(100*time.Millisecond), multiWorst.Round(100*time.Millisecond))
			if len(multiAfterFailover) > 0 {
				// Negative: back before the failover was recorded as
				// finished (the new primary takes writes once promoted).
				backMedian, backWorst := reportMedianWorst(b, "multihost-back-after-failover", multiAfterFailover)
				logf(b, "failover bench %s: through multihost-uri, writes came back %s after the failover finished (median; worst %s; %d runs with one failover)", fc.name, backMedian.Round(100*time.Millisecond), backWorst.Round(100*time.Millisecond), len(multiAfterFailover))
			}
			logf(b, "failover bench %s: %d runs, write outage median %s worst %s (floor: one write %s), %d failovers, %d acknowledged writes lost, %d agent rounds with two servers accepting writes of %d; /proc/loadavg before %s, after %s",
				fc.name, runs, median.Round(100*time.Millisecond), worst.Round(100*time.Millisecond), floor.Round(time.Millisecond), failovers, lost, len(two), samples, loadBefore, loadAverage())
			if len(afterEnd) > 0 {
				for _, m := range []struct {
					what, metric string
					d            []time.Duration
				}{
					{"the failover finished", "finished", finishedAfterEnd},
					{"-rw named the new primary alone", "named", namedAfterEnd},
					{"writes came back", "writes", afterEnd},
				} {
					if len(m.d) == 0 {
						continue // no run with one completed failover
					}
					median, worst := reportMedianWorst(b, m.metric+"-after-fault-end", m.d)
					logf(b, "failover bench %s: %s %s after the fault ended (median; worst %s)", fc.name, m.what, median.Round(100*time.Millisecond), worst.Round(100*time.Millisecond))
				}
			}
		})
	}
	w.stop()
	mw.stop()
}

// benchRuns is DECKHAND_FAILOVER_RUNS, or 10.
func benchRuns(b *testing.B) int {
	runs := 10
	if s := os.Getenv(RunsEnv); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(b, err, "%s=%q", RunsEnv, s)
		runs = n
	}
	return runs
}

// benchMinStandbys is DECKHAND_FAILOVER_SYNC, or 0 (asynchronous).
func benchMinStandbys(b *testing.B) int32 {
	if s := os.Getenv(SyncEnv); s != "" {
		k, err := strconv.Atoi(s)
		require.NoError(b, err, "%s=%q", SyncEnv, s)
		return int32(k)
	}
	return 0
}

// withMinStandbys sets synchronous replication with k standbys (0: none).
func withMinStandbys(k int32) func(*dbv1.Database) {
	return func(db *dbv1.Database) {
		if k > 0 {
			db.Spec.Replication = &dbv1.ReplicationSpec{Synchronous: &dbv1.SynchronousSpec{MinStandbys: k}}
		}
	}
}

// lostNear counts the acknowledged writes of the logs the table does not
// hold (committed) that were acknowledged within a minute of a fault
// (at): the writes a fault lost, not ones lost otherwise.
func lostNear(committed map[int]bool, at []time.Time, logs ...[]writeOutcome) int {
	lost := 0
	for _, log := range logs {
		for _, o := range lostAcks(log, committed) {
			for _, t0 := range at {
				if o.at.After(t0.Add(-time.Minute)) && o.at.Before(t0.Add(time.Minute)) {
					lost++
					break
				}
			}
		}
	}
	return lost
}

// loadAverage is /proc/loadavg's first three fields: the machine's load
// while measuring (it is shared).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// reportMedianWorst reports d's median and largest as the metrics
// <metric>-median-s and <metric>-worst-s, and returns them.
func reportMedianWorst(b *testing.B, metric string, d []time.Duration) (median, worst time.Duration) {
	median, worst = medianWorst(d)
	b.ReportMetric(median.Seconds(), metric+"-median-s")
	b.ReportMetric(worst.Seconds(), metric+"-worst-s")
	return median, worst
}

// medianWorst sorts d (not empty) and returns its median and its largest.
func medianWorst(d []time.Duration) (median, worst time.Duration) {
	slices.Sort(d)
	return d[len(d)/2], d[len(d)-1]
}

// medianAckInterval is the median time between two consecutive
// acknowledged writes.
func medianAckInterval(log []writeOutcome) time.Duration {
	var gaps []time.Duration
	for i := 1; i < len(log); i++ {
		if log[i].ok && log[i-1].ok {
			gaps = append(gaps, log[i].at.Sub(log[i-1].at))
		}
	}
	if len(gaps) == 0 {
		return 0
	}
	median, _ := medianWorst(gaps)
	return median
}

// waitFor returns at `until` or when ctx ends: a fault's length, not a
// wait for a state.
func waitFor(ctx context.Context, until time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(until)):
	}
}
