// Package tdset is the TDSet controller (seed 001): it owns a Deployment
// (and optionally a Service) and sets its replica count from a time-of-day
// schedule, exactly at each window boundary.
package tdset

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
	"github.com/deckhand-dev/deckhand/operator/status"
)

// Name is the controller's name in --controllers.
const Name = "tdset"

// FieldManager owns the fields TDSet applies, and only those.
const FieldManager = "deckhand-tdset"

// Condition types and the label that selects a TDSet's pods.
const (
	ConditionReady         = "Ready"
	ConditionScheduleValid = "ScheduleValid"
	LabelName              = "schedule.rs/tdset"
	containerName          = "app"
)

// +kubebuilder:rbac:groups=schedule.rs,resources=tdsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=schedule.rs,resources=tdsets/status,verbs=get;update;patch
// Owner references with blockOwnerDeletion need update on the finalizers
// subresource (OwnerReferencesPermissionEnforcement, on in OpenShift).
// +kubebuilder:rbac:groups=schedule.rs,resources=tdsets/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler keeps each TDSet's Deployment at its scheduled size.
type Reconciler struct {
	// Client reads TDSets and their own Deployments and Services from the
	// cache (which holds only deckhand's) and writes.
	Client client.Client
	// Reader reads the API server directly: a foreign object of the same
	// name, and HorizontalPodAutoscalers, just before they matter.
	Reader   client.Reader
	Recorder events.EventRecorder
	// Now is the clock; tests replace it.
	Now func() time.Time

	// applied holds, per TDSet UID, its Deployment as the last scaling
	// apply returned it, until the cache has seen that generation: the
	// follow-up reconcile that writes status then neither applies again
	// nor reports from a stale copy.
	applied sync.Map
}

// DefaultWorkers is how many TDSets reconcile at once. At a boundary shared
// by many TDSets each reconcile waits on one API write; 8 in parallel keep
// the API server busy without queueing behind each other.
const DefaultWorkers = 8

// Options are the controller's settings.
type Options struct {
	// Workers is how many TDSets reconcile at once; zero means
	// DefaultWorkers.
	Workers int
	// Now is the clock; nil means the wall clock. Tests put a window
	// boundary seconds away with their own.
	Now func() time.Time
}

// Setup registers the TDSet controller, on the wall clock, with the manager.
func Setup(mgr ctrl.Manager) error {
	return SetupWithOptions(mgr, Options{})
}

// SetupWithClock registers the controller with a clock of the caller's, so
// tests can put a window boundary seconds away.
func SetupWithClock(mgr ctrl.Manager, now func() time.Time) error {
	return SetupWithOptions(mgr, Options{Now: now})
}

// SetupWithOptions registers the controller with the manager.
func SetupWithOptions(mgr ctrl.Manager, o Options) error {
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("deckhand-" + Name), Now: o.Now}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(o.Workers, DefaultWorkers)}).
		For(&schedulev1.TDSet{}).
		Owns(&appsv1.Deployment{}, builder.WithPredicates(deploymentChangesTDSetReads)).
		Owns(&corev1.Service{}).
		// An HPA appearing or going changes who TDSet scales. Its metadata
		// is enough to wake the TDSets of its namespace; the HPA itself is
		// read live when it matters.
		WatchesMetadata(&autoscalingv2.HorizontalPodAutoscaler{}, handler.EnqueueRequestsFromMapFunc(r.tdsetsInNamespace)).
		Complete(r)
}

