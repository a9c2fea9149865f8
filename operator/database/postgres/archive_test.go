package postgres_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/s3test"
)

// The continuous archiving scripts (archive/*.sh) run here against the
// host's PostgreSQL and a versitygw on 127.0.0.1 serving TLS: Barman
// Cloud ships the WAL and base backups, and servers recovered from the
// store are compared with the source.

// archiving is a source server archiving into a store, with a writer
// inserting a timestamped row every 100 ms.
type archiving struct {
	t       testing.TB
	h       *host
	store   *s3test.Store
	scripts string // the archiving scripts' directory
	prefix  string
	server  string // STORE_SERVER of the source
	source  *pgtest.Server
	// writes counts the writer's rows; writeErrs its failed inserts.
	writes, writeErrs atomic.Int64
	stopWriter        func()
}

// storeEnv is the store's settings for the archive named server, as the
// scripts read them.
func (a *archiving) storeEnv(server string) map[string]string {
	return map[string]string{
		"STORE_ENDPOINT":        a.store.Endpoint,
		"STORE_BUCKET":          a.store.Bucket,
		"STORE_PREFIX":          a.prefix,
		"STORE_SERVER":          server,
		"STORE_CA_FILE":         a.store.CAFile,
		"STORE_ACCESS_KEY_FILE": a.store.AccessKeyFile,
		"STORE_SECRET_KEY_FILE": a.store.SecretKeyFile,
		"STORE_COMPRESSION":     "gzip",
		"PATH":                  a.h.bin + ":/usr/bin:/bin",
		"TMPDIR":                os.TempDir(),
	}
}

// startArchiving starts the store and a primary archiving into it.
func startArchiving(t testing.TB) *archiving {
	h := newHost(t)
	a := &archiving{t: t, h: h, store: s3test.Start(t, "deckhand"), prefix: "clusters/ns", server: "name-of-database"}
	a.scripts = h.u.WriteScripts(t, filepath.Join(h.root, "archive"), postgres.ArchiveScripts())
	a.source = a.primary("data-source")
	h.sql(a.source.Port, "postgres", "CREATE TABLE ticks (id bigserial PRIMARY KEY, ts timestamptz NOT NULL DEFAULT clock_timestamp())")
	return a
}

// primary starts a primary on dataVolume that archives into the archive
// named server... the source's unless a test says otherwise.
func (a *archiving) primary(dataVolume string) *pgtest.Server {
	return a.primaryInto(dataVolume, a.server)
}

func (a *archiving) primaryInto(dataVolume, server string) *pgtest.Server {
	return a.serverInto(0, dataVolume, server, "")
}

// serverInto starts ordinal on dataVolume, archiving into the archive
// named server (once it is a primary); a primaryPort makes it a standby
// of the server there. Its archive_command is wal-archive.sh, which hands
// the segments to a resident Barman Cloud process of the server's own, as
// a Database's archiver sidecar does.
func (a *archiving) serverInto(ordinal int, dataVolume, server, primaryPort string) *pgtest.Server {
	env := a.storeEnv(server)
	env["WAL_ARCHIVE_RESIDENT"] = a.resident("archive", server)
	return a.h.archivingServer(a.t, ordinal, dataVolume, primaryPort, archiveCommand("sh "+path.Join(a.scripts, postgres.WALArchiveScript)+" %p"), env)
}

// archiveCommand is the server parameters that set archive_command alone.
func archiveCommand(command string) map[string]string {
	return map[string]string{"archive_command": command}
}

// archivingServer starts ordinal on dataVolume with archive_mode on and a
// Database's archive_timeout, with params set over them (archive_command
// among them), its environment with env added; a primaryPort makes it a
// standby of the server there.
func (h *host) archivingServer(t testing.TB, ordinal int, dataVolume, primaryPort string, params, env map[string]string) *pgtest.Server {
	c := h.cluster
	c.Parameters = postgres.ArchiveParameters(time.Minute)
	maps.Copy(c.Parameters, params)
	pod := postgres.Engine{}.ServerPod(c)
	serverEnv := h.serverEnv(pod, ordinal, dataVolume, primaryPort)
	maps.Copy(serverEnv, env)
	serverEnv["PATH"] = h.bin + ":/usr/bin:/bin"
	return h.u.StartServer(t, h.bin, serverEnv, pgtest.HostCommand(t, pod.Container, h.scripts))
}

