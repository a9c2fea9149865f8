package postgres_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// The backup, restore and upgrade scripts run here against the host's
// PostgreSQL (see host): rows written, dumped, restored into another
// server, compared.

// appData writes what a user's application would: several tables (one in
// a schema of its own), a serial and an identity column, a sequence
// advanced by hand, a view, a non-ASCII value.
const appData = `
CREATE TABLE customers (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL);
CREATE TABLE orders (id serial PRIMARY KEY, customer int REFERENCES customers, item text, placed timestamptz DEFAULT now());
CREATE SCHEMA billing;
CREATE TABLE billing.invoices (no bigint PRIMARY KEY, total numeric(12,2), note text);
CREATE SEQUENCE billing.invoice_no START 1000;
CREATE VIEW big_orders AS SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer;
INSERT INTO customers (name) SELECT 'customer ' || g FROM generate_series(1, 50) g;
INSERT INTO customers (name) VALUES ('Zoë Grüßmann — 東京 🚢');
INSERT INTO orders (customer, item) SELECT 1 + g % 51, 'item ' || g FROM generate_series(1, 500) g;
DELETE FROM orders WHERE id > 490;
SELECT setval('billing.invoice_no', 4242);
INSERT INTO billing.invoices SELECT nextval('billing.invoice_no'), g * 1.25, 'naïve café' FROM generate_series(1, 7) g;
`

// appState is everything appData wrote, as one short string: each table's
// row count and a digest of its rows in order, the non-ASCII row, and each
// sequence's last value.
const appState = `
SELECT concat_ws(E'\n',
  (SELECT count(*) || ' ' || md5(string_agg(id || ' ' || name, E'\n' ORDER BY id)) FROM customers),
  (SELECT count(*) || ' ' || md5(string_agg(id || ' ' || customer || ' ' || item || ' ' || placed, E'\n' ORDER BY id)) FROM orders),
  (SELECT string_agg(no || ' ' || total || ' ' || note, E'\n' ORDER BY no) FROM billing.invoices WHERE no < 4245),
  (SELECT name FROM customers WHERE id = 51),
  (SELECT count(*) FROM big_orders),
  (SELECT string_agg(schemaname || '.' || sequencename || ' ' || coalesce(last_value::text, 'unused'), E'\n' ORDER BY schemaname, sequencename)
     FROM pg_sequences WHERE schemaname NOT IN ('pg_catalog', 'information_schema')))
`

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

