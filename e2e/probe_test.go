package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"

	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// probe runs `deckhand probe` with args and returns its output and exit code.
func probe(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(operatorBinary(t), append([]string{"probe"}, args...)...).CombinedOutput()
	if exit, ok := err.(*exec.ExitError); ok {
		return string(out), exit.ExitCode()
	}
	require.NoError(t, err, "%s", out)
	return string(out), 0
}

// helmTestArgs are the args of the chart's `helm test` Job, with each URL's
// host:port moved to the host-run operator's listener on the same port role.
func helmTestArgs(t *testing.T, r *Rendered, op *HostOperator) []string {
	t.Helper()
	var job *batchv1.Job
	for _, h := range r.Tests {
		if h.GetKind() == "Job" {
			job = Into[batchv1.Job](t, h)
		}
	}
	require.NotNil(t, job, "no helm test hook rendered")
	args := job.Spec.Template.Spec.Containers[0].Args
	require.Equal(t, "probe", args[0])
	var out []string
	for _, a := range args[1:] {
		flag, value, _ := strings.Cut(a, "=")
		switch flag {
		case "--health", "--metrics":
			u, err := url.Parse(value)
			require.NoError(t, err, a)
			u.Host = map[string]string{"--health": op.health, "--metrics": op.metrics}[flag]
			a = flag + "=" + u.String()
		}
		out = append(out, a)
	}
	return out
}

func TestProbeChecksTheHostRunOperatorAsHelmTestWould(t *testing.T) {
	c := testenv.Client(t)
	rel := installChart(t, c, Values(t, []string{ChartDir(t) + "/ci/only-blogpost-values.yaml"}, "replicaCount=0"))
	op := rel.runOperator(t)
	require.NotEmpty(t, op.metrics, "the chart's default serves metrics")

	// The hook's own command line, rendered with replicas to probe.
	withPod := MustRender(t, rel.namespace, Values(t, []string{ChartDir(t) + "/ci/only-blogpost-values.yaml"}))
	args := helmTestArgs(t, withPod, op)
	out, code := probe(t, args...)
	assert.Equal(t, 0, code, out)
	for _, check := range []string{"ok   health: ", "ok   readiness: ", "ok   metrics: "} {
		assert.Contains(t, out, check)
	}

	// Stopped, the operator fails the probe, naming what did not answer.
	require.NoError(t, op.Stop(t))
	out, code = probe(t, append(args, "--timeout=2s")...)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "FAIL health: http://"+op.health+"/healthz")
	assert.Contains(t, out, "connection refused")
}

func TestProbeRefusesAnEndpointThatIsNotDeckhands(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz":
			fmt.Fprint(w, "ok")
		case "/metrics":
			fmt.Fprint(w, "# TYPE something_else counter\nsomething_else 1\n")
		case "/broken":
			fmt.Fprint(w, "this is { not metrics\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer other.Close()

	out, code := probe(t, "--health="+other.URL, "--metrics="+other.URL+"/metrics", "--timeout=1s")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "ok   health: ")
	assert.Contains(t, out, "FAIL metrics: "+other.URL+"/metrics: 1 metric families but no controller_runtime_reconcile_total")

	out, code = probe(t, "--health="+other.URL, "--metrics="+other.URL+"/broken", "--timeout=1s")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "not Prometheus metrics")

	out, code = probe(t, "--health="+other.URL+"/nowhere", "--timeout=1s")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "HTTP 404")

	out, code = probe(t, "--metrics="+other.URL)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "--health is required")
}

// Behind the metrics Service of replicaCount: 2, one replica leads and one
// waits: the standby's metrics have leader_election_master_status 0 and no
// reconcile counters (its controllers start when it leads). kube-proxy
// picks a replica per connection, so the probe reaches the leader only if
// it opens a new connection for each try; on the real node (ct install of
// ci/replicas-2-values.yaml) it kept its first one, to the standby, and
// failed after its 120 s about half the time. Here the first connection
// asking for metrics lands on a standby and every later one on the leader.
func TestProbeReachesTheLeaderBehindAServiceOfTwoReplicas(t *testing.T) {
	var mu sync.Mutex
	first := ""
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			fmt.Fprint(w, "ok")
			return
		}
		mu.Lock()
		if first == "" {
			first = r.RemoteAddr
		}
		standby := r.RemoteAddr == first
		mu.Unlock()
		switch {
		case standby:
			fmt.Fprint(w, "# TYPE leader_election_master_status gauge\nleader_election_master_status{name=\"deckhand\"} 0\n")
		default:
			fmt.Fprint(w, "# TYPE controller_runtime_reconcile_total counter\ncontroller_runtime_reconcile_total{controller=\"blogpost\",result=\"success\"} 1\n")
		}
	}))
	defer service.Close()

	out, code := probe(t, "--health="+service.URL, "--metrics="+service.URL+"/metrics", "--timeout=10s")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   metrics: ")
}