// resident runs wal-resident.sh in mode (archive or restore) for the
// archive named server until the test ends and returns its directory. Its
// log is the test's when the test fails.
func (a *archiving) resident(mode, server string) string {
	t := a.t
	dir := a.h.u.TempDir(t)
	cmd := a.h.u.Command(a.storeEnv(server), []string{"sh", path.Join(a.scripts, postgres.ResidentScript), mode, dir})
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() && log.String() != "" {
			t.Logf("the resident process (%s) of %s:\n%s", mode, server, log.String())
		}
	})
	return dir
}

// startWriter inserts a row every 100 ms into the source until the test
// stops it.
func (a *archiving) startWriter() {
	t := a.t
	db, err := a.h.superuserDB(a.source.Port)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO ticks DEFAULT VALUES"); err != nil {
				if ctx.Err() == nil {
					a.writeErrs.Add(1)
					t.Logf("writer: %v", err)
				}
				continue
			}
			a.writes.Add(1)
		}
	}()
	var once sync.Once
	a.stopWriter = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			db.Close()
		})
	}
	t.Cleanup(a.stopWriter)
}

// script runs one of the archiving scripts as the server user.
func (a *archiving) script(env map[string]string, name string, args ...string) (string, error) {
	out, err := a.h.u.Command(env, append([]string{"sh", path.Join(a.scripts, name)}, args...)).CombinedOutput()
	return string(out), err
}

// baseBackup runs base-backup.sh against the source: what it reports.
func (a *archiving) baseBackup(name string) map[string]string {
	t := a.t
	env := a.storeEnv(a.server)
	env["BACKUP_NAME"] = name
	env["PGHOST"], env["PGPORT"], env["PGUSER"], env["PGPASSWORD"] = "127.0.0.1", a.source.Port, postgres.Superuser, a.h.superPassword()
	out, err := a.script(env, postgres.BaseBackupScript)
	require.NoError(t, err, out)
	report := keyValues(out)
	for _, k := range []string{"backup_id", "begin_lsn", "end_lsn", "end_time", "restore_point_lsn"} {
		require.NotEmpty(t, report[k], "base-backup.sh reported no %s:\n%s", k, out)
	}
	require.Equal(t, name, report["backup_name"])
	return report
}

func keyValues(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.ContainsAny(k, " :") {
			m[k] = v
		}
	}
	return m
}

// switchAndWait ends the source's current segment and waits until the
// archive has it: what is committed now is in the store.
func (a *archiving) switchAndWait(port string, within time.Duration) string {
	t := a.t
	seg := a.h.sql(port, "postgres", "SELECT pg_walfile_name(pg_switch_wal())")
	require.Eventually(t, func() bool {
		return a.h.sql(port, "postgres", "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver") >= seg
	}, within, 200*time.Millisecond, "segment %s was not archived within %s: %s", seg, within,
		a.h.sql(port, "postgres", "SELECT archived_count, last_archived_wal, failed_count, last_failed_wal FROM pg_stat_archiver"))
	return seg
}

// archived are the WAL segments (not history or backup files) the store
// holds for the archive named server, by name, without the compression
// suffix.
func (a *archiving) archived(server string) map[string]bool {
	out := map[string]bool{}
	for _, k := range a.store.Keys(a.t, a.prefix+"/"+server+"/wals/") {
		name := strings.TrimSuffix(path.Base(k), ".gz")
		if len(name) == 24 {
			out[name] = true
		}
	}
	return out
}

// requireEverySegment requires the archive to hold every segment of
// timeline 1 from the first to last (16 MiB segments).
func (a *archiving) requireEverySegment(last string) {
	t := a.t
	got := a.archived(a.server)
	n, ok := walSegmentNo(last, 16<<20)
	require.True(t, ok, "not a segment's name: %q", last)
	var missing []string
	for segno := uint64(1); segno <= n; segno++ {
		name := fmt.Sprintf("00000001%08X%08X", segno/0x100, segno%0x100)
		if !got[name] {
			missing = append(missing, name)
		}
	}
	require.Empty(t, missing, "segments missing from the archive (it holds %d)", len(got))
}

