package database

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// Multi-host connection strings (PostgreSQL Databases): every instance's
// stable name under the headless Service, in the forms libpq (psql,
// psycopg), pgx and pgjdbc read, so that a client finds the primary by
// asking each server what it is, without the -rw Service: no kube-proxy,
// no EndpointSlice, no role label between a promotion and the client.

// Keys of the app Secret that list every instance. They follow the
// convention of the uri and jdbc-uri keys (as CloudNativePG's fqdn-uri
// and fqdn-jdbc-uri, and Crunchy PGO's pgbouncer-uri and
// pgbouncer-jdbc-uri do): a prefix that says which way the string goes.
const (
	// AppMultiHostURIKey is a libpq URI (psql, psycopg, pgx) that lands
	// on the primary: target_session_attrs=read-write.
	AppMultiHostURIKey = "multihost-uri"
	// AppMultiHostJDBCURIKey is its pgjdbc form: targetServerType=primary.
	AppMultiHostJDBCURIKey = "multihost-jdbc-uri"
	// AppMultiHostROURIKey is a libpq URI for reads: a standby when one
	// answers, else the primary (target_session_attrs=prefer-standby).
	AppMultiHostROURIKey = "multihost-ro-uri"
	// AppMultiHostROJDBCURIKey is its pgjdbc form:
	// targetServerType=preferSecondary.
	AppMultiHostROJDBCURIKey = "multihost-ro-jdbc-uri"

	// MultiHostConnectTimeout is how long, in seconds, a client of the
	// multi-host strings waits for one server before it tries the next.
	// A frozen server (its process stopped, its node cut off) still
	// completes the TCP handshake through the kernel's listen backlog and
	// then never answers: without a limit the client waits on it forever,
	// however many good servers follow it in the list. libpq counts it per
	// host (connect_timeout, where 2 is its floor), pgx per host too;
	// pgjdbc's connectTimeout covers the TCP connect only, and its
	// sslResponseTimeout (milliseconds) the first answer, which is where a
	// frozen server stops.
	MultiHostConnectTimeout = 2
)

// MultiHost is what the multi-host connection strings are made of.
type MultiHost struct {
	// Hosts are "host:port", in the order a client tries them.
	Hosts                    []string
	Database, User, Password string
	// CAFile, when set, makes every string verify each server's
	// certificate against this file and the name dialled
	// (sslmode=verify-full); unset, the driver's default applies (libpq,
	// pgx and pgjdbc: prefer, which encrypts when the server offers TLS).
	CAFile string
}

// URI is a libpq URI to every host with target_session_attrs attrs
// ("read-write", "prefer-standby", ...). pgx v5 reads the same URI and
// the same values.
func (m MultiHost) URI(attrs string) string {
	q := url.Values{
		"target_session_attrs": {attrs},
		"connect_timeout":      {strconv.Itoa(MultiHostConnectTimeout)},
	}
	if m.CAFile != "" {
		q.Set("sslmode", "verify-full")
		q.Set("sslrootcert", m.CAFile)
	}
	return "postgresql://" + url.UserPassword(m.User, m.Password).String() + "@" +
		strings.Join(m.Hosts, ",") + "/" + url.PathEscape(m.Database) + "?" + q.Encode()
}

// JDBCURI is a pgjdbc URL to every host with targetServerType
// serverType ("primary", "preferSecondary", ...).
func (m MultiHost) JDBCURI(serverType string) string {
	q := url.Values{
		"user": {m.User}, "password": {m.Password},
		"targetServerType":   {serverType},
		"connectTimeout":     {strconv.Itoa(MultiHostConnectTimeout)},
		"sslResponseTimeout": {strconv.Itoa(MultiHostConnectTimeout * 1000)},
	}
	if m.CAFile != "" {
		q.Set("sslmode", "verify-full")
		q.Set("sslrootcert", m.CAFile)
	}
	return fmt.Sprintf("jdbc:postgresql://%s/%s?", strings.Join(m.Hosts, ","), url.PathEscape(m.Database)) + q.Encode()
}

// Data is the app Secret's multi-host keys.
func (m MultiHost) Data() map[string]string {
	return map[string]string{
		AppMultiHostURIKey:       m.URI("read-write"),
		AppMultiHostJDBCURIKey:   m.JDBCURI("primary"),
		AppMultiHostROURIKey:     m.URI("prefer-standby"),
		AppMultiHostROJDBCURIKey: m.JDBCURI("preferSecondary"),
	}
}

// multiHostInstances are every instance's stable name under the headless
// Service with the port, by ordinal ("<db>-0.<db>-headless.<ns>.svc:5432",
// ...): the names the server certificate carries. A scale-out adds
// names, so the app Secret's connection hash covers them. nil for an
// engine without multi-host strings.
func multiHostInstances(db *Cluster, port string) []string {
	if engineOf(db) != dbv1.EnginePostgreSQL {
		return nil
	}
	headless := namesOf(db).Headless
	var out []string
	for ordinal := range replicasOf(db) {
		out = append(out, fmt.Sprintf("%s.%s.%s.svc:%s", podName(db, ordinal), headless, db.Namespace, port))
	}
	return out
}

// multiHostData is the app Secret's multi-host keys for a connection
// (none without instances).
func (c connection) multiHostData(password string) map[string]string {
	if len(c.Instances) == 0 {
		return nil
	}
	m := MultiHost{Hosts: c.Instances, Database: c.Database, User: c.User, Password: password}
	if c.CA != "" {
		m.CAFile = CAMountDir + "/" + AppCAKey
	}
	return m.Data()
}
