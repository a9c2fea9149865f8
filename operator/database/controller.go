// Package database is the Database controller (seed 004's SampleDB): for
// each Database it keeps a StatefulSet of a primary and streaming standbys
// with a volume each, the Services in front of them, generated credentials,
// the engine's scripts and an init Job that creates the database and the
// role that owns it; and its backups, restore, upgrades, deletion and
// failover. The same core serves the MySQLCluster (operator/mysqlcluster)
// through a Kind of its own (kind.go).
//
// The operator never connects to a database server and holds no database
// password in memory. It sees the servers through the Kubernetes API (pod
// readiness: the kubelet runs the probes; Job results and what a Job
// reports in its container's termination message; the end of a standby's
// log while it clones). With spec.failover.enabled it also asks the
// instance agent in every pod (operator/database/postgres/instance) over
// mutual TLS: the primary's agent on every pass of the failover watch,
// once a second, and every other instance's while the primary is healthy
// (failover.go). Engine knowledge (images, scripts, containers) lives
// behind the engine.Engine interface; operator/database/postgres and
// operator/database/mysql implement it. docs/design/database.md says why.
package database

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/pooler"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/registration"
	"github.com/deckhand-dev/deckhand/operator/status"
)

// Name is the controller's name in --controllers.
const Name = "database"

// FieldManager owns the fields the Database controller applies.
const FieldManager = "deckhand-database"

// Condition types.
const (
	ConditionReady          = "Ready"
	ConditionInitialized    = "Initialized"
	ConditionStorageBound   = "StorageBound"
	ConditionStorageResized = "StorageResized"
	ConditionVersionKnown   = "VersionKnown"
)

// +kubebuilder:rbac:groups=stable.imaginedata.co,resources=databases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=stable.imaginedata.co,resources=databases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=stable.imaginedata.co,resources=databases/finalizers,verbs=update
// +kubebuilder:rbac:groups=stable.imaginedata.co,resources=databasebackups,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=stable.imaginedata.co,resources=databasebackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=stable.imaginedata.co,resources=databasebackups/finalizers,verbs=update
// Secrets: delete only because OwnerReferencesPermissionEnforcement asks
// for it to take the Database's owner reference off them (deletionPolicy
// Retain keeps them); the operator deletes no Secret itself.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Engines are the engines the controller serves, by spec.engine.
var Engines = map[dbv1.Engine]engine.Engine{
	dbv1.EnginePostgreSQL: postgres.Engine{},
}

// Options are the controller's settings.
type Options struct {
	// WatchNamespaces limits the owned-object cache to these namespaces
	// (empty: all), as the manager's cache is.
	WatchNamespaces []string
	// ExcludeNamespaces leaves these namespaces out when WatchNamespaces
	// is empty, as the manager's cache does.
	ExcludeNamespaces []string
	// Now is the clock of schedules and retention (tests may set one; nil:
	// the system clock).
	Now func() time.Time
	// MajorPathWithinMajor is a TEST-ONLY seam: an image change within
	// one major version (even to the same version under another tag)
	// takes the major-upgrade path (backup, servers stopped, upgrade Job,
	// new start), so that path can run on this machine's one PostgreSQL
	// major. No flag, chart value or config key sets it: only Go code
	// that calls Setup (tests) can. See docs/design/database.md, Upgrades.
	MajorPathWithinMajor bool
	// OperatorImage is the operator's own image: the database pods' init
	// container copies the instance agent from it (spec.failover).
	OperatorImage string
	// InstanceDial is a TEST-ONLY seam: the instance channel's client
	// dials through it (tests point a pod's name at an agent on
	// 127.0.0.1; kwok pods' addresses are fake, so the tests that run
	// the operator on kwok refuse every dial unless they give one). Nil:
	// the pod's address from the operator's cache (agentdial.go).
	InstanceDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// FailoverByDefault: a new PostgreSQL Database without
	// spec.failover.enabled gets automatic failover (the flag
	// --database-failover-default, on by default; the chart's
	// controllers.database.failoverByDefault). Off here, the zero value,
	// for tests that run the operator on kwok, whose pods run no agent.
	FailoverByDefault bool
	// TLSByDefault: a new cluster of the Kind (a Database, a
	// MySQLCluster) without spec.tls.enabled gets TLS (the flags
	// --database-tls-default and --mysqlcluster-tls-default, on by
	// default; the chart's controllers.<name>.tlsByDefault). Off here,
	// the zero value, as FailoverByDefault.
	TLSByDefault bool
	// MonitoringByDefault: a new PostgreSQL Database without
	// spec.monitoring.enabled serves metrics (the flag
	// --database-monitoring-default, on by default; the chart's
	// controllers.database.monitoringByDefault). Off here, the zero
	// value, as FailoverByDefault.
	MonitoringByDefault bool
	// ArchiverImage is the archiver sidecar's image (Barman Cloud) for
	// Databases with spec.backup.storage.objectStore; empty:
	// DefaultArchiverImage.
	ArchiverImage string
	// PoolerImage is PgBouncer's image for Poolers that name none; ""
	// is pooler.DefaultImage.
	PoolerImage string
}

