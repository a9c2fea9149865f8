package node

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkIdleDatabaseCPU measures what a Database with failover on
// costs the node while nothing uses it: 3 replicas run by the chart's
// operator on the real node, Ready, the operator watching the primary.
// What it costs is the machine's busy CPU (every process: the servers,
// their agents, the kubelet's probes, containerd, the control plane
// answering the operator) over a minute, less the floor: the same
// measure in the same run before the Database exists (the node, its
// control plane and the operator, idle). It prints both, their
// difference, and that per instance.
//
// The machine must be otherwise quiet: it measures the whole machine.
// Skipped without the node (DECKHAND_NODE_KUBECONFIG); not part of make
// test:
//
//	DECKHAND_NODE_KUBECONFIG=$(hack/node.sh kubeconfig) make bench BENCH=IdleDatabaseCPU
func BenchmarkIdleDatabaseCPU(b *testing.B) {
	const replicas, window, settle = 3, time.Minute, 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	_, cs := clientFor(b)
	operatorDeployment(ctx, b, cs)
	helmUpgrade(ctx, b, "--set", "controllers.database.enabled=true")
	time.Sleep(settle)
	floor := busyCPU(b, window)

	startFailoverCluster(ctx, b, replicas, 0)
	time.Sleep(settle)
	idle := busyCPU(b, window)

	perMinute := func(d time.Duration) float64 { return d.Seconds() / window.Minutes() }
	db := perMinute(idle - floor)
	logf(b, "idle Database, %d replicas, failover on: the machine busy %.1f CPU-s a minute; floor (no Database) %.1f; the Database %.1f CPU-s a minute, %.2f an instance (%.1f%% of a core)",
		replicas, perMinute(idle), perMinute(floor), db, db/replicas, 100*db/replicas/60)
	b.ReportMetric(db/replicas, "CPU-s/min/instance")
}

// busyCPU is the CPU time every process of the machine used over window
// (/proc/stat: user, nice, system, irq and softirq time).
func busyCPU(tb testing.TB, window time.Duration) time.Duration {
	tb.Helper()
	before := procStatBusy(tb)
	time.Sleep(window)
	return procStatBusy(tb) - before
}

// procStatBusy is the machine's busy time so far. /proc/stat counts in
// USER_HZ, 100 a second on Linux.
func procStatBusy(tb testing.TB) time.Duration {
	tb.Helper()
	raw, err := os.ReadFile("/proc/stat")
	require.NoError(tb, err)
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	require.True(tb, len(f) > 7 && f[0] == "cpu", "/proc/stat begins %q", line)
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		n, err := strconv.ParseInt(f[i], 10, 64)
		require.NoError(tb, err)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100
}
