package postgres_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// Each server takes its role from the operator (the scripts ConfigMap's
// key "primary"), never from its ordinal; see host.namePrimary.

// inRecovery says whether the server on port is a standby ("t") or a
// primary ("f").
func inRecovery(h *host, port string) string {
	return h.sql(port, "postgres", "SELECT pg_is_in_recovery()")
}

// kill stops a server the way a crash does: SIGKILL to it and every
// process it started, no shutdown checkpoint.
func kill(t *testing.T, s *pgtest.Server) {
	t.Helper()
	require.NoError(t, syscall.Kill(-s.Cmd.Process.Pid, syscall.SIGKILL))
	s.Stop(t) // waits for the exit
}

// lostDirectories are the data directories bootstrap.sh moved aside on
// dataVolume (pgdata.lost-*).
func lostDirectories(h *host, dataVolume string) []string {
	kept, _ := filepath.Glob(filepath.Join(h.volume(dataVolume), "pgdata.lost-*", "PG_VERSION"))
	return kept
}

// primaryAndStreamingStandby: the named primary on data-0, its app table
// "rows" holding row 1, and a standby on data-1 streaming from it.
func primaryAndStreamingStandby(t *testing.T, h *host) (primary, standby *pgtest.Server) {
	t.Helper()
	primary = h.primary("data-0")
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)
	standby = h.standby(1, "data-1", primary.Port)
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming")
	return primary, standby
}