// Reconciler keeps each cluster's objects and status: a Database's, or
// another Kind's (a MySQLCluster's) through the same code.
type Reconciler struct {
	// Client reads clusters (the manager's cache) and writes.
	Client client.Client
	// Owned reads the objects clusters own, from a cache holding only
	// objects labelled with the Kind's cluster label (Secrets as metadata
	// only).
	Owned client.Reader
	// API reads uncached: whether a name is taken by someone else's
	// object, StorageClasses, the app Secret when its details change.
	API      client.Reader
	Recorder events.EventRecorder
	Kind     *Kind
	// Logs reads the end of a standby's log (a clone's progress); nil:
	// clones are not shown.
	Logs PodLogs
	// Now is the clock of schedules and retention (tests may set one).
	Now func() time.Time
	// MajorPathWithinMajor: Options.MajorPathWithinMajor (test-only).
	MajorPathWithinMajor bool
	// OperatorImage, InstanceDial and FailoverByDefault: Options'.
	OperatorImage     string
	InstanceDial      func(ctx context.Context, network, addr string) (net.Conn, error)
	FailoverByDefault bool
	TLSByDefault      bool
	// MonitoringByDefault: Options'.
	MonitoringByDefault bool
	// ArchiverImage: Options'.
	ArchiverImage string
	// Poolers pauses the Poolers of a Database around a switchover; nil:
	// the Kind has none.
	Poolers *pooler.Console
	// serverTLS are the Databases' server certificates (tls.go).
	serverTLS serverTLS
	// channels are the Databases' instance channel clients; failovers
	// what the operator saw of each primary (failover.go).
	channels  channels
	failovers primaryWatch
	// nodes are the Nodes the primaries run on, read to see a drain
	// coming (drain.go).
	nodes nodes
}

// Setup registers the Database controller with the manager.
func Setup(mgr ctrl.Manager, o Options) error {
	r, err := SetupKind(mgr, DatabaseKind, o)
	if err != nil {
		return err
	}
	// Poolers front Databases: their controller runs beside this one,
	// when the cluster serves the kind (CRDs a user manages may be older
	// than the operator).
	if _, err := mgr.GetRESTMapper().RESTMapping(dbv1.GroupVersion.WithKind("Pooler").GroupKind(), dbv1.GroupVersion.Version); meta.IsNoMatchError(err) {
		mgr.GetLogger().Info("the cluster does not serve kind Pooler (stable.imaginedata.co/v1): Poolers are not reconciled; apply crds/stable.imaginedata.co_poolers.yaml and restart the operator")
		return nil
	}
	// A switchover pauses the Database's poolers first (switchover.go).
	r.Poolers = &pooler.Console{Client: mgr.GetClient(), API: mgr.GetAPIReader(), Recorder: r.Recorder, Dial: o.InstanceDial, Now: o.Now}
	return pooler.Setup(mgr, pooler.Options{
		Image: o.PoolerImage, OperatorImage: o.OperatorImage, Target: poolerTarget,
		WatchNamespaces: o.WatchNamespaces, ExcludeNamespaces: o.ExcludeNamespaces,
		Now: o.Now, Dial: o.InstanceDial,
	})
}

