package main

import (
	"context"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/deckhand-dev/deckhand/internal/freeport"
	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// The operator started while its API server is down (its container
// restarted during an outage, or its process started afresh after the
// outage cost it its Lease) waits for the API server instead of exiting,
// and answers the liveness probe meanwhile: each exit or kill grows the
// kubelet's back-off, and on the real node the operator came back 20 s
// after the API server did, with a failover waiting on it. Here the
// operator's API server address answers nothing (connection refused) until
// a proxy to the real API server opens on it.
func TestTheOperatorWaitsForAnAPIServerThatIsDownWhenItStarts(t *testing.T) {
	c := testenv.Client(t)
	testenv.InstallCRDs(t)
	ns := testenv.Namespace(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	health := "127.0.0.1:" + freeport.String(t)
	addr := "127.0.0.1:" + freeport.String(t)
	kubeconfig, apiServer := kubeconfigThrough(t, addr)

	p := startOperator(ctx, t, nil, "--kubeconfig", kubeconfig,
		"--controllers", "tdset", "--watch-namespaces", ns, "--leader-elect=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", health, "--log-format", "console")
	p.until("the operator to say it waits for the API server", func() bool {
		return strings.Contains(p.log.String(), "waiting for the API server to be ready")
	})
	// Long enough for an operator that gives up to have exited (until
	// fails at once if it has).
	wait := time.Now().Add(3 * time.Second)
	p.until("three seconds without an API server", func() bool { return time.Now().After(wait) })
	// Meanwhile it is alive for the kubelet's liveness probe, and not
	// ready.
	assert.True(t, answers200(health, "/healthz"), "/healthz while waiting for the API server")
	assert.False(t, ready(health), "/readyz while waiting for the API server")

	proxy(ctx, t, addr, apiServer)
	p.until("its health endpoint, once the API server answers", func() bool { return ready(health) })
	assert.Contains(t, p.log.String(), "the API server is ready")
}

// kubeconfigThrough writes a copy of the test cluster's kubeconfig whose
// server is https://addr, and returns its path and the real server's
// address. The API server's certificate names 127.0.0.1, whatever the
// port, so the copy verifies it as the original does.
func kubeconfigThrough(t *testing.T, addr string) (path, apiServer string) {
	cfg, err := clientcmd.LoadFromFile(testenv.Kubeconfig(t))
	require.NoError(t, err)
	cluster := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	u, err := url.Parse(cluster.Server)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", u.Hostname(), "the test cluster's API server")
	apiServer, u.Host = u.Host, addr
	cluster.Server = u.String()
	path = filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path, apiServer
}

// proxy forwards TCP connections from addr to target until the test ends.
func proxy(ctx context.Context, t *testing.T, addr, target string) {
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in) }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
}