func TestBackupThenRestoreIntoANewServerKeepsRowsAndSequences(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	source := h.primary("data-source")
	h.init(source.Port)
	out, err := h.appSQL(source.Port, appData)
	require.NoError(t, err, out)
	want := h.sql(source.Port, h.cluster.Database, appState)
	require.Contains(t, want, "Zoë Grüßmann — 東京 🚢")
	require.Contains(t, want, "billing.invoice_no 4249")
	require.Contains(t, want, "4243 1.25 naïve café")

	report, out, err := h.backup(source.Port, "backup", "name-of-database/first.dump")
	require.NoError(t, err, out)
	file := filepath.Join(h.volume("backup"), "name-of-database", "first.dump")
	info, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, "name-of-database/first.dump", report.File)
	assert.Equal(t, info.Size(), report.Size)
	assert.Equal(t, fileSHA256(t, file), report.SHA256, "the Report's checksum is the file's")
	assert.True(t, strings.HasPrefix(report.Version(), pgtest.Major(h.bin)+"."), "reported version %q", report.ServerVersion)
	partials, _ := filepath.Glob(filepath.Join(h.volume("backup"), "name-of-database", "*.partial"))
	assert.Empty(t, partials)

	// A new server, restored before its init Job, as a Database created
	// with fromBackup is.
	target := h.primary("data-target")
	_, out, err = h.restore(target.Port, "backup", report.File, strings.Repeat("0", 64))
	require.Error(t, err, "a wrong checksum is refused")
	assert.Contains(t, out, "refusing to restore")
	assert.Contains(t, out, report.SHA256)
	assert.Equal(t, "0", h.sql(target.Port, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'name-of-database'"),
		"a refused restore does not even create the database")

	restored, out, err := h.restore(target.Port, "backup", report.File, strings.ToUpper(report.SHA256))
	require.NoError(t, err, out)
	assert.Equal(t, report.ServerVersion, restored.ServerVersion)
	assert.Equal(t, want, h.sql(target.Port, h.cluster.Database, appState))

	// Before the init Job nobody logs in as the app role; after it, the app
	// Secret's password works and the role owns what was restored.
	_, err = h.appSQL(target.Port, "SELECT 1")
	require.Error(t, err, "the restored role has no password yet")
	h.init(target.Port)
	out, err = h.appSQL(target.Port, "SELECT string_agg(DISTINCT tableowner, ',') FROM pg_tables WHERE schemaname IN ('public', 'billing')")
	require.NoError(t, err, out)
	assert.Equal(t, "name-of-database", out)
	out, err = h.appSQL(target.Port, "WITH o AS (INSERT INTO orders (customer, item) VALUES (51, 'after the restore') RETURNING id) SELECT id FROM o")
	require.NoError(t, err, out)
	assert.Equal(t, "501", out, "the serial goes on from where the source's was (rows 491 to 500 were deleted)")
	out, err = h.appSQL(target.Port, "SELECT nextval('billing.invoice_no')")
	require.NoError(t, err, out)
	assert.Equal(t, "4250", out)

	// A retried restore Job changes nothing and succeeds.
	before := h.sql(target.Port, h.cluster.Database, appState)
	_, out, err = h.restore(target.Port, "backup", report.File, report.SHA256)
	require.NoError(t, err, out)
	assert.Contains(t, out, "already restored")
	assert.Equal(t, before, h.sql(target.Port, h.cluster.Database, appState))

	// A database that holds anything else is never restored over.
	_, out, err = h.restore(source.Port, "backup", report.File, report.SHA256)
	require.Error(t, err)
	assert.Contains(t, out, "refusing to restore over them")
	assert.Equal(t, want, h.sql(source.Port, h.cluster.Database, appState))
}

func TestARestoreThatFailsPartWayLeavesNothing(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	source := h.primary("data-source")
	h.init(source.Port)
	out, err := h.appSQL(source.Port, appData)
	require.NoError(t, err, out)
	report, out, err := h.backup(source.Port, "backup", "a.dump")
	require.NoError(t, err, out)

	// A dump cut short, with a checksum of its own (so it passes the
	// check): pg_restore fails part-way, after some tables were created.
	file := filepath.Join(h.volume("backup"), "a.dump")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file+".cut", b[:len(b)*2/3], 0o644))
	target := h.primary("data-target")
	_, out, err = h.restore(target.Port, "backup", "a.dump.cut", fileSHA256(t, file+".cut"))
	require.Error(t, err, out)
	assert.Contains(t, out, "nothing was restored")
	assert.Equal(t, "0", h.sql(target.Port, h.cluster.Database,
		"SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN ('public', 'billing')"),
		"the part before the failure was rolled back")

	// The whole file restores into the same database afterwards.
	_, out, err = h.restore(target.Port, "backup", report.File, report.SHA256)
	require.NoError(t, err, out)
	assert.Equal(t, h.sql(source.Port, h.cluster.Database, appState), h.sql(target.Port, h.cluster.Database, appState))
}

// holdLock keeps an ACCESS EXCLUSIVE lock on table until the returned
// function is called: pg_dump, which has created its output file by then,
// waits for it.
func holdLock(t *testing.T, h *host, port, table string) func() {
	t.Helper()
	cmd := h.u.Command(map[string]string{"PGPASSWORD": h.superPassword()},
		[]string{filepath.Join(h.bin, "psql"), "-X", "-q", "-h", "127.0.0.1", "-p", port, "-U", postgres.Superuser, "-d", h.cluster.Database})
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	_, err = io.WriteString(stdin, "BEGIN; LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(0);\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return h.sql(port, h.cluster.Database, "SELECT count(*) FROM pg_locks WHERE mode = 'AccessExclusiveLock' AND relation = '"+table+"'::regclass") == "1"
	}, 30*time.Second, 50*time.Millisecond)
	return func() {
		stdin.Close()
		_ = cmd.Wait()
	}
}

