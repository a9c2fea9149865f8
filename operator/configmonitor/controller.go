// Package configmonitor is the ConfigMonitor controller (seed 000): when a
// ConfigMap's (or Secret's) data changes, it restarts the workloads whose
// pods match the monitor's podSelector, once per change.
//
// The state is a hash (Wave's design): the SHA-256 of the configuration is
// kept in the monitor's status and stamped on each restarted workload's pod
// template. A reconcile compares them, so it is idempotent, survives
// operator restarts and catches up on changes made while it was down.
package configmonitor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
	"github.com/deckhand-dev/deckhand/operator/status"
)

// Name is the controller's name in --controllers.
const Name = "configmonitor"

// FieldManager owns the pod-template annotations ConfigMonitor writes.
const FieldManager = "deckhand-configmonitor"

// Condition types.
const (
	ConditionReady            = "Ready"
	ConditionConfigFound      = "ConfigFound"
	ConditionTargetsSupported = "TargetsSupported"
)

// Field indexes: which monitors name a ConfigMap or a Secret, and which
// pods carry a label (key=value).
const (
	indexConfigMap = "configmonitor.spec.configMap"
	indexSecret    = "configmonitor.spec.secret"
	indexPodLabel  = "configmonitor.pod.label"
)

// Rollout rate limit shared by every monitor in the process (Wave's: a
// config storm must not flood the API server with new ReplicaSets).
const (
	DefaultRestartsPerSecond = 1
	DefaultRestartBurst      = 100
)

// DefaultWorkers is how many monitors reconcile at once. A reconcile spends
// its time waiting on two API round trips (read the ConfigMap, patch the
// workload), so workers cost little CPU; 8 keeps a burst of changes from
// queueing behind each other on a 2-core node.
const DefaultWorkers = 8

// Per-monitor retry backoff after a failed pass: client-go's default
// doubling from 5 ms, capped at MaxFailureBackoff instead of workqueue's
// 1000 s, so a monitor that failed a few times in a row during an API
// server's bad minute is retried within seconds once it recovers.
const (
	MinFailureBackoff = 5 * time.Millisecond
	MaxFailureBackoff = 30 * time.Second
)

// failureBackoff is the controller's workqueue rate limiter: the capped
// per-monitor backoff, and workqueue's overall 10 retries per second
// (burst 100) so many failing monitors do not flood the API server.
func failureBackoff() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](MinFailureBackoff, MaxFailureBackoff),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// +kubebuilder:rbac:groups=magalix.com,resources=configmonitors,verbs=get;list;watch
// +kubebuilder:rbac:groups=magalix.com,resources=configmonitors/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;delete
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler restarts the workloads of each ConfigMonitor when its
// configuration changes.
type Reconciler struct {
	// Client reads ConfigMonitors, and the metadata of pods and
	// ReplicaSets, from the cache, and writes.
	Client client.Client
	// Workloads reads Deployment, StatefulSet and DaemonSet metadata from a
	// cache of ConfigMonitor's own: the manager's Deployment cache may hold
	// only deckhand's Deployments (TDSet's label filter), and a restart
	// needs every workload's resourceVersion and generation.
	Workloads client.Reader
	// ConfigMaps reads ConfigMaps with their data's hash instead of their
	// data (keepDataHash), from the same cache; nil reads them live.
	ConfigMaps client.Reader
	// Reader reads Secrets and, when the cache has not seen them,
	// ConfigMaps and workloads straight from the API server.
	Reader   client.Reader
	Recorder events.EventRecorder
	// Limiter paces restarts across all monitors.
	Limiter *rate.Limiter
	// Now is the clock; tests replace it.
	Now func() time.Time
	// IgnoreSecrets runs without any access to Secrets: no Secret watch, and
	// monitors naming a Secret are reported instead of served.
	IgnoreSecrets bool

	// changedAt remembers when a ConfigMap or Secret event arrived, for the
	// event-to-patch latency metric.
	changedAt sync.Map
	// stamped remembers which workloads carry which hash, so a pass skips
	// those it rolled already without a request or a restart token.
	stamped stamps
}

