// Package pgbouncer knows PgBouncer (Debian 12's 1.18) as the Pooler runs
// it in front of a Database: its pgbouncer.ini, its auth_file and the SQL
// that gives the Database what PgBouncer's auth_query needs.
//
// How a client logs in: PgBouncer asks the client for SCRAM-SHA-256 and
// checks it against the role's SCRAM secret, which it reads from the
// server with auth_query, connected as the pooler's own role (AuthUser,
// the one role in the auth_file, with its password in plain text so
// PgBouncer can log in with SCRAM itself). PgBouncer then logs in to the
// server as the client's role with the keys the client's SCRAM exchange
// proved (SCRAM pass-through): it never holds the role's password. This
// works only while the secret the server checks is the one auth_query
// returned, which it is, since both are the server's; a role whose
// password is stored as MD5 cannot log in through the pooler.
//
// PgBouncer 1.18 has no auth_dbname: auth_query runs in the database the
// client asks for, so SetupSQL's function must exist in every database
// clients reach through the pooler (the Database's app database); a client
// asking for any other database is refused at login.
package pgbouncer

import (
	"fmt"
	"strings"
)

const (
	// Port is where PgBouncer listens in the pod.
	Port = 5432
	// ConfigDir holds pgbouncer.ini (a ConfigMap volume).
	ConfigDir = "/etc/pgbouncer"
	// AuthDir holds userlist.txt (a Secret volume, mode 0400).
	AuthDir = "/etc/pgbouncer/auth"
	// ServerCADir holds ca.crt, the CA of the Database's server
	// certificate, when the server has TLS.
	ServerCADir = "/etc/pgbouncer/server-ca"
	// ClientTLSDir holds tls.crt and tls.key, which the pooler presents to
	// its clients when ClientTLS is on.
	ClientTLSDir = "/etc/pgbouncer/tls"
	// AuthFunction is the function auth_query calls (SetupSQL makes it).
	AuthFunction = "deckhand.pooler_user_search"
)

// File names inside the directories above.
const (
	// ConfigFile is pgbouncer.ini's name in ConfigDir.
	ConfigFile = "pgbouncer.ini"
	// UserlistFile is the auth_file's name in AuthDir.
	UserlistFile = "userlist.txt"
)

// PgBouncer's own defaults, written out when a Config leaves the field
// zero, so the ini says what runs.
const (
	defaultPoolMode        = "session"
	defaultDefaultPoolSize = 20
	defaultMaxClientConn   = 100
)

// Config is what a Pooler's pgbouncer.ini depends on.
type Config struct {
	// ServerHost is the Database's read-write Service, e.g. ledger-rw.ns.svc.
	ServerHost string
	ServerPort int32
	// PoolMode is "session" or "transaction" ("" is session). In
	// transaction mode a client must not rely on session state between
	// transactions, named prepared statements included (PgBouncer 1.18
	// does not track them): pgx with default_query_exec_mode=exec or
	// simple_protocol, pgjdbc with prepareThreshold=0.
	PoolMode string
	// DefaultPoolSize is the server connections per database and role
	// (0 is 20).
	DefaultPoolSize int32
	// MaxClientConn is the client connections PgBouncer accepts (0 is 100).
	MaxClientConn int32
	// AuthUser is the pooler's own role, e.g. deckhand_pooler_<name>: it
	// runs auth_query and is the admin console's one admin.
	AuthUser string
	// ServerTLS: the server has TLS; PgBouncer requires it and verifies
	// the server's certificate and name (verify-full) against
	// ServerCADir/ca.crt.
	ServerTLS bool
	// ClientTLS: PgBouncer presents ClientTLSDir/tls.crt and tls.key to its
	// clients and refuses those that do not use TLS. PgBouncer 1.18 then
	// also loads the system CAs (/etc/ssl/certs/ca-certificates.crt) and
	// does not start without them: the image carries them.
	ClientTLS bool
	// ListenPort is where PgBouncer listens (0 is Port); tests run it on a
	// free port.
	ListenPort int32
}