// deploymentChangesTDSetReads lets through the Deployment changes a TDSet
// acts on or reports: its spec (generation), metadata, deletion, and the
// two status fields it reads. A scaling otherwise wakes the TDSet for each
// of the several status updates the Deployment controller makes on the way
// (replicas, updated, available, conditions), all at a boundary shared by
// many TDSets.
var deploymentChangesTDSetReads = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*appsv1.Deployment)
		cur, okNew := e.ObjectNew.(*appsv1.Deployment)
		if !okOld || !okNew {
			return true
		}
		return old.Generation != cur.Generation ||
			old.Status.ReadyReplicas != cur.Status.ReadyReplicas ||
			old.Status.ObservedGeneration != cur.Status.ObservedGeneration ||
			!old.DeletionTimestamp.Equal(cur.DeletionTimestamp) ||
			!maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations) ||
			!equality.Semantic.DeepEqual(old.OwnerReferences, cur.OwnerReferences)
	},
}

// tdsetsInNamespace wakes every TDSet of an HPA's namespace: HPAs are few
// and their target is not in their metadata.
func (r *Reconciler) tdsetsInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list schedulev1.TDSetList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing TDSets", "namespace", o.GetNamespace())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// Reconcile brings the Deployment, Service and HPA in line with the schedule
// at this instant, then sleeps until the next boundary.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var td schedulev1.TDSet
	if err := r.Client.Get(ctx, req.NamespacedName, &td); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !td.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := td.DeepCopy()
	now := r.Now()
	result, err := r.reconcile(ctx, &td, now)
	if errors.Is(err, errScaledFirst) {
		// The status, the Service, the HPA's floor and the Scaled event
		// follow in a reconcile queued behind the other TDSets due now, so
		// at a boundary shared by many every Deployment is scaled before
		// any status is written.
		return ctrl.Result{RequeueAfter: time.Millisecond, Priority: ptr.To(followUpPriority)}, nil
	}
	td.Status.ObservedGeneration = td.Generation
	// The next boundary's wake or an error, never both: controller-runtime
	// drops the wake that comes with an error.
	return status.Outcome(ctx, result, err, status.Patch(ctx, r.Client, before, &td))
}

func (r *Reconciler) reconcile(ctx context.Context, td *schedulev1.TDSet, now time.Time) (ctrl.Result, error) {
	resync := time.Duration(max(td.Spec.IntervalMint, 1)) * time.Minute
	schedule, err := NewSchedule(td.Spec)
	if err != nil {
		r.warn(td, ConditionScheduleValid, "InvalidSchedule", err.Error())
		r.setCondition(td, ConditionScheduleValid, false, "InvalidSchedule", err.Error())
		r.setCondition(td, ConditionReady, false, "InvalidSchedule", "nothing is scaled until the schedule is fixed")
		return ctrl.Result{}, nil
	}
	r.reportOverlaps(td, schedule)

	decision := schedule.Decide(now)
	// Whatever else goes wrong, the next boundary is kept.
	wake := ctrl.Result{RequeueAfter: requeueAfter(now, decision.Next, resync)}
	deploy, err := r.ownDeployment(ctx, td)
	if err != nil || deploy == nil {
		return wake, err
	}
	hpa, err := r.hpaIfItMatters(ctx, td)
	if err != nil {
		return ctrl.Result{}, err
	}
	if hpa != nil && deploy.Name != "" {
		// The HPA moves replicas: take them from the API server, not from
		// a cache that may be behind it.
		if deploy, err = r.liveDeployment(ctx, td); err != nil || deploy == nil {
			return wake, err
		}
	}

	previous := td.Status.DesiredReplicas
	firstSight := td.Status.ObservedGeneration == 0 && td.Status.ScaleTarget == ""
	recordDecision(td, decision, schedule)
	scaled, err := r.applyDeployment(ctx, td, deploy, decision.Replicas, hpa)
	if err != nil {
		r.setCondition(td, ConditionReady, false, "ApplyFailed", err.Error())
		return ctrl.Result{}, err
	}
	if scaled != nil && deploy.Name != "" && !firstSight {
		r.applied.Store(td.UID, scaled)
		return wake, errScaledFirst
	}
	if err := r.scaleHPA(ctx, td, hpa, decision.Replicas); err != nil {
		return ctrl.Result{}, err
	}
	serviceOK, err := r.applyService(ctx, td)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !td.Spec.Suspend && !firstSight && previous != decision.Replicas {
		r.Recorder.Eventf(td, nil, corev1.EventTypeNormal, "Scaled", "Scale",
			"%s in force: %s set to %d replicas (was %d)", schedule.Describe(decision.Window), td.Status.ScaleTarget, decision.Replicas, previous)
	}
	if serviceOK {
		// A foreign Service keeps Ready false with its reason.
		r.reportReadiness(td, deploy, hpa)
	}
	return wake, nil
}