// processIn is the pid of a process named name in process group pgid.
func processIn(pgid int, name string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		comm, _ := os.ReadFile(filepath.Join(d, "comm"))
		if strings.TrimSpace(string(comm)) != name {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			return pid
		}
	}
	return 0
}

func TestAKilledBackupLeavesNoFileThatLooksComplete(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	server := h.primary("data")
	h.init(server.Port)
	out, err := h.appSQL(server.Port, appData)
	require.NoError(t, err, out)
	dir := h.volume("backup")

	// startBackup runs a backup that waits for a lock held on orders, with
	// its output file created, until the test kills it.
	waitingDumps := func() int {
		n, _ := strconv.Atoi(h.sql(server.Port, "postgres", "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_dump' AND wait_event_type = 'Lock'"))
		return n
	}
	startBackup := func(file string) (*syncbuf.Buffer, chan error, int) {
		// A killed pg_dump's server process waits on the lock until it is
		// released (it does not notice its client is gone): count ours on
		// top of those.
		before := waitingDumps()
		pod := postgres.Engine{}.BackupPod(h.cluster, engine.Backup{File: file, Host: "x", ClaimName: "backup"})
		cmd := h.u.Command(h.env(pod, "backup", server.Port, map[string]string{engine.BackupVolume: dir}), pgtest.HostCommand(t, pod.Container, h.scripts))
		log := &syncbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = log, log
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var dump int
		require.Eventually(t, func() bool {
			dump = processIn(cmd.Process.Pid, "pg_dump")
			_, err := os.Stat(filepath.Join(dir, file+".partial"))
			return dump != 0 && err == nil && waitingDumps() == before+1
		}, 60*time.Second, 50*time.Millisecond, "pg_dump never waited on the lock:\n%s", log)
		return log, done, cmd.Process.Pid
	}

	// pg_dump killed: the script fails and removes its partial file.
	release := holdLock(t, h, server.Port, "orders")
	log, done, pgid := startBackup("one.dump")
	require.NoError(t, syscall.Kill(processIn(pgid, "pg_dump"), syscall.SIGKILL))
	require.Error(t, <-done, log.String())
	assert.NoFileExists(t, filepath.Join(dir, "one.dump"))
	assert.NoFileExists(t, filepath.Join(dir, "one.dump.partial"))

	// The whole Job killed (its pod gone): only the partial file is left.
	_, done, pgid = startBackup("two.dump")
	require.NoError(t, syscall.Kill(-pgid, syscall.SIGKILL))
	<-done
	release()
	assert.NoFileExists(t, filepath.Join(dir, "two.dump"))
	assert.FileExists(t, filepath.Join(dir, "two.dump.partial"))

	// The next backup succeeds and removes what the killed one left.
	report, out, err := h.backup(server.Port, "backup", "three.dump")
	require.NoError(t, err, out)
	assert.Contains(t, out, "left by a backup that did not finish")
	assert.NoFileExists(t, filepath.Join(dir, "two.dump.partial"))
	assert.Equal(t, fileSHA256(t, filepath.Join(dir, "three.dump")), report.SHA256)

	// A retried Job whose first attempt completed the file reports it
	// again and never rewrites it.
	info, err := os.Stat(filepath.Join(dir, "three.dump"))
	require.NoError(t, err)
	again, out, err := h.backup(server.Port, "backup", "three.dump")
	require.NoError(t, err, out)
	assert.Equal(t, report, again)
	info2, err := os.Stat(filepath.Join(dir, "three.dump"))
	require.NoError(t, err)
	assert.Equal(t, info.ModTime(), info2.ModTime())
}