// INI is the pgbouncer.ini for c. The same Config gives the same bytes, so
// the ConfigMap (and the pods' hash of it) changes only when c does.
func (c Config) INI() string {
	var b strings.Builder
	b.WriteString("; written by deckhand from the Pooler: edits are overwritten\n")
	b.WriteString("[databases]\n")
	b.WriteString("; every database name passes through to the Database's primary\n")
	fmt.Fprintf(&b, "* = host=%s port=%d\n", c.ServerHost, c.ServerPort)
	b.WriteString("\n[pgbouncer]\n")
	writeSettings(&b, c.listenSettings())
	writeSettings(&b, c.authSettings())
	writeSettings(&b, c.poolSettings())
	writeSettings(&b, timeoutSettings())
	writeSettings(&b, c.serverTLSSettings())
	writeSettings(&b, c.clientTLSSettings())
	b.WriteString("\n[users]\n")
	b.WriteString("; the pooler's own role only looks passwords up: a few server connections,\n")
	b.WriteString("; so that the application's pools keep the server's slots (a lookup waits\n")
	b.WriteString("; for a free one rather than failing)\n")
	fmt.Fprintf(&b, "%s = max_user_connections=%d\n", c.AuthUser, AuthUserConnections)
	return b.String()
}

// AuthUserConnections is the most server connections each PgBouncer
// opens as the pooler's own role. Without a cap it gets a pool of
// default_pool_size like any role, and a burst of logins (hundreds of
// clients reconnecting after a switchover) fills the server's
// max_connections with lookups: the server refuses the next login, and
// PgBouncer then refuses every new client for server_login_retry.
const AuthUserConnections = 2

// setting is one line of the ini, with the comment above it saying why.
type setting struct {
	why, key, value string
}

func writeSettings(b *strings.Builder, settings []setting) {
	for _, s := range settings {
		if s.why != "" {
			fmt.Fprintf(b, "; %s\n", s.why)
		}
		if s.value == "" {
			fmt.Fprintf(b, "%s =\n", s.key)
			continue
		}
		fmt.Fprintf(b, "%s = %s\n", s.key, s.value)
	}
}

func (c Config) listenSettings() []setting {
	port := c.ListenPort
	if port == 0 {
		port = Port
	}
	return []setting{
		{"", "listen_addr", "*"},
		{"", "listen_port", fmt.Sprint(port)},
		{"no unix socket: clients come over TCP only", "unix_socket_dir", ""},
		{"the log goes to stderr, the process stays in the foreground", "logfile", ""},
		{"", "pidfile", ""},
	}
}

func (c Config) authSettings() []setting {
	return []setting{
		{"", "auth_type", "scram-sha-256"},
		{"the pooler's own role only; every other role's secret comes from auth_query", "auth_file", AuthDir + "/" + UserlistFile},
		{"", "auth_user", c.AuthUser},
		{AuthFunction + " returns nothing for superusers and roles that cannot log in", "auth_query", "SELECT usename, passwd FROM " + AuthFunction + "($1)"},
		{"the admin console's one admin (SHOW POOLS, PAUSE, RESUME): the pooler's role", "admin_users", c.AuthUser},
		{"startup parameters psql and pgjdbc send that PgBouncer would refuse", "ignore_startup_parameters", "extra_float_digits,options"},
	}
}

func (c Config) poolSettings() []setting {
	mode, size, clients := c.PoolMode, c.DefaultPoolSize, c.MaxClientConn
	if mode == "" {
		mode = defaultPoolMode
	}
	if size == 0 {
		size = defaultDefaultPoolSize
	}
	if clients == 0 {
		clients = defaultMaxClientConn
	}
	return []setting{
		{"", "pool_mode", mode},
		{"", "default_pool_size", fmt.Sprint(size)},
		{"", "max_client_conn", fmt.Sprint(clients)},
	}
}

func timeoutSettings() []setting {
	return []setting{
		{"PgBouncer's default: a login (TLS, SCRAM, a new backend) can take seconds on a busy node, and a login cut short makes PgBouncer refuse new clients for server_login_retry; a Service without a ready endpoint refuses at once anyway", "server_connect_timeout", "15"},
		{"after a failed server login (a primary restarting) try again in a second, not 15", "server_login_retry", "1"},
		{"how long a client waits for a server connection, a PAUSE for a switchover included", "query_wait_timeout", "120"},
		{"a client that does not finish logging in is dropped", "client_login_timeout", "60"},
		{"idle server connections close, so the server's slots come back", "server_idle_timeout", "600"},
		{"server connections are renewed hourly, so none outlives a change on the server for long", "server_lifetime", "3600"},
	}
}

