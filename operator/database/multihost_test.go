package database

import (
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/mysql"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/servertls"
)

// The app Secret's multi-host keys name every instance under the headless
// Service, with the port, in ordinal order; the read-write strings ask for
// the primary, the read strings prefer a standby; every string gives up
// on a server after MultiHostConnectTimeout; with TLS on they verify the
// server against the mounted ca.crt, without it they leave sslmode to
// the driver. pgx parses the libpq forms as libpq does.
func TestMultiHostKeysNameEveryInstance(t *testing.T) {
	const password = "pa ss@w/rd'"
	ca, err := servertls.NewCA("ns", "db", time.Now())
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o600))
	for _, tc := range []struct {
		name     string
		replicas int32
		port     int32
		bundle   string
		hosts    string
	}{
		{"one replica, no TLS", 1, 5432, "", "db-0.db-headless.ns.svc:5432"},
		{"three replicas, no TLS", 3, 5432, "", "db-0.db-headless.ns.svc:5432,db-1.db-headless.ns.svc:5432,db-2.db-headless.ns.svc:5432"},
		{"three replicas, TLS, another port", 3, 6543, "PEM", "db-0.db-headless.ns.svc:6543,db-1.db-headless.ns.svc:6543,db-2.db-headless.ns.svc:6543"},
		{"one replica, TLS", 1, 5432, "PEM", "db-0.db-headless.ns.svc:5432"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := sampleNamed("db")
			db.Namespace = "ns"
			db.Spec.Replicas, db.Spec.Port = tc.replicas, tc.port
			data := connectionOf(db, postgres.Engine{}, tc.bundle).appData(postgres.Engine{}, password)
			tls := ""
			if tc.bundle != "" {
				tls = "&sslmode=verify-full&sslrootcert=%2Fetc%2Fdeckhand%2Fdb%2Fca.crt"
			}
			// The password: escaped in the URI's user information (libpq
			// decodes %XX there) and in the JDBC query (pgjdbc decodes it
			// as a form: + is a space).
			prefix := "postgresql://name-of-database:pa%20ss%40w%2Frd%27@" + tc.hosts + "/name-of-database?connect_timeout=2" + tls
			assert.Equal(t, prefix+"&target_session_attrs=read-write", data[AppMultiHostURIKey])
			assert.Equal(t, prefix+"&target_session_attrs=prefer-standby", data[AppMultiHostROURIKey])
			jdbc := "jdbc:postgresql://" + tc.hosts + "/name-of-database?connectTimeout=2&password=pa+ss%40w%2Frd%27&sslResponseTimeout=2000" + tls
			assert.Equal(t, jdbc+"&targetServerType=primary&user=name-of-database", data[AppMultiHostJDBCURIKey])
			assert.Equal(t, jdbc+"&targetServerType=preferSecondary&user=name-of-database", data[AppMultiHostROJDBCURIKey])
			// The keys the Secret had stay as they were.
			assert.Equal(t, "db-rw.ns.svc", data["host"])
			assert.NotContains(t, data["uri"], "target_session_attrs")

			// pgx reads them: every host, the password, the timeout, the
			// check of the session, TLS.
			for _, key := range []string{AppMultiHostURIKey, AppMultiHostROURIKey} {
				uri := data[key]
				if tc.bundle != "" {
					// pgx reads the CA file as it parses: the test's.
					uri = strings.Replace(uri, url.QueryEscape(CAMountDir+"/"+AppCAKey), url.QueryEscape(caFile), 1)
				}
				cfg, err := pgconn.ParseConfig(uri)
				require.NoError(t, err, key)
				var hosts []string
				for _, c := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...) {
					h := c.Host + ":" + strconv.Itoa(int(c.Port))
					if len(hosts) == 0 || hosts[len(hosts)-1] != h {
						hosts = append(hosts, h)
					}
					if tc.bundle != "" {
						require.NotNil(t, c.TLSConfig, "%s: verify-full to %s", key, h)
						assert.Equal(t, c.Host, c.TLSConfig.ServerName, key)
					}
				}
				assert.Equal(t, tc.hosts, strings.Join(hosts, ","), key)
				assert.Equal(t, password, cfg.Password, key)
				assert.Equal(t, 2*time.Second, cfg.ConnectTimeout, key)
				assert.NotNil(t, cfg.ValidateConnect, "%s checks what the server is", key)
			}
		})
	}
}

// Strings built for the host's servers (127.0.0.1 on ports of their own)
// go through the same function.
func TestMultiHostTakesAnyHostList(t *testing.T) {
	m := MultiHost{Hosts: []string{"127.0.0.1:5001", "127.0.0.1:5002"}, Database: "d b", User: "u", Password: "p"}
	assert.Equal(t, "postgresql://u:p@127.0.0.1:5001,127.0.0.1:5002/d%20b?connect_timeout=2&target_session_attrs=read-write", m.URI("read-write"))
	assert.Equal(t, "jdbc:postgresql://127.0.0.1:5001,127.0.0.1:5002/d%20b?connectTimeout=2&password=p&sslResponseTimeout=2000&targetServerType=primary&user=u", m.JDBCURI("primary"))
}

// A scale-out changes the connection's hash, so the operator rewrites the
// keys (keeping the password); a Database of another engine has none.
func TestMultiHostKeysFollowTheReplicasAndThePostgreSQLEngineOnly(t *testing.T) {
	db := sampleNamed("db")
	db.Spec.Replicas = 2
	two := connectionOf(db, postgres.Engine{}, "")
	db.Spec.Replicas = 3
	three := connectionOf(db, postgres.Engine{}, "")
	assert.NotEqual(t, two.hash(), three.hash())
	assert.Contains(t, three.appData(postgres.Engine{}, "p")[AppMultiHostURIKey], "db-2.db-headless.default.svc:5432")
	assert.NotContains(t, two.appData(postgres.Engine{}, "p")[AppMultiHostURIKey], "db-2.")

	db.Spec.Engine = dbv1.Engine("MySQL") // a MySQLCluster's
	data := connectionOf(db, mysql.Engine{}, "").appData(mysql.Engine{}, "p")
	for _, k := range []string{AppMultiHostURIKey, AppMultiHostJDBCURIKey, AppMultiHostROURIKey, AppMultiHostROJDBCURIKey} {
		assert.NotContains(t, data, k)
	}
}
