package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/freeport"
	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// runOperatorEnv makes this test binary run the operator's main instead of
// its tests: the test below starts it so, and the operator's own re-exec
// (startAfresh) runs it again with the same environment.
const runOperatorEnv = "DECKHAND_TEST_RUN_OPERATOR"

func TestMain(m *testing.M) {
	if os.Getenv(runOperatorEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// The operator, leading, loses its Lease (here another holder takes it;
// in a cluster, an API-server outage longer than the renew deadline does
// the same): it stops reconciling, but its process does not exit, so a
// kubelet would count no restart and grow no back-off. The same process
// campaigns again, takes the Lease back once the other holder's has
// expired, and serves its health endpoint on the same port.
func TestTheOperatorStartsAfreshInItsProcessWhenItLosesItsLease(t *testing.T) {
	c := testenv.Client(t)
	testenv.InstallCRDs(t)
	ns := testenv.Namespace(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const pod, lease = "deckhand-7d4b9c6f8-q5m2x", "deckhand.deckhand.dev"
	health := "127.0.0.1:" + freeport.String(t)

	p := startOperator(ctx, t, []string{"POD_NAME=" + pod}, "--kubeconfig", testenv.Kubeconfig(t),
		"--controllers", "tdset", "--watch-namespaces", ns,
		"--leader-elect", "--leader-election-namespace", ns, "--leader-election-id", lease,
		"--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "1s",
		"--metrics-bind-address", "0", "--health-probe-bind-address", health, "--log-format", "console")
	holder := func() string {
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: lease}, &l); err != nil {
			return ""
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	p.until("the operator to take its Lease", func() bool { return holder() == pod })
	p.until("its health endpoint", func() bool { return ready(health) })

	// Another holder takes the Lease for 8 s: the operator's renewals fail
	// and, 3 s on, it stops leading. The operator renews every second, so
	// this write can meet a newer copy: read again and retry, as any second
	// candidate would.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: lease}, &l); err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptr.To("another-replica")
		l.Spec.LeaseDurationSeconds = ptr.To[int32](8)
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		return c.Update(ctx, &l)
	}))

	p.until("the operator to start afresh", func() bool { return strings.Contains(p.log.String(), "starting afresh in this process") })
	p.until("the same process to take the Lease back", func() bool { return holder() == pod })
	p.until("its health endpoint on the same port", func() bool { return ready(health) })
}

// operatorProcess is the operator's main run by this test binary.
type operatorProcess struct {
	t      *testing.T
	ctx    context.Context
	log    syncbuf.Buffer
	exited chan error
}

// startOperator starts the operator with args and the extra environment;
// the test's cleanup stops it (SIGTERM, then SIGKILL after 20 s).
func startOperator(ctx context.Context, t *testing.T, env []string, args ...string) *operatorProcess {
	p := &operatorProcess{t: t, ctx: ctx, exited: make(chan error, 1)}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), runOperatorEnv+"=1"), env...)
	cmd.Stdout, cmd.Stderr = &p.log, &p.log
	require.NoError(t, cmd.Start())
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return p
}

// until waits for cond, failing at once if the operator exits.
func (p *operatorProcess) until(what string, cond func() bool) {
	p.t.Helper()
	err := wait.PollUntilContextTimeout(p.ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case err := <-p.exited:
			p.t.Fatalf("the operator exited (%v) while waiting for %s; its log:\n%s", err, what, p.log.String())
		default:
		}
		return cond(), nil
	})
	require.NoError(p.t, err, "%s; the operator's log:\n%s", what, p.log.String())
}

func ready(addr string) bool { return answers200(addr, "/readyz") }

// answers200: the operator's health endpoint at addr answers path with 200.
func answers200(addr, path string) bool {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