// errScaledFirst says the reconcile scaled the Deployment and left the rest
// to a follow-up reconcile.
var errScaledFirst = errors.New("deployment scaled; status follows")

// followUpPriority queues the follow-up of a scaling behind reconciles of
// the default priority (0): TDSets whose boundary is due, and watch events.
const followUpPriority = -10

// requeueAfter wakes the controller at the next boundary, or after the
// resync interval if that comes first.
func requeueAfter(now, next time.Time, resync time.Duration) time.Duration {
	if next.IsZero() {
		return resync
	}
	// A millisecond past the boundary so the clock is surely on its far side.
	return min(next.Sub(now)+time.Millisecond, resync)
}

func recordDecision(td *schedulev1.TDSet, d Decision, s *Schedule) {
	td.Status.DesiredReplicas = d.Replicas
	td.Status.ActiveWindow = nil
	if d.Window >= 0 {
		td.Status.ActiveWindow = ptr.To(int32(d.Window))
	}
	td.Status.NextTransitionTime, td.Status.NextReplicas = nil, nil
	if !d.Next.IsZero() {
		td.Status.NextTransitionTime = &metav1.Time{Time: d.Next}
		td.Status.NextReplicas = ptr.To(d.NextReplicas)
	}
}

func (r *Reconciler) reportOverlaps(td *schedulev1.TDSet, s *Schedule) {
	overlaps := s.Overlaps()
	if len(overlaps) == 0 {
		r.setCondition(td, ConditionScheduleValid, true, "Valid", "the windows do not overlap")
		return
	}
	msg := ""
	for i, o := range overlaps {
		if i > 0 {
			msg += "; "
		}
		msg += fmt.Sprintf("%s and %s overlap", s.Describe(o[0]), s.Describe(o[1]))
	}
	msg += "; where they overlap the highest replica count applies"
	r.setCondition(td, ConditionScheduleValid, false, "OverlappingWindows", msg)
}

// ownDeployment returns the TDSet's Deployment (empty if not created yet),
// or reports and returns nil when a Deployment of that name is not ours.
// The cache holds only deckhand's Deployments, so a miss is checked live:
// a user's Deployment of the same name must be found before TDSet applies.
func (r *Reconciler) ownDeployment(ctx context.Context, td *schedulev1.TDSet) (*appsv1.Deployment, error) {
	var d appsv1.Deployment
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(td), &d)
	if applied := r.lastApplied(td, &d, err); applied != nil {
		return r.ifOwned(td, applied), nil
	}
	if apierrors.IsNotFound(err) {
		err = r.Reader.Get(ctx, client.ObjectKeyFromObject(td), &d)
	}
	if apierrors.IsNotFound(err) {
		return &appsv1.Deployment{}, nil
	}
	if err != nil {
		return nil, err
	}
	return r.ifOwned(td, &d), nil
}

// lastApplied is the Deployment TDSet's last scaling apply returned, when
// the cache (cached, read with err) has not caught up with it yet; nil
// once it has, and the remembered copy is dropped then.
func (r *Reconciler) lastApplied(td *schedulev1.TDSet, cached *appsv1.Deployment, err error) *appsv1.Deployment {
	v, ok := r.applied.Load(td.UID)
	if !ok {
		return nil
	}
	applied := v.(*appsv1.Deployment)
	if err == nil && cached.Generation >= applied.Generation {
		r.applied.Delete(td.UID)
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil
	}
	return applied.DeepCopy()
}

