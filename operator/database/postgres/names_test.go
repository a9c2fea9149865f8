package postgres_test

import (
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
