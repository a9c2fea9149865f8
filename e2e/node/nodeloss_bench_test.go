package node

import (
	"context"
	"os/exec"
	"testing"
	"time"

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
