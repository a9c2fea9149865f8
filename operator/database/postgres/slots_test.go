package postgres_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// probe runs one of the server pod's probes, as the kubelet would, in the
// environment of ordinal's pod (on dataVolume, following primaryPort):
// its output and whether it passed.
func (h *host) probe(p *corev1.Probe, ordinal int, dataVolume, primaryPort string, extra map[string]string) (string, bool) {
	h.t.Helper()
	pod := postgres.Engine{}.ServerPod(h.cluster)
	env := h.serverEnv(pod, ordinal, dataVolume, primaryPort)
	for k, v := range extra {
		env[k] = v
	}
	c := pod.Container
	c.Command, c.Args = p.Exec.Command, nil
	out, err := h.u.Command(env, pgtest.HostCommand(h.t, c, h.scripts)).CombinedOutput()
	return string(out), err == nil
}

// TestAStandbyStreamsThroughItsSlotAndIsReadyOnlyWhileStreaming: each
// standby streams through a physical slot of its own, made at clone time,
// with hot_standby_feedback on; its readiness probe passes only while it
// streams (pg_isready alone answers for a standby that follows nothing);
// a slot the primary reports lost fails its liveness probe, and its next
// start moves its data aside (kept) and clones the primary again; the
// primary drops the inactive slots of standbys beyond its replicas.
func TestAStandbyStreamsThroughItsSlotAndIsReadyOnlyWhileStreaming(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	// No WAL kept beyond the slots', and slots may hold at most 1 MB: a
	// standby that is away while 3 segments are written is lost.
	h.cluster.Parameters = map[string]string{"wal_keep_size": "0", "max_slot_wal_keep_size": "1MB"}
	pod := postgres.Engine{}.ServerPod(h.cluster)
	primary := h.primary("data-0")
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)

	standby := h.standby(1, "data-1", primary.Port)
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming")
	assert.Equal(t, "deckhand_standby_1 true physical", h.sql(primary.Port, "postgres", "SELECT slot_name || ' ' || active || ' ' || slot_type FROM pg_replication_slots"))
	assert.Equal(t, "on", h.sql(standby.Port, "postgres", "SHOW hot_standby_feedback"))
	out, ok := h.probe(pod.Container.ReadinessProbe, 1, "data-1", primary.Port, nil)
	assert.True(t, ok, "a streaming standby is ready: %s", out)
	out, ok = h.probe(pod.Container.ReadinessProbe, 0, "data-0", "", nil)
	assert.True(t, ok, "the primary is ready: %s", out)

	// The primary stops: the standby still answers, but follows nothing.
	primary.Stop(t)
	require.Eventually(t, func() bool {
		_, ok := h.probe(pod.Container.ReadinessProbe, 1, "data-1", primary.Port, nil)
		return !ok
	}, 30*time.Second, 200*time.Millisecond, "a standby that does not stream is not ready")
	out, ok = h.probe(pod.Container.ReadinessProbe, 1, "data-1", primary.Port, nil)
	assert.Contains(t, out, "not streaming")
	_, ok = h.probe(pod.Container.LivenessProbe, 1, "data-1", primary.Port, nil)
	assert.True(t, ok, "but alive: the primary may come back")

	// The standby is away while the primary writes more WAL than its slot
	// may hold: the slot is lost.
	standby.Stop(t)
	primary = h.primary("data-0")
	for range 4 {
		h.sql(primary.Port, "postgres", "CREATE TABLE IF NOT EXISTS filler (v text); INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 2000); SELECT pg_switch_wal()")
	}
	h.sql(primary.Port, "postgres", "CHECKPOINT")
	require.Equal(t, "lost", h.sql(primary.Port, "postgres", "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'deckhand_standby_1'"))
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)

	standby = h.standby(1, "data-1", primary.Port)
	assert.Contains(t, standby.Log.String(), "replication slot deckhand_standby_1 lost")
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming")
	waitForRow(t, h, standby.Port, "2")
	kept, _ := filepath.Glob(filepath.Join(h.volume("data-1"), "pgdata.lost-*", "PG_VERSION"))
	assert.Len(t, kept, 1, "the lost standby's data directory is kept aside")
	// Right after the clone the new slot may read "unreserved": with a
	// limit below one segment, a restart_lsn one segment behind the insert
	// position is beyond it until the standby's next feedback (every
	// wal_receiver_status_interval) moves the slot forward.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, "deckhand_standby_1 true reserved", h.sql(primary.Port, "postgres", "SELECT slot_name || ' ' || active || ' ' || wal_status FROM pg_replication_slots"))
	}, 30*time.Second, 200*time.Millisecond, "the re-cloned standby streams through a fresh slot")

	// Scaled to one replica: the primary drops the gone standby's slot.
	standby.Stop(t)
	require.NoError(t, os.WriteFile(filepath.Join(h.scripts, "replicas"), []byte("1"), 0o444))
	require.Eventually(t, func() bool {
		h.probe(pod.Container.ReadinessProbe, 0, "data-0", "", nil)
		return h.sql(primary.Port, "postgres", "SELECT count(*) FROM pg_replication_slots") == "0"
	}, 30*time.Second, 500*time.Millisecond, "the slot of a standby beyond replicas is dropped")
}

