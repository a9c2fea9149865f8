package postgres_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// The instance channel on real servers: the agent binary
// (cmd/deckhand-instance) runs on the host as the servers' user, beside
// each server, as it runs beside the server in a pod; the operator's
// client asks it over mutual TLS by the pod's name under the headless
// Service, dialled at 127.0.0.1.

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.RemoveAgentBinary()
	os.Exit(code)
}

// channel is the operator's side of the test: the Database's credentials,
// the client, and each pod's agent address on 127.0.0.1.
type channel struct {
	creds  *instance.Credentials
	client *instance.Client
	addrs  map[string]string // host name -> 127.0.0.1:port
	tlsDir string
	binary string
}

func newChannel(t testing.TB, h *host, pods ...string) *channel {
	t.Helper()
	var insts []instance.Instance
	for _, pod := range pods {
		insts = append(insts, instance.Instance{Pod: pod, Hosts: instance.PodHosts(pod, h.cluster.Name+"-headless", h.cluster.Namespace)})
	}
	creds, err := instance.IssueCredentials(h.cluster.Namespace, h.cluster.Name, insts, time.Now())
	require.NoError(t, err)
	// The pods' Secret, as the kubelet mounts it: readable by the
	// servers' user.
	dir := h.u.Dir(t, h.root, "instance-tls")
	for name, data := range creds.PodSecretData() {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o400))
		if h.u != nil {
			require.NoError(t, os.Chown(filepath.Join(dir, name), h.u.UID, h.u.GID))
		}
	}
	op := creds.OperatorSecretData()
	tlsConfig, err := instance.ClientTLSConfig(op[instance.CACertKey], op[instance.ClientCertKey], op[instance.ClientKeyKey])
	require.NoError(t, err)
	c := &channel{creds: creds, addrs: map[string]string{}, tlsDir: dir, binary: pgtest.AgentBinary(t)}
	c.client = instance.NewClient(tlsConfig, instance.DefaultPort, instance.WithDialContext(c.dial))
	return c
}

// dial connects to the agent that serves addr's host, on 127.0.0.1.
func (c *channel) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	local, ok := c.addrs[host]
	if !ok {
		return nil, errors.New("no agent for " + host)
	}
	return (&net.Dialer{}).DialContext(ctx, network, local)
}

// startAgent runs the agent of ordinal's pod (server on dataVolume, its
// port h.ports[dataVolume]) as the servers' user; it returns the pod's
// host name for the client. The agent is stopped at the end of the test.
func (c *channel) startAgent(t testing.TB, h *host, ordinal int, dataVolume string) string {
	t.Helper()
	env := h.serverEnv(postgres.Engine{}.ServerPod(h.cluster), ordinal, dataVolume, "")
	return c.startAgentFor(t, h, ordinal, env["PGDATA"], env["PGPORT"])
}

// startAgentFor runs ordinal's agent for the data directory pgdata and
// the server on port, with the flags extra.
func (c *channel) startAgentFor(t testing.TB, h *host, ordinal int, pgdata, port string, extra ...string) string {
	t.Helper()
	host, _ := c.startAgentWith(t, h, ordinal, map[string]string{"PGDATA": pgdata, "PGPORT": port}, extra...)
	return host
}

// startAgentWith runs ordinal's agent with the environment env (PATH and
// POD_NAME added) and the flags extra; it returns the pod's host name for
// the client and the agent's log.
func (c *channel) startAgentWith(t testing.TB, h *host, ordinal int, env map[string]string, extra ...string) (string, *syncbuf.Buffer) {
	t.Helper()
	pod := h.cluster.Name + "-" + strconv.Itoa(ordinal)
	listen := "127.0.0.1:" + pgtest.FreePort(t)
	env = maps.Clone(env)
	env["PATH"], env["POD_NAME"] = h.bin+":/usr/bin:/bin", pod
	cmd := h.u.Command(env, append([]string{c.binary, "serve", "--tls-dir", c.tlsDir, "--listen", listen}, extra...))
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for _, secret := range []string{h.superPassword(), h.replicationPassword(), string(c.creds.Servers[pod].KeyPEM)} {
			assert.NotContains(t, log.String(), secret, "the agent's log")
		}
	})
	host := instance.PodHosts(pod, h.cluster.Name+"-headless", h.cluster.Namespace)[0]
	c.addrs[host] = listen
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := c.client.Status(context.Background(), host)
		assert.NoError(ct, err, "agent log:\n%s", log.String())
	}, 60*time.Second, 100*time.Millisecond, "the agent of %s never answered", pod)
	return host, log
}