// SetupKind registers the controllers of one Kind (its clusters and its
// backups) with the manager, and returns the cluster Reconciler.
//
// The objects a cluster owns are watched through a cache of the
// controller's own, selecting the Kind's cluster label: the manager's
// cache is shared with controllers that watch every ConfigMap's metadata
// or every Service, and a label selector there would hide objects from
// them. Each Kind has its own label, so a Database controller never sees
// a MySQLCluster's objects, nor the other way round.
func SetupKind(mgr ctrl.Manager, kind *Kind, o Options) (*Reconciler, error) {
	owned, err := registration.LabelledCache(mgr, kind.Keys.Cluster, kind.Name+"-cache", o.WatchNamespaces, o.ExcludeNamespaces)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(owned); err != nil {
		return nil, err
	}
	clientset, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	r := &Reconciler{
		Client:   mgr.GetClient(),
		Owned:    owned.GetCache(),
		API:      mgr.GetAPIReader(),
		Recorder: wordsRecorder{EventRecorder: mgr.GetEventRecorder("deckhand-" + kind.Name), kind: kind},
		Kind:     kind,
		Logs:     apiPodLogs{clientset: clientset},
		Now:      o.Now,
		// Test-only (Options.MajorPathWithinMajor).
		MajorPathWithinMajor: o.MajorPathWithinMajor,
		OperatorImage:        o.OperatorImage,
		InstanceDial:         o.InstanceDial,
		FailoverByDefault:    o.FailoverByDefault,
		TLSByDefault:         o.TLSByDefault,
		MonitoringByDefault:  o.MonitoringByDefault,
		ArchiverImage:        o.ArchiverImage,
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(kind.Name).
		// Reconciles mostly wait on API writes: a few in parallel bring
		// up many clusters faster.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		For(kind.Clusters.New())
	for _, obj := range ownedKinds() {
		b = b.WatchesRawSource(source.Kind(owned.GetCache(), obj, handler.EnqueueRequestsFromMapFunc(clusterOfLabel(kind))))
	}
	b = b.Watches(kind.Backups.New(), handler.EnqueueRequestsFromMapFunc(clusterOfBackup(kind, mgr.GetClient()))).
		Watches(kind.Clusters.New(), handler.EnqueueRequestsFromMapFunc(sourcesOfRecovery(kind, mgr.GetClient())))
	if err := b.Complete(r); err != nil {
		return nil, err
	}
	// The backups' clock is the schedules' (verification schedules).
	br := &BackupReconciler{Client: r.Client, Owned: r.Owned, API: r.API, Recorder: r.Recorder, Kind: kind, Now: o.Now, ArchiverImage: o.ArchiverImage}
	err = ctrl.NewControllerManagedBy(mgr).
		Named(kind.Name + "-backup").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		For(kind.Backups.New()).
		WatchesRawSource(source.Kind(owned.GetCache(), client.Object(&batchv1.Job{}), handler.EnqueueRequestsFromMapFunc(backupOfJob(kind, r.Owned)))).
		WatchesRawSource(source.Kind(owned.GetCache(), client.Object(&corev1.Pod{}), handler.EnqueueRequestsFromMapFunc(backupOfJob(kind, r.Owned)))).
		Complete(br)
	return r, err
}

// clusterOfBackup maps a backup to its cluster, and to the clusters
// waiting to be restored from it (fromBackup), which start their restore
// when it completes.
func clusterOfBackup(kind *Kind, clusters client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		b := kind.Backups.View(o)
		out := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Cluster}}}
		all, err := kind.Clusters.List(ctx, clusters, b.Namespace)
		if err != nil {
			return out
		}
		for _, c := range all {
			if c.Spec.FromBackup == b.Name && c.Name != b.Cluster && !restored(c) {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
			}
		}
		return out
	}
}

