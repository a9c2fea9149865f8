package pgbouncer_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/pki"
	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/pooler/pgbouncer"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

func TestINIIsTheSameForTheSameConfig(t *testing.T) {
	c := pgbouncer.Config{ServerHost: "ledger-rw.ns.svc", ServerPort: 5432, PoolMode: "transaction",
		DefaultPoolSize: 20, MaxClientConn: 500, AuthUser: "deckhand_pooler_ledger", ServerTLS: true, ClientTLS: true}
	assert.Equal(t, c.INI(), c.INI())
}

func TestINIPassesEveryDatabaseToTheServerAndAuthenticatesThroughAuthQuery(t *testing.T) {
	ini := pgbouncer.Config{ServerHost: "ledger-rw.ns.svc", ServerPort: 5433, PoolMode: "transaction",
		DefaultPoolSize: 7, MaxClientConn: 300, AuthUser: "deckhand_pooler_ledger"}.INI()
	settings := parseINI(t, ini)
	want := map[string]string{
		"databases.*":                         "host=ledger-rw.ns.svc port=5433",
		"pgbouncer.listen_addr":               "*",
		"pgbouncer.listen_port":               "5432",
		"pgbouncer.unix_socket_dir":           "",
		"pgbouncer.logfile":                   "",
		"pgbouncer.pidfile":                   "",
		"pgbouncer.auth_type":                 "scram-sha-256",
		"pgbouncer.auth_file":                 "/etc/pgbouncer/auth/userlist.txt",
		"pgbouncer.auth_user":                 "deckhand_pooler_ledger",
		"pgbouncer.auth_query":                "SELECT usename, passwd FROM deckhand.pooler_user_search($1)",
		"pgbouncer.admin_users":               "deckhand_pooler_ledger",
		"pgbouncer.ignore_startup_parameters": "extra_float_digits,options",
		"pgbouncer.pool_mode":                 "transaction",
		"pgbouncer.default_pool_size":         "7",
		"pgbouncer.max_client_conn":           "300",
		"pgbouncer.server_connect_timeout":    "15",
		"pgbouncer.server_login_retry":        "1",
		"pgbouncer.server_tls_sslmode":        "disable",
		"pgbouncer.client_tls_sslmode":        "disable",
		"users.deckhand_pooler_ledger":        "max_user_connections=2",
	}
	for k, v := range want {
		got, ok := settings[k]
		if assert.True(t, ok, "%s missing from\n%s", k, ini) {
			assert.Equal(t, v, got, k)
		}
	}
	for _, k := range []string{"pgbouncer.server_tls_ca_file", "pgbouncer.client_tls_cert_file", "pgbouncer.client_tls_key_file"} {
		assert.NotContains(t, settings, k, "no TLS files without TLS")
	}
}

func TestINIVerifiesTheServerAndRequiresTLSOfClientsWithTLS(t *testing.T) {
	settings := parseINI(t, pgbouncer.Config{ServerHost: "h", ServerPort: 5432, AuthUser: "a", ServerTLS: true, ClientTLS: true}.INI())
	assert.Equal(t, "verify-full", settings["pgbouncer.server_tls_sslmode"])
	assert.Equal(t, "/etc/pgbouncer/server-ca/ca.crt", settings["pgbouncer.server_tls_ca_file"])
	assert.Equal(t, "require", settings["pgbouncer.client_tls_sslmode"])
	assert.Equal(t, "/etc/pgbouncer/tls/tls.crt", settings["pgbouncer.client_tls_cert_file"])
	assert.Equal(t, "/etc/pgbouncer/tls/tls.key", settings["pgbouncer.client_tls_key_file"])
}

func TestINIWritesPgBouncersDefaultsForZeroFields(t *testing.T) {
	settings := parseINI(t, pgbouncer.Config{ServerHost: "h", ServerPort: 5432, AuthUser: "a", ListenPort: 6432}.INI())
	assert.Equal(t, "session", settings["pgbouncer.pool_mode"])
	assert.Equal(t, "20", settings["pgbouncer.default_pool_size"])
	assert.Equal(t, "100", settings["pgbouncer.max_client_conn"])
	assert.Equal(t, "6432", settings["pgbouncer.listen_port"])
}

