package postgres_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database"
)

// The app Secret's multi-host strings (database.MultiHost, the function
// the operator fills the Secret with) on real servers: the host's servers
// listen on 127.0.0.1, each on a port of its own, so the strings list
// 127.0.0.1:port where the Secret lists each pod's name.

// reachedBy is "port recovery" of the server a client reached through
// uri ("5433 f": the primary on 5433), with psql (libpq), pgx or pgjdbc,
// and how long it took.
type reachedBy func(uri string) (string, time.Duration, error)

const whichServer = "SELECT inet_server_port() || ' ' || pg_is_in_recovery()::text"

func psqlClient(h *host) reachedBy {
	return func(uri string) (string, time.Duration, error) {
		cmd := exec.Command(filepath.Join(h.bin, "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", uri, "-c", whichServer)
		// Nothing from the environment: the URI says it all.
		cmd.Env = []string{"PGSYSCONFDIR=/nonexistent"}
		start := time.Now()
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), time.Since(start), err
	}
}

func pgxClient(uri string) (string, time.Duration, error) {
	// Far beyond the strings' own timeout: a client that waits on a frozen
	// server shows as a failed bound, not a hung test.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return "", time.Since(start), err
	}
	defer conn.Close(ctx)
	var out string
	err = conn.QueryRow(ctx, whichServer).Scan(&out)
	return out, time.Since(start), err
}

// jdbcWarmUp is a JDBC URL of the server on port, named localhost: a
// host the strings under test (127.0.0.1) do not list.
func jdbcWarmUp(h *host, port string) string {
	return database.MultiHost{Hosts: []string{"localhost:" + port}, Database: h.cluster.Database, User: h.cluster.AppUser, Password: h.appPassword()}.JDBCURI("any")
}

// pgjdbcJar is Debian's pgjdbc (libpostgresql-jdbc-java).
const pgjdbcJar = "/usr/share/java/postgresql.jar"

// jdbcClient runs testdata/WhichServer.java on the JDK with pgjdbc: a
// real JVM client of the JDBC strings. The time is the connection's and
// the query's as the JVM measured them, its own start and a first
// connection to warmUp (a single-host JDBC URL of a server that answers,
// which loads the driver's classes) left out. warmUp names another host
// than the strings under test, so the driver's memory of each host's
// state (its host status tracker) knows nothing of theirs.
func jdbcClient(t *testing.T, warmUp string) reachedBy {
	t.Helper()
	require.FileExists(t, pgjdbcJar, "Debian's pgjdbc: hack/test-deps.sh installs libpostgresql-jdbc-java")
	src, err := filepath.Abs(filepath.Join("testdata", "WhichServer.java"))
	require.NoError(t, err)
	return func(uri string) (string, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "java", "-cp", pgjdbcJar, src, uri, whichServer, warmUp).CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err != nil || len(lines) != 2 {
			return string(out), 0, fmt.Errorf("java WhichServer.java: %v", err)
		}
		ms, err := strconv.Atoi(lines[1])
		return lines[0], time.Duration(ms) * time.Millisecond, err
	}
}

// freeze stops a server's postmaster (SIGSTOP), and only it: the kernel
// still completes TCP handshakes into its listen backlog, and nothing ever
// answers them, as with a server whose node froze. It is resumed when the
// test ends (before the servers are stopped: cleanups run last first).
func freeze(t *testing.T, h *host, dataVolume string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.volume(dataVolume), "pgdata", "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	return pid
}

// passOver is how long a client may take to pass over a frozen server
// tries times: the strings' connect timeout each time, and a margin for a
// busy machine. libpq tries a frozen server twice for prefer-standby: once
// looking for a standby, once for any server.
func passOver(tries int) time.Duration {
	return time.Duration(tries)*database.MultiHostConnectTimeout*time.Second + 3*time.Second
}

