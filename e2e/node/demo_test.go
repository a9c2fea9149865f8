package node

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Seed 000's lab on the real node: the chart's demo (the Flask app from
// Debian's python3-flask, its ConfigMap and ConfigMonitor) answers through
// its Service with the chart's message; after helm upgrade changes the
// message, the new one is served, by new containers, after one rollout.
func TestRealNodeServesSeed000Demo(t *testing.T) {
	// Its upgrades add the demo's own objects and change no value the
	// operator's Deployment reads, so the operator serves the other tests
	// throughout (helmUpgrade takes turns with their upgrades).
	parallel(t, 90*time.Second)
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	operatorDeployment(ctx, t, cs)

	image := imageRef(t, "demo-flask")
	first, second := "Welcome to Kubernetes! "+rand.String(6), "Welcome to Operators! "+rand.String(6)
	helmUpgrade(ctx, t, "--set", "demo.enabled=true",
		"--set", "demo.flask.image.repository="+image[:strings.LastIndex(image, ":")],
		"--set", "demo.flask.image.tag="+image[strings.LastIndex(image, ":")+1:],
		"--set", "demo.flask.image.pullPolicy=Never",
		"--set-string", "demo.flask.message="+first)
	t.Cleanup(func() { helmUpgrade(context.Background(), t, "--set", "demo.enabled=false") })

	svc, err := cs.CoreV1().Services(operatorNamespace).Get(ctx, "frontend", metav1.GetOptions{})
	require.NoError(t, err)
	client := startPod(ctx, t, cs, namespace(ctx, t, cs), "client", nil, "exec sleep 3600")
	fetch := "timeout 5 wget -q -O- http://" + svc.Spec.ClusterIP + "/"
	assert.Contains(t, eventually(ctx, t, cfg, cs, client, fetch, first), first)

	before := frontendState(ctx, t, cs)
	helmUpgrade(ctx, t, "--set-string", "demo.flask.message="+second)
	assert.Contains(t, eventually(ctx, t, cfg, cs, client, fetch, second), second)

	after := frontendState(ctx, t, cs)
	assert.Equal(t, before.revision+1, after.revision, "one rollout of the Flask app")
	for _, p := range after.pods {
		assert.NotContains(t, before.pods, p, "the new message is served by new containers")
	}
}

type frontend struct {
	revision int
	pods     []string
}

// frontendState is the Flask Deployment's revision and its running pods,
// once the rollout in progress (if any) has finished.
func frontendState(ctx context.Context, t testing.TB, cs clientset) frontend {
	t.Helper()
	s := settledDeployment(ctx, t, cs, operatorNamespace, "frontend")
	f := frontend{revision: s.revision}
	for _, p := range s.pods {
		f.pods = append(f.pods, p.Name)
	}
	return f
}

// releaseMu serialises upgrades of the cluster's release: the tests that
// run in parallel each switch their controller on, and Helm refuses an
// upgrade while another is under way ("release: already exists").
var releaseMu sync.Mutex

// helmUpgrade upgrades the cluster's release with args on top of its
// values, waiting for the operator to be Available again.
func helmUpgrade(ctx context.Context, t testing.TB, args ...string) {
	t.Helper()
	releaseMu.Lock()
	defer releaseMu.Unlock()
	cmd := append([]string{"--kubeconfig", kubeconfigPath(), "-n", operatorNamespace, "upgrade", "deckhand",
		"../../charts/deckhand", "--reuse-values", "--wait", "--timeout", "3m"}, args...)
	out, err := exec.CommandContext(ctx, helmBinary(t), cmd...).CombinedOutput()
	require.NoError(t, err, "helm upgrade %v:\n%s", args, out)
}
