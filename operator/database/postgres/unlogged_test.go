package postgres_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// unloggedData is an application that keeps its sessions in an unlogged
// table numbered by an unlogged sequence (neither written to the WAL, so a
// standby has none of their contents) beside an ordinary table; rows' last
// row (1) is written last, so a standby that has it has replayed
// everything before.
const unloggedData = `
CREATE UNLOGGED SEQUENCE session_no;
CREATE UNLOGGED TABLE sessions (id int PRIMARY KEY DEFAULT nextval('session_no'), token text);
INSERT INTO sessions (token) SELECT 'token ' || g FROM generate_series(1, 3) g;
CREATE TABLE rows (id int PRIMARY KEY);
INSERT INTO rows SELECT generate_series(2, 5);
INSERT INTO rows VALUES (1);
`

// withUnloggedTable starts a primary holding unloggedData and a standby
// streaming from it, which backup Jobs are offered (STANDBY_HOST).
func withUnloggedTable(t *testing.T) (h *host, primary, standby *pgtest.Server) {
	t.Helper()
	h = newHost(t)
	primary = h.primary("data-0")
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, unloggedData)
	require.NoError(t, err, out)
	standby = h.standby(1, "data-1", primary.Port)
	waitForRow(t, h, standby.Port, "1")
	h.standbyPort = standby.Port
	return h, primary, standby
}

// backupOfferingStandby runs a backup Job as a scheduled backup of a
// Database with standbys runs: given the primary (on port) and a standby
// it may read instead when the standby is close enough (1 GiB here: the
// lag never decides).
func (h *host) backupOfferingStandby(port, file string) (engine.Report, string, error) {
	h.t.Helper()
	pod := postgres.Engine{}.BackupPod(h.cluster, engine.Backup{
		File: file, Host: "name-of-database-rw", Standby: "name-of-database-1.name-of-database-headless", MaxLagBytes: 1 << 30, ClaimName: "backup",
	})
	return h.job(pod, "backup", port, map[string]string{engine.BackupVolume: h.volume("backup")})
}

// restoredRows is the data of table in the dump file, as pg_restore
// writes it (COPY lines).
func restoredRows(t *testing.T, h *host, file, table string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(h.bin, "pg_restore"), "-f", "-", "-a", "-t", table, filepath.Join(h.volume("backup"), file)).CombinedOutput()
	require.NoError(t, err, string(out))
	return string(out)
}

// TestABackupOfADatabaseWithAnUnloggedTableSucceedsWhenItHasAStandby: a
// backup offered a standby completes, and the row counts it recorded are
// what its dump holds: a verification restores it and finds them.
func TestABackupOfADatabaseWithAnUnloggedTableSucceedsWhenItHasAStandby(t *testing.T) {
	t.Parallel()
	h, primary, _ := withUnloggedTable(t)

	report, out, err := h.backupOfferingStandby(primary.Port, "unlogged.dump")
	require.NoError(t, err, "the backup failed:\n%s", out)
	counts, err := os.ReadFile(filepath.Join(h.volume("backup"), "unlogged.dump"+engine.CountsSuffix))
	require.NoError(t, err)
	assert.Equal(t, "public.rows\t5\npublic.sessions\t3\n", string(counts))

	verified, out, err := h.verify("backup", report.File, report.SHA256, "SELECT count(*) = 3 FROM sessions")
	require.NoError(t, err, out)
	require.NotNil(t, verified.Verification, out)
	assert.Equal(t, []string{"checksum:passed", "restore:passed", "rowCounts:passed", "userCheck:passed"}, checkNames(verified.Verification), out)
}

