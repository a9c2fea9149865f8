package postgres_test

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

// appSession is a client of the app role that stays connected, as an
// application's pool does: one psql reading statements from a pipe.
type appSession struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func (h *host) openAppSession(t *testing.T, port string) *appSession {
	t.Helper()
	return openSession(t, h.bin, port, h.cluster.AppUser, h.appPassword(), h.cluster.Database)
}

// openSession connects as user to the server on port of 127.0.0.1 and
// keeps the session open.
func openSession(t *testing.T, bin, port, user, password, dbname string) *appSession {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "psql"), "-X", "-A", "-t", "-q",
		"-h", "127.0.0.1", "-p", port, "-U", user)
	// The name through the environment: -d would parse one holding "=" as
	// connection settings.
	cmd.Env = []string{"PGPASSWORD=" + password, "PGCONNECT_TIMEOUT=5", "PGDATABASE=" + dbname}
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	s := &appSession{cmd: cmd, in: in, out: bufio.NewReader(stdout)}
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
	})
	// The session is open once it has answered.
	assert.Equal(t, "open", s.query(t, "SELECT 'open';"))
	return s
}

// rest is everything the session says until its psql exits (at most 10 s).
func (s *appSession) rest(t *testing.T) string {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(s.out)
		_ = s.cmd.Wait()
		done <- string(b)
	}()
	select {
	case out := <-done:
		return out
	case <-time.After(10 * time.Second):
		t.Fatal("the session's psql did not end")
		return ""
	}
}

// query sends one statement and reads one line of its answer.
func (s *appSession) query(t *testing.T, sql string) string {
	t.Helper()
	_, err := io.WriteString(s.in, sql+"\n")
	require.NoError(t, err)
	line, err := s.out.ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(line)
}

// fence runs the fence Job (lift: the unfence Job) against the server on
// port.
func (h *host) fence(port string, lift bool) (engine.Report, string, error) {
	h.t.Helper()
	return h.job(postgres.Engine{}.FencePod(h.cluster, lift), "fence", port, nil)
}

// The fence of a major upgrade on a real server: an open session of the
// app role is ended, a new one is refused, the superuser (who takes the
// dump) still works; lifted, the app logs in again.
func TestFenceEndsAppSessionsAndRefusesAppLoginsUntilLifted(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	server := h.primary("data-0")
	h.init(server.Port)
	out, err := h.appSQL(server.Port, "CREATE TABLE t (v int); INSERT INTO t VALUES (1)")
	require.NoError(t, err, out)

	session := h.openAppSession(t, server.Port)
	assert.Equal(t, "2", session.query(t, "INSERT INTO t VALUES (2) RETURNING v;"), "the session writes before the fence")

	report, out, err := h.fence(server.Port, false)
	require.NoError(t, err, out)
	assert.Equal(t, 1, report.SessionsEnded, out)
	assert.NotEmpty(t, report.ServerVersion)

	// The open session is gone: its psql sees the server close it.
	_, _ = io.WriteString(session.in, "INSERT INTO t VALUES (3);\n")
	assert.Contains(t, session.rest(t), "terminat", "the open session was ended by the fence")

	// A new login is refused; the superuser still works and sees no write
	// after the fence.
	out, err = h.appSQL(server.Port, "INSERT INTO t VALUES (4)")
	require.Error(t, err)
	assert.Contains(t, out, "not permitted to log in")
	assert.Equal(t, "1\n2", h.sql(server.Port, h.cluster.Database, "SELECT v FROM t ORDER BY v"))

	// A second fence changes nothing.
	again, out, err := h.fence(server.Port, false)
	require.NoError(t, err, out)
	assert.Equal(t, 0, again.SessionsEnded)

	// Lifted: the app logs in again.
	_, out, err = h.fence(server.Port, true)
	require.NoError(t, err, out)
	out, err = h.appSQL(server.Port, "SELECT 5 FROM t LIMIT 1")
	require.NoError(t, err, out)
	assert.Equal(t, "5", out)
	_, out, err = h.fence(server.Port, true)
	require.NoError(t, err, out, "a second lift changes nothing")
	server.Stop(t)
}

// The way out a LiftFailed condition names (engine.Fencer's LiftByHand),
// run by hand as the superuser on a real fenced server, lets the app log
// in again.
func TestTheLiftByHandTheConditionNamesLetsTheAppLogInAgain(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	server := h.primary("data-0")
	h.init(server.Port)
	_, out, err := h.fence(server.Port, false)
	require.NoError(t, err, out)
	out, err = h.appSQL(server.Port, "SELECT 1")
	require.Error(t, err)
	assert.Contains(t, out, "not permitted to log in")

	statement := postgres.Engine{}.LiftByHand(h.cluster.AppUser)
	h.sql(server.Port, h.cluster.Database, statement)
	out, err = h.appSQL(server.Port, "SELECT 2")
	require.NoError(t, err, "after %s: %s", statement, out)
	assert.Equal(t, "2", out)
	server.Stop(t)
}