// TestAFormerPrimaryToldItIsAStandbyRejoinsTheNewPrimaryWithoutItsDivergedWrites:
// the operator names the standby the primary (as a failover will): until
// each restarts, the readiness probes of both fail (no Service routes to
// either); the named standby is promoted at its start; the old primary,
// which took a write after that and then crashed, comes back as a
// standby of the new primary through pg_rewind: the write it took alone is
// never served, and it follows the new primary's writes.
func TestAFormerPrimaryToldItIsAStandbyRejoinsTheNewPrimaryWithoutItsDivergedWrites(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	ready := postgres.Engine{}.ServerPod(h.cluster).Container.ReadinessProbe
	old, standby := primaryAndStreamingStandby(t, h)
	waitForRow(t, h, standby.Port, "1")
	out, ok := h.probe(ready, 0, "data-0", "", nil)
	require.True(t, ok, "the named primary is ready: %s", out)

	h.namePrimary(1)
	out, ok = h.probe(ready, 0, "data-0", "", nil)
	assert.False(t, ok, "a primary the operator no longer names is not ready")
	assert.Contains(t, out, "this server runs as a primary, but the operator names name-of-database-1 the primary")
	out, ok = h.probe(ready, 1, "data-1", old.Port, nil)
	assert.False(t, ok, "the named primary is not ready while it is a standby")
	assert.Contains(t, out, "the operator names this pod the primary, but its server is in recovery")

	// The named standby restarts: promoted before it serves.
	standby.Stop(t)
	primary := h.server(h.scripts, 1, "data-1", "")
	assert.Contains(t, primary.Log.String(), "the operator names name-of-database-1 the primary: starting as the primary")
	assert.Contains(t, primary.Log.String(), "promoted")
	assert.Equal(t, "f", inRecovery(h, primary.Port))
	out, ok = h.probe(ready, 1, "data-1", "", nil)
	assert.True(t, ok, "the promoted primary is ready: %s", out)

	// The old primary still runs (nothing fenced it yet) and takes a write
	// the new primary never sees, then crashes.
	out, err := h.appSQL(old.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (3)")
	require.NoError(t, err, out)
	kill(t, old)
	// Crashed, it left its postmaster.pid behind, still reading "ready":
	// the readiness probe looks at the process the file names.
	pm, err := os.ReadFile(filepath.Join(h.volume("data-0"), "pgdata", "postmaster.pid"))
	require.NoError(t, err, "a crashed server's postmaster.pid")
	require.Contains(t, string(pm), "ready")
	out, ok = h.probe(ready, 0, "data-0", "", nil)
	assert.False(t, ok, "a crashed server is not ready")
	assert.Contains(t, out, "the server is not accepting connections (postmaster.pid)")

	// At its start it is told it is a standby: rewound, never a primary.
	rejoined := h.server(h.scripts, 0, "data-0", primary.Port)
	log := rejoined.Log.String()
	assert.Contains(t, log, "starting as the standby")
	assert.Contains(t, log, "rewinding it to follow name-of-database-1")
	assert.Contains(t, log, "it starts as a standby of name-of-database-1")
	assert.Empty(t, lostDirectories(h, "data-0"), "rewound, not moved aside")
	assert.Equal(t, "t", inRecovery(h, rejoined.Port))
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-0 streaming")
	waitForRow(t, h, rejoined.Port, "3")
	out, err = h.appSQL(rejoined.Port, "SELECT string_agg(id::text, ',' ORDER BY id) FROM rows")
	require.NoError(t, err, out)
	assert.Equal(t, "1,3", out, "the write the old primary took alone is gone")
	out, err = h.appSQL(rejoined.Port, "INSERT INTO rows VALUES (4)")
	assert.Error(t, err, "a standby takes no writes")
	assert.Contains(t, out, "read-only transaction")
	out, ok = h.probe(ready, 0, "data-0", primary.Port, nil)
	assert.True(t, ok, "the rejoined standby streams, as the operator says it should: %s", out)
	assert.Equal(t, "deckhand_standby_0 true", h.sql(primary.Port, "postgres", "SELECT slot_name || ' ' || active FROM pg_replication_slots"))
}

// TestAFormerPrimaryRejoinsAStandbyPromotedOnlineMomentsAgo: a failover
// promotes the standby online (the agent's pg_promote, no restart), so
// the new primary's control file still names the old timeline until its
// next checkpoint; pg_rewind reads it there. The old primary, crashed,
// restarted moments after the promotion and told it is a standby, must
// still be rewound and follow the new primary on its timeline (on the
// real node, before bootstrap.sh asked the primary for a checkpoint,
// pg_rewind said "no rewind required" and the old primary, its WAL past
// the fork, never followed).
func TestAFormerPrimaryRejoinsAStandbyPromotedOnlineMomentsAgo(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	old, standby := primaryAndStreamingStandby(t, h)
	// Buffers the standby replayed and has not written yet: the
	// checkpoint its promotion requests is spread over minutes
	// (checkpoint_completion_target), as under an application's writes.
	out, err := h.appSQL(old.Port, "INSERT INTO rows SELECT generate_series(100, 20000)")
	require.NoError(t, err, out)
	waitForRow(t, h, standby.Port, "20000")

	kill(t, old)
	h.namePrimary(1)
	require.Equal(t, "t", h.sql(standby.Port, "postgres", "SELECT pg_promote()"), "promoted online, as the agent does")
	out, err = h.appSQL(standby.Port, "INSERT INTO rows VALUES (3)")
	require.NoError(t, err, out)

	rejoined := h.server(h.scripts, 0, "data-0", standby.Port)
	assert.Contains(t, rejoined.Log.String(), "it starts as a standby of name-of-database-1")
	assert.Equal(t, "t", inRecovery(h, rejoined.Port))
	waitForRow(t, h, rejoined.Port, "3")
	assert.Equal(t, "2", h.sql(rejoined.Port, "postgres", "SELECT received_tli FROM pg_stat_wal_receiver"), "it follows the new primary's timeline")
}

// TestAPodNotNamedPrimaryNeverRunsAsOne: the pod the operator names
// (ordinal 1 here) initialises an empty volume; ordinal 0 on an empty
// volume clones it; a data directory of another system without
// standby.signal on a pod not named cannot be rewound: it is moved aside
// (kept) and the pod clones the named primary; no named primary at all:
// no server starts.
func TestAPodNotNamedPrimaryNeverRunsAsOne(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	h.namePrimary(1)
	primary := h.server(h.scripts, 1, "data-1", "")
	assert.Contains(t, primary.Log.String(), "empty volume on the primary name-of-database-1: initialising")
	assert.Equal(t, "f", inRecovery(h, primary.Port))
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)

	zero := h.server(h.scripts, 0, "data-0", primary.Port)
	assert.Contains(t, zero.Log.String(), "empty volume on standby name-of-database-0: cloning the primary")
	assert.NotContains(t, zero.Log.String(), "initialising")
	assert.Equal(t, "t", inRecovery(h, zero.Port))
	waitForRow(t, h, zero.Port, "1")

	// Another system's data directory, a primary's (no standby.signal).
	foreign := filepath.Join(h.volume("data-2"), "pgdata")
	initdb := h.u.Command(map[string]string{"PATH": h.bin + ":/usr/bin:/bin"},
		[]string{filepath.Join(h.bin, "initdb"), "-D", foreign, "--data-checksums", "--auth=trust", "--username=postgres"})
	b, err := initdb.CombinedOutput()
	require.NoError(t, err, "%s", b)
	two := h.server(h.scripts, 2, "data-2", primary.Port)
	log := two.Log.String()
	assert.Contains(t, log, "rewinding it to follow name-of-database-1")
	assert.Contains(t, log, "pg_rewind could not rewind")
	assert.Len(t, lostDirectories(h, "data-2"), 1, "the directory pg_rewind could not rewind is kept aside")
	assert.Equal(t, "t", inRecovery(h, two.Port))
	waitForRow(t, h, two.Port, "1")

	// No primary named: nothing starts, nothing is made.
	require.NoError(t, os.Remove(filepath.Join(h.scripts, "primary")))
	pod := postgres.Engine{}.ServerPod(h.cluster)
	env := h.serverEnv(pod, 3, "data-3", primary.Port)
	b, err = h.u.Command(env, pgtest.HostCommand(t, pod.Container, h.scripts)).CombinedOutput()
	assert.Error(t, err)
	assert.Contains(t, string(b), "no primary named in")
	entries, err := os.ReadDir(h.volume("data-3"))
	require.NoError(t, err)
	assert.Empty(t, entries, "the volume is left as it was")
}