// ownedKinds are the kinds a cluster's objects have; Secrets are watched
// as metadata, so the operator keeps no password in memory.
func ownedKinds() []client.Object {
	return []client.Object{
		secretMetadata(), &corev1.ConfigMap{}, &corev1.Service{}, &appsv1.StatefulSet{}, &batchv1.Job{},
		&corev1.PersistentVolumeClaim{}, &corev1.Pod{}, &policyv1.PodDisruptionBudget{},
	}
}

func secretMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// clusterOfLabel maps an owned object (or a PVC or pod, owned by the
// StatefulSet or Job) to its cluster.
func clusterOfLabel(kind *Kind) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[kind.Keys.Cluster]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	}
}

// Reconcile brings a cluster's objects in line with its spec, then
// reports what runs.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.Kind.Clusters.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.Kind.forgetMetrics(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		before := obj.DeepCopyObject().(client.Object)
		db := r.Kind.Clusters.View(obj)
		result, gone, err := r.finalize(ctx, db)
		if gone {
			r.Kind.forgetMetrics(req.Namespace, req.Name)
			return status.Outcome(ctx, result, err, nil)
		}
		r.Kind.Clusters.SetStatus(obj, db)
		return status.Outcome(ctx, result, err, status.PatchLocked(ctx, r.Client, before, obj))
	}
	err := r.ensureFinalizerAndDefaults(ctx, obj)
	if errors.Is(err, errStaleDatabase) {
		return ctrl.Result{RequeueAfter: staleRecheck}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	before := obj.DeepCopyObject().(client.Object)
	db := r.Kind.Clusters.View(obj)
	result, err := r.reconcile(ctx, db)
	if errors.Is(err, errStaleDatabase) {
		return ctrl.Result{RequeueAfter: staleRecheck}, nil
	}
	if err == nil {
		var next time.Duration
		next, err = r.manageBackups(ctx, db)
		if upgrade := upgradeRecheck(db, r.now()); upgrade > 0 && (next == 0 || upgrade < next) {
			next = upgrade
		}
		if certs := r.tlsRecheck(db); certs > 0 && (next == 0 || certs < next) {
			next = certs
		}
		if next > 0 && (result.RequeueAfter == 0 || next < result.RequeueAfter) {
			result.RequeueAfter = next
		}
	}
	db.Status.ObservedGeneration = db.Generation
	r.Kind.publishMetrics(db)
	r.Kind.Clusters.SetStatus(obj, db)
	// A planned recheck or an error, never both: controller-runtime drops
	// the recheck that comes with an error.
	return status.Outcome(ctx, result, err, status.PatchLocked(ctx, r.Client, before, obj))
}

// recheckForeign is how often a Database blocked by someone else's object
// looks again: that object is not in the operator's cache, so its removal
// sends no event.
const recheckForeign = 10 * time.Second