// TestACloneThatProgressesIsNeverRestartedAndOneThatStallsIs: the startup
// and liveness probes of a standby whose first clone is under way pass
// while pg_basebackup reports progress (pg_isready cannot: no server runs
// yet), and fail once it has reported none for CLONE_STALL_SECONDS.
func TestACloneThatProgressesIsNeverRestartedAndOneThatStallsIs(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	pod := postgres.Engine{}.ServerPod(h.cluster)
	primary := h.primary("data-0")
	h.init(primary.Port)

	// A clone at pg_basebackup's lowest rate (32 kB/s) of a ~30 MB cluster.
	env := h.serverEnv(pod, 1, "data-1", primary.Port)
	env["CLONE_MAX_RATE"] = "32k"
	clone := h.u.Command(env, pgtest.HostCommand(t, pod.Container, h.scripts))
	log := &syncbuf.Buffer{}
	clone.Stdout, clone.Stderr = log, log
	require.NoError(t, clone.Start())
	t.Cleanup(func() { _ = syscall.Kill(-clone.Process.Pid, syscall.SIGKILL); _, _ = clone.Process.Wait() })
	// Copying, not only started: before its first bytes pg_basebackup
	// waits for the primary's checkpoint, which a loaded machine makes
	// last seconds, and reports no progress meanwhile.
	progress := filepath.Join(h.volume("data-1"), "pgdata.deckhand-new.progress")
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(progress)
		return copiedKB(string(b)) > 0
	}, 60*time.Second, 100*time.Millisecond, "the clone never copied a byte:\n%s", log)

	stall := map[string]string{"CLONE_STALL_SECONDS": "3"}
	for _, p := range []*corev1.Probe{pod.Container.StartupProbe, pod.Container.LivenessProbe} {
		out, ok := h.probe(p, 1, "data-1", primary.Port, stall)
		assert.True(t, ok, "a clone under way: %s", out)
	}
	time.Sleep(2 * time.Second)
	out, ok := h.probe(pod.Container.LivenessProbe, 1, "data-1", primary.Port, stall)
	assert.True(t, ok, "a clone that progressed since the last probe: %s", out)
	out, ok = h.probe(pod.Container.ReadinessProbe, 1, "data-1", primary.Port, stall)
	assert.False(t, ok, "not ready while cloning: %s", out)

	// pg_basebackup stopped (SIGSTOP): no progress, and after
	// CLONE_STALL_SECONDS the probe fails.
	basebackup := processIn(clone.Process.Pid, "pg_basebackup")
	require.NotZero(t, basebackup)
	require.NoError(t, syscall.Kill(basebackup, syscall.SIGSTOP))
	h.probe(pod.Container.LivenessProbe, 1, "data-1", primary.Port, stall)
	require.Eventually(t, func() bool {
		_, ok := h.probe(pod.Container.LivenessProbe, 1, "data-1", primary.Port, stall)
		return !ok
	}, 20*time.Second, 500*time.Millisecond, "a stalled clone fails the liveness probe")
	_ = syscall.Kill(basebackup, syscall.SIGCONT)
}