// TestAFencedServerStartsOnlyOnceTheFenceIsLiftedAndInTheRoleNamedThen:
// the instance agent fences a primary (the marker beside PGDATA, then a
// fast shutdown); its container's restart waits without a server (its
// liveness passes: restarting it would change nothing) while the operator
// names the standby the primary and it is promoted; once the fence is
// lifted the old primary starts in the role named then: a standby of the
// new primary, never a second primary.
func TestAFencedServerStartsOnlyOnceTheFenceIsLiftedAndInTheRoleNamedThen(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	pod := postgres.Engine{}.ServerPod(h.cluster)
	old := h.primary("data-0")
	h.init(old.Port)
	out, err := h.appSQL(old.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)
	standby := h.standby(1, "data-1", old.Port)
	waitForStreaming(t, h, old.Port, "deckhand_replication name-of-database-1 streaming")

	// The agent's fence: the marker, then a fast shutdown.
	marker := filepath.Join(h.volume("data-0"), "deckhand-fenced")
	require.NoError(t, os.WriteFile(marker, nil, 0o600))
	out, ok := h.probe(pod.Container.ReadinessProbe, 0, "data-0", "", nil)
	assert.False(t, ok, "a fenced server is not ready, even before it stops")
	assert.Contains(t, out, "fenced")
	old.Stop(t)

	// The container restarts (the kubelet's doing): no server.
	env := h.serverEnv(pod, 0, "data-0", standby.Port)
	fenced := h.u.Command(env, pgtest.HostCommand(t, pod.Container, h.scripts))
	log := &syncbuf.Buffer{}
	fenced.Stdout, fenced.Stderr = log, log
	require.NoError(t, fenced.Start())
	exited := make(chan error, 1)
	go func() { exited <- fenced.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-fenced.Process.Pid, syscall.SIGINT)
		<-exited
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Contains(ct, log.String(), "not starting the server until the fence is lifted")
	}, 30*time.Second, 100*time.Millisecond)
	assert.NoFileExists(t, filepath.Join(h.volume("data-0"), "pgdata", "postmaster.pid"), "no server while fenced")
	out, ok = h.probe(pod.Container.LivenessProbe, 0, "data-0", standby.Port, nil)
	assert.True(t, ok, "a fenced container is alive: %s", out)
	out, ok = h.probe(pod.Container.ReadinessProbe, 0, "data-0", standby.Port, nil)
	assert.False(t, ok, "and not ready: %s", out)

	// The operator names the standby the primary; it is promoted.
	h.namePrimary(1)
	standby.Stop(t)
	primary := h.server(h.scripts, 1, "data-1", "")
	require.Equal(t, "f", inRecovery(h, primary.Port))
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)

	// The fence is lifted: the old primary starts, as a standby.
	require.NoError(t, os.Remove(marker))
	require.Eventually(t, func() bool {
		_, err := pgtest.PSQL(h.bin, env["PGPORT"], postgres.Superuser, h.superPassword(), "postgres", "SELECT 1")
		return err == nil
	}, 90*time.Second, 200*time.Millisecond, "the server never started once the fence was lifted:\n%s", log)
	assert.Contains(t, log.String(), "the fence is lifted: starting")
	assert.Contains(t, log.String(), "the operator names name-of-database-1 the primary: starting as the standby")
	assert.Equal(t, "t", inRecovery(h, env["PGPORT"]))
	waitForRow(t, h, env["PGPORT"], "2")
}

// TestASynchronousPrimaryStartsAgainAfterACrash: a primary whose
// synchronous_standby_names is set (spec.replication.synchronous, through
// ALTER SYSTEM) crashes and its container starts again before any standby
// has reconnected. bootstrap.sh's single-user step (the replication role)
// must not wait for a synchronous standby that cannot connect to a
// single-user server: on the real node it waited for good, and the old
// primary never came back.
func TestASynchronousPrimaryStartsAgainAfterACrash(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary := h.primary("data-0")
	h.init(primary.Port)
	h.sql(primary.Port, "postgres", `ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 ("name-of-database-1")'`)
	h.sql(primary.Port, "postgres", "SELECT pg_reload_conf()")
	kill(t, primary)

	again := h.primary("data-0")
	assert.Contains(t, again.Log.String(), "replication role")
	assert.Equal(t, "f", inRecovery(h, again.Port))
	assert.Equal(t, `ANY 1 ("name-of-database-1")`, h.sql(again.Port, "postgres", "SHOW synchronous_standby_names"), "the setting is kept")
}
