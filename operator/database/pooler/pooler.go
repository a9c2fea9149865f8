// Package pooler runs PgBouncer in front of a PostgreSQL Database (kind
// Pooler): a Deployment of PgBouncer pods, a Service, the pooler's own
// CA and certificate, and a Secret with the keys to connect through it.
//
// Clients log in as the Database's own roles. PgBouncer finds a role's
// SCRAM verifier with auth_query, as the pooler's own role
// (deckhand_pooler_<name>), through a SECURITY DEFINER function that a
// setup Job creates in the app database; no file holds a client's
// password. The only password PgBouncer holds is its own role's, in a
// Secret the operator generates.
//
// The Database controller runs this controller beside it (same API
// group, same chart toggle): a Pooler needs the Database's Services,
// Secrets and state, which the database package names (Target).
package pooler

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// +kubebuilder:rbac:groups=stable.imaginedata.co,resources=poolers,verbs=get;list;watch
// +kubebuilder:rbac:groups=stable.imaginedata.co,resources=poolers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=stable.imaginedata.co,resources=poolers/finalizers,verbs=update
// +kubebuilder:rbac:groups=stable.imaginedata.co,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps;secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// LabelPooler on every object of a Pooler is the Pooler's name; the
// controller's cache holds only objects with it.
const LabelPooler = "stable.imaginedata.co/pooler"

// DefaultImage is PgBouncer's image when neither the Pooler nor the
// operator's --database-pooler-image names one: Debian 12's PgBouncer.
const DefaultImage = "ghcr.io/deckhand-dev/pgbouncer:1.18.0"

// Target is what a Pooler needs of its Database; the database package
// fills it in, so that its naming stays in one place.
type Target struct {
	// Host and Port are the Service the pooler connects to (-rw or -ro),
	// as a name PgBouncer resolves.
	Host string
	Port int32
	// PrimaryHost is the -rw Service: the setup Job writes there.
	PrimaryHost string
	// ReadWriteService is the -rw Service's name: a pause around a
	// switchover ends once its endpoints are the new primary.
	ReadWriteService string
	// AppDatabase is the database the app role owns (where the setup Job
	// creates the lookup function).
	AppDatabase string
	// AppSecret holds the app role's keys (user, password, dbname).
	AppSecret string
	// SuperuserSecret holds username and password of the superuser.
	SuperuserSecret string
	// ServerCASecret is a Secret with the server CA bundle under ca.crt
	// ("": the Database's servers have no TLS).
	ServerCASecret string
	// Image is the server's image: the setup Job runs its psql.
	Image string
	// RunAsUser is the UID the Database's containers run as.
	RunAsUser int64
	// Initialized: the Database's init Job has made the app database.
	Initialized bool
}

// Options configure the controller.
type Options struct {
	// Image is PgBouncer's image for Poolers that name none.
	Image string
	// OperatorImage is the operator's own image: the PgBouncer pods run
	// its `deckhand pooler-metrics` beside PgBouncer. "": no metrics.
	OperatorImage string
	// Target describes a Database for a Pooler of a type; an error says
	// why the Database cannot be pooled (its engine).
	Target func(*dbv1.Database, dbv1.PoolerType) (Target, error)
	// WatchNamespaces and ExcludeNamespaces restrict the cache.
	WatchNamespaces, ExcludeNamespaces []string
	// Now is the clock of certificate lifetimes and pauses (nil:
	// time.Now).
	Now func() time.Time
	// Dial connects to a PgBouncer pod's admin console (nil: the
	// network's).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Reconciler reconciles Poolers.
type Reconciler struct {
	Client   client.Client
	Owned    client.Reader
	API      client.Reader
	Recorder events.EventRecorder
	Options
}

// Setup registers the Pooler controller with the manager.
func Setup(mgr ctrl.Manager, o Options) error {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	// Its objects include Secrets and ConfigMaps, which other controllers
	// watch unfiltered in the manager's cache.
	owned, err := registration.LabelledCache(mgr, LabelPooler, "pooler-cache", o.WatchNamespaces, o.ExcludeNamespaces)
	if err != nil {
		return err
	}
	if err := mgr.Add(owned); err != nil {
		return err
	}
	r := &Reconciler{
		Client: mgr.GetClient(), Owned: owned.GetCache(), API: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("deckhand-pooler"), Options: o,
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("pooler").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		For(&dbv1.Pooler{}).
		Watches(&dbv1.Database{}, handler.EnqueueRequestsFromMapFunc(poolersOf(mgr.GetClient())),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
				return databaseChangeMatters(e.ObjectOld.(*dbv1.Database), e.ObjectNew.(*dbv1.Database))
			}}))
	for _, obj := range ownedKinds() {
		b = b.WatchesRawSource(source.Kind(owned.GetCache(), obj, handler.EnqueueRequestsFromMapFunc(poolerOfLabel)))
	}
	return b.Complete(r)
}

// ownedKinds are the kinds of a Pooler's objects; Secrets as metadata, so
// no password stays in the operator's memory.
func ownedKinds() []client.Object {
	secret := &metav1.PartialObjectMetadata{}
	secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return []client.Object{secret, &corev1.ConfigMap{}, &corev1.Service{}, &appsv1.Deployment{}, &batchv1.Job{}, &policyv1.PodDisruptionBudget{}}
}

func poolerOfLabel(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[LabelPooler]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// poolersOf maps a Database to the Poolers in front of it.
func poolersOf(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list dbv1.PoolerList
		if err := c.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, p := range list.Items {
			if p.Spec.Database == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
			}
		}
		return out
	}
}

