package faults

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/deckhand-dev/deckhand/e2e"
	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// faultyProxy stands between the operator and the API server on
// 127.0.0.1: it answers one in ten requests itself with 429 (Retry-After 1)
// and one in twenty with 500, delays one in ten by 300 ms, and counts what
// the operator sends.
type faultyProxy struct {
	*httptest.Server
	requests atomic.Int64
	injected atomic.Int64
	faulty   atomic.Bool
	mu       sync.Mutex
	times    []time.Time
	// byKind counts requests by method and resource (names and namespaces
	// dropped).
	byKind map[string]int
}

func newFaultyProxy(t *testing.T) *faultyProxy {
	t.Helper()
	// The operator's own token passes through, so it acts as itself.
	target, cfg := testenv.APIServerTransport(t)
	transport, err := rest.TransportFor(cfg)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	rp.FlushInterval = -1 // watches stream
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode >= 400 {
			t.Logf("proxy: %s %s: %s", resp.Request.Method, resp.Request.URL, resp.Status)
		}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, req *http.Request, err error) {
		t.Logf("proxy: %s %s: %v", req.Method, req.URL.Path, err)
		w.WriteHeader(http.StatusBadGateway)
	}

	p := &faultyProxy{byKind: map[string]int{}}
	// TLS: client-go sends a bearer token only over HTTPS.
	p.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := p.requests.Add(1)
		kind := requestKind(req)
		p.mu.Lock()
		p.times = append(p.times, time.Now())
		p.byKind[kind]++
		p.mu.Unlock()
		if p.faulty.Load() && !isLeaseOrWatch(req) {

			switch n % 20 {
			case 0, 10:
				p.injected.Add(1)
				w.Header().Set("Retry-After", "1")
				http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}`, http.StatusTooManyRequests)
				return
			case 5:
				p.injected.Add(1)
				http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500}`, http.StatusInternalServerError)
				return
			case 3, 13:
				time.Sleep(300 * time.Millisecond)
			}
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(p.Close)
	return p
}

// requestKind is "GET pods" for GET /api/v1/namespaces/x/pods/y.
func requestKind(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var kept []string
	for i := 0; i < len(parts); i++ {
		switch parts[i] {
		case "api", "apis":
			continue
		case "namespaces":
			i++ // skip the namespace's name
			continue
		}
		kept = append(kept, parts[i])
	}
	// Drop the group/version prefix and object names: keep resource words.
	words := []string{}
	for _, k := range kept {
		if strings.Contains(k, ".") || strings.HasPrefix(k, "v1") || k == "v2" || strings.HasPrefix(k, "w-") || strings.HasPrefix(k, "test") || len(k) > 30 {
			continue
		}
		words = append(words, k)
	}
	if req.URL.Query().Get("watch") == "true" {
		words = append(words, "(watch)")
	}
	return req.Method + " " + strings.Join(words, "/")
}

// top lists the most frequent request kinds.
func (p *faultyProxy) top(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	type kc struct {
		kind  string
		count int
	}
	var all []kc
	for k, c := range p.byKind {
		all = append(all, kc{k, c})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].count > all[j].count })
	var out []string
	for i := 0; i < len(all) && i < n; i++ {
		out = append(out, fmt.Sprintf("%s: %d", all[i].kind, all[i].count))
	}
	return strings.Join(out, ", ")
}

// caPEM is the proxy's certificate, for the operator's kubeconfig.
func (p *faultyProxy) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Certificate().Raw})
}

// isLeaseOrWatch spares what keeps the process alive and informed; faults
// on them are the API-server-stopped test's subject.
func isLeaseOrWatch(req *http.Request) bool {
	return strings.Contains(req.URL.Path, "/leases") || req.URL.Query().Get("watch") == "true"
}

// since counts the requests at or after t.
func (p *faultyProxy) since(t time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.times {
		if !at.Before(t) {
			n++
		}
	}
	return n
}

// 15% of the operator's requests refused (429 with Retry-After, or 500)
// and 10% slow, through a whole rollout: the operator
// retries with backoff, never crashes, rolls each workload exactly once,
// and falls quiet once done (no busy loop).
func throttlingAndServerErrors(t *testing.T) {
	c, ns, rendered := release(t, "leaderElection.enabled=false")
	proxy := newFaultyProxy(t)
	op := e2e.RunOperatorAsChartVia(t, rendered, ns, proxy.URL, proxy.caPEM())
	op.WaitReady(t)

	r := newRollout(t, c, ns)
	r.waitTakenIn(t)
	proxy.faulty.Store(true)
	start, sentBefore := time.Now(), proxy.requests.Load()
	r.change(t, "2")
	t.Cleanup(func() {
		t.Logf("requests by kind: %s", proxy.top(10))
		if t.Failed() {
			t.Logf("reached %d of %d; monitor status: %s", r.reached(t), workloads, r.status(t))
		}
	})
	r.waitDone(t, 5*time.Minute)
	took := time.Since(start)
	sent, injected := proxy.requests.Load()-sentBefore, proxy.injected.Load()

	r.rolledExactlyOnce(t)
	quietFrom := time.Now()
	time.Sleep(10 * time.Second)
	idle := proxy.since(quietFrom)
	assert.True(t, op.Running(), "the operator exited:\n%s", op.Logs())
	assert.Greater(t, injected, int64(0), "no fault was injected: the test proved nothing")
	// Settled, the operator only renews nothing and watches: a handful of
	// requests in 10 s, not a retry loop.
	assert.Less(t, idle, 20, "requests in the 10 s after the rollout: a busy loop?")
	assert.Less(t, sent, int64(20*workloads), "requests for one change of %d workloads", workloads)
	t.Logf("RESULT api-faults: 15%% of requests refused (10%% 429 Retry-After 1, 5%% 500), 10%% delayed 300 ms; rollout of %d workloads done in %.1f s with %d requests (%d refused); %d requests in the 10 s after; every workload rolled exactly once",
		workloads, took.Seconds(), sent, injected, idle)
}