func (c Config) serverTLSSettings() []setting {
	if !c.ServerTLS {
		return []setting{{"the server has no TLS", "server_tls_sslmode", "disable"}}
	}
	return []setting{
		{"the server's certificate must chain to the Database's CA and name ServerHost", "server_tls_sslmode", "verify-full"},
		{"", "server_tls_ca_file", ServerCADir + "/ca.crt"},
	}
}

// clientTLSSettings: with a certificate, TLS is required, not preferred:
// a Database with TLS refuses clients without it, and the pooler in front
// of it must not be the way around that.
func (c Config) clientTLSSettings() []setting {
	if !c.ClientTLS {
		return []setting{{"", "client_tls_sslmode", "disable"}}
	}
	return []setting{
		{"clients must use TLS, as the Database requires of its own clients", "client_tls_sslmode", "require"},
		{"", "client_tls_cert_file", ClientTLSDir + "/tls.crt"},
		{"", "client_tls_key_file", ClientTLSDir + "/tls.key"},
	}
}

// Userlist is the auth_file: the pooler's own role and its password in
// plain text (PgBouncer logs in to the server with it). A double quote in
// either is written twice, as PgBouncer's auth_file wants. The file is
// line based, so neither may hold a line break or a NUL: the operator
// generates passwords without them.
func Userlist(role, password string) string {
	return quoteUserlist(role) + " " + quoteUserlist(password) + "\n"
}

func quoteUserlist(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// SetupSQL is run by psql as the superuser in each database clients reach
// through the pooler, the SQL on stdin, with the auth role and its
// password as psql variables, so neither reaches the server's log:
//
//	psql -X -q -v ON_ERROR_STOP=1 -v role=<AuthUser> -v password=<its password> -f -
//
// A -v value is on psql's command line (/proc/<pid>/cmdline); to keep the
// password off it, set the variables in the script instead, before this
// SQL: "\getenv password VAR" (psql 15) or "\set password `...`". The SQL
// reads only :'role', :"role" and :'password'.
//
// It makes the role if missing (LOGIN and no other right), (re)sets its
// password as a SCRAM secret, and makes AuthFunction, which only the role
// may call. Running it again changes nothing but the password. It refuses
// to run when role is the role running it (it would lose superuser).
func SetupSQL() string {
	return setupSQL
}

// The function is SECURITY DEFINER (the superuser who runs this owns it)
// since only a superuser reads pg_shadow; its search_path is fixed so no
// one's objects can stand in for the catalog's. pg_shadow lists the roles
// that can log in; superusers are left out so none logs in through the
// pooler, nor do replication roles (the Database's standbys' role), and
// neither do roles whose password has expired. The role is
// altered on every run so a role someone made by hand with more rights
// loses them.
const setupSQL = `-- The password must not reach the server log, even with an error.
SET log_statement = 'none';
SET log_min_error_statement = 'panic';
SET log_min_duration_statement = -1;
SET password_encryption = 'scram-sha-256';
-- no NOTICE for what a run before made (CREATE SCHEMA IF NOT EXISTS)
SET client_min_messages = 'warning';
-- ALTER ROLE below takes every right away: never from the role running this.
SELECT pg_catalog.set_config('deckhand.pooler_role', :'role', false) AS pooler_role \gset
DO $$
BEGIN
  IF pg_catalog.current_setting('deckhand.pooler_role') = current_user THEN
    RAISE EXCEPTION 'the pooler''s role % is the role running this setup', current_user;
  END IF;
END
$$;
SELECT format('CREATE ROLE %I', :'role')
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I LOGIN NOSUPERUSER NOINHERIT NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD %L', :'role', :'password') \gexec
CREATE SCHEMA IF NOT EXISTS deckhand;
CREATE OR REPLACE FUNCTION deckhand.pooler_user_search(uname text)
RETURNS TABLE (usename name, passwd text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT s.usename, s.passwd
    FROM pg_catalog.pg_shadow s
   WHERE s.usename = uname
     AND NOT s.usesuper
     AND NOT s.userepl
     AND (s.valuntil IS NULL OR s.valuntil > pg_catalog.now())
$$;
REVOKE ALL ON FUNCTION deckhand.pooler_user_search(text) FROM PUBLIC;
GRANT USAGE ON SCHEMA deckhand TO :"role";
GRANT EXECUTE ON FUNCTION deckhand.pooler_user_search(text) TO :"role";
`
