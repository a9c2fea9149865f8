package faults

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/e2e"
)

// The faults that disturb nothing but their own namespace run first, side
// by side; the API-server stop, then the storm (which times the API
// server), run alone after them. Tests run in the order they are declared,
// file by file: this one comes first, storm_test.go's last.
func TestFaultsConfinedToTheirNamespace(t *testing.T) {
	faults := []struct {
		name string
		run  func(*testing.T)
	}{
		{"LeaderKilledMidRolloutEveryWorkloadRollsExactlyOnce", leaderKilledMidRollout},
		{"OperatorKilledMidRolloutEveryWorkloadRollsExactlyOnce", operatorKilledMidRollout},
		{"ThrottlingAndServerErrorsAreRetriedWithoutABusyLoop", throttlingAndServerErrors},
		{"OperatorKilledMidBackupTheBackupCompletesOnceAndNeverRunsTwice", operatorKilledMidBackup},
		{"OperatorKilledMidUpgradeTheUpgradeFinishesOnce", operatorKilledMidUpgrade},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			f.run(t)
		})
	}
}

// Two operators with leader election; the leader is SIGKILLed in the
// middle of a rollout, so its Lease is never released: the other one takes
// over when the Lease expires and finishes the rollout.
func leaderKilledMidRollout(t *testing.T) {
	c, ns, rendered := release(t, "leaderElection.enabled=true")
	first := e2e.RunOperatorAsChart(t, rendered, ns)
	first.WaitReady(t)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NotEmpty(ct, leaseHolder(ct, c, ns))
	}, time.Minute, 200*time.Millisecond, "the first operator never became leader")
	leader := leaseHolder(t, c, ns)
	second := e2e.RunOperatorAsChart(t, rendered, ns)
	second.WaitReady(t)

	r := newRollout(t, c, ns)
	r.waitTakenIn(t)
	r.change(t, "2")
	reached := r.waitMidway(t)

	first.Kill(t)
	killed := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		holder := leaseHolder(ct, c, ns)
		require.NotEqual(ct, leader, holder)
		require.NotEmpty(ct, holder)
	}, time.Minute, 100*time.Millisecond, "the second operator never took the Lease")
	takeover := time.Since(killed)
	r.waitDone(t, 2*time.Minute)
	finished := time.Since(killed)

	r.rolledExactlyOnce(t)
	assert.True(t, second.Running())
	assert.Empty(t, second.Failures())
	t.Logf("RESULT leader-failover: killed after %d/%d workloads; Lease taken over in %.1f s (the chart's 10 s lease, 8 s renew, 2 s retry); rollout finished %.1f s after the kill; every workload rolled exactly once",
		reached, workloads, takeover.Seconds(), finished.Seconds())
}

// One operator SIGKILLed in the middle of a rollout and started again: the
// new process finishes from what the API server holds.
func operatorKilledMidRollout(t *testing.T) {
	c, ns, rendered := release(t, "leaderElection.enabled=false")
	op := e2e.RunOperatorAsChart(t, rendered, ns)
	op.WaitReady(t)

	r := newRollout(t, c, ns)
	r.waitTakenIn(t)
	r.change(t, "2")
	reached := r.waitMidway(t)

	op.Kill(t)
	killed := time.Now()
	again := e2e.RunOperatorAsChart(t, rendered, ns)
	again.WaitReady(t)
	r.waitDone(t, 2*time.Minute)
	finished := time.Since(killed)

	r.rolledExactlyOnce(t)
	assert.Empty(t, again.Failures())
	t.Logf("RESULT operator-killed: killed after %d/%d workloads; the restarted operator finished the rollout %.1f s after the kill; every workload rolled exactly once",
		reached, workloads, finished.Seconds())
}

// The control plane stopped in the middle of a rollout and started again,
// with an operator without leader election: it keeps running, reconnects,
// and finishes.
func TestAPIServerStoppedMidRolloutEveryWorkloadRollsExactlyOnce(t *testing.T) {
	// Half the other tests' pace: stopping the control plane takes seconds,
	// and the rollout must still be under way when it goes.
	c, ns, rendered := release(t, "leaderElection.enabled=false", "config.configmonitor-restarts-per-second=5")
	op := e2e.RunOperatorAsChart(t, rendered, ns)
	op.WaitReady(t)

	r := newRollout(t, c, ns)
	r.waitTakenIn(t)
	r.change(t, "2")
	reached := r.waitMidway(t)

	_, err := cluster("stop")
	require.NoError(t, err)
	stopped := time.Now()
	time.Sleep(5 * time.Second)
	_, err = cluster("up")
	require.NoError(t, err)
	down := time.Since(stopped)
	r.waitDone(t, 3*time.Minute)
	finished := time.Since(stopped)

	r.rolledExactlyOnce(t)
	require.True(t, op.Running(), "the operator exited while the API server was down:\n%s", op.Logs())
	t.Logf("RESULT apiserver-stopped: stopped after %d/%d workloads for %.1f s (stop, 5 s, start); the same operator process reconnected and finished %.1f s after the stop; every workload rolled exactly once",
		reached, workloads, down.Seconds(), finished.Seconds())
}