// copiedKB is the last "<done>/<total> kB" pg_basebackup --progress wrote
// (its lines end in carriage returns), 0 before any.
func copiedKB(progress string) int {
	done := 0
	for _, line := range strings.FieldsFunc(progress, func(r rune) bool { return r == '\r' || r == '\n' }) {
		if m := progressLine.FindStringSubmatch(line); m != nil {
			done, _ = strconv.Atoi(m[1])
		}
	}
	return done
}

var progressLine = regexp.MustCompile(`^ *([0-9]+)/[0-9]+ kB`)

// TestABackupReadsAStandbyOnlyWhenItStreamsWithinTheLagBound: given a
// standby, the backup Job measures its replay lag against the primary
// before the dump and reads it only when it streams and the lag is within
// MAX_LAG_BYTES; the Report says which host it read and the lag. A
// standby that stopped replaying while the primary wrote is not used, and
// the dump holds the primary's latest rows.
func TestABackupReadsAStandbyOnlyWhenItStreamsWithinTheLagBound(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary := h.primary("data-0")
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)
	standby := h.standby(1, "data-1", primary.Port)
	waitForRow(t, h, standby.Port, "1")
	h.standbyPort = standby.Port
	backup := func(file string) engine.Report {
		pod := postgres.Engine{}.BackupPod(h.cluster, engine.Backup{
			File: file, Host: "name-of-database-rw", Standby: "name-of-database-1.name-of-database-headless", MaxLagBytes: 1 << 20, ClaimName: "backup",
		})
		report, out, err := h.job(pod, "backup", primary.Port, map[string]string{engine.BackupVolume: h.volume("backup")})
		require.NoError(t, err, out)
		return report
	}

	near := backup("from-standby.dump")
	assert.Equal(t, "127.0.0.1", near.Source) // STANDBY_HOST, as the host maps it
	require.NotNil(t, near.LagBytes, "a standby source carries its lag")
	assert.LessOrEqual(t, *near.LagBytes, int64(1<<20))
	activity := h.sql(standby.Port, "postgres", "SELECT count(*) FROM pg_stat_database WHERE datname = 'name-of-database' AND xact_commit > 0")
	assert.Equal(t, "1", activity, "the dump ran on the standby")

	// The standby stops replaying; the primary writes 2 MB more.
	h.sql(standby.Port, "postgres", "SELECT pg_wal_replay_pause()")
	out, err = h.appSQL(primary.Port, "CREATE TABLE pad AS SELECT repeat('x', 1000) AS v FROM generate_series(1, 3000); INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)
	far := backup("from-primary.dump")
	assert.Nil(t, far.LagBytes, "read from the primary")
	dump, err := exec.Command(filepath.Join(h.bin, "pg_restore"), "-f", "-", "-a", "-t", "rows", filepath.Join(h.volume("backup"), "from-primary.dump")).CombinedOutput()
	require.NoError(t, err, string(dump))
	assert.Contains(t, string(dump), "\n2\n", "the dump holds the primary's latest row")
}

