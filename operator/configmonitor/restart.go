package configmonitor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
)

// workload is a restart target: the owner of some selected pods.
type workload struct{ kind, name string }

func (w workload) String() string { return w.kind + "/" + w.name }

// skip is a selected pod or workload that is not restarted, and why.
type skip struct {
	what   string
	reason string
	detail string
}

// outcome is what rolling a change out did to one workload.
type outcome int

const (
	gone           outcome = iota // deleted since its pods were listed
	alreadyCurrent                // carries this configuration already (another monitor, or an earlier try)
	rolled                        // restarted now
)

// restart rolls the change out to every selected workload and returns
// those that run it now: restarted by this call, or already carrying it
// (another monitor of the same configuration, or this monitor's previous
// attempt whose status write failed). Skips are reported in a Warning event.
func (r *Reconciler) restart(ctx context.Context, m *magalixv1.ConfigMonitor, selector labels.Selector, hash string) ([]magalixv1.WorkloadRef, error) {
	var pods corev1.PodList
	if err := r.Reader.List(ctx, &pods, client.InNamespace(m.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("listing pods %s: %w", selector, err)
	}
	if m.Spec.Strategy == magalixv1.DeletePods {
		return r.deletePods(ctx, m, pods.Items)
	}
	targets, skips, err := r.ownersOf(ctx, pods.Items)
	if err != nil {
		return nil, err
	}
	var restarted []magalixv1.WorkloadRef
	var errs []error
	for _, t := range targets {
		result, why, err := r.rollOut(ctx, m, t, hash)
		var limited *rateLimitedError
		switch {
		case errors.As(err, &limited):
			// The rest waits for the next reconcile; those rolled now will
			// be found current then.
			return restarted, err
		case err != nil:
			restartFailures.WithLabelValues(t.kind).Inc()
			obj, _ := newWorkload(t.kind)
			obj.SetNamespace(m.Namespace)
			obj.SetName(t.name)
			r.Recorder.Eventf(m, obj, corev1.EventTypeWarning, "RestartFailed", "Restart", "restarting %s: %v", t, err)
			r.Recorder.Eventf(obj, m, corev1.EventTypeWarning, "RestartFailed", "Restart", "restart for ConfigMonitor %s failed: %v", m.Name, err)
			errs = append(errs, fmt.Errorf("restarting %s: %w", t, err))
		case why != nil:
			skips = append(skips, *why)
		case result != gone:
			restarted = append(restarted, magalixv1.WorkloadRef{Kind: t.kind, Name: t.name})
		}
	}
	r.reportSkips(m, skips)
	return restarted, errors.Join(errs...)
}

// ownersOf maps pods to the workloads that own them: ReplicaSet→Deployment,
// StatefulSet, DaemonSet. Each ReplicaSet is read once.
func (r *Reconciler) ownersOf(ctx context.Context, pods []corev1.Pod) ([]workload, []skip, error) {
	var targets []workload
	var skips []skip
	replicaSets := map[string]*metav1.OwnerReference{}
	add := func(w workload) {
		if !slices.Contains(targets, w) {
			targets = append(targets, w)
		}
	}
	for i := range pods {
		pod := &pods[i]
		if !pod.DeletionTimestamp.IsZero() {
			continue
		}
		ref := metav1.GetControllerOf(pod)
		switch {
		case ref == nil:
			skips = append(skips, skip{"Pod/" + pod.Name, "BarePod", "no controller to roll; strategy DeletePods restarts bare pods"})
		case ref.Kind == "StatefulSet" || ref.Kind == "DaemonSet":
			add(workload{ref.Kind, ref.Name})
		case ref.Kind == "ReplicaSet":
			owner, seen := replicaSets[ref.Name]
			if !seen {
				var err error
				if owner, err = r.replicaSetOwner(ctx, pod.Namespace, ref.Name); err != nil {
					return nil, nil, err
				}
				replicaSets[ref.Name] = owner
			}
			if owner != nil && owner.Kind == "Deployment" {
				add(workload{"Deployment", owner.Name})
			} else {
				skips = append(skips, skip{"ReplicaSet/" + ref.Name, "UnsupportedOwner", "a ReplicaSet without a Deployment cannot be rolled"})
			}
		default:
			skips = append(skips, skip{ref.Kind + "/" + ref.Name, "UnsupportedOwner", "only Deployments, StatefulSets and DaemonSets are rolled"})
		}
	}
	return targets, dedupeSkips(skips), nil
}

// replicaSetOwner reads a ReplicaSet's controller from the metadata cache,
// or from the API server when the cache has not seen it yet.
func (r *Reconciler) replicaSetOwner(ctx context.Context, namespace, name string) (*metav1.OwnerReference, error) {
	rs := &metav1.PartialObjectMetadata{}
	rs.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	key := client.ObjectKey{Namespace: namespace, Name: name}
	err := r.Client.Get(ctx, key, rs)
	if apierrors.IsNotFound(err) {
		err = r.Reader.Get(ctx, key, rs)
	}
	if client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("reading ReplicaSet %s: %w", name, err)
	}
	return metav1.GetControllerOf(rs), nil
}

