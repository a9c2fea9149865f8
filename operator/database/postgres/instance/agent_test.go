package instance_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

const (
	pod0 = "db-0"
	pod1 = "db-1"
)

func hosts(pod string) []string { return instance.PodHosts(pod, "db-headless", "ns") }

// issue makes a Database's credentials for db-0 and db-1.
func issue(t *testing.T) *instance.Credentials {
	t.Helper()
	creds, err := instance.IssueCredentials("ns", "db", []instance.Instance{{Pod: pod0, Hosts: hosts(pod0)}, {Pod: pod1, Hosts: hosts(pod1)}}, time.Now())
	require.NoError(t, err)
	return creds
}

// mount writes the pods' Secret into dir, as the kubelet mounts it.
func mount(t *testing.T, dir string, creds *instance.Credentials) {
	t.Helper()
	for name, data := range creds.PodSecretData() {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".new"), data, 0o600))
		require.NoError(t, os.Rename(filepath.Join(dir, name+".new"), filepath.Join(dir, name)))
	}
}

// serveAgent serves db-0's agent on 127.0.0.1 with creds' pods' Secret
// mounted; its server's socket directory is socketDir (nothing listens
// there unless the test makes it). It returns the agent's address and
// the Secret's directory.
func serveAgent(t *testing.T, creds *instance.Credentials, socketDir string) (addr, tlsDir string) {
	t.Helper()
	tlsDir = t.TempDir()
	mount(t, tlsDir, creds)
	agent, err := instance.New(instance.Config{Pod: pod0, SocketDir: socketDir, Port: 5432, DataDir: filepath.Join(t.TempDir(), "pgdata")})
	require.NoError(t, err)
	tlsConfig, err := instance.ServerTLSConfig(tlsDir, pod0)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Serve(ctx, l, tlsConfig) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
		agent.Close()
	})
	return l.Addr().String(), tlsDir
}

// clientOf asks every pod name at addr with tlsConfig.
func clientOf(tlsConfig *tls.Config, addr string) *instance.Client {
	return instance.NewClient(tlsConfig, instance.DefaultPort, instance.WithDialContext(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}))
}

func operatorTLS(t *testing.T, creds *instance.Credentials) *tls.Config {
	t.Helper()
	op := creds.OperatorSecretData()
	c, err := instance.ClientTLSConfig(op[instance.CACertKey], op[instance.ClientCertKey], op[instance.ClientKeyKey])
	require.NoError(t, err)
	return c
}

// The agent answers the operator of its own Database only, and the
// operator believes only that Database's agent for that pod's name.
func TestChannelAcceptsOnlyItsDatabasesOperatorAndAgents(t *testing.T) {
	creds := issue(t)
	addr, _ := serveAgent(t, creds, t.TempDir())
	ctx := context.Background()

	st, err := clientOf(operatorTLS(t, creds), addr).Status(ctx, hosts(pod0)[0])
	require.NoError(t, err, "the operator's certificate is accepted")
	assert.Equal(t, pod0, st.Pod)

	pool := operatorTLS(t, creds).RootCAs
	other := issue(t) // another Database's CA
	otherOp := operatorTLS(t, other)
	serverPair, err := tls.X509KeyPair(creds.Servers[pod1].CertPEM, creds.Servers[pod1].KeyPEM)
	require.NoError(t, err)
	for _, c := range []struct {
		name   string
		config *tls.Config
		host   string
	}{
		{"a client without a certificate", &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}, hosts(pod0)[0]},
		{"a client certificate of another CA", &tls.Config{RootCAs: pool, Certificates: otherOp.Certificates, MinVersion: tls.VersionTLS13}, hosts(pod0)[0]},
		{"another pod's server certificate used as a client's", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{serverPair}, MinVersion: tls.VersionTLS13}, hosts(pod0)[0]},
		{"an operator that trusts another CA", otherOp, hosts(pod0)[0]},
		{"db-0's agent answering for db-1's name", operatorTLS(t, creds), hosts(pod1)[0]},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := clientOf(c.config, addr).Status(ctx, c.host)
			require.Error(t, err, "refused")
		})
	}
}

// Renewed certificates, or a new CA, take effect at the next handshake,
// without restarting the agent: the pods' Secret is read at each.
func TestAgentServesRenewedCredentialsWithoutARestart(t *testing.T) {
	old := issue(t)
	addr, tlsDir := serveAgent(t, old, t.TempDir())
	ctx := context.Background()
	_, err := clientOf(operatorTLS(t, old), addr).Status(ctx, hosts(pod0)[0])
	require.NoError(t, err)

	renewed := issue(t)
	mount(t, tlsDir, renewed)
	_, err = clientOf(operatorTLS(t, renewed), addr).Status(ctx, hosts(pod0)[0])
	require.NoError(t, err, "the renewed credentials are served")
	_, err = clientOf(operatorTLS(t, old), addr).Status(ctx, hosts(pod0)[0])
	require.Error(t, err, "the old CA is no longer trusted")
}

