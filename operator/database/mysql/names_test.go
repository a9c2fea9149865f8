package mysql_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/mysql"
	"github.com/deckhand-dev/deckhand/operator/database/mysql/mysqltest"
)

// TestBackupDumpsDatabasesNamedLikeOptionsAsDatabases: the backup Job
// passes each user database's name to the dump tool as an argument. Names
// that look like the dump tool's options ("--no-data", "--where=0") or
// hold "=", spaces and quotes are dumped as databases, with their rows,
// and restored into another server as they were; a replica's clone (the
// same dump tool, in bootstrap.sh) holds them too.
func TestBackupDumpsDatabasesNamedLikeOptionsAsDatabases(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	e := mysql.Engine{}
	primary := h.server("primary", 0, "")
	names := []string{"--no-data", "--where=0", "a=b c", `it's "quoted"`, `back\slash`, "tab\there"}
	for _, name := range names {
		ident := "`" + strings.ReplaceAll(name, "`", "``") + "`"
		h.sql(primary.Port, "CREATE DATABASE "+ident+"; CREATE TABLE "+ident+".t (v VARCHAR(100)); INSERT INTO "+ident+".t VALUES ("+sqlString(name)+")")
	}
	// A replica clones the primary from a dump of the same databases.
	replica := h.server("replica", 1, primary.Port)
	for _, name := range names {
		ident := "`" + strings.ReplaceAll(name, "`", "``") + "`"
		got, err := mysqltest.SQL(replica.Port, "root", rootPassword, "", "SELECT v FROM "+ident+".t")
		require.NoError(t, err, got)
		assert.Equal(t, name, rawValue(got), "the replica's clone of %s", name)
	}
	replica.Stop(t)

	backupDir := mysqltest.Dir(t, h.u, h.root, "backup")
	rep, out, err := h.job(e.BackupPod(h.cluster, engine.Backup{File: "names.sql", Host: "x", ClaimName: "b"}),
		map[string]string{"SOURCE_HOST": "127.0.0.1", "SOURCE_PORT": primary.Port, "BACKUP_DIR": backupDir})
	require.NoError(t, err, out)

	h.secrets["other-secret"] = map[string]string{"password": "other-root"}
	other := h.cluster
	other.Name, other.SuperuserSecret = "restored", "other-secret"
	saved := h.cluster
	h.cluster = other
	restored := h.server("restored", 0, "")
	h.cluster = saved
	_, out, err = h.job(e.RestorePod(other, engine.Restore{File: "names.sql", SHA256: rep.SHA256, ClaimName: "b"}),
		map[string]string{"PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": restored.Port, "BACKUP_DIR": backupDir})
	require.NoError(t, err, out)
	for _, name := range names {
		ident := "`" + strings.ReplaceAll(name, "`", "``") + "`"
		got, err := mysqltest.SQL(restored.Port, "root", "other-root", "", "SELECT v FROM "+ident+".t")
		require.NoError(t, err, got)
		assert.Equal(t, name, rawValue(got), name)
	}
}

// TestAMySQLBackupNeverReportsAFileItDidNotWrite: as PostgreSQL's, a
// file already under the backup's name is reported only to a retry of
// the Job that wrote it; anything else is refused and left alone.
func TestAMySQLBackupNeverReportsAFileItDidNotWrite(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	e := mysql.Engine{}
	primary := h.server("primary", 0, "")
	h.sql(primary.Port, "CREATE DATABASE d; CREATE TABLE d.t (v INT); INSERT INTO d.t VALUES (1)")
	backupDir := mysqltest.Dir(t, h.u, h.root, "backup")
	backup := func(file, jobUID string) (engine.Report, string, error) {
		return h.job(e.BackupPod(h.cluster, engine.Backup{File: file, Host: "x", ClaimName: "b"}),
			map[string]string{"SOURCE_HOST": "127.0.0.1", "SOURCE_PORT": primary.Port, "BACKUP_DIR": backupDir, "BACKUP_JOB_UID": jobUID})
	}
	first, out, err := backup("db/same.sql", "first-job")
	require.NoError(t, err, out)
	original, err := os.ReadFile(filepath.Join(backupDir, "db", "same.sql"))
	require.NoError(t, err)

	h.sql(primary.Port, "UPDATE d.t SET v = 2")
	rep, out, err := backup("db/same.sql", "second-job")
	require.Error(t, err, "a file another Job wrote was reported as this backup: %+v\n%s", rep, out)
	assert.Contains(t, out, "this backup did not write it")
	now, err := os.ReadFile(filepath.Join(backupDir, "db", "same.sql"))
	require.NoError(t, err)
	assert.Equal(t, original, now, "the file is left as it was")

	again, out, err := backup("db/same.sql", "first-job")
	require.NoError(t, err, out)
	assert.Equal(t, first, again, "a retry of the Job that wrote it reports it")

	require.NoError(t, os.WriteFile(filepath.Join(backupDir, "db", "by-hand.sql"), []byte("-- Dump completed\n"), 0o644))
	_, out, err = backup("db/by-hand.sql", "third-job")
	require.Error(t, err, out)
	assert.Contains(t, out, "this backup did not write it")
}

// sqlString is s as a MariaDB string literal (default sql_mode).
func sqlString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(s) + "'"
}

// rawValue undoes the batch mode's escaping of one value (mysqltest.SQL
// runs the client with -B).
func rawValue(s string) string {
	return strings.NewReplacer(`\\`, `\`, `\t`, "\t", `\n`, "\n").Replace(s)
}
