package postgres_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInitCreatesDatabasesNamedWithSQLAndShell runs the init Job's script
// against a real PostgreSQL with database names that admission accepts
// (spec.name: up to 63 bytes, no control characters) and that would break
// a script that pasted them into SQL or a shell: the database and its
// role are created under exactly that name, the role can log in to it,
// and nothing else happens (the postgres database is still there).
func TestInitCreatesDatabasesNamedWithSQLAndShell(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	server := h.primary("data")
	for _, name := range []string{
		`app'; DROP DATABASE postgres; --`,
		`$(touch /tmp/pwned) ` + "`id`" + ` ; rm -rf / #`,
		`a"b\c 'd' %s :x données_李`,
	} {
		h.cluster.Database, h.cluster.AppUser = name, name
		h.init(server.Port)
		h.init(server.Port) // again, as after an operator restart: idempotent

		quoted := "'" + strings.ReplaceAll(name, "'", "''") + "'"
		assert.Equal(t, "1", h.sql(server.Port, "postgres", "SELECT count(*) FROM pg_database WHERE datname = "+quoted), name)
		assert.Equal(t, "1", h.sql(server.Port, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = "+quoted), name)
		who, err := h.appSQL(server.Port, "SELECT current_user || '|' || current_database()")
		require.NoError(t, err, who)
		assert.Equal(t, name+"|"+name, who)
	}
	assert.Equal(t, "1", h.sql(server.Port, "postgres", "SELECT count(*) FROM pg_database WHERE datname = 'postgres'"))
}

// TestBackupAndRestoreReadTheDatabaseNamedNotAConnectionString backs up
// and restores databases whose names libpq would read as a connection
// string if a script passed them as one (pg_dump --dbname, psql -d): an
// "=" makes a name conninfo, a "postgresql://" prefix makes it a URI. The
// dump holds exactly that database's table and the restore writes into
// exactly that database, on another server; the postgres database is
// never touched. None of the names sends a connection anywhere but the
// test's own servers (a host is a Unix socket directory, or none).
func TestBackupAndRestoreReadTheDatabaseNamedNotAConnectionString(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	source := h.primary("data-source")
	target := h.primary("data-target")
	for i, name := range []string{
		`dbname=postgres`,
		`dbname=postgres host=/nonexistent-deckhand`,
		`postgresql:///postgres`,
		`postgres://?dbname=postgres`,
		`name with spaces`,
		`it's "quoted" \ too`,
		`dbname='postgres'`,
	} {
		h.cluster.Database, h.cluster.AppUser = name, fmt.Sprintf("app%d", i)
		h.init(source.Port)
		table := fmt.Sprintf("rows_of_%d", i)
		h.sql(source.Port, name, "CREATE TABLE "+table+" (v text); INSERT INTO "+table+" VALUES ('written to "+strings.ReplaceAll(name, "'", "''")+"')")

		report, out, err := h.backup(source.Port, "backup", fmt.Sprintf("names/%d.dump", i))
		require.NoError(t, err, "%s: %s", name, out)
		restored, out, err := h.restore(target.Port, "backup", report.File, report.SHA256)
		require.NoError(t, err, "%s: %s", name, out)
		assert.NotEmpty(t, restored.ServerVersion)
		h.init(target.Port)
		assert.Equal(t, "written to "+name, h.sql(target.Port, name, "SELECT v FROM "+table), name)
	}
	for _, port := range []string{source.Port, target.Port} {
		assert.Equal(t, "0", h.sql(port, "postgres", "SELECT count(*) FROM pg_class WHERE relname LIKE 'rows_of_%'"), "a table reached the postgres database")
	}
}