// liveDeployment reads the Deployment from the API server.
func (r *Reconciler) liveDeployment(ctx context.Context, td *schedulev1.TDSet) (*appsv1.Deployment, error) {
	var d appsv1.Deployment
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(td), &d); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return r.ifOwned(td, &d), nil
}

// ifOwned returns d when this TDSet controls it; otherwise it reports the
// conflict and returns nil.
func (r *Reconciler) ifOwned(td *schedulev1.TDSet, d *appsv1.Deployment) *appsv1.Deployment {
	if owner := metav1.GetControllerOf(d); owner != nil && owner.UID == td.UID {
		return d
	}
	msg := fmt.Sprintf("Deployment %s exists and is not owned by this TDSet; it is left untouched (rename the TDSet or delete the Deployment)", d.Name)
	r.warn(td, ConditionReady, "DeploymentNotOwned", msg)
	r.setCondition(td, ConditionReady, false, "DeploymentNotOwned", msg)
	return nil
}

// hpaIfItMatters finds the HorizontalPodAutoscaler scaling the TDSet's
// Deployment, read live, when the namespace has any HPA. The metadata
// cache says so without a request: at a boundary shared by many TDSets, a
// live LIST each would double the requests that delay the scaling. An HPA
// created too recently for the cache wakes the TDSet when the cache sees
// it, and TDSet then hands it the replicas.
func (r *Reconciler) hpaIfItMatters(ctx context.Context, td *schedulev1.TDSet) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	if any, err := r.namespaceHasHPAs(ctx, td.Namespace); err != nil || !any {
		return nil, err
	}
	var list autoscalingv2.HorizontalPodAutoscalerList
	if err := r.Reader.List(ctx, &list, client.InNamespace(td.Namespace)); err != nil {
		return nil, fmt.Errorf("listing HorizontalPodAutoscalers: %w", err)
	}
	for i := range list.Items {
		ref := list.Items[i].Spec.ScaleTargetRef
		if ref.Kind == "Deployment" && ref.Name == td.Name {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// namespaceHasHPAs asks the HPA metadata cache whether the namespace has
// any HorizontalPodAutoscaler.
func (r *Reconciler) namespaceHasHPAs(ctx context.Context, namespace string) (bool, error) {
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscalerList"))
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return false, fmt.Errorf("listing HorizontalPodAutoscalers from the cache: %w", err)
	}
	return len(list.Items) > 0, nil
}

func podLabels(td *schedulev1.TDSet) map[string]string {
	return map[string]string{LabelName: td.Name}
}

func objectLabels(td *schedulev1.TDSet) map[string]string {
	return map[string]string{
		LabelName:                      td.Name,
		"app.kubernetes.io/name":       td.Name,
		"app.kubernetes.io/managed-by": "deckhand",
	}
}

func ownerReference(td *schedulev1.TDSet) *metav1ac.OwnerReferenceApplyConfiguration {
	gvk := schedulev1.GroupVersion.WithKind("TDSet")
	return metav1ac.OwnerReference().WithAPIVersion(gvk.GroupVersion().String()).WithKind(gvk.Kind).
		WithName(td.Name).WithUID(td.UID).WithController(true).WithBlockOwnerDeletion(true)
}

// applyDeployment server-side applies the fields TDSet owns, and only when
// one of them differs, so a steady state makes no API writes. With an HPA
// the replica count is the HPA's: TDSet keeps whatever it finds. It
// returns the Deployment as the apply left it, nil when nothing was
// written.
func (r *Reconciler) applyDeployment(ctx context.Context, td *schedulev1.TDSet, current *appsv1.Deployment, desired int32, hpa *autoscalingv2.HorizontalPodAutoscaler) (*appsv1.Deployment, error) {
	replicas := desired
	switch {
	case td.Spec.Suspend && current.Name != "":
		replicas = ptr.Deref(current.Spec.Replicas, desired)
	case hpa != nil && current.Name != "":
		replicas = ptr.Deref(current.Spec.Replicas, desired)
	}
	td.Status.ScaleTarget = "Deployment/" + td.Name
	if hpa != nil {
		td.Status.ScaleTarget = "HorizontalPodAutoscaler/" + hpa.Name
	}
	if current.Name != "" && deploymentMatches(current, td, replicas) {
		return nil, nil
	}
	if current.Name != "" && hpa == nil && deploymentMatches(current, td, ptr.Deref(current.Spec.Replicas, 1)) {
		return r.scale(ctx, current, replicas)
	}
	apply := appsv1ac.Deployment(td.Name, td.Namespace).
		WithLabels(objectLabels(td)).
		WithOwnerReferences(ownerReference(td))
	if hpa != nil && current.Name != "" {
		// The replica count written is the HPA's as read live; the apply
		// fails with a conflict if the HPA moved it since, and is retried.
		apply = apply.WithResourceVersion(current.ResourceVersion)
	}
	apply = apply.
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(replicas).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(podLabels(td))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(podLabels(td)).
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().
					WithName(containerName).
					WithImage(td.Spec.Container.Image).
					WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(td.Spec.Container.Port).WithProtocol(corev1.ProtocolTCP))))))
	if err := r.Client.Apply(ctx, apply, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return nil, err
	}
	return asDeployment(apply)
}