// TestABackupNeverReportsAFileItDidNotWrite: a file already under the
// backup's name that another Job wrote (a DatabaseBackup deleted while
// running, one that failed, one whose finalizer was removed by hand, then
// made again under the same name) or that nothing recorded is refused,
// not reported as this backup's result, and left as it is. A retry of the
// Job that wrote it still reports it.
func TestABackupNeverReportsAFileItDidNotWrite(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	server := h.primary("data")
	h.init(server.Port)
	out, err := h.appSQL(server.Port, "CREATE TABLE t (v text); INSERT INTO t VALUES ('old')")
	require.NoError(t, err, out)
	dir := h.volume("backup")
	file := filepath.Join(dir, "db", "same-name.dump")

	h.jobUID = "first-job"
	first, out, err := h.backup(server.Port, "backup", "db/same-name.dump")
	require.NoError(t, err, out)
	require.Equal(t, fileSHA256(t, file), first.SHA256)

	// A new Job for a backup of the same name, after new writes.
	_, err = h.appSQL(server.Port, "UPDATE t SET v = 'new'")
	require.NoError(t, err)
	h.jobUID = "second-job"
	report, out, err := h.backup(server.Port, "backup", "db/same-name.dump")
	require.Error(t, err, "a file another Job wrote was reported as this backup: %+v\n%s", report, out)
	assert.Contains(t, out, "this backup did not write it")
	assert.Equal(t, first.SHA256, fileSHA256(t, file), "the file is left as it was")

	// A retry of the first Job reports its own file.
	h.jobUID = "first-job"
	again, out, err := h.backup(server.Port, "backup", "db/same-name.dump")
	require.NoError(t, err, out)
	assert.Equal(t, first, again)

	// A file nothing recorded (copied there by hand, or by an older
	// deckhand) is refused too.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "db", "by-hand.dump"), []byte("not a dump"), 0o644))
	_, out, err = h.backup(server.Port, "backup", "db/by-hand.dump")
	require.Error(t, err, out)
	assert.Contains(t, out, "this backup did not write it")

	// Without the Job's UID (a pod outside a Job) an existing file is
	// always refused.
	h.jobUID = ""
	_, out, err = h.backup(server.Port, "backup", "db/same-name.dump")
	require.Error(t, err, out)
}

// backedUpForUpgrade is where the upgrade tests start: data-0's server
// holds the app's rows, its pre-upgrade dump is on the backup volume, and it
// is stopped. It returns the data volume, the rows, and the dump's report.
func (h *host) backedUpForUpgrade(t *testing.T) (data, rows string, dump engine.Report) {
	t.Helper()
	data = h.volume("data-0")
	server := h.primary("data-0")
	h.init(server.Port)
	out, err := h.appSQL(server.Port, appData)
	require.NoError(t, err, out)
	rows = h.sql(server.Port, h.cluster.Database, appState)
	// As the operator does: writes fenced (the app role NOLOGIN) before
	// the dump.
	_, out, err = h.fence(server.Port, false)
	require.NoError(t, err, out)
	dump, out, err = h.backup(server.Port, "backup", "pre-upgrade.dump")
	require.NoError(t, err, out)
	server.Stop(t)
	return data, rows, dump
}

// upgradeJob runs the upgrade Job's pod on the data volume.
func (h *host) upgradeJob(t *testing.T, data string, u engine.Upgrade) (engine.Report, string, error) {
	pod := postgres.Engine{}.UpgradePod(h.cluster, u)
	return h.job(pod, "upgrade", pgtest.FreePort(t), map[string]string{engine.BackupVolume: h.volume("backup"), engine.DataVolume: data})
}