// TestACloneLogsItsProgressForTheOperator: while pg_basebackup copies the
// primary, bootstrap.sh logs "clone progress" lines, and the Go reader the
// operator applies to the pod's log (Engine.CloneProgress) finds the clone
// under way with growing byte counts; once the clone is done, it says no
// clone runs, and the reporter left no process behind.
func TestACloneLogsItsProgressForTheOperator(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	pod := postgres.Engine{}.ServerPod(h.cluster)
	primary := h.primary("data-0")
	h.init(primary.Port)

	// ~30 MB at 4 MB/s: a clone of some seconds, a line a second.
	env := h.serverEnv(pod, 1, "data-1", primary.Port)
	env["CLONE_MAX_RATE"] = "4M"
	env["CLONE_PROGRESS_SECONDS"] = "1"
	clone := h.u.Command(env, pgtest.HostCommand(t, pod.Container, h.scripts))
	log := &syncbuf.Buffer{}
	clone.Stdout, clone.Stderr = log, log
	require.NoError(t, clone.Start())
	t.Cleanup(func() { _ = syscall.Kill(-clone.Process.Pid, syscall.SIGKILL); _, _ = clone.Process.Wait() })

	var first engine.CloneProgress
	require.Eventually(t, func() bool {
		p, cloning := postgres.Engine{}.CloneProgress(log.String())
		first = p
		return cloning && p.CopiedBytes > 0
	}, 60*time.Second, 100*time.Millisecond, "no clone progress in the log:\n%s", log)
	assert.Greater(t, first.TotalBytes, int64(10<<20), "the primary's size, in bytes")
	assert.WithinDuration(t, time.Now(), first.At, time.Minute, "the line's time")
	require.Eventually(t, func() bool {
		p, cloning := postgres.Engine{}.CloneProgress(log.String())
		return !cloning || p.CopiedBytes > first.CopiedBytes
	}, 60*time.Second, 100*time.Millisecond, "the progress never grew:\n%s", log)

	require.Eventually(t, func() bool {
		_, cloning := postgres.Engine{}.CloneProgress(log.String())
		return !cloning
	}, 120*time.Second, 200*time.Millisecond, "the clone never ended:\n%s", log)
	assert.Contains(t, log.String(), "bootstrap: clone finished")
	require.Eventually(t, func() bool {
		out, err := pgtest.PSQL(h.bin, env["PGPORT"], postgres.Superuser, h.superPassword(), "postgres", "SELECT pg_is_in_recovery()")
		return err == nil && out == "t"
	}, 60*time.Second, 200*time.Millisecond, "the standby never served:\n%s", log)
	assert.Zero(t, processIn(clone.Process.Pid, "sleep"), "the progress reporter left its sleep behind")
}

// TestTheLivenessProbeGivesTheStartAfterAFenceTheStartupProbesHour: a
// server whose fence was lifted starts again without a container restart
// (the supervisor), so no startup probe covers its rewind and replay;
// probe.sh live passes for an hour after the lift bootstrap.sh records
// (deckhand-restarted in DECKHAND_ROLE_DIR) while the server does not
// answer, fails after that, and forgets the lift once the server answers.
func TestTheLivenessProbeGivesTheStartAfterAFenceTheStartupProbesHour(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	live := postgres.Engine{}.ServerPod(h.cluster).Container.LivenessProbe
	roleDir := h.u.TempDir(t)
	marker := filepath.Join(roleDir, "deckhand-restarted")
	env := map[string]string{"DECKHAND_ROLE_DIR": roleDir}
	lifted := func(ago time.Duration) {
		t.Helper()
		require.NoError(t, os.WriteFile(marker, []byte(strconv.FormatInt(time.Now().Add(-ago).Unix(), 10)+"\n"), 0o644))
	}
	down := pgtest.FreePort(t)

	out, ok := h.probe(live, 1, "data-1", down, env)
	assert.False(t, ok, "a server that does not answer, no lift recorded: %s", out)
	lifted(time.Minute)
	out, ok = h.probe(live, 1, "data-1", down, env)
	assert.True(t, ok, "a minute after the lift: %s", out)
	lifted(time.Hour + time.Minute)
	out, ok = h.probe(live, 1, "data-1", down, env)
	assert.False(t, ok, "an hour after the lift: %s", out)

	primary := h.primary("data-0")
	lifted(time.Minute)
	out, ok = h.probe(live, 0, "data-0", primary.Port, env)
	assert.True(t, ok, "a server that answers: %s", out)
	assert.NoFileExists(t, marker, "the start is over once the server answers")
}