// parseINI reads an ini as PgBouncer does: "section.key" to value, every
// key once.
func parseINI(t *testing.T, ini string) map[string]string {
	t.Helper()
	settings := map[string]string{}
	section := ""
	for _, line := range strings.Split(ini, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, ";") || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "line %q", line)
			key := section + "." + strings.TrimSpace(k)
			require.NotContains(t, settings, key, "%s set twice", key)
			settings[key] = strings.TrimSpace(v)
		}
	}
	return settings
}

func TestUserlistDoublesQuotes(t *testing.T) {
	assert.Equal(t, `"deckhand_pooler_a" "pw"`+"\n", pgbouncer.Userlist("deckhand_pooler_a", "pw"))
	assert.Equal(t, `"a""b" "p""w'\ x"`+"\n", pgbouncer.Userlist(`a"b`, `p"w'\ x`))
}

// A password with every character that needs quoting somewhere: psql's
// :'password', the auth_file's quotes, a connection string.
const authPassword = `pooler "secret" 'pw' \ 1`

// TestPgBouncerInFrontOfPostgreSQL runs the real PgBouncer (Debian's
// /usr/sbin/pgbouncer) with INI and Userlist in front of the host's
// PostgreSQL set up by SetupSQL, as a user of the pooler sees it.
func TestPgBouncerInFrontOfPostgreSQL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg := startPostgres(t, nil)
	pg.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD 'app-pw'`)
	pg.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
	pg.sql(t, "postgres", `CREATE ROLE cannot_login NOLOGIN PASSWORD 'nologin-pw'`)
	pg.sql(t, "postgres", `SET password_encryption = 'md5'; CREATE ROLE md5 LOGIN PASSWORD 'md5-pw'`)
	require.NoError(t, pg.setup("deckhand_pooler_test", authPassword))
	b := pg.startPgBouncer(t, pgbouncer.Config{ServerHost: "127.0.0.1", ServerPort: pg.port, PoolMode: "transaction",
		DefaultPoolSize: 20, MaxClientConn: 600, AuthUser: "deckhand_pooler_test"}, authPassword, nil)

	t.Run("the app role logs in with its password, no other login does", func(t *testing.T) {
		conn, err := connect(ctx, b.port, "app", "app-pw", "app")
		require.NoError(t, err, b.log.String())
		var who string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_user").Scan(&who))
		assert.Equal(t, "app", who)
		require.NoError(t, conn.Close(ctx))

		_, err = connect(ctx, b.port, "app", "wrong", "app")
		assert.ErrorContains(t, err, "SASL authentication failed")
		_, err = connect(ctx, b.port, "postgres", pg.superPassword, "app")
		assert.ErrorContains(t, err, "no such user", "a superuser must not log in through the pooler")
		_, err = connect(ctx, b.port, "cannot_login", "nologin-pw", "app")
		assert.ErrorContains(t, err, "no such user", "a NOLOGIN role")
		_, err = connect(ctx, b.port, "md5", "md5-pw", "app")
		assert.Error(t, err, "a role whose password is stored as MD5")
		_, err = connect(ctx, b.port, "app", "app-pw", "postgres")
		assert.Error(t, err, "a database without the auth function (auth_query runs in the client's database)")
	})

	t.Run("only the pooler's role reads secrets", func(t *testing.T) {
		conn, err := connect(ctx, pg.port, "app", "app-pw", "app")
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "SELECT * FROM "+pgbouncer.AuthFunction+"('app')")
		assert.ErrorContains(t, err, "permission denied")
	})

	t.Run("500 clients share 20 server connections", func(t *testing.T) {
		peak := clientsThroughThePool(ctx, t, pg, b, 500)
		t.Logf("server connections seen at most: %d, %d of them the app's (max_connections 50)", peak.all, peak.app)
		assert.Less(t, peak.all, 50)
		assert.LessOrEqual(t, peak.app, 20, "default_pool_size")
	})

	t.Run("PAUSE holds a query until RESUME", func(t *testing.T) {
		admin := adminConsole(ctx, t, b.port, authPassword)
		app, err := connect(ctx, b.port, "app", "app-pw", "app")
		require.NoError(t, err)
		defer app.Close(ctx)

		admin.exec(ctx, t, "PAUSE")
		// 1.18 has no SHOW STATE: a pause shows as a second PAUSE refused.
		assert.ErrorContains(t, admin.try(ctx, "PAUSE"), "already suspended/paused")
		done := make(chan error, 1)
		go func() { _, err := app.Exec(ctx, "SELECT 1"); done <- err }()
		select {
		case err := <-done:
			t.Fatalf("a query finished on a paused pooler: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		pools := admin.rows(ctx, t, "SHOW POOLS")
		assert.Equal(t, "1", poolOf(t, pools, "app", "app")["cl_waiting"], "the query waits")

		admin.exec(ctx, t, "RESUME")
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("the query did not finish after RESUME")
		}
		assert.ErrorContains(t, admin.try(ctx, "RESUME"), "not paused", "a second RESUME")
	})

	t.Run("the metrics say who waits and what was pooled", func(t *testing.T) { metricsSayWhoWaits(ctx, t, b) })

	t.Run("SetupSQL runs again and a new password replaces the old", func(t *testing.T) {
		require.NoError(t, pg.setup("deckhand_pooler_test", authPassword), "the same password again")
		assert.Equal(t, "t|f|f|1", pg.sql(t, "app",
			`SELECT r.rolcanlogin, r.rolsuper, r.rolinherit, (SELECT count(*) FROM pg_proc WHERE proname = 'pooler_user_search')
			   FROM pg_roles r WHERE rolname = 'deckhand_pooler_test'`))
		const newPassword = "rotated-pw"
		require.NoError(t, pg.setup("deckhand_pooler_test", newPassword))
		_, err := connect(ctx, pg.port, "deckhand_pooler_test", authPassword, "app")
		assert.ErrorContains(t, err, "password authentication failed", "the old password on the server")
		conn, err := connect(ctx, pg.port, "deckhand_pooler_test", newPassword, "app")
		require.NoError(t, err, "the new password on the server")
		require.NoError(t, conn.Close(ctx))

		// The pooler reads its auth_file again on RELOAD; its server
		// connections logged in with the old password stay until KILL.
		admin := adminConsole(ctx, t, b.port, authPassword)
		b.writeUserlist(t, newPassword)
		admin.exec(ctx, t, "RELOAD")
		admin.exec(ctx, t, "KILL app")
		admin.exec(ctx, t, "RESUME app")
		_, err = connectAdmin(ctx, b.port, authPassword)
		assert.Error(t, err, "the old password on the admin console")
		admin = adminConsole(ctx, t, b.port, newPassword)
		app, err := connect(ctx, b.port, "app", "app-pw", "app")
		require.NoError(t, err, "a login through auth_query with the pooler's new password\n%s", b.log.String())
		require.NoError(t, app.Close(ctx))

		log := pg.server.Log.String()
		assert.Contains(t, log, "statement: CREATE ROLE cannot_login", "the server logs statements")
		assert.NotContains(t, log, authPassword)
		assert.NotContains(t, log, newPassword)
	})

	t.Run("SetupSQL never takes the rights of the role running it", func(t *testing.T) {
		assert.ErrorContains(t, pg.setup("postgres", "x"), "is the role running this setup")
		assert.Equal(t, "t", pg.sql(t, "app", `SELECT rolsuper FROM pg_roles WHERE rolname = 'postgres'`))
	})
}

// TestPgBouncerWithTLS: a server that refuses clients without TLS, a
// pooler that verifies its certificate and presents its own to clients.
func TestPgBouncerWithTLS(t *testing.T) {
	t.Parallel()
	// The servers' start counts against it: on two loaded cores, initdb,
	// PostgreSQL and PgBouncer have taken 25 s before the first client.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ca := newTestCA(t)
	pg := startPostgres(t, ca)
	pg.sql(t, "postgres", `CREATE ROLE app LOGIN PASSWORD 'app-pw'`)
	pg.sql(t, "postgres", `CREATE DATABASE app OWNER app`)
	require.NoError(t, pg.setup("deckhand_pooler_test", authPassword))
	b := pg.startPgBouncer(t, pgbouncer.Config{ServerHost: "127.0.0.1", ServerPort: pg.port, PoolMode: "session",
		AuthUser: "deckhand_pooler_test", ServerTLS: true, ClientTLS: true}, authPassword, ca)
	caFile := filepath.Join(b.dir, "client-ca.crt")
	require.NoError(t, os.WriteFile(caFile, ca.pem, 0o644))

	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=app password=app-pw dbname=app sslmode=verify-full sslrootcert=%s", b.port, caFile))
	require.NoError(t, err, "a client verifying the pooler's certificate\n%s", b.log.String())
	defer conn.Close(ctx)
	var serverTLS bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&serverTLS))
	assert.True(t, serverTLS, "the pooler's connection to the server is encrypted")

	_, err = connect(ctx, b.port, "app", "app-pw", "app")
	assert.ErrorContains(t, err, "SSL required", "a client without TLS")

	// A pooler given another CA does not trust the server.
	other := newTestCA(t)
	distrusting := pg.startPgBouncer(t, pgbouncer.Config{ServerHost: "127.0.0.1", ServerPort: pg.port,
		AuthUser: "deckhand_pooler_test", ServerTLS: true}, authPassword, other)
	// The login waits for a server connection PgBouncer keeps failing to
	// make (server_login_retry, until client_login_timeout). The client
	// stays until PgBouncer has logged why: a client that gave up first
	// leaves PgBouncer nothing to try for, which on a loaded machine
	// happened before PgBouncer had read its startup packet.
	attempt, stopAttempt := context.WithCancel(ctx)
	defer stopAttempt()
	login := make(chan error, 1)
	go func() {
		conn, err := connect(attempt, distrusting.port, "app", "app-pw", "app")
		if err == nil {
			conn.Close(ctx)
		}
		login <- err
	}()
	assert.Eventually(t, func() bool { return strings.Contains(distrusting.log.String(), "certificate verify failed") },
		time.Minute, 100*time.Millisecond, "PgBouncer's log:\n%s", distrusting.log.String())
	stopAttempt()
	assert.Error(t, <-login, "a server whose certificate the pooler cannot verify")
}

// clientsThroughThePool opens n client connections through the pooler,
// all held open at once, each running a few transactions, and returns the
// most server connections pg_stat_activity showed meanwhile.
func clientsThroughThePool(ctx context.Context, t *testing.T, pg *postgres, b *bouncer, n int) peakConnections {
	t.Helper()
	var peak peakConnections
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchServerConnections(ctx, pg, &peak, stop)
	}()

	var open, wg sync.WaitGroup
	open.Add(n)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- oneClient(ctx, b.port, i, &open)
		}()
	}
	wg.Wait()
	close(stop)
	<-watched
	close(errs)
	var failed []error
	for err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	require.Empty(t, failed, "%d of %d clients failed: %v\n%s", len(failed), n, errors.Join(failed...), b.log.String())
	return peak
}

// peakConnections are the most client backends the server had at once,
// and the app role's most (the rest are the pooler's role's, running
// auth_query for clients logging in).
type peakConnections struct{ all, app int }

// oneClient logs in, waits until every client is in, then runs three
// transactions on its one connection.
func oneClient(ctx context.Context, port int32, i int, open *sync.WaitGroup) error {
	conn, err := connect(ctx, port, "app", "app-pw", "app")
	open.Done()
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	open.Wait()
	for range 3 {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var got int
			if err := tx.QueryRow(ctx, "SELECT $1::int FROM pg_sleep(0.005)", i).Scan(&got); err != nil {
				return err
			}
			if got != i {
				return fmt.Errorf("client %d read %d", i, got)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
	}
	return nil
}

// watchServerConnections keeps the most client backends the server had
// until stop, counted from a connection of its own (not counted).
func watchServerConnections(ctx context.Context, pg *postgres, peak *peakConnections, stop <-chan struct{}) {
	conn, err := pg.connect(ctx, "postgres", pg.superPassword, "postgres")
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	for {
		var all, app int
		err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE usename = 'app') FROM pg_stat_activity
			 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&all, &app)
		if err == nil {
			peak.all, peak.app = max(peak.all, all), max(peak.app, app)
		}
		select {
		case <-stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// connect logs in over TCP without TLS. Statements are not prepared by
// name (exec mode), as transaction pooling requires of clients.
func connect(ctx context.Context, port int32, user, password, dbname string) (*pgx.Conn, error) {
	cfg, err := clientConfig(port, "", user, password, dbname)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// clientConfig is connect's configuration; with caFile, the client
// requires TLS and verifies the certificate and its name (verify-full)
// against that CA. The connect timeout is long: 500 SCRAM logins at once
// queue in PgBouncer's one process, and on a loaded machine the last one
// waits well over 10 s; the tests ask that every client gets in, not how
// fast (the benchmark says that).
func clientConfig(port int32, caFile, user, password, dbname string) (*pgx.ConnConfig, error) {
	// The host is in the string: pgx names the server TLS verifies from it.
	conn := fmt.Sprintf("host=127.0.0.1 port=%d sslmode=disable connect_timeout=60", port)
	if caFile != "" {
		conn = fmt.Sprintf("host=127.0.0.1 port=%d sslmode=verify-full sslrootcert=%s connect_timeout=60", port, caFile)
	}
	cfg, err := pgx.ParseConfig(conn)
	if err != nil {
		return nil, err
	}
	cfg.User, cfg.Password, cfg.Database = user, password, dbname
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	return cfg, nil
}

// console is a connection to PgBouncer's admin console, which speaks the
// simple query protocol only.
type console struct{ conn *pgconn.PgConn }

func connectAdmin(ctx context.Context, port int32, password string) (*pgconn.PgConn, error) {
	return connectAdminTLS(ctx, port, "", password)
}

// connectAdminTLS is connectAdmin, with TLS as clientConfig's caFile says.
func connectAdminTLS(ctx context.Context, port int32, caFile, password string) (*pgconn.PgConn, error) {
	cfg, err := clientConfig(port, caFile, "deckhand_pooler_test", password, "pgbouncer")
	if err != nil {
		return nil, err
	}
	return pgconn.ConnectConfig(ctx, &cfg.Config)
}

func adminConsole(ctx context.Context, t testing.TB, port int32, password string) *console {
	return adminConsoleTLS(ctx, t, port, "", password)
}

func adminConsoleTLS(ctx context.Context, t testing.TB, port int32, caFile, password string) *console {
	t.Helper()
	conn, err := connectAdminTLS(ctx, port, caFile, password)
	require.NoError(t, err, "the admin console")
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &console{conn: conn}
}

func (c *console) exec(ctx context.Context, t testing.TB, sql string) {
	t.Helper()
	require.NoError(t, c.try(ctx, sql), sql)
}

func (c *console) try(ctx context.Context, sql string) error {
	_, err := c.conn.Exec(ctx, sql).ReadAll()
	return err
}

// rows are the rows of sql's one result, column name to text.
func (c *console) rows(ctx context.Context, t *testing.T, sql string) []map[string]string {
	t.Helper()
	results, err := c.conn.Exec(ctx, sql).ReadAll()
	require.NoError(t, err, sql)
	require.Len(t, results, 1, sql)
	var rows []map[string]string
	for _, values := range results[0].Rows {
		row := map[string]string{}
		for i, f := range results[0].FieldDescriptions {
			row[f.Name] = string(values[i])
		}
		rows = append(rows, row)
	}
	require.NotEmpty(t, rows, sql)
	return rows
}

func poolOf(t *testing.T, pools []map[string]string, database, user string) map[string]string {
	t.Helper()
	for _, p := range pools {
		if p["database"] == database && p["user"] == user {
			return p
		}
	}
	t.Fatalf("no pool of %s/%s in %v", database, user, pools)
	return nil
}

// postgres is a PostgreSQL 15 server of the host's, run as the
// unprivileged user, with max_connections 50.
type postgres struct {
	bin           string
	u             *pgtest.User
	dir           string
	port          int32
	superPassword string
	// caFile is the CA's certificate clients verify the server's with,
	// when it has TLS ("" without).
	caFile string
	// server logs every statement: SetupSQL must keep its password out.
	server *pgtest.Server
}

// connect logs in to the server as connect does, with TLS when the server
// has it.
func (pg *postgres) connect(ctx context.Context, user, password, dbname string) (*pgx.Conn, error) {
	cfg, err := clientConfig(pg.port, pg.caFile, user, password, dbname)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// startPostgres starts it; with ca, the server has a certificate ca
// issued for 127.0.0.1 and refuses clients without TLS.
func startPostgres(t testing.TB, ca *testCA) *postgres {
	t.Helper()
	u := pgtest.Unprivileged(t)
	pg := &postgres{bin: pgtest.Bin(t), u: u, dir: u.TempDir(t), superPassword: "super-pw"}
	port := pgtest.FreePort(t)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	pg.port = int32(p)
	pwfile := filepath.Join(pg.dir, "pwfile")
	require.NoError(t, os.WriteFile(pwfile, []byte(pg.superPassword+"\n"), 0o644))
	data := filepath.Join(pg.dir, "data")
	out, err := u.Command(nil, []string{filepath.Join(pg.bin, "initdb"), "-D", data, "-U", "postgres",
		"--pwfile", pwfile, "--auth", "scram-sha-256", "--locale", "C", "-E", "UTF8", "--no-sync"}).CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)
	argv := []string{filepath.Join(pg.bin, "postgres"), "-D", data,
		"-p", port, "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + pg.dir,
		"-c", "max_connections=50", "-c", "fsync=off", "-c", "log_statement=all"}
	if ca != nil {
		cert, key := ca.issue(t, u, pg.dir, "server")
		require.NoError(t, os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte("hostssl all all 127.0.0.1/32 scram-sha-256\n"), 0o600))
		argv = append(argv, "-c", "ssl=on", "-c", "ssl_cert_file="+cert, "-c", "ssl_key_file="+key)
		pg.caFile = filepath.Join(pg.dir, "ca.crt")
		writeOwned(t, u, pg.caFile, ca.pem, 0o644)
	}
	pg.server = u.StartServer(t, pg.bin, map[string]string{"PGPORT": port}, argv)
	return pg
}

// testCA issues certificates for 127.0.0.1.
type testCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pem    []byte
	pemDir string
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	pem, cert, err := pki.Sign(tmpl, tmpl, key.Public(), key)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem}
}

// issue writes name.crt and name.key into dir, u's (key mode 0600, as
// both PostgreSQL and PgBouncer want it), and returns their paths.
func (ca *testCA) issue(t testing.TB, u *pgtest.User, dir, name string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	certPEM, _, err := pki.Sign(tmpl, ca.cert, k.Public(), ca.key)
	require.NoError(t, err)
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeOwned(t, u, cert, certPEM, 0o644)
	writeOwned(t, u, key, pki.KeyPEM(k), 0o600)
	return cert, key
}

// writeOwned writes a file u owns (root's writes otherwise), replacing
// one that is there.
func writeOwned(t testing.TB, u *pgtest.User, path string, data []byte, mode os.FileMode) {
	t.Helper()
	_ = os.Remove(path)
	require.NoError(t, os.WriteFile(path, data, mode))
	if u != nil {
		require.NoError(t, os.Chown(path, u.UID, u.GID))
	}
}

// sql runs sql as the superuser in dbname.
func (pg *postgres) sql(t testing.TB, dbname, sql string) string {
	t.Helper()
	out, err := pgtest.PSQL(pg.bin, strconv.Itoa(int(pg.port)), "postgres", pg.superPassword, dbname, sql)
	require.NoError(t, err, "%s: %s", sql, out)
	return out
}

// setup runs SetupSQL in the app database as the operator will: psql as
// the superuser, the role and password as psql variables, the SQL on
// stdin.
func (pg *postgres) setup(role, password string) error {
	cmd := exec.Command(filepath.Join(pg.bin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-v", "role="+role, "-v", "password="+password, "-h", "127.0.0.1", "-p", strconv.Itoa(int(pg.port)), "-U", "postgres", "-f", "-")
	cmd.Env = []string{"PGPASSWORD=" + pg.superPassword, "PGDATABASE=app", "PGCONNECT_TIMEOUT=5"}
	cmd.Stdin = strings.NewReader(pgbouncer.SetupSQL())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// bouncer is the real PgBouncer, run as the unprivileged user with the
// pod's directories on the host.
type bouncer struct {
	port int32
	dir  string
	u    *pgtest.User
	log  *syncbuf.Buffer
}

func (pg *postgres) startPgBouncer(t testing.TB, c pgbouncer.Config, password string, ca *testCA) *bouncer {
	t.Helper()
	port, err := strconv.Atoi(pgtest.FreePort(t))
	require.NoError(t, err)
	c.ListenPort = int32(port)
	b := &bouncer{port: c.ListenPort, dir: pg.u.TempDir(t), u: pg.u, log: &syncbuf.Buffer{}}
	b.writeUserlist(t, password)
	if c.ServerTLS {
		writeOwned(t, pg.u, filepath.Join(b.hostDir(t, pgbouncer.ServerCADir), "ca.crt"), ca.pem, 0o644)
	}
	if c.ClientTLS {
		ca.issue(t, pg.u, b.hostDir(t, pgbouncer.ClientTLSDir), "tls")
	}
	// The pod's paths, on the host.
	ini := strings.ReplaceAll(c.INI(), pgbouncer.ConfigDir+"/", b.dir+"/")
	iniPath := filepath.Join(b.dir, pgbouncer.ConfigFile)
	require.NoError(t, os.WriteFile(iniPath, []byte(ini), 0o444))

	cmd := pg.u.Command(nil, []string{"/usr/sbin/pgbouncer", iniPath})
	cmd.Stdout, cmd.Stderr = b.log, b.log
	require.NoError(t, cmd.Start(), "Debian's pgbouncer (hack/test-deps.sh installs it)")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { stopPgBouncer(t, cmd, exited, b.log) })
	require.Eventually(t, func() bool {
		select {
		case err := <-exited:
			exited <- err
			return true
		default:
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
		// A minute: at a load of 60 on two cores (the whole suite beside
		// it) PgBouncer took more than 10 s to listen.
	}, time.Minute, 50*time.Millisecond, "pgbouncer never listened on %d\n%s", port, b.log)
	select {
	case err := <-exited:
		t.Fatalf("pgbouncer exited: %v\n%s", err, b.log.String())
	default:
	}
	return b
}

// writeUserlist writes the auth_file as the Secret volume gives it: the
// server user's, mode 0400.
func (b *bouncer) writeUserlist(t testing.TB, password string) {
	t.Helper()
	path := filepath.Join(b.hostDir(t, pgbouncer.AuthDir), pgbouncer.UserlistFile)
	writeOwned(t, b.u, path, []byte(pgbouncer.Userlist("deckhand_pooler_test", password)), 0o400)
}

// hostDir is the host's directory for podDir, one of the pod's
// directories under ConfigDir.
func (b *bouncer) hostDir(t testing.TB, podDir string) string {
	t.Helper()
	rel, err := filepath.Rel(pgbouncer.ConfigDir, podDir)
	require.NoError(t, err)
	return b.u.Dir(t, b.dir, rel)
}

// stopPgBouncer shuts it down at once (SIGTERM, the kubelet's stop
// signal), within the pod's 30 s grace period; it usually takes
// milliseconds, and has taken more than 10 s on two loaded cores.
func stopPgBouncer(t testing.TB, cmd *exec.Cmd, exited chan error, log *syncbuf.Buffer) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Errorf("pgbouncer did not stop within the 30 s grace period after SIGTERM; its log:\n%s", log.String())
	}
}
