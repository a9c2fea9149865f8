package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strings"

	"go.uber.org/zap/zapcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/deckhand-dev/deckhand/operator"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// inClusterNamespaceFile holds the pod's namespace when running in a cluster.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Logger builds the JSON (or console) logger the configuration asks for.
func Logger(cfg Config) (zap.Opts, error) {
	level, err := parseLevel(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	return func(o *zap.Options) {
		// controller-runtime's production mode writes JSON; development mode
		// writes console lines for people running the operator by hand.
		o.Development = cfg.LogFormat == "console"
		o.Level = level
		o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder
	}, nil
}

func parseLevel(s string) (zapcore.Level, error) {
	switch strings.ToLower(s) {
	case "debug", "info", "warn", "error":
		return zapcore.ParseLevel(strings.ToLower(s))
	}
	return 0, fmt.Errorf("log-level %q: must be debug, info, warn or error", s)
}

// RESTConfig loads the API client configuration: --kubeconfig, else
// in-cluster, else $KUBECONFIG, with the configured rate limits.
func RESTConfig(cfg Config) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	} else {
		rc, err = ctrl.GetConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = cfg.KubeAPIQPS, cfg.KubeAPIBurst
	return rc, nil
}

// New builds a manager running the selected controllers.
func New(cfg Config, rc *rest.Config) (ctrl.Manager, []registration.Controller, error) {
	selected, err := operator.Select(cfg.Controllers)
	if err != nil {
		return nil, nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	for _, c := range selected {
		if err := c.AddToScheme(scheme); err != nil {
			return nil, nil, fmt.Errorf("registering %s types: %w", c.Name, err)
		}
	}

	leNamespace, err := leaderElectionNamespace(cfg)
	if err != nil {
		return nil, nil, err
	}
	lease, renew, retry := cfg.leaderElectionTimes()
	if err := checkLeaderElectionTimes(lease, renew, retry); err != nil {
		return nil, nil, err
	}
	opts := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: cfg.MetricsBindAddress},
		HealthProbeBindAddress:        cfg.HealthProbeBindAddress,
		PprofBindAddress:              cfg.PprofBindAddress,
		LeaderElection:                cfg.LeaderElect,
		LeaderElectionID:              cfg.LeaderElectionID,
		LeaderElectionNamespace:       leNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &lease,
		RenewDeadline:                 &renew,
		RetryPeriod:                   &retry,
		GracefulShutdownTimeout:       &cfg.GracefulShutdownTimeout,
		Controller:                    ctrlconfig.Controller{SkipNameValidation: &cfg.ManyPerProcess},
		MapperProvider:                newRememberingRESTMapper,
	}
	opts.Cache = cache.Options{DefaultTransform: SlimCachedObjects, ByObject: OwnedObjectsOnly(selected)}
	opts.Cache.DefaultNamespaces = registration.CacheNamespaces(cfg.WatchNamespaces, cfg.ExcludeNamespaces)
	var leaseEvents *laterRecorder
	var identity string
	if cfg.LeaderElect {
		if identity, err = leaderIdentity(); err != nil {
			return nil, nil, err
		}
		opts.LeaderElectionResourceLockInterface, leaseEvents, err = newLeaseLock(rc, leNamespace, cfg.LeaderElectionID, identity, renew)
		if err != nil {
			return nil, nil, fmt.Errorf("leader-election lock: %w", err)
		}
		ctrl.Log.WithName("setup").Info("leader election", "lease", leNamespace+"/"+cfg.LeaderElectionID, "identity", identity,
			"leaseDuration", lease.String(), "renewDeadline", renew.String(), "retryPeriod", retry.String())
	}
	mgr, err := ctrl.NewManager(rc, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errCreatingManager, err)
	}
	if leaseEvents != nil {
		// The Events controller-runtime's own lock records ("<identity>
		// became leader" on the Lease), through the manager's recorder.
		leaseEvents.set(mgr.GetEventRecorderFor(identity)) //nolint:staticcheck // client-go's lock records core/v1 Events
	}
	if cfg.HealthProbeBindAddress != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, nil, err
		}
		if err := mgr.AddReadyzCheck("informers", informersSynced(mgr)); err != nil {
			return nil, nil, err
		}
	}
	for _, c := range selected {
		if err := c.Setup(mgr, cfg.settings()); err != nil {
			return nil, nil, fmt.Errorf("setting up controller %s: %w", c.Name, err)
		}
	}
	return mgr, selected, nil
}