// Options are the controller's settings.
type Options struct {
	// IgnoreSecrets runs without any access to Secrets, so the operator
	// needs no RBAC on them; monitors naming a Secret are reported.
	IgnoreSecrets bool
	// RestartsPerSecond and RestartBurst pace restarts across all monitors;
	// zero means DefaultRestartsPerSecond and DefaultRestartBurst.
	RestartsPerSecond float64
	RestartBurst      int
	// Workers is how many monitors reconcile at once; zero means
	// DefaultWorkers.
	Workers int
	// Namespaces limits the workload metadata cache to the namespaces the
	// operator watches; empty means all but ExcludeNamespaces.
	Namespaces        []string
	ExcludeNamespaces []string
}

// restartLimiter is the token bucket of o, with the defaults for zeros.
func restartLimiter(o Options) *rate.Limiter {
	perSecond, burst := o.RestartsPerSecond, o.RestartBurst
	if perSecond == 0 {
		perSecond = DefaultRestartsPerSecond
	}
	if burst == 0 {
		burst = DefaultRestartBurst
	}
	return rate.NewLimiter(rate.Limit(perSecond), burst)
}

// Setup registers the ConfigMonitor controller with the manager.
func Setup(mgr ctrl.Manager, o Options) error {
	own, err := ownCache(mgr, o.Namespaces, o.ExcludeNamespaces)
	if err != nil {
		return err
	}
	r := &Reconciler{
		Workloads:     own,
		ConfigMaps:    own,
		Client:        mgr.GetClient(),
		Reader:        mgr.GetAPIReader(),
		Recorder:      mgr.GetEventRecorder("deckhand-" + Name),
		Limiter:       restartLimiter(o),
		Now:           time.Now,
		IgnoreSecrets: o.IgnoreSecrets,
	}
	if r.IgnoreSecrets {
		mgr.GetLogger().WithName(Name).Info("Secrets are ignored: monitors naming a Secret are reported as SecretsIgnored and restart nothing")
	}
	return r.SetupWithManager(mgr, own, cmp.Or(o.Workers, DefaultWorkers))
}

// SetupWithManager indexes monitors by what they watch and wires the
// watches. The workload informers of own (ownCache) are started by
// watches that enqueue nothing, so the controller starts only once they
// have synced.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, own cache.Cache, workers int) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &magalixv1.ConfigMonitor{}, indexConfigMap, func(o client.Object) []string {
		return []string{o.(*magalixv1.ConfigMonitor).Spec.ConfigMapName()}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &magalixv1.ConfigMonitor{}, indexSecret, func(o client.Object) []string {
		if s := o.(*magalixv1.ConfigMonitor).Spec.Secret; s != "" {
			return []string{s}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, podMetadata(), indexPodLabel, podLabels); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers, RateLimiter: failureBackoff()}).
		// Status writes (its own) must not queue a second reconcile that
		// would delay the next ConfigMap event.
		For(&magalixv1.ConfigMonitor{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// ConfigMaps come with their data's hash, not their data: a
		// ConfigMap nobody monitors costs its name in memory, and a change
		// is known without reading it.
		WatchesRawSource(source.Kind[client.Object](own, &corev1.ConfigMap{},
			handler.EnqueueRequestsFromMapFunc(r.monitorsNaming(indexConfigMap)), dataChanged{})).
		// Pod and ReplicaSet metadata (labels, owner references) map a
		// monitor's selector to its workloads without a request; nothing
		// is enqueued from them.
		WatchesMetadata(&corev1.Pod{}, handler.Funcs{}).
		WatchesMetadata(&appsv1.ReplicaSet{}, handler.Funcs{})
	for _, kind := range workloadKinds {
		b = b.WatchesRawSource(source.Kind[client.Object](own, workloadMetadata(kind), handler.Funcs{}))
	}
	if !r.IgnoreSecrets {
		b = b.WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.monitorsNaming(indexSecret)),
			builder.WithPredicates(predicate.ResourceVersionChangedPredicate{}))
	}
	return b.Complete(r)
}

// monitorsNaming maps a ConfigMap or Secret event to the monitors in its
// namespace that name it, through the field index: no other monitor wakes.
func (r *Reconciler) monitorsNaming(index string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list magalixv1.ConfigMonitorList
		if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing ConfigMonitors", "index", index, "name", o.GetName())
			return nil
		}
		if len(list.Items) == 0 {
			return nil
		}
		r.changedAt.Store(types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}, r.Now())
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, m := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
		}
		return reqs
	}
}

