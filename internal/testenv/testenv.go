// Package testenv gives integration tests a real API server: deckhand's
// local cluster (hack/cluster.sh), started once per `go test` run when none
// is up and shared by every test package, a fresh namespace per test, the
// CRDs from crds/, and an in-process operator.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/deckhand-dev/deckhand/operator"
	"github.com/deckhand-dev/deckhand/operator/manager"
)

// KubeconfigEnv points tests at a cluster that is already up; without it
// the local cluster is started (or reused) through hack/cluster.sh. Tests
// never use $KUBECONFIG, so they cannot touch a cluster by accident.
const KubeconfigEnv = "DECKHAND_TEST_KUBECONFIG"

var (
	clusterOnce sync.Once
	kubeconfig  string
	clusterErr  error
)

// Root is the repository root.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "go.mod not found above the test's directory")
		dir = parent
	}
}

// Kubeconfig is the path of the test cluster's kubeconfig.
func Kubeconfig(t testing.TB) string {
	t.Helper()
	clusterOnce.Do(func() {
		if kubeconfig = os.Getenv(KubeconfigEnv); kubeconfig != "" {
			return
		}
		cmd := exec.Command(filepath.Join(Root(t), "hack", "cluster.sh"), "up")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			clusterErr = fmt.Errorf("hack/cluster.sh up: %w\n%s", err, stderr.String())
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		kubeconfig = strings.TrimPrefix(lines[len(lines)-1], "export KUBECONFIG=")
	})
	require.NoError(t, clusterErr)
	return kubeconfig
}

// RESTConfig is a client configuration for the test cluster, with rate
// limits high enough that tests are never throttled client-side.
func RESTConfig(t testing.TB) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", Kubeconfig(t))
	require.NoError(t, err)
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg
}

// Scheme has the built-in types and every deckhand API.
func Scheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, apiextensionsv1.AddToScheme(s))
	for _, c := range operator.Controllers {
		require.NoError(t, c.AddToScheme(s))
	}
	return s
}

// Client is a direct (uncached) client to the test cluster.
func Client(t testing.TB) client.Client {
	t.Helper()
	c, err := client.New(RESTConfig(t), client.Options{Scheme: Scheme(t)})
	require.NoError(t, err)
	return c
}

// Namespace creates a namespace for this test and deletes it when the test
// ends. A benchmark also waits, for at most benchmarkCleanup, until the
// namespace is gone: benchmarks fill it with thousands of objects, and
// deleting them keeps the cluster busy (kwok took a minute over 5,000
// pods), which the next benchmark would otherwise measure, or a test wait on.
func Namespace(t testing.TB, c client.Client) string {
	t.Helper()
	name := strings.ToLower(t.Name())
	name = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, name)
	if len(name) > 40 {
		name = name[:40]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   strings.Trim(name, "-") + "-" + rand.String(5),
		Labels: map[string]string{"deckhand.dev/test": "true"},
	}}
	require.NoError(t, c.Create(context.Background(), ns))
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), ns)
		if _, bench := t.(*testing.B); bench {
			waitNamespaceGone(t, c, ns.Name)
		}
	})
	return ns.Name
}

const benchmarkCleanup = 3 * time.Minute

// waitNamespaceGone waits until the namespace no longer exists, and says
// how long that took, or that it was still there.
func waitNamespaceGone(t testing.TB, c client.Client, name string) {
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, benchmarkCleanup, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Logf("namespace %s still there %v after it was deleted; going on", name, benchmarkCleanup)
		return
	}
	t.Logf("namespace %s gone %.1f s after it was deleted", name, time.Since(start).Seconds())
}

var crdOnce sync.Once

// InstallCRDs applies every CRD in crds/ and waits until each is served.
func InstallCRDs(t testing.TB) {
	t.Helper()
	c := Client(t)
	crdOnce.Do(func() {
		files, err := filepath.Glob(filepath.Join(Root(t), "crds", "*.yaml"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, f := range files {
			crd := ReadCRD(t, f)
			// Other test processes (the chart's e2e) may be updating it too.
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return createOrReplace(c, crd.DeepCopy()) })
			require.NoError(t, err, f)
			WaitEstablished(t, c, crd.Name)
		}
	})
}