// OwnedObjectsOnly limits the caches of the types the selected controllers
// create to objects labelled as deckhand's: a cluster's other Deployments
// or Services cost the operator no memory.
func OwnedObjectsOnly(selected []registration.Controller) map[client.Object]cache.ByObject {
	ours := labels.SelectorFromSet(labels.Set{registration.ManagedByLabel: registration.ManagedByValue})
	byObject := map[client.Object]cache.ByObject{}
	seen := map[reflect.Type]bool{}
	for _, c := range selected {
		for _, obj := range c.Owns {
			if t := reflect.TypeOf(obj); !seen[t] {
				seen[t] = true
				byObject[obj] = cache.ByObject{Label: ours}
			}
		}
	}
	return byObject
}

// SlimCachedObjects drops what no controller reads from the cache:
// managedFields everywhere, and the annotations of metadata-only objects
// (the ConfigMaps, Secrets and pods controllers watch as metadata), where
// kubectl's last-applied copy would otherwise keep every ConfigMap's data
// in memory after all.
func SlimCachedObjects(in any) (any, error) {
	if obj, ok := in.(metav1.Object); ok {
		obj.SetManagedFields(nil)
	}
	if m, ok := in.(*metav1.PartialObjectMetadata); ok {
		m.Annotations = nil
	}
	return in, nil
}

// informersSynced makes /readyz fail until the caches have synced, so a
// rolling update waits for a replica that can actually reconcile.
func informersSynced(mgr ctrl.Manager) healthz.Checker {
	return func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("informer caches not synced")
		}
		return nil
	}
}

// leaderElectionNamespace is the configured one, else the operator's own.
func leaderElectionNamespace(cfg Config) (string, error) {
	if !cfg.LeaderElect || cfg.LeaderElectionNamespace != "" {
		return cfg.LeaderElectionNamespace, nil
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	if b, err := os.ReadFile(inClusterNamespaceFile); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	return "", fmt.Errorf("leader-elect needs a namespace for its Lease: set --leader-election-namespace (or POD_NAMESPACE) when running outside a cluster")
}

// ErrLeaseLost is what Run returns when the operator stopped leading while
// ctx was still running: it could not renew its leader Lease within the
// renew deadline (the API server unreachable that long, or another replica
// holding the Lease). The process must stop reconciling at once.
var ErrLeaseLost = errors.New("lost the leader Lease")

// leaderElectionLost is the error controller-runtime's manager returns when
// its elector stops leading (pkg/manager/internal.go, OnStoppedLeading);
// it has no typed error for it. TestTheOperatorStartsAfreshInItsProcessWhenItLosesItsLease
// (cmd/deckhand) fails if a new controller-runtime words it otherwise.
const leaderElectionLost = "leader election lost"

// Run starts the manager and blocks until ctx ends; ErrLeaseLost when the
// manager stopped leading before that.
func Run(ctx context.Context, cfg Config) error {
	rc, err := RESTConfig(cfg)
	if err != nil {
		return err
	}
	mgr, selected, err := newWhenAPIServerServes(ctx, cfg, rc)
	if ctx.Err() != nil {
		return nil // stopped before it ran
	}
	if err != nil {
		return err
	}
	var names []string
	for _, c := range selected {
		names = append(names, c.Name)
	}
	ctrl.Log.WithName("setup").Info("starting deckhand", "controllers", names,
		"host", rc.Host, "leaderElect", cfg.LeaderElect, "watchNamespaces", cfg.WatchNamespaces, "excludeNamespaces", cfg.ExcludeNamespaces)
	err = mgr.Start(ctx)
	if err != nil && ctx.Err() == nil && strings.Contains(err.Error(), leaderElectionLost) {
		return fmt.Errorf("%w: %w", ErrLeaseLost, err)
	}
	return err
}