// databaseChangeMatters: a Database's status is written often (its
// archive window, its standbys' state), and each Pooler reconcile reads
// Secrets and applies every object: only a change of what a Pooler
// depends on wakes it. That is its spec and annotations (TLS, image,
// names), whether it is initialized, its primary, and its last failover
// record (a pause ends with a switchover).
func databaseChangeMatters(old, cur *dbv1.Database) bool {
	return old.Generation != cur.Generation ||
		!reflect.DeepEqual(old.Annotations, cur.Annotations) ||
		meta.IsStatusConditionTrue(old.Status.Conditions, databaseInitialized) != meta.IsStatusConditionTrue(cur.Status.Conditions, databaseInitialized) ||
		old.Status.CurrentPrimary != cur.Status.CurrentPrimary ||
		!reflect.DeepEqual(lastFailover(old), lastFailover(cur))
}

// databaseInitialized is the Database's condition that its app database
// exists (the database package's ConditionInitialized).
const databaseInitialized = "Initialized"

func lastFailover(db *dbv1.Database) *dbv1.FailoverRecord {
	if n := len(db.Status.Failovers); n > 0 {
		return &db.Status.Failovers[n-1]
	}
	return nil
}

// resync is how often a Pooler is looked at without an event: the app
// Secret it copies is not in its cache.
const resync = 5 * time.Minute

// Reconcile brings a Pooler's objects in line with its spec and its
// Database, then reports what runs.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &dbv1.Pooler{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // its objects go with it (owner references)
	}
	before := p.Status.DeepCopy()
	result, err := r.converge(ctx, p)
	p.Status.ObservedGeneration = p.Generation
	if statusErr := r.writeStatus(ctx, p, before); statusErr != nil && err == nil {
		err = statusErr
	}
	return result, err
}

// converge does the work and sets the Ready condition; an error it
// returns is retried with backoff.
func (r *Reconciler) converge(ctx context.Context, p *dbv1.Pooler) (ctrl.Result, error) {
	db := &dbv1.Database{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.Database}, db)
	if client.IgnoreNotFound(err) == nil && err != nil {
		r.setReady(p, false, dbv1.PoolerReasonDatabaseMissing,
			fmt.Sprintf("Database %q does not exist in namespace %s: the pooler starts once it does", p.Spec.Database, p.Namespace))
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	target, err := r.Target(db, typeOf(p))
	if err != nil {
		r.setReady(p, false, dbv1.PoolerReasonNotPostgres, err.Error())
		return ctrl.Result{}, nil
	}
	plan, err := r.plan(ctx, p, target)
	if err != nil {
		return r.applyFailed(p, err)
	}
	for _, obj := range plan.objects() {
		if err := r.apply(ctx, p, obj); err != nil {
			return r.applyFailed(p, err)
		}
	}
	if err := r.removeOldSetupJobs(ctx, p, plan.setupJob); err != nil {
		return ctrl.Result{}, err
	}
	next := r.report(ctx, p, target, plan)
	again, err := r.console().resumeIfDone(ctx, p, db, target.ReadWriteService)
	if err != nil {
		return ctrl.Result{}, err // retried with backoff; the pause stays recorded
	}
	if again > 0 {
		next = min(next, again)
	}
	return ctrl.Result{RequeueAfter: min(next, resync)}, nil
}

// console is how the reconciler reaches the pods' admin consoles.
func (r *Reconciler) console() Console {
	return Console{Client: r.Client, API: r.API, Recorder: r.Recorder, Dial: r.Dial, Now: r.Now}
}

// applyFailed reports an object that could not be written: another's
// object of the same name is a lasting problem (a condition, no retry
// storm), anything else is retried.
func (r *Reconciler) applyFailed(p *dbv1.Pooler, err error) (ctrl.Result, error) {
	if taken, ok := err.(*nameTakenError); ok {
		r.setReady(p, false, dbv1.PoolerReasonNameTaken, taken.Error())
		return ctrl.Result{RequeueAfter: resync}, nil
	}
	r.setReady(p, false, dbv1.PoolerReasonApplyFailed, err.Error())
	return ctrl.Result{}, err
}

func typeOf(p *dbv1.Pooler) dbv1.PoolerType {
	if p.Spec.Type == "" {
		return dbv1.PoolerReadWrite
	}
	return p.Spec.Type
}

// setReady sets the Ready condition and, on a change of reason, records
// an Event that says the same.
func (r *Reconciler) setReady(p *dbv1.Pooler, ready bool, reason, message string) {
	status := metav1.ConditionFalse
	kind := corev1.EventTypeWarning
	if ready {
		status, kind = metav1.ConditionTrue, corev1.EventTypeNormal
	}
	old := meta.FindStatusCondition(p.Status.Conditions, ConditionReady)
	if old == nil || old.Reason != reason {
		if ready || reason != dbv1.PoolerReasonSetup {
			r.Recorder.Eventf(p, nil, kind, reason, "Reconcile", "%s", message)
		}
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type: ConditionReady, Status: status, Reason: reason, Message: message, ObservedGeneration: p.Generation,
	})
}

// ConditionReady is the Pooler's one condition.
const ConditionReady = "Ready"

func (r *Reconciler) writeStatus(ctx context.Context, p *dbv1.Pooler, before *dbv1.PoolerStatus) error {
	if equalStatus(before, &p.Status) {
		return nil
	}
	return client.IgnoreNotFound(r.Client.Status().Update(ctx, p))
}