// scale sets only the replica count, the one field a window boundary
// changes, with a merge patch under TDSet's field manager: at a boundary
// shared by many TDSets it costs the API server what a plain client's
// scaling does, where a full apply costs several times more.
func (r *Reconciler) scale(ctx context.Context, current *appsv1.Deployment, replicas int32) (*appsv1.Deployment, error) {
	d := current.DeepCopy()
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas))
	if err := r.Client.Patch(ctx, d, patch, client.FieldOwner(FieldManager)); err != nil {
		return nil, err
	}
	return d, nil
}

// asDeployment converts the apply configuration the server filled in with
// its answer into a Deployment.
func asDeployment(apply *appsv1ac.DeploymentApplyConfiguration) (*appsv1.Deployment, error) {
	raw, err := json.Marshal(apply)
	if err != nil {
		return nil, err
	}
	d := &appsv1.Deployment{}
	return d, json.Unmarshal(raw, d)
}

func deploymentMatches(d *appsv1.Deployment, td *schedulev1.TDSet, replicas int32) bool {
	if ptr.Deref(d.Spec.Replicas, 1) != replicas || len(d.Spec.Template.Spec.Containers) == 0 {
		return false
	}
	for k, v := range objectLabels(td) {
		if d.Labels[k] != v {
			return false
		}
	}
	c := d.Spec.Template.Spec.Containers[0]
	return c.Name == containerName && c.Image == td.Spec.Container.Image &&
		len(c.Ports) == 1 && c.Ports[0].ContainerPort == td.Spec.Container.Port
}

// scaleHPA schedules the HPA's floor instead of fighting its replica count.
// minReplicas is at least 1 and at most maxReplicas, as the HPA API requires.
func (r *Reconciler) scaleHPA(ctx context.Context, td *schedulev1.TDSet, hpa *autoscalingv2.HorizontalPodAutoscaler, desired int32) error {
	if hpa == nil || td.Spec.Suspend {
		return nil
	}
	floor := min(max(desired, 1), hpa.Spec.MaxReplicas)
	if ptr.Deref(hpa.Spec.MinReplicas, 1) == floor {
		return nil
	}
	patch := client.MergeFrom(hpa.DeepCopy())
	hpa.Spec.MinReplicas = ptr.To(floor)
	if err := r.Client.Patch(ctx, hpa, patch, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("setting minReplicas of HorizontalPodAutoscaler %s: %w", hpa.Name, err)
	}
	return nil
}

