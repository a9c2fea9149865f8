// Command deckhand runs the deckhand operators in one manager.
package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"syscall"
	// TDSet time zones work on images without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/deckhand-dev/deckhand/operator/manager"
)

// version is set at build time (-ldflags -X main.version=..., from the
// Dockerfile's VERSION or make image).
var version = "dev"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println(version)
		return
	}
	// `deckhand probe` checks a running operator (the chart's helm test).
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(runProbe(os.Args[2:], os.Stdout, os.Stderr))
	}
	// `deckhand pooler-metrics` serves PgBouncer's metrics beside it in a
	// Pooler's pods.
	if len(os.Args) > 1 && os.Args[1] == "pooler-metrics" {
		os.Exit(runPoolerMetrics(os.Args[2:], os.Stderr))
	}
	cfg, err := manager.Load(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deckhand:", err)
		os.Exit(2)
	}
	logOpts, err := manager.Logger(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deckhand:", err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(logOpts))
	collectAtHalfTheLiveHeap()
	setMemoryLimit()

	// SIGTERM cancels the context: reconciles get the graceful-shutdown
	// timeout and the leader Lease is released.
	err = manager.Run(ctrl.SetupSignalHandler(), cfg)
	if errors.Is(err, manager.ErrLeaseLost) {
		startAfresh(err)
	}
	if err != nil {
		ctrl.Log.Error(err, "deckhand stopped")
		os.Exit(1)
	}
}

// startAfresh replaces the process with a new run of its own binary, with
// the same arguments and environment, after the operator lost its leader
// Lease. Every reconcile stops at once, as it would on exit. But the PID
// stays, so the kubelet sees no exit: no restart is counted and no
// back-off grows. Exiting instead, each API-server outage longer than the
// renew deadline cost a restart, and a few within minutes left the
// operator in CrashLoopBackOff (5 minutes) when a failover needed it. The
// new run campaigns for the Lease at once; held by the pod's name, it gets
// it back as soon as the API server answers, unless another replica took
// it meanwhile. It exits only when the exec itself fails.
func startAfresh(cause error) {
	ctrl.Log.Info("stopped leading: starting afresh in this process to campaign for the Lease again", "reason", cause.Error())
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, os.Environ())
	}
	ctrl.Log.Error(err, "could not start afresh; exiting")
	os.Exit(1)
}

// defaultGCPercent is the Go collector's GOGC unless the environment sets
// one: a collection when the heap has grown by half what was live, not by
// all of it. The operator's live heap is mostly its caches, which are
// small and change slowly, so collections stay rare; the heap's high-water
// mark, and with it RSS, follows the goal: with every controller on and
// 10,000 ConfigMaps, 1,000 Deployments and 5,000 pods in the cluster, the
// same binary's RSS was 90-97 MiB at GOGC=100 and 70-72 MiB at 50, for
// about a quarter more CPU while the caches fill (BenchmarkOperatorMemory;
// docs/performance.md, which also gives ConfigMonitor's reaction at each).
const defaultGCPercent = 50

// collectAtHalfTheLiveHeap sets defaultGCPercent, unless GOGC is set.
func collectAtHalfTheLiveHeap() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	debug.SetGCPercent(defaultGCPercent)
}

// setMemoryLimit makes the Go runtime collect harder as the heap nears 90%
// of the container's memory limit (from its cgroup), rather than grow past
// it and be OOM-killed mid-rollout. GOMEMLIMIT in the environment wins, and
// AUTOMEMLIMIT=off (or a ratio) changes it; without a limit nothing changes.
func setMemoryLimit() {
	limit, err := memlimit.Set(memlimit.WithRatio(0.9), memlimit.WithProvider(memlimit.FromCgroup))
	if err != nil {
		ctrl.Log.Info("memory limit of the container not read; the Go runtime runs without a soft limit", "reason", err.Error())
		return
	}
	if limit < math.MaxInt64 {
		ctrl.Log.Info("Go runtime soft memory limit", "bytes", limit)
	}
}
