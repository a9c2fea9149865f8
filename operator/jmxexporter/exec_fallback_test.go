package jmxexporter_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

// noWebSocketProxy stands on 127.0.0.1 between a client and the API server
// as an older proxy or load balancer may: it refuses WebSocket upgrades and
// passes everything else, SPDY upgrades included, through.
type noWebSocketProxy struct {
	*httptest.Server
	refusedWebSockets, spdyUpgrades atomic.Int64
}

func newNoWebSocketProxy(t *testing.T) *noWebSocketProxy {
	t.Helper()
	target, cfg := testenv.APIServerTransport(t)
	transport, err := rest.TransportFor(cfg)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	p := &noWebSocketProxy{}
	p.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch upgrade := strings.ToLower(req.Header.Get("Upgrade")); {
		case upgrade == "websocket":
			p.refusedWebSockets.Add(1)
			http.Error(w, "WebSocket upgrades are not allowed here", http.StatusBadRequest)
			return
		case strings.HasPrefix(upgrade, "spdy"):
			p.spdyUpgrades.Add(1)
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(p.Close)
	return p
}

// through is cfg sent through the proxy.
func (p *noWebSocketProxy) through(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Host = p.URL
	out.TLSClientConfig = rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Certificate().Raw})}
	return out
}

// Where WebSocket upgrades are refused, exec falls back to SPDY: stdin of a
// known length arrives, stdout and stderr come back, and the chart's RBAC
// allows it. (kwok reports a command's non-zero exit as an internal error,
// not as a code, whatever the protocol: that part is not checked here.)
func TestExecFallsBackToSPDYWhereWebSocketsAreRefused(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	proxy := newNoWebSocketProxy(t)
	cfg := proxy.through(listedRBAC(t, ns))
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	exec := &jmxexporter.PodExecutor{Config: cfg, Clientset: cs}

	pod := runPod(t, c, ns, "spdy-only", map[string]string{"app": "spdy"}, "containerd://spdy")
	routeExec(t, c, ns, pod.Name, t.TempDir(), jvmtest.Marker(t))
	awaitExecRoute(t, ns, pod.Name)

	// Under make test's load, kwok's exec server has answered an exec with
	// no output at all and success (twice in about fifteen CI runs; never
	// in 40 runs alone), after the route was in effect. The operator reads
	// an answer without a result as a failed step (HelperFailed, or
	// Unknown after an attach, which it checks before attaching again).
	// The test tries again, at most three times, and says when it had to.
	start := time.Now()
	var res jmxexporter.ExecResult
	for attempt := 1; attempt <= 3; attempt++ {
		var err error
		res, err = exec.Exec(context.Background(), pod, "app", []string{"sh", "-c", "head -c 5; echo; echo to-stderr >&2"}, []byte("hello"), 30*time.Second)
		require.NoError(t, err)
		if res.Stdout != "" || res.Stderr != "" {
			break
		}
		t.Logf("attempt %d: kwok answered with no output", attempt)
	}
	assert.Equal(t, "hello\n", res.Stdout)
	assert.Equal(t, "to-stderr\n", res.Stderr)
	assert.Zero(t, res.ExitCode)
	assert.Positive(t, proxy.refusedWebSockets.Load(), "the executor never tried WebSocket first")
	assert.Positive(t, proxy.spdyUpgrades.Load(), "the executor never fell back to SPDY")
	t.Logf("exec through SPDY after a refused WebSocket: %v", time.Since(start).Round(time.Millisecond))
}

// awaitExecRoute waits until kwok runs the pod's execs on this host: until
// kwok has read the Exec object, it refuses an exec ("no exec found for
// container").
func awaitExecRoute(t *testing.T, ns, pod string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := testenv.Kubectl(t, "-n", ns, "exec", pod, "--", "echo", "routed")
		require.NoError(ct, err, out)
		require.Equal(ct, "routed\n", out)
	}, 30*time.Second, 200*time.Millisecond, "kwok never ran pod %s's exec on this host", pod)
}