func TestUpgradeRestoresIntoANewDirectoryAndKeepsTheOldOne(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	data, want, report := h.backedUpForUpgrade(t)

	// Same version both sides: the host has one PostgreSQL; the path is the
	// one a major upgrade takes.
	version := report.Version()
	upgrade := func() (engine.Report, string, error) {
		return h.upgradeJob(t, data, engine.Upgrade{
			File: report.File, SHA256: report.SHA256, ClaimName: "backup", DataClaimName: "data-name-of-database-0",
			FromVersion: version, ToVersion: version,
		})
	}
	pgdata := filepath.Join(data, "pgdata")
	old := filepath.Join(data, "pgdata.old-"+version)
	marker := filepath.Join(pgdata, "deckhand-test-old-directory")
	require.NoError(t, os.WriteFile(marker, nil, 0o600))

	upgraded, out, err := upgrade()
	require.NoError(t, err, out)
	assert.Equal(t, report.ServerVersion, upgraded.ServerVersion)
	assert.FileExists(t, filepath.Join(old, "deckhand-test-old-directory"), "the old directory is kept, as it was")
	assert.NoFileExists(t, marker, "the data directory is a new one")
	assert.NoDirExists(t, pgdata+".deckhand-upgrade")
	assert.NoDirExists(t, pgdata+".deckhand-upgraded")

	// The server starts on the new directory: rows, sequences, and the app
	// Secret's password (a backup holds no roles: the Job made it), and the
	// app role logs in although the old directory's was fenced.
	server := h.primary("data-0")
	assert.Equal(t, want, h.sql(server.Port, h.cluster.Database, appState))
	out, err = h.appSQL(server.Port, "SELECT current_user")
	require.NoError(t, err, out)
	server.Stop(t)

	// Run again: nothing to do, nothing lost.
	again, out, err := upgrade()
	require.NoError(t, err, out)
	assert.Equal(t, upgraded, again)
	assert.Contains(t, out, "already the upgraded directory")
	assert.FileExists(t, filepath.Join(old, "deckhand-test-old-directory"))

	// A Job killed between the two renames of the swap (the old directory
	// moved, the new one not yet in place) finishes the swap when run again.
	require.NoError(t, os.Rename(pgdata, pgdata+".deckhand-upgraded"))
	_, out, err = upgrade()
	require.NoError(t, err, out)
	assert.Contains(t, out, "finishing the swap")
	assert.FileExists(t, filepath.Join(pgdata, "PG_VERSION"))
	assert.FileExists(t, filepath.Join(old, "deckhand-test-old-directory"))

	// A Job killed while restoring left an incomplete directory: it is
	// made again (here, from the start: the old directory back in place).
	require.NoError(t, os.RemoveAll(pgdata))
	require.NoError(t, os.Rename(old, pgdata))
	h.u.Dir(t, pgdata+".deckhand-upgrade")
	require.NoError(t, os.WriteFile(filepath.Join(pgdata+".deckhand-upgrade", "PG_VERSION"), []byte("junk"), 0o644))
	_, out, err = upgrade()
	require.NoError(t, err, out)
	assert.FileExists(t, filepath.Join(old, "deckhand-test-old-directory"))
	server = h.primary("data-0")
	assert.Equal(t, want, h.sql(server.Port, h.cluster.Database, appState))
	server.Stop(t)

	// A wrong checksum is refused before anything moves.
	require.NoError(t, os.RemoveAll(pgdata))
	require.NoError(t, os.Rename(old, pgdata))
	report.SHA256 = strings.Repeat("f", 64)
	_, out, err = upgrade()
	require.Error(t, err)
	assert.Contains(t, out, "refusing to restore")
	assert.FileExists(t, marker)
	assert.NoDirExists(t, old)
}