// Reconcile compares the configuration's hash with the one the selected
// workloads run, and restarts them once when they differ.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var m magalixv1.ConfigMonitor
	if err := r.Client.Get(ctx, req.NamespacedName, &m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !m.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := m.DeepCopy()
	result, err := r.reconcile(ctx, &m)
	m.Status.ObservedGeneration = m.Generation
	m.Status.ConfigMap = m.Spec.ConfigMapName()
	m.Status.Selector = labels.SelectorFromSet(m.Spec.PodSelector).String()
	// Locked: a pass that read the monitor before its last status write
	// reached the cache would record a changed configuration as the
	// baseline (or an old one as still pending); refused, it runs again
	// from the newer monitor. The lock is on m's version: DeletePods reads
	// (and may write) the monitor on the server mid-pass (persistCutoff),
	// and its own write must not refuse the pass's.
	before.ResourceVersion = m.ResourceVersion
	return status.Outcome(ctx, result, err, status.PatchLocked(ctx, r.Client, before, &m))
}

func (r *Reconciler) reconcile(ctx context.Context, m *magalixv1.ConfigMonitor) (ctrl.Result, error) {
	selector, err := labels.ValidatedSelectorFromSet(m.Spec.PodSelector)
	if err != nil {
		setCondition(m, ConditionReady, false, "InvalidSelector", "podSelector is not a valid label selector: "+err.Error())
		return ctrl.Result{}, nil
	}
	if m.Spec.Secret != "" && r.IgnoreSecrets {
		// The baseline stays: when Secrets are turned back on, an unchanged
		// configuration hashes the same and restarts nothing.
		msg := "spec.secret names Secret " + m.Spec.Secret + ", but this operator runs without access to Secrets " +
			"(--configmonitor-ignore-secrets; Helm value controllers.configMonitor.secrets=false); nothing is restarted " +
			"until Secrets are turned on or spec.secret is removed"
		if reason(m, ConditionReady) != "SecretsIgnored" {
			r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, "SecretsIgnored", "Reconcile", "%s", msg)
		}
		skipped.WithLabelValues("SecretsIgnored").Inc()
		setCondition(m, ConditionConfigFound, false, "SecretsIgnored", msg)
		setCondition(m, ConditionReady, false, "SecretsIgnored", msg)
		return ctrl.Result{}, nil
	}
	hash, missing, err := r.configHash(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if missing != "" {
		// Forget the baseline: the configuration's return is a new baseline,
		// not a change. The ConfigMap/Secret watch wakes us when it appears.
		msg := missing + " not found in namespace " + m.Namespace + "; nothing is restarted until it exists"
		m.Status.ObservedHash, m.Status.PendingHash, m.Status.PendingSince = "", "", nil
		setCondition(m, ConditionConfigFound, false, "NotFound", msg)
		setCondition(m, ConditionReady, false, "ConfigNotFound", msg)
		return ctrl.Result{}, nil
	}
	setCondition(m, ConditionConfigFound, true, "Found", "configuration hash "+short(hash))

	switch {
	case m.Status.ObservedHash == "":
		m.Status.ObservedHash = hash
		skipped.WithLabelValues("Baseline").Inc()
		setCondition(m, ConditionReady, true, "Baseline", "configuration recorded; its next change restarts the selected workloads")
		return ctrl.Result{}, nil
	case m.Status.ObservedHash == hash:
		m.Status.PendingHash, m.Status.PendingSince = "", nil
		// Keep the reason of the last action (Baseline, Restarted) when
		// nothing happened since.
		if !meta.IsStatusConditionTrue(m.Status.Conditions, ConditionReady) {
			setCondition(m, ConditionReady, true, "UpToDate", "the selected workloads run configuration "+short(hash))
		}
		return ctrl.Result{}, nil
	}

	now := r.Now()
	if m.Status.PendingHash != hash {
		m.Status.PendingHash, m.Status.PendingSince = hash, &metav1.Time{Time: now}
		// What an earlier change left pending says nothing about this one.
		m.Status.PendingWorkloads = nil
	}
	if m.Spec.Suspend {
		skipped.WithLabelValues("Suspended").Inc()
		setCondition(m, ConditionReady, false, "Suspended", "configuration changed; restarts are suspended until spec.suspend is false")
		return ctrl.Result{}, nil
	}
	if wait := debounceLeft(m, now); wait > 0 {
		setCondition(m, ConditionReady, false, "Debouncing", fmt.Sprintf("configuration changed; restarting after %s without further change", m.Spec.Debounce.Duration))
		return ctrl.Result{RequeueAfter: wait}, nil
	}

	out, err := r.restart(ctx, m, selector, hash)
	if m.Status.ObservedHash == hash {
		// DeletePods found, reading live, that this change was rolled out
		// already; m came from a stale cache.
		return ctrl.Result{}, nil
	}
	var wait *cutoffWait
	if errors.As(err, &wait) {
		setCondition(m, ConditionReady, false, "Restarting", "configuration changed; deleting the selected pods created before the change")
		return ctrl.Result{RequeueAfter: wait.after}, nil
	}
	m.Status.PendingWorkloads = out.pending
	r.reportUnsupported(m, out.unsupported)
	var limited *rateLimitedError
	if errors.As(err, &limited) {
		// Not a failure: the change stays pending and this monitor comes
		// back when a restart is allowed, without holding a worker.
		skipped.WithLabelValues("RateLimited").Inc()
		setCondition(m, ConditionReady, false, "RateLimited", fmt.Sprintf(
			"configuration changed; restarts are paced at %g per second (burst %d) across all monitors, the next is allowed in %s",
			float64(r.Limiter.Limit()), r.Limiter.Burst(), limited.retryAfter.Round(time.Millisecond)))
		return ctrl.Result{RequeueAfter: limited.retryAfter}, nil
	}
	if err != nil {
		setCondition(m, ConditionReady, false, "RestartFailed", err.Error())
		return ctrl.Result{}, err
	}
	m.Status.ObservedHash, m.Status.PendingHash, m.Status.PendingSince = hash, "", nil
	m.Status.RestartedWorkloads = out.done
	m.Status.LastRestartTime = &metav1.Time{Time: now}
	setCondition(m, ConditionReady, true, "Restarted", fmt.Sprintf("configuration %s rolled out to %d workload(s)", short(hash), len(out.done)))
	return ctrl.Result{}, nil
}