func dedupeSkips(skips []skip) []skip {
	var out []skip
	for _, s := range skips {
		if !slices.ContainsFunc(out, func(o skip) bool { return o.what == s.what }) {
			out = append(out, s)
		}
	}
	return out
}

// rollOut stamps the configuration hash on a workload's pod template, which
// rolls it the way `kubectl rollout restart` does. It does nothing when the
// workload already carries this hash (another monitor of the same
// configuration got there first).
func (r *Reconciler) rollOut(ctx context.Context, m *magalixv1.ConfigMonitor, t workload, hash string) (outcome, *skip, error) {
	var result outcome
	var why *skip
	// The patch carries the resourceVersion it read, so a second monitor
	// racing on the same workload fails, re-reads and finds the hash there
	// instead of restarting it twice (and saying so). Conflicts with the
	// workload's own status updates are retried at once, without a pause:
	// a pause only gives the workload's controller time for the next one.
	err := retry.RetryOnConflict(wait.Backoff{Steps: 10}, func() error {
		var err error
		result, why, err = r.rollOutOnce(ctx, m, t, hash)
		return err
	})
	return result, why, err
}

func (r *Reconciler) rollOutOnce(ctx context.Context, m *magalixv1.ConfigMonitor, t workload, hash string) (outcome, *skip, error) {
	obj, template := newWorkload(t.kind)
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: t.name}, obj)
	if apierrors.IsNotFound(err) {
		return gone, nil, nil
	}
	if err != nil {
		return gone, nil, err
	}
	key := AnnotationKey(&m.Spec)
	if template().Annotations[key] == hash {
		skipped.WithLabelValues("AlreadyCurrent").Inc()
		return alreadyCurrent, nil, nil
	}
	if d, ok := obj.(*appsv1.Deployment); ok && d.Spec.Paused {
		return gone, &skip{t.String(), "Paused", "the Deployment is paused; resume it and the next change restarts it"}, nil
	}
	if err := r.takeRestartToken(); err != nil {
		return gone, nil, err
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	tmpl := template()
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	tmpl.Annotations[key] = hash
	if err := r.Client.Patch(ctx, obj, patch, client.FieldOwner(FieldManager)); err != nil {
		return gone, nil, err
	}
	r.observeReaction(m)
	restarts.WithLabelValues(t.kind).Inc()
	msg := fmt.Sprintf("%s changed (configuration %s): rolling restart", configNames(m), short(hash))
	r.Recorder.Eventf(m, obj, corev1.EventTypeNormal, "Restarted", "Restart", "%s of %s", msg, t)
	r.Recorder.Eventf(obj, m, corev1.EventTypeNormal, "Restarted", "Restart", "%s by ConfigMonitor %s", msg, m.Name)
	return rolled, nil, nil
}

// rateLimitedError says the shared restart budget is spent for now.
type rateLimitedError struct{ retryAfter time.Duration }

func (e *rateLimitedError) Error() string {
	return fmt.Sprintf("restart rate limit reached; the next restart is allowed in %s", e.retryAfter)
}