// A CA is replaced without a moment in which the operator is refused:
// while the pods' ca.crt holds both CAs, the old operator certificate and
// the new one are both accepted; then the old CA is dropped.
func TestCARotationThroughABundle(t *testing.T) {
	old, renewed := issue(t), issue(t)
	addr, tlsDir := serveAgent(t, old, t.TempDir())
	ctx := context.Background()

	bundle := append(append([]byte{}, old.CA.CertPEM...), renewed.CA.CertPEM...)
	require.NoError(t, os.WriteFile(filepath.Join(tlsDir, instance.CACertKey), bundle, 0o600))
	for name, creds := range map[string]*instance.Credentials{"old": old, "new": renewed} {
		op := creds.OperatorSecretData()
		// The operator trusts both CAs for the agents' certificates too.
		c, err := instance.ClientTLSConfig(bundle, op[instance.ClientCertKey], op[instance.ClientKeyKey])
		require.NoError(t, err)
		_, err = clientOf(c, addr).Status(ctx, hosts(pod0)[0])
		require.NoError(t, err, "the %s operator certificate during the rotation", name)
	}
}

func TestAgentRefusesToStartWithoutItsCertificate(t *testing.T) {
	_, err := instance.ServerTLSConfig(t.TempDir(), pod0)
	require.Error(t, err)
	tlsDir := t.TempDir()
	mount(t, tlsDir, issue(t))
	_, err = instance.ServerTLSConfig(tlsDir, "db-7")
	require.ErrorContains(t, err, "server certificate of db-7")
}

// A server that accepts the connection and never answers (stopped by a
// signal, stuck on a full disk) does not hang the status: the agent
// answers within its bound, server down, role unknown.
func TestStatusAnswersWhenTheServerHangs(t *testing.T) {
	creds := issue(t)
	addr, _ := serveAgent(t, creds, silentServer(t))

	st, err := clientOf(operatorTLS(t, creds), addr).Status(context.Background(), hosts(pod0)[0])
	require.NoError(t, err, "an answer, not the client's timeout")
	assert.False(t, st.ServerUp)
	assert.Equal(t, instance.RoleUnknown, st.Role)
	assert.Contains(t, st.Error, "did not answer in time")
}

// The operator's second look at a primary (ConfirmPrimaryStatus) gives
// its server longer than a status's bound: the agent waits for a hung
// server well past DefaultStatusTimeout (here its connection's own 2 s
// connect_timeout ends the wait, within the 3 s asked), then answers,
// server down, before the client's ConfirmTimeout.
func TestTheSecondLookWaitsLongerForTheServer(t *testing.T) {
	creds := issue(t)
	addr, _ := serveAgent(t, creds, silentServer(t))

	start := time.Now()
	st, err := clientOf(operatorTLS(t, creds), addr).ConfirmPrimaryStatus(context.Background(), hosts(pod0)[0], 0)
	require.NoError(t, err, "an answer, not the client's timeout")
	assert.GreaterOrEqual(t, time.Since(start), 2*instance.DefaultStatusTimeout, "the agent waited longer than a status's bound")
	assert.False(t, st.ServerUp)
	assert.Equal(t, instance.RoleUnknown, st.Role)
	assert.NotEmpty(t, st.Error)
}

// silentServer is a server's socket directory where connections are
// accepted and never answered.
func silentServer(t *testing.T) string {
	t.Helper()
	socketDir, err := os.MkdirTemp("", "pgsock-") // short: a socket path is at most 107 bytes
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(socketDir) })
	silent, err := net.Listen("unix", filepath.Join(socketDir, ".s.PGSQL."+strconv.Itoa(5432)))
	require.NoError(t, err)
	t.Cleanup(func() { silent.Close() })
	go func() {
		var held []net.Conn // held open, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return socketDir
}

// With no server at all (its socket absent) the status says why.
func TestStatusOfAStoppedServer(t *testing.T) {
	creds := issue(t)
	addr, _ := serveAgent(t, creds, t.TempDir())
	st, err := clientOf(operatorTLS(t, creds), addr).Status(context.Background(), hosts(pod0)[0])
	require.NoError(t, err)
	assert.False(t, st.ServerUp)
	assert.Equal(t, instance.RoleUnknown, st.Role)
	assert.NotEmpty(t, st.Error)
	assert.False(t, st.Fenced)
}

// An agent nobody listens for is an error of the client, within its
// bound (an unreachable instance).
func TestClientReportsAnUnreachableAgent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = clientOf(operatorTLS(t, issue(t)), addr).Status(context.Background(), hosts(pod0)[0])
	require.Error(t, err)
	var opErr *net.OpError
	assert.True(t, errors.As(err, &opErr), "%v", err)
}