// debounceLeft is how long the pending change must still stay unchanged.
func debounceLeft(m *magalixv1.ConfigMonitor, now time.Time) time.Duration {
	if m.Spec.Debounce == nil || m.Spec.Debounce.Duration <= 0 || m.Status.PendingSince == nil {
		return 0
	}
	return m.Status.PendingSince.Add(m.Spec.Debounce.Duration).Sub(now)
}

// configHash is the hash of the monitor's configuration: a ConfigMap's
// from the cache, which hashed it when its event arrived; with a Secret,
// both read from the API server and hashed together (Secrets' data is
// neither cached nor hashed in memory). missing names what does not exist.
func (r *Reconciler) configHash(ctx context.Context, m *magalixv1.ConfigMonitor) (hash, missing string, err error) {
	key := client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ConfigMapName()}
	var cm corev1.ConfigMap
	if m.Spec.Secret == "" && r.ConfigMaps != nil {
		// A ConfigMap the cache has not seen (just created, or missing) is
		// asked of the API server below.
		if r.ConfigMaps.Get(ctx, key, &cm) == nil {
			if hash, ok := cachedHash(&cm); ok {
				return hash, "", nil
			}
		}
	}
	err = r.Reader.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) {
		return "", "ConfigMap " + m.Spec.ConfigMapName(), nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading ConfigMap %s: %w", m.Spec.ConfigMapName(), err)
	}
	var secret *corev1.Secret
	if m.Spec.Secret != "" {
		secret = &corev1.Secret{}
		err = r.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Secret}, secret)
		if apierrors.IsNotFound(err) {
			return "", "Secret " + m.Spec.Secret, nil
		}
		if err != nil {
			// The error names the Secret, never its data.
			return "", "", fmt.Errorf("reading Secret %s: %w", m.Spec.Secret, err)
		}
	}
	return Hash(&cm, secret), "", nil
}

func setCondition(m *magalixv1.ConfigMonitor, kind string, ok bool, reason, msg string) {
	status.SetCondition(&m.Status.Conditions, m.Generation, kind, ok, reason, msg)
}

// reason is the reason of a condition, "" when it is not set.
func reason(m *magalixv1.ConfigMonitor, kind string) string {
	if c := meta.FindStatusCondition(m.Status.Conditions, kind); c != nil {
		return c.Reason
	}
	return ""
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}