func (r *Reconciler) reconcile(ctx context.Context, db *Cluster) (ctrl.Result, error) {
	eng, ok := r.Kind.Engines[engineOf(db)]
	if !ok {
		msg := fmt.Sprintf("engine %q is not served by this operator", engineOf(db))
		r.setCondition(db, ConditionReady, false, "UnknownEngine", msg)
		db.Status.Phase = dbv1.PhaseDegraded
		return ctrl.Result{}, nil
	}
	db.Status.Replicas = replicasOf(db)
	recordCurrentPrimary(db)
	if !db.Spec.Suspend {
		adopted, err := r.adoptKeptSecrets(ctx, db)
		if err != nil {
			return ctrl.Result{}, err
		}
		if adopted {
			// The cache shows the adopted Secrets as ours a moment later;
			// until then the lookup would refuse them.
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
	}
	live, err := r.lookupAll(ctx, db)
	if notOwned := notOwnedErrors(err); len(notOwned) > 0 {
		r.refuse(db, notOwned)
		return ctrl.Result{RequeueAfter: recheckForeign}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if !db.Spec.Suspend {
		err := r.converge(ctx, db, eng, live)
		if errors.Is(err, errStaleDatabase) {
			return ctrl.Result{}, err
		}
		if notOwned := notOwnedErrors(err); len(notOwned) > 0 {
			r.refuse(db, notOwned)
			return ctrl.Result{RequeueAfter: recheckForeign}, nil
		}
		if err != nil {
			r.setCondition(db, ConditionReady, false, "ApplyFailed", err.Error())
			db.Status.Phase = dbv1.PhaseDegraded
			return ctrl.Result{}, err
		}
	}
	r.observe(ctx, db, eng, live)
	if !db.Spec.Suspend {
		recheck, err := r.watchPrimary(ctx, db, eng, live)
		if err != nil {
			return ctrl.Result{}, err
		}
		if recheck > 0 {
			return ctrl.Result{RequeueAfter: min(recheck, cloneRecheck)}, nil
		}
	}
	if len(db.Status.Clones) > 0 {
		// Nothing about a cloning pod changes while it copies.
		return ctrl.Result{RequeueAfter: cloneRecheck}, nil
	}
	return ctrl.Result{}, nil
}

func engineOf(db *Cluster) dbv1.Engine {
	if db.Spec.Engine == "" {
		return dbv1.EnginePostgreSQL
	}
	return db.Spec.Engine
}

// live are the objects of a Database as they are now.
type live struct {
	superuser, app, replication metav1.PartialObjectMetadata
	scripts, ca                 corev1.ConfigMap
	services                    []corev1.Service
	statefulSet                 appsv1.StatefulSet
	job                         batchv1.Job
	pdb, primaryPDB             policyv1.PodDisruptionBudget
	// claims are the PVCs of ordinals below replicas that exist, by ordinal.
	claims map[int32]*corev1.PersistentVolumeClaim
	exists map[string]bool
}

// lookupAll finds every object the Database has or will have, and fails
// with notOwnedErrors for each name someone else's object holds: nothing
// is created or changed while one is in the way.
func (r *Reconciler) lookupAll(ctx context.Context, db *Cluster) (*live, error) {
	n := namesOf(db)
	l := &live{
		superuser: *secretMetadata(), app: *secretMetadata(), replication: *secretMetadata(),
		services: make([]corev1.Service, 3),
		claims:   map[int32]*corev1.PersistentVolumeClaim{},
		exists:   map[string]bool{},
	}
	// The init Job is created last, once the primary is ready: a name taken
	// by someone else's Job shows then (ensureInitJob), not on every
	// reconcile before.
	targets := []struct {
		kind, name string
		obj        client.Object
		toCreate   bool
	}{
		{"Secret", n.App, &l.app, n.App != ""},
		{"Secret", n.Replication, &l.replication, n.Replication != ""},
		{"ConfigMap", n.Scripts, &l.scripts, true},
		{"ConfigMap", n.CA, &l.ca, tlsOn(db)},
		{"Service", n.Headless, &l.services[0], true},
		{"Service", n.ReadWrite, &l.services[1], true},
		{"Service", n.ReadOnly, &l.services[2], true},
		{"StatefulSet", n.StatefulSet, &l.statefulSet, true},
		{"Job", n.InitJob, &l.job, false},
		{"PodDisruptionBudget", n.PDB, &l.pdb, replicasOf(db) > 1},
		{"PodDisruptionBudget", n.PrimaryPDB, &l.primaryPDB, r.wantsPrimaryPDB(db)},
	}
	var errs []error
	if db.Secrets.SuperuserNamedByUser {
		// The user named it: it is used whoever made it.
		exists, err := r.lookupNamedSecret(ctx, db, n.Superuser, &l.superuser)
		l.exists["Secret/"+n.Superuser] = exists
		errs = append(errs, err)
	} else {
		targets = append(targets, struct {
			kind, name string
			obj        client.Object
			toCreate   bool
		}{"Secret", n.Superuser, &l.superuser, true})
	}
	for _, t := range targets {
		if t.name == "" {
			continue
		}
		exists, err := r.lookup(ctx, db, t.kind, t.name, t.obj, t.toCreate)
		l.exists[t.kind+"/"+t.name] = exists
		errs = append(errs, err)
	}
	// The StatefulSet takes any PVC of its claims' names: one of someone
	// else's matters before the StatefulSet makes that ordinal's.
	made := int32(0)
	if l.has("StatefulSet", n.StatefulSet) {
		made = ptr.Deref(l.statefulSet.Spec.Replicas, 0)
	}
	for ordinal := range replicasOf(db) {
		pvc, err := r.lookupClaim(ctx, db, ordinal, ordinal >= made)
		if pvc != nil {
			l.claims[ordinal] = pvc
		}
		errs = append(errs, err)
	}
	return l, errors.Join(errs...)
}

func (l *live) has(kind, name string) bool { return l.exists[kind+"/"+name] }

// lookupClaim finds the PVC of an ordinal. The StatefulSet would use any
// PVC of that name, so one without the Database's label is refused.
func (r *Reconciler) lookupClaim(ctx context.Context, db *Cluster, ordinal int32, toCreate bool) (*corev1.PersistentVolumeClaim, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	key := client.ObjectKey{Namespace: db.Namespace, Name: claimName(db, ordinal)}
	err := r.Owned.Get(ctx, key, pvc)
	if client.IgnoreNotFound(err) == nil && err != nil {
		if !toCreate {
			return nil, nil
		}
		err = r.API.Get(ctx, key, pvc)
		if client.IgnoreNotFound(err) == nil && err != nil {
			return nil, nil
		}
	}
	if err != nil {
		return nil, err
	}
	if pvc.Labels[db.Kind.Keys.Cluster] != db.Name {
		return nil, &notOwnedError{Kind: "PersistentVolumeClaim", Name: pvc.Name, Owner: db.Kind.clusterKind()}
	}
	return pvc, nil
}

func notOwnedErrors(err error) []*notOwnedError {
	var out []*notOwnedError
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			out = append(out, notOwnedErrors(e)...)
		}
		return out
	}
	var no *notOwnedError
	if errors.As(err, &no) {
		out = append(out, no)
	}
	return out
}