// walSegmentNo is the number of the WAL segment named name, of size
// bytes (a history or backup file's name: none).
func walSegmentNo(name string, size uint64) (uint64, bool) {
	if len(name) != 24 {
		return 0, false
	}
	log, err1 := strconv.ParseUint(name[8:16], 16, 32)
	seg, err2 := strconv.ParseUint(name[16:], 16, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return log*(1<<32/size) + seg, true
}

type archiverStats struct {
	archived, failed int
	lastArchived     string
}

func (a *archiving) stats(port string) archiverStats {
	out := a.h.sql(port, "postgres", "SELECT archived_count || ' ' || failed_count || ' ' || coalesce(last_archived_wal, '-') FROM pg_stat_archiver")
	f := strings.Fields(out)
	require.Len(a.t, f, 3, out)
	archived, _ := strconv.Atoi(f[0])
	failed, _ := strconv.Atoi(f[1])
	return archiverStats{archived: archived, failed: failed, lastArchived: f[2]}
}

// now is the source's clock.
func (a *archiving) now() time.Time {
	out := a.h.sql(a.source.Port, "postgres", "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
	ts, err := time.Parse(time.RFC3339Nano, out)
	require.NoError(a.t, err, out)
	return ts
}

// recovery is a server recovered from the store.
type recovery struct {
	out    string
	port   string
	server *pgtest.Server
}

// recover runs recover.sh into a new data directory with target (its
// RECOVERY_TARGET_* settings) and starts a server on it; err is the
// script's, when it refused.
func (a *archiving) recover(t testing.TB, target map[string]string) (recovery, error) {
	h := a.h
	dir := h.u.TempDir(t)
	pgdata := filepath.Join(dir, "pgdata")
	env := a.storeEnv(a.server)
	env["PGDATA"] = pgdata
	maps.Copy(env, target)
	out, err := a.script(env, postgres.RecoverScript)
	if err != nil {
		return recovery{out: out}, err
	}
	// What restore_command needs: the store's settings, and a resident
	// Barman Cloud process to fetch through, as in a recovering pod's
	// sidecar.
	serverEnv := a.storeEnv(a.server)
	serverEnv["WAL_RESTORE_RESIDENT"] = a.resident("restore", a.server)
	r := recovery{out: out}
	r.port, r.server = a.startUntilPromoted(t, dir, pgdata, serverEnv, 5*time.Minute)
	return r, nil
}

// startUntilPromoted starts a server on the recovered data directory
// pgdata (its socket in dir) with env, on a free port, and waits within
// for its recovery to end in a promotion.
func (a *archiving) startUntilPromoted(t testing.TB, dir, pgdata string, env map[string]string, within time.Duration) (string, *pgtest.Server) {
	t.Helper()
	h := a.h
	port := pgtest.FreePort(t)
	env["PGPORT"] = port
	server := h.u.StartServer(t, h.bin, env, []string{filepath.Join(h.bin, "postgres"), "-D", pgdata,
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + dir})
	promoted := assert.Eventually(t, func() bool {
		out, err := pgtest.PSQL(h.bin, port, postgres.Superuser, h.superPassword(), "postgres", "SELECT pg_is_in_recovery()")
		return err == nil && out == "f"
	}, within, 200*time.Millisecond)
	// The log as it is at the deadline, not as it was when the wait began.
	require.True(t, promoted, "the recovered server was not promoted:\n%s", server.Log.String())
	return port, server
}

// requireRowsUpTo requires the recovered server to hold every row the
// source holds with ts <= until-1s, and none with ts > until.
func (a *archiving) requireRowsUpTo(t testing.TB, r recovery, until time.Time) {
	h := a.h
	cut := until.Add(-time.Second).Format(time.RFC3339Nano)
	want := h.sql(a.source.Port, "postgres", fmt.Sprintf("SELECT count(*) FROM ticks WHERE ts <= '%s'", cut))
	got := h.sql(r.port, "postgres", fmt.Sprintf("SELECT count(*) FROM ticks WHERE ts <= '%s'", cut))
	assert.NotEqual(t, "0", want)
	assert.Equal(t, want, got, "rows with ts <= %s", cut)
	assert.Equal(t, "0", h.sql(r.port, "postgres", fmt.Sprintf("SELECT count(*) FROM ticks WHERE ts > '%s'", until.Format(time.RFC3339Nano))),
		"rows after %s", until.Format(time.RFC3339Nano))
	// It is a primary of its own: it takes writes.
	h.sql(r.port, "postgres", "INSERT INTO ticks DEFAULT VALUES")
}

func TestArchivingAndPointInTimeRecoveryFromAnObjectStore(t *testing.T) {
	t.Parallel()
	a := startArchiving(t)
	h := a.h
	beforeBackups := a.now()
	a.startWriter()
	time.Sleep(time.Second)

	first := a.baseBackup("backup-1")
	// barman keeps whole seconds of a backup's end.
	time.Sleep(2 * time.Second)
	betweenBackups := a.now()
	time.Sleep(time.Second)
	second := a.baseBackup("backup-2")
	time.Sleep(time.Second)
	// A restore point a user makes, and the source's clock just after it.
	out := h.sql(a.source.Port, "postgres", "SELECT pg_create_restore_point('before-the-mistake'), to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
	rpTime, err := time.Parse(time.RFC3339Nano, strings.Split(out, "|")[1])
	require.NoError(t, err, out)
	time.Sleep(1500 * time.Millisecond)
	out = h.sql(a.source.Port, "postgres", "SELECT pg_current_wal_lsn() || '|' || to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
	lsn, lsnClock, _ := strings.Cut(out, "|")
	lsnTime, err := time.Parse(time.RFC3339Nano, lsnClock)
	require.NoError(t, err, out)
	time.Sleep(1500 * time.Millisecond)
	last := a.switchAndWait(a.source.Port, time.Minute)

	t.Run("the archive holds every segment and the archiver never failed", func(t *testing.T) {
		s := a.stats(a.source.Port)
		assert.Zero(t, s.failed, "pg_stat_archiver.failed_count")
		assert.GreaterOrEqual(t, s.lastArchived, last)
		a.requireEverySegment(last)
		assert.Zero(t, a.writeErrs.Load(), "the writer's failed inserts")
		assert.Greater(t, a.writes.Load(), int64(50), "rows written")
	})

	t.Run("recoveries", func(t *testing.T) {
		t.Run("to a time between two base backups, from the first", func(t *testing.T) {
			t.Parallel()
			r, err := a.recover(t, map[string]string{"RECOVERY_TARGET_TIME": betweenBackups.Format(time.RFC3339Nano)})
			require.NoError(t, err, r.out)
			assert.Equal(t, first["backup_id"], keyValues(r.out)["backup_id"], "the newest base backup ended before the target")
			a.requireRowsUpTo(t, r, betweenBackups)
		})
		t.Run("to a restore point a user made", func(t *testing.T) {
			t.Parallel()
			r, err := a.recover(t, map[string]string{"RECOVERY_TARGET_NAME": "before-the-mistake"})
			require.NoError(t, err, r.out)
			a.requireRowsUpTo(t, r, rpTime)
		})
		t.Run("to an LSN, from the second base backup", func(t *testing.T) {
			t.Parallel()
			r, err := a.recover(t, map[string]string{"RECOVERY_TARGET_LSN": lsn})
			require.NoError(t, err, r.out)
			assert.Equal(t, second["backup_id"], keyValues(r.out)["backup_id"])
			a.requireRowsUpTo(t, r, lsnTime)
		})
		t.Run("to a base backup's own restore point, which holds its marker row", func(t *testing.T) {
			t.Parallel()
			r, err := a.recover(t, map[string]string{"RECOVERY_TARGET_NAME": "backup-1"})
			require.NoError(t, err, r.out)
			assert.Equal(t, first["backup_id"], keyValues(r.out)["backup_id"])
			assert.Equal(t, "backup-1", h.sql(r.port, "postgres", "SELECT string_agg(name, ',') FROM deckhand.backup_markers"))
		})
		t.Run("outside the archive's window is refused with the window in the message", func(t *testing.T) {
			t.Parallel()
			for _, target := range []map[string]string{
				{"RECOVERY_TARGET_TIME": beforeBackups.Format(time.RFC3339Nano)},
				{"RECOVERY_TARGET_TIME": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
				{"RECOVERY_TARGET_LSN": "0/1"},
				{"RECOVERY_TARGET_LSN": "FF/0"},
			} {
				r, err := a.recover(t, target)
				require.Error(t, err, "%v\n%s", target, r.out)
				assert.Contains(t, r.out, "is outside what", target)
				assert.Contains(t, r.out, "the end of base backup "+first["backup_id"], "the oldest recoverable point")
				assert.Contains(t, r.out, "the last transaction archived", "the newest recoverable point")
				assert.Contains(t, r.out, "LSN "+first["end_lsn"], target)
			}
			r, err := a.recover(t, map[string]string{"RECOVERY_TARGET_TIME": betweenBackups.Format(time.RFC3339Nano), "RECOVERY_TARGET_IMMEDIATE": "true"})
			require.Error(t, err)
			assert.Contains(t, r.out, "at most one recovery target may be set")
		})
		t.Run("recovery never happens in place", func(t *testing.T) {
			t.Parallel()
			env := a.storeEnv(a.server)
			env["PGDATA"] = h.volume("data-source")
			env["RECOVERY_TARGET_IMMEDIATE"] = "true"
			out, err := a.script(env, postgres.RecoverScript)
			require.Error(t, err)
			assert.Contains(t, out, "it is not empty (recovery never happens in place)")
		})
		t.Run("a segment the archive lacks is its end: restore_command exits 1", func(t *testing.T) {
			t.Parallel()
			out, err := a.script(a.storeEnv(a.server), postgres.WALRestoreScript, "0000000100000000000000FF", filepath.Join(os.TempDir(), "never"))
			require.Error(t, err, out)
			assert.Equal(t, 1, err.(*exec.ExitError).ExitCode(), out)
		})
		t.Run("a second server pointed at the same archive is refused", func(t *testing.T) {
			t.Parallel()
			segment := a.store.Path(a.prefix + "/" + a.server + "/wals/0000000100000000/000000010000000000000001.gz")
			before, err := os.ReadFile(segment)
			require.NoError(t, err)
			other := a.primary("data-other")
			h.sql(other.Port, "postgres", "CREATE TABLE t (i int); SELECT pg_switch_wal()")
			require.Eventually(t, func() bool { return a.stats(other.Port).failed > 0 }, time.Minute, 200*time.Millisecond)
			assert.Contains(t, other.Log.String(), "refusing to archive into s3://deckhand/clusters/ns/name-of-database")
			assert.Equal(t, "-", a.stats(other.Port).lastArchived)
			other.StopImmediately(t)
			after, err := os.ReadFile(segment)
			require.NoError(t, err)
			assert.Equal(t, before, after, "the first server's segment is untouched")
		})
	})
	// Retention (expire.sh, which the primary's sidecar runs after each
	// base backup) deletes the base backups no recovery within the policy
	// needs, with the WAL only they needed, and nothing else. The archive
	// is made to end here first: every row is in it.
	a.stopWriter()
	rows := h.sql(a.source.Port, "postgres", "SELECT count(*) FROM ticks")
	last = a.switchAndWait(a.source.Port, time.Minute)
	t.Run("retention deletes only what no recovery needs", func(t *testing.T) {
		backups := func() []string {
			var ids []string
			for _, k := range a.store.Keys(t, a.prefix+"/"+a.server+"/base/") {
				id := strings.Split(strings.TrimPrefix(k, a.prefix+"/"+a.server+"/base/"), "/")[0]
				if len(ids) == 0 || ids[len(ids)-1] != id {
					ids = append(ids, id)
				}
			}
			return ids
		}
		require.Equal(t, []string{first["backup_id"], second["backup_id"]}, backups())
		expire := func(policy string) (string, error) {
			env := a.storeEnv(a.server)
			env["RETENTION_POLICY"] = policy
			return a.script(env, postgres.ExpireScript)
		}
		out, err := expire("RECOVERY WINDOW OF 7 DAYS")
		require.NoError(t, err, out)
		assert.Contains(t, out, "deckhand: retention RECOVERY WINDOW OF 7 DAYS applied to s3://deckhand/clusters/ns/name-of-database")
		assert.Equal(t, []string{first["backup_id"], second["backup_id"]}, backups(), "both are in the window")
		a.requireEverySegment(last)

		// The operator's holds (holds.sh, run by expire.sh first): a
		// pause deletes nothing; a keep spares its backup and the WAL
		// after it; a keep it no longer lists is released, but never a
		// keep somebody made with barman-cloud-backup-keep.
		holds := filepath.Join(h.u.Dir(t, h.root, "holds"), "base-backup-holds")
		setHolds := func(lines ...string) {
			require.NoError(t, os.WriteFile(holds, []byte(strings.Join(lines, "")), 0o644))
		}
		keep := func(id string, flags ...string) string {
			env := a.storeEnv(a.server)
			env["SCRIPTS"] = a.scripts
			script := `. "$SCRIPTS/store.sh"; store_setup; id=$1; shift; barman-cloud-backup-keep $store_endpoint "$@" "$store_url" "$STORE_SERVER" "$id"`
			out, err := h.u.Command(env, append([]string{"sh", "-c", script, "keep", id}, flags...)).CombinedOutput()
			require.NoError(t, err, "%s", out)
			return string(out)
		}
		expireHeld := func(policy string) string {
			env := a.storeEnv(a.server)
			env["RETENTION_POLICY"], env["HOLDS_FILE"] = policy, holds
			out, err := a.script(env, postgres.ExpireScript)
			require.NoError(t, err, out)
			return out
		}
		setHolds(postgres.PauseHold("Database ns/copy recovers from this archive"))
		out = expireHeld("REDUNDANCY 1")
		assert.Contains(t, out, "deckhand: retention paused, nothing deleted: Database ns/copy recovers from this archive")
		assert.Equal(t, []string{first["backup_id"], second["backup_id"]}, backups(), "a pause deletes nothing")

		setHolds(postgres.KeepHold(first["backup_id"], "the newest verified base backup (backup-1)"))
		out = expireHeld("REDUNDANCY 1")
		assert.Contains(t, out, "deckhand: base backup "+first["backup_id"]+" kept: the newest verified base backup (backup-1)")
		assert.Equal(t, []string{first["backup_id"], second["backup_id"]}, backups(), "the held backup is spared")
		assert.Contains(t, keep(first["backup_id"], "--status"), "full")
		a.requireEverySegment(last)

		keep(second["backup_id"], "--target", "standalone")
		setHolds()
		out = expireHeld("REDUNDANCY 1")
		assert.Contains(t, out, "deckhand: base backup "+first["backup_id"]+" released (was: the newest verified base backup (backup-1))")
		assert.NotContains(t, out, second["backup_id"]+" released", "a keep the operator did not make")
		assert.Equal(t, []string{second["backup_id"]}, backups(), "only the newest is kept")
		assert.Contains(t, keep(second["backup_id"], "--status"), "standalone", "somebody's keep stays")
		keep(second["backup_id"], "--release")
		segments := a.archived(a.server)
		assert.False(t, segments["000000010000000000000001"], "WAL before the kept backup is deleted")
		assert.True(t, segments[last], "the archive's end is kept")

		out, err = expire("KEEP 3")
		require.Error(t, err)
		assert.Contains(t, out, "RETENTION_POLICY is 'KEEP 3', not REDUNDANCY <n> or RECOVERY WINDOW OF <n> DAYS|WEEKS|MONTHS")
	})

	// A failover switches the archive to a new timeline: the standby,
	// promoted online as the agent does, archives the new timeline's
	// history file and segments beside its old primary's. A recovery that
	// follows the latest timeline (the default) crosses the switch and
	// holds the rows written after it (from the one base backup retention
	// kept); one that stays on the base backup's timeline (current) holds
	// only those written before.
	t.Run("a recovery crosses a failover's timeline switch", func(t *testing.T) {
		standby := a.serverInto(1, "data-standby", a.server, a.source.Port)
		require.Eventually(t, func() bool {
			return h.sql(standby.Port, "postgres", "SELECT count(*) FROM ticks") == rows
		}, time.Minute, 200*time.Millisecond, "the standby replays every row")
		a.source.Stop(t)
		h.namePrimary(1)
		require.Equal(t, "t", h.sql(standby.Port, "postgres", "SELECT pg_promote()"))
		h.sql(standby.Port, "postgres", "INSERT INTO ticks DEFAULT VALUES; INSERT INTO ticks DEFAULT VALUES")
		after := a.switchAndWait(standby.Port, time.Minute)
		require.True(t, strings.HasPrefix(after, "00000002"), "the new primary writes timeline 2: %s", after)
		isHistory := func(k string) bool { return strings.HasPrefix(path.Base(k), "00000002.history") }
		require.True(t, slices.ContainsFunc(a.store.Keys(t, a.prefix+"/"+a.server+"/wals/"), isHistory), "the new timeline's history file is archived")
		assert.True(t, a.archived(a.server)[last], "the old timeline's last segment stays")
		all := h.sql(standby.Port, "postgres", "SELECT count(*) FROM ticks")

		latest, err := a.recover(t, nil)
		require.NoError(t, err, latest.out)
		assert.Equal(t, second["backup_id"], keyValues(latest.out)["backup_id"])
		assert.Equal(t, all, h.sql(latest.port, "postgres", "SELECT count(*) FROM ticks"), "every row, across the switch, to the end of the archive")
		assert.Equal(t, "3", h.sql(latest.port, "postgres", "SELECT timeline_id FROM pg_control_checkpoint()"), "its own new timeline after 2")

		current, err := a.recover(t, map[string]string{"RECOVERY_TARGET_TIMELINE": "current"})
		require.NoError(t, err, current.out)
		assert.Equal(t, rows, h.sql(current.port, "postgres", "SELECT count(*) FROM ticks"), "only the rows of the base backup's timeline")
	})
}

// A store that goes down must not stop the server, nor lose a segment: its
// own store and server, as stopping the store would break the other
// test's recoveries.
func TestArchivingCatchesUpAfterTheStoreWasDown(t *testing.T) {
	t.Parallel()
	a := startArchiving(t)
	h := a.h
	a.startWriter()
	time.Sleep(time.Second)
	a.requireEverySegment(a.switchAndWait(a.source.Port, time.Minute))

	before := a.stats(a.source.Port)
	writes := a.writes.Load()
	a.store.Stop(t)
	down := time.Now()
	// PostgreSQL reads restore_command's exit 1 as the end of the
	// archive: an unreachable store must not look like that, or a
	// recovery would promote early.
	restored := make(chan error, 1)
	go func() {
		out, err := a.script(a.storeEnv(a.server), postgres.WALRestoreScript, "000000010000000000000001", filepath.Join(os.TempDir(), "never"))
		if err == nil || err.(*exec.ExitError).ExitCode() != 126 {
			err = fmt.Errorf("wal-restore.sh with the store down: %v, want exit status 126\n%s", err, out)
		} else {
			err = nil
		}
		restored <- err
	}()
	// 20 s, or longer (a minute at most) until a failure is counted: a
	// try against a store that refuses connections takes about 11 s.
	for time.Since(down) < 20*time.Second || (a.stats(a.source.Port).failed == before.failed && time.Since(down) < time.Minute) {
		h.sql(a.source.Port, "postgres", "SELECT pg_switch_wal()")
		time.Sleep(2 * time.Second)
	}
	require.NoError(t, <-restored)
	during := a.stats(a.source.Port)
	assert.Greater(t, during.failed, before.failed, "pg_stat_archiver.failed_count while the store is down")
	assert.Greater(t, a.writes.Load(), writes+100, "the server took writes while the store was down")
	assert.Zero(t, a.writeErrs.Load(), "the writer's failed inserts")
	a.store.Restart(t)
	last := a.switchAndWait(a.source.Port, 3*time.Minute)
	a.requireEverySegment(last)
}