// TestADumpHoldsTheUnloggedTablesRowsAndSaysWhyItReadThePrimary: pg_dump
// leaves the data of unlogged tables out on a standby (it cannot read
// them during recovery), so a backup of a database that holds one reads
// the primary, whatever the standby's lag, and its report says so; the
// dump holds the primary's rows. A database without one reads the
// standby again.
func TestADumpHoldsTheUnloggedTablesRowsAndSaysWhyItReadThePrimary(t *testing.T) {
	t.Parallel()
	h, primary, standby := withUnloggedTable(t)

	report, out, err := h.backupOfferingStandby(primary.Port, "unlogged.dump")
	require.NoError(t, err, "the backup failed:\n%s", out)
	assert.Nil(t, report.LagBytes, "read from the primary:\n%s", out)
	assert.Contains(t, report.SourceReason, "unlogged", out)
	assert.Contains(t, report.SourceReason, "public.sessions", out)
	assert.Contains(t, restoredRows(t, h, "unlogged.dump", "sessions"), "3\ttoken 3\n", "the dump holds the unlogged table's rows")
	assert.Contains(t, restoredRows(t, h, "unlogged.dump", "session_no"), "setval('public.session_no', 3, true)",
		"the dump holds the unlogged sequence's value (restored at its start, the next session's id would be taken)")
	assert.EqualValues(t, 8, report.Rows)

	// No unlogged table or sequence left: the standby is read again.
	out, err = h.appSQL(primary.Port, "DROP TABLE sessions; DROP SEQUENCE session_no; INSERT INTO rows VALUES (6)")
	require.NoError(t, err, out)
	waitForRow(t, h, standby.Port, "6")
	h.jobUID = "job-uid-2"
	report, out, err = h.backupOfferingStandby(primary.Port, "logged.dump")
	require.NoError(t, err, out)
	require.NotNil(t, report.LagBytes, "read from the standby:\n%s", out)
	assert.Contains(t, report.SourceReason, "bytes behind the primary", out)
	assert.EqualValues(t, 6, report.Rows)
}

// TestADumpOnAStandbyThatWouldLeaveUnloggedRowsOutFails: an unlogged
// table the check on the primary did not see (made after it) but the
// standby's snapshot holds fails the backup with a message that names
// it: a dump without its rows is never reported complete (the Job's next
// try finds the table and reads the primary). The check here reads a
// second primary that holds no unlogged table, as the real primary did
// just before the table was made.
func TestADumpOnAStandbyThatWouldLeaveUnloggedRowsOutFails(t *testing.T) {
	t.Parallel()
	h, _, _ := withUnloggedTable(t)
	before := h.server(h.scripts, 0, "data-before", "")
	h.init(before.Port)

	_, out, err := h.backupOfferingStandby(before.Port, "unlogged.dump")
	require.Error(t, err, "a dump that leaves unlogged rows out completed:\n%s", out)
	assert.Contains(t, out, "public.sessions")
	assert.Contains(t, out, "unlogged")
	_, err = os.Stat(filepath.Join(h.volume("backup"), "unlogged.dump"))
	assert.True(t, os.IsNotExist(err), "no file under the backup's name: %v", err)
}

// TestABackupWarnsOnlyOfRolesTheOperatorDidNotMake: the replication role
// is the operator's own (a new Database's standbys get it again), so the
// backup's warning about roles a restore does not recreate leaves it out;
// a role made by hand is still named.
func TestABackupWarnsOnlyOfRolesTheOperatorDidNotMake(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary := h.primary("data-0")
	h.init(primary.Port)
	require.Equal(t, "1", h.sql(primary.Port, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = '"+postgres.ReplicationUser+"'"),
		"the primary has the replication role")

	_, out, err := h.backup(primary.Port, "backup", "first.dump")
	require.NoError(t, err, out)
	assert.NotContains(t, out, "roles besides", "no role but the operator's own exists")

	h.sql(primary.Port, "postgres", "CREATE ROLE reporting LOGIN")
	h.jobUID = "job-uid-2"
	_, out, err = h.backup(primary.Port, "backup", "second.dump")
	require.NoError(t, err, out)
	assert.Contains(t, out, "roles besides the superuser and the database's owner exist (reporting)")
}