// takeRestartToken takes one restart from the shared budget, or says how
// long until one is free. It never waits: a waiting reconcile would hold
// one of the controller's few workers and show nothing in status.
func (r *Reconciler) takeRestartToken() error {
	res := r.Limiter.Reserve()
	if !res.OK() {
		return fmt.Errorf("restart rate limit with burst %d allows no restart", r.Limiter.Burst())
	}
	if wait := res.Delay(); wait > 0 {
		res.Cancel()
		return &rateLimitedError{retryAfter: wait}
	}
	return nil
}

// newWorkload returns an empty object of kind and an accessor of its pod
// template.
func newWorkload(kind string) (client.Object, func() *corev1.PodTemplateSpec) {
	switch kind {
	case "StatefulSet":
		s := &appsv1.StatefulSet{}
		return s, func() *corev1.PodTemplateSpec { return &s.Spec.Template }
	case "DaemonSet":
		d := &appsv1.DaemonSet{}
		return d, func() *corev1.PodTemplateSpec { return &d.Spec.Template }
	default:
		d := &appsv1.Deployment{}
		return d, func() *corev1.PodTemplateSpec { return &d.Spec.Template }
	}
}

// deletePods is the seed's strategy: delete the selected pods that were
// created before the change was seen (so a retry spares their successors).
func (r *Reconciler) deletePods(ctx context.Context, m *magalixv1.ConfigMonitor, pods []corev1.Pod) ([]magalixv1.WorkloadRef, error) {
	cutoff := r.Now()
	if m.Status.PendingSince != nil {
		cutoff = m.Status.PendingSince.Time
	}
	var deleted []magalixv1.WorkloadRef
	var errs []error
	for i := range pods {
		pod := &pods[i]
		if !pod.DeletionTimestamp.IsZero() || !pod.CreationTimestamp.Time.Before(cutoff) {
			continue
		}
		if err := r.takeRestartToken(); err != nil {
			return deleted, err
		}
		err := r.Client.Delete(ctx, pod, client.Preconditions{UID: ptrTo(pod.UID)})
		if client.IgnoreNotFound(err) != nil {
			restartFailures.WithLabelValues("Pod").Inc()
			r.Recorder.Eventf(m, pod, corev1.EventTypeWarning, "RestartFailed", "Restart", "deleting Pod %s: %v", pod.Name, err)
			errs = append(errs, fmt.Errorf("deleting Pod %s: %w", pod.Name, err))
			continue
		}
		r.observeReaction(m)
		restarts.WithLabelValues("Pod").Inc()
		r.Recorder.Eventf(m, pod, corev1.EventTypeNormal, "Restarted", "Restart", "%s changed: deleted Pod %s (strategy DeletePods)", configNames(m), pod.Name)
		deleted = append(deleted, magalixv1.WorkloadRef{Kind: "Pod", Name: pod.Name})
	}
	return deleted, errors.Join(errs...)
}

func ptrTo[T any](v T) *T { return &v }

// reportSkips counts skips and tells the user once per change.
func (r *Reconciler) reportSkips(m *magalixv1.ConfigMonitor, skips []skip) {
	if len(skips) == 0 {
		return
	}
	parts := make([]string, 0, len(skips))
	for _, s := range skips {
		skipped.WithLabelValues(s.reason).Inc()
		parts = append(parts, fmt.Sprintf("%s (%s: %s)", s.what, s.reason, s.detail))
	}
	r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, "Skipped", "Restart", "not restarted: %s", strings.Join(parts, "; "))
}

// observeReaction records the time since the configuration's watch event.
func (r *Reconciler) observeReaction(m *magalixv1.ConfigMonitor) {
	var latest time.Time
	for _, name := range []string{m.Spec.ConfigMapName(), m.Spec.Secret} {
		if v, ok := r.changedAt.Load(types.NamespacedName{Namespace: m.Namespace, Name: name}); ok && v.(time.Time).After(latest) {
			latest = v.(time.Time)
		}
	}
	if !latest.IsZero() {
		reaction.Observe(time.Since(latest).Seconds())
	}
}

func configNames(m *magalixv1.ConfigMonitor) string {
	s := "ConfigMap " + m.Spec.ConfigMapName()
	if m.Spec.Secret != "" {
		s += " or Secret " + m.Spec.Secret
	}
	return s
}
