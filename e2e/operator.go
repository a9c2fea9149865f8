package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/deckhand-dev/deckhand/internal/freeport"
	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/internal/testenv"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// operatorBinary builds cmd/deckhand once per test run.
func operatorBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deckhand-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "deckhand")
		// Without a symbol table and DWARF, as the image builds it: a
		// third less CPU to link, on a machine the suite keeps busy.
		cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", binary, "./cmd/deckhand")
		cmd.Dir = testenv.Root(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binary
}

// HostOperator is the operator binary running on this host the way the
// chart's Deployment would run it: its args, its config file, its
// environment, and a token of its ServiceAccount.
type HostOperator struct {
	cmd    *exec.Cmd
	health string
	// metrics is the metrics listener's host:port, empty with metrics off.
	metrics string
	logs    *syncbuf.Buffer
	done    chan error
}

// RunOperatorAsChart starts the operator described by a rendered release.
func RunOperatorAsChart(t testing.TB, r *Rendered, namespace string) *HostOperator {
	t.Helper()
	return RunOperatorAsChartVia(t, r, namespace, "", nil)
}

// RunOperatorAsChartVia is RunOperatorAsChart with the API server reached
// at server (HTTPS with certificate authority caPEM, e.g. a fault-injecting
// proxy on 127.0.0.1) instead of the cluster's address; "" is the cluster's.
func RunOperatorAsChartVia(t testing.TB, r *Rendered, namespace, server string, caPEM []byte) *HostOperator {
	t.Helper()
	return runOperatorBinaryAsChart(t, operatorBinary(t), r, namespace, server, caPEM)
}

// runOperatorBinaryAsChart is RunOperatorAsChartVia with another build of
// the operator (a benchmark compares builds in the same cluster state).
func runOperatorBinaryAsChart(t testing.TB, binary string, r *Rendered, namespace, server string, caPEM []byte) *HostOperator {
	t.Helper()
	d := Into[appsv1.Deployment](t, r.Operator(t, "Deployment"))
	cm := Into[corev1.ConfigMap](t, r.Operator(t, "ConfigMap"))
	container := d.Spec.Template.Spec.Containers[0]
	dir := t.TempDir()

	// The chart's config, with the listen addresses moved to free local
	// ports so several operators can run on one host.
	cfg := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg))
	health := freeAddress(t)
	cfg["health-probe-bind-address"] = health
	// Tests share the cluster: the operator watches only the test's own
	// namespace (unless the chart already limits it), so it never sees, nor
	// records Events about, another test's objects.
	if _, ok := cfg["watch-namespaces"]; !ok {
		cfg["watch-namespaces"] = []string{namespace}
	}
	// kwok's pods run no instance agent and their addresses are fake: the
	// operator must never ask them, so a Database made here without
	// spec.failover.enabled gets failover off (the chart's default is on).
	cfg["database-failover-default"] = false
	metrics := ""
	if cfg["metrics-bind-address"] != "0" {
		metrics = freeAddress(t)
		cfg["metrics-bind-address"] = metrics
	}
	cfgFile := filepath.Join(dir, "config.yaml")
	b, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cfgFile, b, 0o600))

	var args []string
	for _, a := range container.Args {
		if strings.HasPrefix(a, "--config=") {
			a = "--config=" + cfgFile
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+serviceAccountKubeconfig(t, namespace, d.Spec.Template.Spec.ServiceAccountName, dir, server, caPEM))

	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "POD_NAMESPACE="+namespace)
	for _, e := range container.Env {
		if e.ValueFrom == nil {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	op := &HostOperator{cmd: cmd, health: health, metrics: metrics, logs: logs, done: make(chan error, 1)}
	go func() { op.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("operator logs:\n%s", logs.String())
		}
	})
	return op
}

// WaitReady waits until /readyz answers 200.
func (o *HostOperator) WaitReady(t testing.TB) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true,
		func(ctx context.Context) (bool, error) {
			select {
			case err := <-o.done:
				return false, fmt.Errorf("operator exited: %v\n%s", err, o.logs.String())
			default:
			}
			resp, err := http.Get("http://" + o.health + "/readyz")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
	require.NoError(t, err, "operator not ready:\n%s", o.logs.String())
}

// Stop sends SIGTERM and returns the exit error (nil for a clean exit).
func (o *HostOperator) Stop(t testing.TB) error {
	t.Helper()
	require.NoError(t, o.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-o.done:
		return err
	case <-time.After(45 * time.Second):
		return fmt.Errorf("operator did not stop within 45 s of SIGTERM")
	}
}

// Kill sends SIGKILL, as a node failure or the OOM killer would: no
// deferred cleanup runs and a held Lease is not released.
func (o *HostOperator) Kill(t testing.TB) {
	t.Helper()
	require.NoError(t, o.cmd.Process.Kill())
	err := <-o.done
	o.done <- err // for Running
}

// Running reports whether the process has not exited.
func (o *HostOperator) Running() bool {
	select {
	case err := <-o.done:
		o.done <- err
		return false
	default:
		return true
	}
}

// Pid is the operator process's id (for its memory, from /proc).
func (o *HostOperator) Pid() int { return o.cmd.Process.Pid }

// Logs is what the operator printed so far.
func (o *HostOperator) Logs() string { return o.logs.String() }

// Failures are the operator's own failures in its log so far: JSON lines at
// error level or above (a reconciler's error, a failed Event), klog's error
// lines (client-go's: a list or watch refused, e.g. by RBAC) and Go panics.
// Optimistic-concurrency conflicts are left out: the reconcile is retried
// by design.
func (o *HostOperator) Failures() []string {
	var out []string
	for _, line := range strings.Split(o.Logs(), "\n") {
		if isFailure(line) && !strings.Contains(line, "the object has been modified") {
			out = append(out, line)
		}
	}
	return out
}

var klogError = regexp.MustCompile(`^[EF]\d{4} `)

func isFailure(line string) bool {
	var entry struct {
		Level string `json:"level"`
	}
	if json.Unmarshal([]byte(line), &entry) == nil && entry.Level != "" {
		switch entry.Level {
		case "error", "dpanic", "panic", "fatal":
			return true
		}
		return false
	}
	return klogError.MatchString(line) || strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:")
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount with a token from the TokenRequest API.
func serviceAccountKubeconfig(t testing.TB, namespace, sa, dir, server string, serverCA []byte) string {
	t.Helper()
	admin := testenv.RESTConfig(t)
	token := testenv.ServiceAccountToken(t, namespace, sa)

	ca := admin.CAData
	if len(ca) == 0 && admin.CAFile != "" {
		var err error
		ca, err = os.ReadFile(admin.CAFile)
		require.NoError(t, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: ca}
	if server != "" {
		kc.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: serverCA}
	}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: sa, Namespace: namespace}
	kc.CurrentContext = "sa"
	path := filepath.Join(dir, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// freeAddress is a local address no other caller gets while the test
// runs: the kernel's next free port, closed at once, can come back to the
// next caller (the metrics and health addresses of one operator once got
// the same one).
func freeAddress(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + freeport.String(t)
}