// refuse reports objects of others in the way; nothing is touched.
func (r *Reconciler) refuse(db *Cluster, notOwned []*notOwnedError) {
	msgs := make([]string, len(notOwned))
	for i, e := range notOwned {
		msgs[i] = e.Error()
	}
	reason := strings.ReplaceAll(notOwned[0].Kind, " ", "") + "NotOwned"
	msg := strings.Join(msgs, "; ")
	r.warn(db, ConditionReady, reason, msg)
	r.setCondition(db, ConditionReady, false, reason, msg)
	db.Status.Phase = dbv1.PhaseDegraded
}

func (r *Reconciler) setCondition(db *Cluster, kind string, ok bool, reason, msg string) {
	status.SetCondition(&db.Status.Conditions, db.Generation, kind, ok, reason, msg)
}

// warn emits a Warning event unless the condition already reports this
// reason, so a lasting problem is announced once, not on every reconcile.
func (r *Reconciler) warn(db *Cluster, kind, reason, msg string) {
	if c := meta.FindStatusCondition(db.Status.Conditions, kind); c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason {
		return
	}
	r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
}

func (r *Reconciler) normal(db *Cluster, reason, action, msg string, args ...any) {
	r.Recorder.Eventf(db.Object, nil, corev1.EventTypeNormal, reason, action, msg, args...)
}