// lsn is a pg_lsn the server on port reports for expr.
func lsn(t *testing.T, h *host, port, expr string) instance.LSN {
	t.Helper()
	l, err := instance.ParseLSN(h.sql(port, "postgres", "SELECT "+expr))
	require.NoError(t, err)
	return l
}

// TestInstanceChannelFailsOverARealPrimary runs a failover's steps through
// the channel on a primary and its streaming standby: each agent reports
// its server's role, timeline and WAL positions as the server itself
// does; the fence ends the primary's open session (its INSERT fails) and
// leaves the server stopped, and its status still answers (server down,
// role unknown, fenced); the promotion makes the standby a primary that
// takes writes, on the next timeline; promoting a primary is refused; a
// client without this Database's operator certificate is refused.
func TestInstanceChannelFailsOverARealPrimary(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary := h.primary("data-0")
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)
	standby := h.standby(1, "data-1", primary.Port)
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming")
	waitForRow(t, h, standby.Port, "1")

	ch := newChannel(t, h, h.cluster.Name+"-0", h.cluster.Name+"-1")
	primaryHost := ch.startAgent(t, h, 0, "data-0")
	standbyHost := ch.startAgent(t, h, 1, "data-1")
	ctx := context.Background()

	// The primary: its current position, bracketed by the server's own
	// answers before and after (background writes may move it).
	before := lsn(t, h, primary.Port, "pg_current_wal_lsn()")
	st := statusOf(t, ch.client, primaryHost)
	after := lsn(t, h, primary.Port, "pg_current_wal_lsn()")
	assert.True(t, st.ServerUp, st.Error)
	require.Equal(t, instance.RolePrimary, st.Role, st.Error)
	assert.Equal(t, int64(1), st.Timeline)
	assert.False(t, *st.InRecovery)
	assert.False(t, st.Fenced)
	assert.Equal(t, h.cluster.Name+"-0", st.Pod)
	assert.True(t, before <= st.CurrentLSN && st.CurrentLSN <= after, "current %s between %s and %s", st.CurrentLSN, before, after)
	assert.Zero(t, st.ReplayLSN, "a primary replays nothing")

	// The standby, once it has replayed everything the primary wrote.
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)
	waitForRow(t, h, standby.Port, "2")
	before = lsn(t, h, standby.Port, "pg_last_wal_replay_lsn()")
	st = statusOf(t, ch.client, standbyHost)
	after = lsn(t, h, standby.Port, "pg_last_wal_replay_lsn()")
	require.Equal(t, instance.RoleStandby, st.Role, st.Error)
	assert.True(t, *st.InRecovery)
	assert.True(t, st.Streaming, "walReceiver %q", st.WALReceiver)
	assert.Equal(t, "streaming", st.WALReceiver)
	assert.Equal(t, "127.0.0.1", st.PrimaryHost, "primary_conninfo's host, and nothing else of it")
	assert.Equal(t, int64(1), st.Timeline)
	assert.Zero(t, st.CurrentLSN, "a standby writes no WAL of its own")
	assert.True(t, before <= st.ReplayLSN && st.ReplayLSN <= after, "replay %s between %s and %s", st.ReplayLSN, before, after)
	assert.GreaterOrEqual(t, st.ReceiveLSN, st.ReplayLSN)

	// Only the operator of this Database is answered: no client
	// certificate, or another Database's, is refused by the agent binary.
	other, err := instance.IssueCredentials(h.cluster.Namespace, "other", nil, time.Now())
	require.NoError(t, err)
	otherOp := other.OperatorSecretData()
	otherTLS, err := instance.ClientTLSConfig(otherOp[instance.CACertKey], otherOp[instance.ClientCertKey], otherOp[instance.ClientKeyKey])
	require.NoError(t, err)
	ours := ch.creds.OperatorSecretData()
	withoutCert, err := instance.ClientTLSConfig(ours[instance.CACertKey], otherOp[instance.ClientCertKey], otherOp[instance.ClientKeyKey])
	require.NoError(t, err)
	withoutCert.Certificates = nil
	otherCA := otherTLS.Clone()
	otherCA.RootCAs = withoutCert.RootCAs // trusts our agents, presents another CA's certificate
	for name, cfg := range map[string]*tls.Config{"no client certificate": withoutCert, "another CA's certificate": otherCA} {
		_, err := instance.NewClient(cfg, instance.DefaultPort, instance.WithDialContext(ch.dial)).Status(ctx, primaryHost)
		require.Error(t, err, name)
	}
	_, err = instance.NewClient(otherTLS, instance.DefaultPort, instance.WithDialContext(ch.dial)).Status(ctx, primaryHost)
	require.Error(t, err, "an operator that trusts another CA does not believe this agent")

	// Promoting the primary is refused, and changes nothing.
	_, err = ch.client.Promote(ctx, primaryHost)
	require.ErrorIs(t, err, instance.ErrAlreadyPrimary)
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (3)")
	require.NoError(t, err, "the refused promotion changed nothing: %s", out)

	// An agent that cannot reach the postmaster (here: another data
	// directory; in a pod: no shared process namespace) must not report a
	// fence while the server still answers.
	blind := newChannel(t, h, h.cluster.Name+"-0")
	blindHost := blind.startAgentFor(t, h, 0, filepath.Join(h.volume("elsewhere"), "pgdata"), primary.Port)
	_, err = blind.client.Fence(ctx, blindHost)
	require.Error(t, err, "the server still answers: not fenced")
	assert.Contains(t, err.Error(), "still answers")
	out, err = h.appSQL(primary.Port, "SELECT 1")
	require.NoError(t, err, "the primary was not touched: %s", out)

	// Fence the primary while an application session is open in it.
	session := h.openAppSession(t, primary.Port)
	assert.Equal(t, "4", session.query(t, "INSERT INTO rows VALUES (4) RETURNING id;"), "the session writes before the fence")
	res, err := ch.client.Fence(ctx, primaryHost)
	require.NoError(t, err)
	assert.Equal(t, "fenced", res.Done)
	assert.True(t, res.WasRunning)
	assert.True(t, res.CleanShutdown, "a fast shutdown: pg_rewind's precondition")
	_, _ = io.WriteString(session.in, "INSERT INTO rows VALUES (5);\n")
	assert.Contains(t, session.rest(t), "terminat", "the open session's INSERT after the fence fails")
	_, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (6)")
	require.Error(t, err, "a new session is refused: the server is stopped")
	assert.NoFileExists(t, filepath.Join(h.volume("data-0"), "pgdata", "postmaster.pid"), "the server stays stopped")
	assert.FileExists(t, filepath.Join(h.volume("data-0"), instance.FenceMarker), "the marker that keeps a restart from serving")
	control := h.controlData(t, "data-0")
	assert.Regexp(t, `Database cluster state:\s+shut down\n`, control, "stopped cleanly")

	// The fenced primary's status still answers, within the client's
	// bound: its server is down, its role unknown.
	st, err = ch.client.Status(ctx, primaryHost)
	require.NoError(t, err)
	assert.False(t, st.ServerUp)
	assert.Equal(t, instance.RoleUnknown, st.Role)
	assert.True(t, st.Fenced)
	assert.NotEmpty(t, st.Error)
	assert.Nil(t, st.InRecovery)
	// Fencing again changes nothing, and says the server was shut down
	// cleanly; a fenced instance is never promoted.
	res, err = ch.client.Fence(ctx, primaryHost)
	require.NoError(t, err)
	assert.False(t, res.WasRunning)
	assert.True(t, res.CleanShutdown, "its control file holds the first fence's shutdown checkpoint")
	assert.False(t, res.Killed)
	_, err = ch.client.Promote(ctx, primaryHost)
	require.ErrorIs(t, err, instance.ErrFenced)

	// Promote the standby: a primary on the next timeline that takes
	// writes, holding every row committed before the fence (a fast
	// shutdown sends the standbys all its WAL first).
	st, err = ch.client.Promote(ctx, standbyHost)
	require.NoError(t, err)
	assert.Equal(t, instance.RolePrimary, st.Role)
	assert.Equal(t, int64(2), st.Timeline)
	assert.NotZero(t, st.CurrentLSN)
	out, err = h.appSQL(standby.Port, "INSERT INTO rows VALUES (7)")
	require.NoError(t, err, "the promoted standby takes writes: %s", out)
	out, err = h.appSQL(standby.Port, "SELECT string_agg(id::text, ',' ORDER BY id) FROM rows")
	require.NoError(t, err, out)
	assert.Equal(t, "1,2,3,4,7", out)
	_, err = ch.client.Promote(ctx, standbyHost)
	require.ErrorIs(t, err, instance.ErrAlreadyPrimary, "promoting it again is refused, and harmless")

	// Lifting the fence removes the marker only: the server is started by
	// its entrypoint, not by the agent.
	res, err = ch.client.Unfence(ctx, primaryHost)
	require.NoError(t, err)
	assert.False(t, res.Status.Fenced)
	assert.False(t, res.Status.ServerUp)
}
