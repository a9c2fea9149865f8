package postgres

import (
	"net/url"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

func TestScriptsAreTheFilesInTheRepository(t *testing.T) {
	scripts := Engine{}.Scripts()
	require.ElementsMatch(t, []string{BootstrapScript, InitScript}, keys(scripts))
	for name, body := range scripts {
		b, err := os.ReadFile("scripts/" + name)
		require.NoError(t, err)
		assert.Equal(t, string(b), body, name)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestConnectionURIQuotesWhatNeedsIt(t *testing.T) {
	uri := Engine{}.ConnectionURI("name of/db", "p@ss:w/rd", "db-rw.ns.svc", 5432, "name of/db")
	u, err := url.Parse(uri)
	require.NoError(t, err)
	assert.Equal(t, "name of/db", u.User.Username())
	pw, _ := u.User.Password()
	assert.Equal(t, "p@ss:w/rd", pw)
	assert.Equal(t, "db-rw.ns.svc:5432", u.Host)
	assert.Equal(t, "/name of/db", u.Path)
	assert.Equal(t, "postgresql://name-of-database:X@h:1/name-of-database", Engine{}.ConnectionURI("name-of-database", "X", "h", 1, "name-of-database"))
}

func TestServerArgsAreSortedSingleArguments(t *testing.T) {
	assert.Equal(t, []string{"-c", "max_connections=50", "-c", "search_path=\"$user\", public", "-c", "wal_keep_size=512MB"},
		serverArgs(map[string]string{"search_path": `"$user", public`, "max_connections": "50"}))
	assert.Equal(t, []string{"-c", "wal_keep_size=1GB"}, serverArgs(map[string]string{"wal_keep_size": "1GB"}))
}

func TestPodsRunAsThePostgresUserOfTheImage(t *testing.T) {
	c := engine.Cluster{Name: "db", Image: "postgres:17.6-alpine", Port: 5432, PrimaryHost: "db-rw"}
	assert.Equal(t, int64(70), *Engine{}.ServerPod(c).SecurityContext.RunAsUser)
	c.Image = "postgres:17.6"
	p := Engine{}.ServerPod(c)
	assert.Equal(t, int64(999), *p.SecurityContext.RunAsUser)
	assert.True(t, *p.SecurityContext.RunAsNonRoot)
	assert.Equal(t, []string{"ALL"}, []string{string(p.Container.SecurityContext.Capabilities.Drop[0])})
}