func TestMultiHostStringsReachThePrimaryOrAStandbyAndPassOverAFrozenServer(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary, standby := primaryAndStreamingStandby(t, h)
	build := func(ports ...string) map[string]string {
		m := database.MultiHost{Database: h.cluster.Database, User: h.cluster.AppUser, Password: h.appPassword()}
		for _, p := range ports {
			m.Hosts = append(m.Hosts, "127.0.0.1:"+p)
		}
		return m.Data()
	}
	// Each client reads the app Secret's keys for its kind of driver.
	type client struct {
		reach        reachedBy
		rwKey, roKey string
	}
	libpq := func(r reachedBy) client {
		return client{r, database.AppMultiHostURIKey, database.AppMultiHostROURIKey}
	}
	clients := map[string]client{"psql": libpq(psqlClient(h)), "pgx": libpq(pgxClient),
		"pgjdbc": {jdbcClient(t, jdbcWarmUp(h, primary.Port)), database.AppMultiHostJDBCURIKey, database.AppMultiHostROJDBCURIKey}}
	reaches := func(name string, keys map[string]string, write bool, want, why string, frozenTries int) {
		t.Helper()
		c := clients[name]
		uri := keys[c.roKey]
		if write {
			uri = keys[c.rwKey]
		}
		got, took, err := c.reach(uri)
		require.NoError(t, err, "%s, %s: %s", name, why, got)
		assert.Equal(t, want, got, "%s, %s", name, why)
		assert.Less(t, took, passOver(frozenTries), "%s, %s", name, why)
		t.Logf("%s, %s: %s in %v", name, why, got, took.Round(time.Millisecond))
	}
	const read, write = false, true

	// (a) The read-write string lands on the primary, the standby listed
	// first; (b) the read string on the standby, whichever comes first.
	standbyFirst, primaryFirst := build(standby.Port, primary.Port), build(primary.Port, standby.Port)
	for _, c := range []string{"psql", "pgx", "pgjdbc"} {
		reaches(c, standbyFirst, write, primary.Port+" false", "read-write, the standby first", 0)
		reaches(c, standbyFirst, read, standby.Port+" true", "read, the standby first", 0)
		reaches(c, primaryFirst, read, standby.Port+" true", "read, the primary first", 0)
	}

	// (c) The standby frozen, first in the list: each client gives up on it
	// after the connect timeout and reaches the primary, for writes and
	// for reads (prefer-standby falls back to the primary).
	freeze(t, h, "data-1")
	for _, c := range []string{"psql", "pgx", "pgjdbc"} {
		reaches(c, standbyFirst, write, primary.Port+" false", "read-write, the frozen standby first", 1)
		reaches(c, standbyFirst, read, primary.Port+" false", "read, the frozen standby first", 2)
	}
}

// (d) A failover: the old primary frozen, the standby promoted. The
// read-write string, the old primary first, writes on the new one; and
// still once the old primary is stopped (its port refuses at once).
func TestMultiHostStringFindsThePrimaryPromotedWhileTheOldOneIsFrozenThenStopped(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	old, standby := primaryAndStreamingStandby(t, h)
	m := database.MultiHost{
		Hosts:    []string{"127.0.0.1:" + old.Port, "127.0.0.1:" + standby.Port},
		Database: h.cluster.Database, User: h.cluster.AppUser, Password: h.appPassword(),
	}
	rw := m.Data()[database.AppMultiHostURIKey]
	jdbc := jdbcClient(t, jdbcWarmUp(h, standby.Port))
	write := func(id, why string) {
		t.Helper()
		start := time.Now()
		cmd := exec.Command(filepath.Join(h.bin, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", rw,
			"-c", "INSERT INTO rows VALUES ("+id+") RETURNING inet_server_port()")
		cmd.Env = []string{"PGSYSCONFDIR=/nonexistent"}
		out, err := cmd.CombinedOutput()
		took := time.Since(start)
		require.NoError(t, err, "%s: %s", why, out)
		assert.Equal(t, standby.Port, strings.TrimSpace(string(out)), "%s: the write went to the new primary", why)
		assert.Less(t, took, passOver(1), why)
		got, _, err := pgxClient(rw)
		require.NoError(t, err, why)
		assert.Equal(t, standby.Port+" false", got, "%s: pgx", why)
		got, took, err = jdbc(m.Data()[database.AppMultiHostJDBCURIKey])
		require.NoError(t, err, "%s: pgjdbc: %s", why, got)
		assert.Equal(t, standby.Port+" false", got, "%s: pgjdbc", why)
		assert.Less(t, took, passOver(1), "%s: pgjdbc", why)
	}

	freeze(t, h, "data-0")
	h.namePrimary(1)
	require.Equal(t, "t", h.sql(standby.Port, "postgres", "SELECT pg_promote()"), "promoted online, as the agent does")
	write("10", "the old primary frozen")

	kill(t, old)
	write("11", "the old primary stopped")
	out, err := h.appSQL(standby.Port, "SELECT string_agg(id::text, ' ' ORDER BY id) FROM rows WHERE id >= 10")
	require.NoError(t, err, out)
	assert.Equal(t, "10 11", out)
}