// applyService creates, updates or (when spec.service is removed) deletes
// the TDSet's own Service. It reports false, with a condition, when a
// Service of that name belongs to someone else.
func (r *Reconciler) applyService(ctx context.Context, td *schedulev1.TDSet) (bool, error) {
	var svc corev1.Service
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(td), &svc)
	if apierrors.IsNotFound(err) && td.Spec.Service != nil {
		// Only deckhand's Services are cached: look for a user's one
		// before creating ours.
		err = r.Reader.Get(ctx, client.ObjectKeyFromObject(td), &svc)
	}
	if client.IgnoreNotFound(err) != nil {
		return false, err
	}
	exists := err == nil
	ours := exists && metav1.IsControlledBy(&svc, td)
	if td.Spec.Service == nil {
		if ours {
			return true, client.IgnoreNotFound(r.Client.Delete(ctx, &svc))
		}
		return true, nil
	}
	if exists && !ours {
		msg := fmt.Sprintf("Service %s exists and is not owned by this TDSet; it is left untouched (rename the TDSet or delete the Service)", svc.Name)
		r.warn(td, ConditionReady, "ServiceNotOwned", msg)
		r.setCondition(td, ConditionReady, false, "ServiceNotOwned", msg)
		return false, nil
	}
	if ours && len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].Port == td.Spec.Service.Port &&
		svc.Spec.Ports[0].TargetPort == intstr.FromInt32(td.Spec.Container.Port) && equality.Semantic.DeepEqual(svc.Spec.Selector, podLabels(td)) {
		return true, nil
	}
	apply := corev1ac.Service(td.Name, td.Namespace).
		WithLabels(objectLabels(td)).
		WithOwnerReferences(ownerReference(td)).
		WithSpec(corev1ac.ServiceSpec().
			WithSelector(podLabels(td)).
			WithPorts(corev1ac.ServicePort().WithName("http").WithPort(td.Spec.Service.Port).
				WithTargetPort(intstr.FromInt32(td.Spec.Container.Port)).WithProtocol(corev1.ProtocolTCP)))
	return true, r.Client.Apply(ctx, apply, client.FieldOwner(FieldManager), client.ForceOwnership)
}

func (r *Reconciler) reportReadiness(td *schedulev1.TDSet, d *appsv1.Deployment, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	td.Status.ReadyReplicas = d.Status.ReadyReplicas
	switch {
	case td.Spec.Suspend:
		r.setCondition(td, ConditionReady, true, "Suspended", "scaling is suspended; the Deployment keeps its replica count")
	case hpa != nil:
		r.setCondition(td, ConditionReady, true, "ScalingHPA",
			fmt.Sprintf("HorizontalPodAutoscaler %s scales the Deployment; TDSet sets its minReplicas", hpa.Name))
	case d.Name == "" || d.Status.ReadyReplicas != td.Status.DesiredReplicas || d.Status.ObservedGeneration < d.Generation:
		r.setCondition(td, ConditionReady, false, "Scaling",
			fmt.Sprintf("%d of %d replicas ready", d.Status.ReadyReplicas, td.Status.DesiredReplicas))
	default:
		r.setCondition(td, ConditionReady, true, "Ready", fmt.Sprintf("%d replicas ready", d.Status.ReadyReplicas))
	}
}

func (r *Reconciler) setCondition(td *schedulev1.TDSet, kind string, ok bool, reason, msg string) {
	status.SetCondition(&td.Status.Conditions, td.Generation, kind, ok, reason, msg)
}

// warn emits a Warning event unless the condition already reports this
// reason, so a lasting problem is announced once, not on every resync.
func (r *Reconciler) warn(td *schedulev1.TDSet, kind, reason, msg string) {
	if c := meta.FindStatusCondition(td.Status.Conditions, kind); c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason {
		return
	}
	r.Recorder.Eventf(td, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
}