func TestRollbackPutsTheOldDirectoryBackWhereverTheUpgradeStopped(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	data, want, report := h.backedUpForUpgrade(t)

	version := report.Version()
	run := func(rollback bool) (engine.Report, string, error) {
		u := engine.Upgrade{
			File: report.File, SHA256: report.SHA256, ClaimName: "backup", DataClaimName: "data-name-of-database-0",
			FromVersion: version, ToVersion: version, Rollback: rollback,
		}
		if rollback {
			// As the controller runs it: no dump, no backup volume.
			u.File, u.SHA256, u.ClaimName = "", "", ""
		}
		return h.upgradeJob(t, data, u)
	}
	pgdata := filepath.Join(data, "pgdata")
	old := filepath.Join(data, "pgdata.old-"+version)
	oldMarker := filepath.Join(pgdata, "deckhand-test-old-directory")
	require.NoError(t, os.WriteFile(oldMarker, nil, 0o600))
	failedDirs := func() []string {
		dirs, err := filepath.Glob(filepath.Join(data, "pgdata.failed-"+version+"-*"))
		require.NoError(t, err)
		return dirs
	}

	// After a complete swap (the new primary never became ready): the old
	// directory is back, the one the new version served is kept aside.
	_, out, err := run(false)
	require.NoError(t, err, out)
	require.NoFileExists(t, oldMarker)
	newMarker := filepath.Join(pgdata, "deckhand-test-new-directory")
	require.NoError(t, os.WriteFile(newMarker, nil, 0o600))
	back, out, err := run(true)
	require.NoError(t, err, out)
	assert.Equal(t, report.ServerVersion, back.ServerVersion)
	assert.Contains(t, out, "putting the old data directory")
	assert.FileExists(t, oldMarker, "the old directory is PGDATA again")
	assert.NoDirExists(t, old)
	require.Len(t, failedDirs(), 1)
	assert.FileExists(t, filepath.Join(failedDirs()[0], "deckhand-test-new-directory"), "what the new version served is kept")
	server := h.primary("data-0")
	assert.Equal(t, want, h.sql(server.Port, h.cluster.Database, appState))
	server.Stop(t)

	// Run again: nothing moves.
	_, out, err = run(true)
	require.NoError(t, err, out)
	assert.FileExists(t, oldMarker)
	assert.Len(t, failedDirs(), 1)

	// A Job killed between the two renames of the swap: the old directory
	// moved aside, the complete new one not in place yet.
	require.NoError(t, os.Rename(pgdata, old))
	h.u.Dir(t, pgdata+".deckhand-upgraded")
	_, out, err = run(true)
	require.NoError(t, err, out)
	assert.FileExists(t, oldMarker)
	assert.NoDirExists(t, pgdata+".deckhand-upgraded")
	assert.Len(t, failedDirs(), 1, "nothing served to keep")

	// A Job that failed while restoring: its incomplete directory goes,
	// the old one never moved.
	h.u.Dir(t, pgdata+".deckhand-upgrade")
	_, out, err = run(true)
	require.NoError(t, err, out)
	assert.NoDirExists(t, pgdata+".deckhand-upgrade")
	assert.FileExists(t, oldMarker)
	server = h.primary("data-0")
	assert.Equal(t, want, h.sql(server.Port, h.cluster.Database, appState))
	server.Stop(t)

	// Nothing to go back to: refused, nothing touched.
	require.NoError(t, os.WriteFile(filepath.Join(pgdata, "PG_VERSION"), []byte("99\n"), 0o600))
	_, out, err = run(true)
	require.Error(t, err)
	assert.Contains(t, out, "nothing to roll back to")
	assert.FileExists(t, oldMarker)
}

func TestTheServerRemovesTheOldDirectoryOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	data := h.volume("data-0")
	server := h.primary("data-0")
	h.init(server.Port)
	server.Stop(t)
	old := filepath.Join(data, "pgdata.old-14.9")
	h.u.Dir(t, old)
	require.NoError(t, os.WriteFile(filepath.Join(old, "PG_VERSION"), []byte("14\n"), 0o644))

	server = h.primary("data-0")
	assert.DirExists(t, old)
	server.Stop(t)

	h.cluster.RemoveOldData = true
	server = h.primary("data-0")
	assert.NoDirExists(t, old)
	assert.Contains(t, server.Log.String(), "removing the old data directory")
	out, err := h.appSQL(server.Port, "SELECT current_database()")
	require.NoError(t, err, out)
}