// createOrReplace makes the cluster's CRD the file's, whoever installed it
// before (another test package, or a chart).
func createOrReplace(c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	ctx := context.Background()
	var existing apiextensionsv1.CustomResourceDefinition
	err := c.Get(ctx, client.ObjectKeyFromObject(crd), &existing)
	if apierrors.IsNotFound(err) {
		if err := c.Create(ctx, crd); !apierrors.IsAlreadyExists(err) {
			return err
		}
		return createOrReplace(c, crd)
	}
	if err != nil {
		return err
	}
	crd.ResourceVersion = existing.ResourceVersion
	crd.Annotations = existing.Annotations
	crd.Labels = existing.Labels
	return c.Update(ctx, crd)
}

// ReadCRD decodes one CRD file.
func ReadCRD(t testing.TB, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.UnmarshalStrict(b, crd), file)
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	return crd
}

// WaitEstablished waits until the API server serves the CRD.
func WaitEstablished(t testing.TB, c client.Client, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
	require.NoError(t, err, "CRD %s not established", name)
}

// StartOperator runs the deckhand manager in this process with the given
// controllers, watching only the given namespaces (at least one), until the
// test ends. It authenticates as a ServiceAccount with the RBAC the chart
// gives those controllers (ChartRBACConfig).
func StartOperator(t testing.TB, controllers []string, namespaces ...string) {
	t.Helper()
	cfg := manager.Config{
		Controllers:             controllers,
		WatchNamespaces:         namespaces,
		MetricsBindAddress:      "0",
		HealthProbeBindAddress:  "0",
		LogLevel:                "info",
		LogFormat:               "json",
		KubeAPIQPS:              200,
		KubeAPIBurst:            400,
		GracefulShutdownTimeout: 5 * time.Second,
		ManyPerProcess:          true,
	}
	require.NotEmpty(t, namespaces, "an operator under test watches only its test's namespaces")
	mgr, _, err := manager.New(cfg, ChartRBACConfig(t, namespaces[0], controllers...))
	require.NoError(t, err)
	run(t, mgr)
}

// StartController runs one controller, registered by setup (for example
// with a clock of the test's), with the given client config (benchmarks
// count its requests), watching only the given namespaces, until the test
// ends.
func StartController(t testing.TB, rc *rest.Config, setup func(ctrl.Manager) error, namespaces ...string) {
	t.Helper()
	StartStoppableController(t, rc, setup, namespaces...)
}

// StartStoppableController is StartController, and returns a function
// that stops the operator (as a process that ends would: a test can then
// start another, with nothing of the first one's memory); stopping it
// twice, or at the test's end, is fine.
func StartStoppableController(t testing.TB, rc *rest.Config, setup func(ctrl.Manager) error, namespaces ...string) (stop func()) {
	t.Helper()
	// No namespace would mean every namespace: the test's operator would see,
	// and record Events about, other tests' objects.
	require.NotEmpty(t, namespaces, "a controller under test watches only its test's namespaces")
	opts := ctrl.Options{
		Scheme:                 Scheme(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{}, DefaultTransform: manager.SlimCachedObjects,
			ByObject: manager.OwnedObjectsOnly(operator.Controllers)},
	}
	for _, ns := range namespaces {
		opts.Cache.DefaultNamespaces[ns] = cache.Config{}
	}
	mgr, err := ctrl.NewManager(rc, opts)
	require.NoError(t, err)
	require.NoError(t, setup(mgr))
	return run(t, mgr)
}

var loggerOnce sync.Once

// run starts mgr until the test ends (or stop) and waits for its caches.
func run(t testing.TB, mgr ctrl.Manager) (stop func()) {
	t.Helper()
	// Reconcile errors reach the test output; the rest would drown it.
	loggerOnce.Do(func() { ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel))) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("operator stopped with an error: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	require.True(t, mgr.GetCache().WaitForCacheSync(syncCtx), "operator caches did not sync")
	return stop
}

// Kubectl runs the pinned kubectl against the test cluster and returns its
// combined output.
func Kubectl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	dir, err := exec.Command(filepath.Join(Root(t), "hack", "tools.sh"), "dir", "kube").Output()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(strings.TrimSpace(string(dir)), "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+Kubeconfig(t))
	out, err := cmd.CombinedOutput()
	return string(out), err
}
