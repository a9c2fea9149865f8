package configmonitor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
)

// workload is a restart target: the owner of some selected pods.
type workload struct{ kind, name string }

func (w workload) String() string { return w.kind + "/" + w.name }

// skip is a selected pod or workload that can never carry the
// configuration's hash under the monitor's strategy, and why.
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

// rollout is what one attempt at rolling a change out achieved.
type rollout struct {
	// done run the change now: restarted by this attempt or carrying it
	// already (another monitor of the same configuration, or an earlier
	// attempt whose status write failed).
	done []magalixv1.WorkloadRef
	// pending are supported targets that do not carry it yet: the rate
	// limit stopped the attempt, or their restart failed.
	pending []magalixv1.WorkloadRef
	// unsupported can never carry it (bare pods under RollingRestart,
	// owners that cannot be rolled).
	unsupported []skip
}

// restart rolls the change out to every selected workload. A rate limit
// stops it early (a *rateLimitedError); the targets it did not reach are
// pending, and so are those whose restart failed.
func (r *Reconciler) restart(ctx context.Context, m *magalixv1.ConfigMonitor, selector labels.Selector, hash string) (rollout, error) {
	pods, err := r.selectedPods(ctx, m.Namespace, selector)
	if err != nil {
		return rollout{}, err
	}
	if m.Spec.Strategy == magalixv1.DeletePods {
		return r.deletePods(ctx, m, pods)
	}
	targets, unsupported, err := r.ownersOf(ctx, pods)
	if err != nil {
		return rollout{}, err
	}
	// The passes before this one (of the same change: reconcile clears
	// the list when a new one starts) reached every target not pending.
	// They are checked again, last, by the pass that finishes the rollout.
	unreached := m.Status.PendingWorkloads
	unreachedFirst(targets, unreached)
	out := rollout{unsupported: unsupported}
	var limited *rateLimitedError
	var errs []error
	for _, t := range targets {
		ref := magalixv1.WorkloadRef{Kind: t.kind, Name: t.name}
		if limited != nil {
			if len(unreached) == 0 || slices.Contains(unreached, ref) {
				out.pending = append(out.pending, ref)
			}
			continue
		}
		result, err := r.rollOut(ctx, m, t, hash)
		switch {
		case errors.As(err, &limited):
			out.pending = append(out.pending, ref)
		case err != nil:
			restartFailures.WithLabelValues(t.kind).Inc()
			obj, _ := newWorkload(t.kind)
			obj.SetNamespace(m.Namespace)
			obj.SetName(t.name)
			r.Recorder.Eventf(m, obj, corev1.EventTypeWarning, "RestartFailed", "Restart", "restarting %s: %v", t, err)
			r.Recorder.Eventf(obj, m, corev1.EventTypeWarning, "RestartFailed", "Restart", "restart for ConfigMonitor %s failed: %v", m.Name, err)
			errs = append(errs, fmt.Errorf("restarting %s: %w", t, err))
			out.pending = append(out.pending, ref)
		case result != gone:
			out.done = append(out.done, ref)
		}
	}
	if limited != nil {
		// The pacing is not a failure; failures seen before it still are.
		return out, limited
	}
	return out, errors.Join(errs...)
}

// unreachedFirst orders targets so that those the last pass left pending
// come first, each group by kind and name. A paced rollout takes one or a
// few restarts per pass; without this order every pass would first check
// again, a request each, the workloads the passes before it rolled.
func unreachedFirst(targets []workload, pending []magalixv1.WorkloadRef) {
	reached := func(w workload) int {
		if slices.Contains(pending, magalixv1.WorkloadRef{Kind: w.kind, Name: w.name}) {
			return 0
		}
		return 1
	}
	slices.SortFunc(targets, func(a, b workload) int {
		return cmp.Or(cmp.Compare(reached(a), reached(b)), cmp.Compare(a.kind, b.kind), cmp.Compare(a.name, b.name))
	})
}

// selectedPods lists the metadata of the pods selector selects, from the
// cache: labels, owner references and creation times are all a restart
// needs, and a change costs no LIST request however many pods there are.
// The label index narrows the list to the pods carrying one of the
// selector's labels, rather than matching every pod of the namespace (a
// thousand pods took about a millisecond of CPU per change).
func (r *Reconciler) selectedPods(ctx context.Context, namespace string, selector labels.Selector) ([]metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector}}
	if reqs, _ := selector.Requirements(); len(reqs) > 0 && reqs[0].Operator() == selection.Equals {
		opts = append(opts, client.MatchingFields{indexPodLabel: reqs[0].Key() + "=" + reqs[0].Values().UnsortedList()[0]})
	}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("listing pods %s: %w", selector, err)
	}
	for i := range list.Items {
		// Events and deletions need the kind, which cached items may lack.
		list.Items[i].SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	}
	return list.Items, nil
}

// ownersOf maps pods to the workloads that own them: ReplicaSet→Deployment,
// StatefulSet, DaemonSet. Each ReplicaSet is read once.
func (r *Reconciler) ownersOf(ctx context.Context, pods []metav1.PartialObjectMetadata) ([]workload, []skip, error) {
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
func (r *Reconciler) rollOut(ctx context.Context, m *magalixv1.ConfigMonitor, t workload, hash string) (outcome, error) {
	var result outcome
	// The patch carries the resourceVersion it read, so a second monitor
	// racing on the same workload fails, re-reads and finds the hash there
	// instead of restarting it twice (and saying so). Conflicts with the
	// workload's own status updates are retried at once, without a pause:
	// a pause only gives the workload's controller time for the next one.
	//
	// A server error (500, 503, 504, a timeout) is retried here too, after a
	// short pause: the rest of the pass, and every other workload's restart,
	// must not wait on the controller's backoff for one refused request.
	// The retry is safe: the patch carries the resourceVersion, so one the
	// server applied before failing conflicts and is found done. 429s are
	// retried by client-go itself, after the server's Retry-After.
	err := retry.OnError(transientRetry, isTransient, func() error {
		return retry.RetryOnConflict(wait.Backoff{Steps: 10}, func() error {
			var err error
			result, err = r.rollOutOnce(ctx, m, t, hash)
			return err
		})
	})
	return result, err
}

// transientRetry paces the retries of a workload's restart after server
// errors: 3 more tries within about a second.
var transientRetry = wait.Backoff{Steps: 4, Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2}

// isTransient says the API server failed the request but may well accept
// it again at once.
func isTransient(err error) bool {
	return apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsUnexpectedServerError(err)
}

// rollOutOnce stamps the hash on one workload's template. A paused
// Deployment is stamped too: it rolls when `kubectl rollout resume` lifts
// the pause, as its owner expects.
func (r *Reconciler) rollOutOnce(ctx context.Context, m *magalixv1.ConfigMonitor, t workload, hash string) (outcome, error) {
	result, err := r.rollOutFromCache(ctx, m, t, hash)
	if !errors.Is(err, errCacheBehind) {
		return result, err
	}
	return r.rollOutLive(ctx, m, t, hash)
}

// errCacheBehind says the workload cache cannot vouch for a workload: it
// has not seen it, or the API server has a newer version.
var errCacheBehind = errors.New("workload cache behind the API server")

// rollOutFromCache stamps the hash in one request, without reading the
// workload: the patch carries the resourceVersion of the cached metadata,
// so it applies only to the version the cache has seen, and the generation
// the server returns says whether the template changed (rolled) or
// carried the hash already (a no-op patch keeps the generation). A
// conflict (the cache is behind, or another monitor just stamped it) is
// errCacheBehind: the caller reads the workload live.
func (r *Reconciler) rollOutFromCache(ctx context.Context, m *magalixv1.ConfigMonitor, t workload, hash string) (outcome, error) {
	if r.Workloads == nil {
		return gone, errCacheBehind
	}
	cached := workloadMetadata(t.kind)
	if err := r.Workloads.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: t.name}, cached); err != nil {
		return gone, errCacheBehind
	}
	key := AnnotationKey(&m.Spec)
	if r.stamped.carries(cached.UID, key, hash, cached.Generation) {
		skipped.WithLabelValues("AlreadyCurrent").Inc()
		return alreadyCurrent, nil
	}
	token, err := r.takeRestartToken()
	if err != nil {
		return gone, err
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": cached.ResourceVersion},
		"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{key: hash}}}},
	})
	if err != nil {
		return gone, err
	}
	obj, _ := newWorkload(t.kind)
	obj.SetNamespace(m.Namespace)
	obj.SetName(t.name)
	err = r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, body), client.FieldOwner(FieldManager))
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		token.Cancel()
		return gone, errCacheBehind
	case err != nil:
		token.Cancel()
		return gone, err
	case obj.GetGeneration() == cached.Generation:
		token.Cancel()
		r.stamped.record(cached.UID, key, hash, cached.Generation)
		skipped.WithLabelValues("AlreadyCurrent").Inc()
		return alreadyCurrent, nil
	}
	r.stamped.record(obj.GetUID(), key, hash, obj.GetGeneration())
	r.reportRestart(m, t, obj, hash)
	return rolled, nil
}

// rollOutLive reads the workload from the API server and stamps the hash
// unless it carries it already.
func (r *Reconciler) rollOutLive(ctx context.Context, m *magalixv1.ConfigMonitor, t workload, hash string) (outcome, error) {
	obj, template := newWorkload(t.kind)
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: t.name}, obj)
	if apierrors.IsNotFound(err) {
		return gone, nil
	}
	if err != nil {
		return gone, err
	}
	key := AnnotationKey(&m.Spec)
	if template().Annotations[key] == hash {
		r.stamped.record(obj.GetUID(), key, hash, obj.GetGeneration())
		skipped.WithLabelValues("AlreadyCurrent").Inc()
		return alreadyCurrent, nil
	}
	token, err := r.takeRestartToken()
	if err != nil {
		return gone, err
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	tmpl := template()
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	tmpl.Annotations[key] = hash
	if err := r.Client.Patch(ctx, obj, patch, client.FieldOwner(FieldManager)); err != nil {
		token.Cancel()
		return gone, err
	}
	r.stamped.record(obj.GetUID(), key, hash, obj.GetGeneration())
	r.reportRestart(m, t, obj, hash)
	return rolled, nil
}

// reportRestart counts a restart and announces it on the monitor and the
// workload.
func (r *Reconciler) reportRestart(m *magalixv1.ConfigMonitor, t workload, obj client.Object, hash string) {
	r.observeReaction(m)
	restarts.WithLabelValues(t.kind).Inc()
	msg := fmt.Sprintf("%s changed (configuration %s): rolling restart", configNames(m), short(hash))
	if d, ok := obj.(*appsv1.Deployment); ok && d.Spec.Paused {
		msg += "; the Deployment is paused and rolls when it is resumed"
	}
	r.Recorder.Eventf(m, obj, corev1.EventTypeNormal, "Restarted", "Restart", "%s of %s", msg, t)
	r.Recorder.Eventf(obj, m, corev1.EventTypeNormal, "Restarted", "Restart", "%s by ConfigMonitor %s", msg, m.Name)
}

// rateLimitedError says the shared restart budget is spent for now.
type rateLimitedError struct{ retryAfter time.Duration }

func (e *rateLimitedError) Error() string {
	return fmt.Sprintf("restart rate limit reached; the next restart is allowed in %s", e.retryAfter)
}

// cutoffWait says DeletePods waits for the second of its cutoff to pass.
type cutoffWait struct{ after time.Duration }

func (e *cutoffWait) Error() string {
	return fmt.Sprintf("deleting pods in %s, once the second of the change has passed", e.after)
}

// takeRestartToken takes one restart from the shared budget, or says how
// long until one is free. It never waits: a waiting reconcile would hold
// one of the controller's workers and show nothing in status. Cancel the
// reservation to give the token back when no restart happened.
func (r *Reconciler) takeRestartToken() (*restartToken, error) {
	now := time.Now()
	res := r.Limiter.ReserveN(now, 1)
	if !res.OK() {
		return nil, fmt.Errorf("restart rate limit with burst %d allows no restart", r.Limiter.Burst())
	}
	if wait := res.DelayFrom(now); wait > 0 {
		res.CancelAt(now)
		return nil, &rateLimitedError{retryAfter: wait}
	}
	return &restartToken{res: res, at: now}, nil
}

// restartToken is one restart taken from the shared budget.
type restartToken struct {
	res *rate.Reservation
	at  time.Time
}

// Cancel gives the restart back. It cancels as of the instant the token
// was taken: rate.Reservation.Cancel restores nothing once that instant has
// passed, so a refused patch or one that found the workload current would
// spend the budget of a restart that never happened.
func (t *restartToken) Cancel() { t.res.CancelAt(t.at) }

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

// deletePods is the seed's strategy: delete the selected pods created
// before the change was first seen. That instant (status.pendingSince) is
// persisted before the first deletion, so a retry, or a reconcile from a
// cache that has not seen this one's status yet, spares the pods that
// replaced the deleted ones.
func (r *Reconciler) deletePods(ctx context.Context, m *magalixv1.ConfigMonitor, pods []metav1.PartialObjectMetadata) (rollout, error) {
	cutoff, done, err := r.persistCutoff(ctx, m)
	if err != nil || done {
		return rollout{}, err
	}
	if wait := cutoff.Sub(r.Now()); wait > 0 {
		return rollout{}, &cutoffWait{after: wait}
	}
	var out rollout
	var errs []error
	for i := range pods {
		pod := &pods[i]
		if !pod.DeletionTimestamp.IsZero() || !pod.CreationTimestamp.Time.Before(cutoff) {
			continue
		}
		ref := magalixv1.WorkloadRef{Kind: "Pod", Name: pod.Name}
		if _, err := r.takeRestartToken(); err != nil {
			for _, rest := range pods[i:] {
				if rest.DeletionTimestamp.IsZero() && rest.CreationTimestamp.Time.Before(cutoff) {
					out.pending = append(out.pending, magalixv1.WorkloadRef{Kind: "Pod", Name: rest.Name})
				}
			}
			return out, err
		}
		err := r.Client.Delete(ctx, pod, client.Preconditions{UID: ptrTo(pod.UID)})
		if client.IgnoreNotFound(err) != nil {
			restartFailures.WithLabelValues("Pod").Inc()
			r.Recorder.Eventf(m, pod, corev1.EventTypeWarning, "RestartFailed", "Restart", "deleting Pod %s: %v", pod.Name, err)
			errs = append(errs, fmt.Errorf("deleting Pod %s: %w", pod.Name, err))
			out.pending = append(out.pending, ref)
			continue
		}
		r.observeReaction(m)
		restarts.WithLabelValues("Pod").Inc()
		r.Recorder.Eventf(m, pod, corev1.EventTypeNormal, "Restarted", "Restart", "%s changed: deleted Pod %s (strategy DeletePods)", configNames(m), pod.Name)
		out.done = append(out.done, ref)
	}
	return out, errors.Join(errs...)
}

// persistCutoff reads the monitor from the API server and returns the
// instant the pending change was first seen, writing it to status first
// if the server does not have it yet. done says the server's status
// already records this change as rolled out (m came from a stale cache).
// m takes the server's resourceVersion (after its own write, if any): the
// pass's status write, locked on it (Reconcile), is refused only when
// someone else wrote since, not because of this read or write.
func (r *Reconciler) persistCutoff(ctx context.Context, m *magalixv1.ConfigMonitor) (time.Time, bool, error) {
	var live magalixv1.ConfigMonitor
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(m), &live); err != nil {
		return time.Time{}, false, fmt.Errorf("reading ConfigMonitor %s: %w", m.Name, err)
	}
	m.ResourceVersion = live.ResourceVersion
	if live.Status.ObservedHash == m.Status.PendingHash {
		m.Status = live.Status
		return time.Time{}, true, nil
	}
	if live.Status.PendingHash == m.Status.PendingHash && live.Status.PendingSince != nil {
		m.Status.PendingSince = live.Status.PendingSince
		return live.Status.PendingSince.Time, false, nil
	}
	// metav1.Time keeps whole seconds, and so do pods' creation times:
	// round up, so a pod created in the same second as the change, before
	// it, is deleted rather than missed. deletePods waits for that second
	// to pass, so no replacement pod can fall before the cutoff.
	since := metav1.NewTime(m.Status.PendingSince.Truncate(time.Second).Add(time.Second))
	before := live.DeepCopy()
	live.Status.PendingHash, live.Status.PendingSince = m.Status.PendingHash, &since
	if err := r.Client.Status().Patch(ctx, &live, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return time.Time{}, false, fmt.Errorf("recording the change before deleting pods: %w", err)
	}
	m.ResourceVersion = live.ResourceVersion
	m.Status.PendingSince = &since
	return since.Time, false, nil
}

func ptrTo[T any](v T) *T { return &v }

// reportUnsupported names the selected pods and workloads that can never
// carry the configuration's hash, in a condition and, when that list
// changes, a Warning event. They do not hold the change pending.
func (r *Reconciler) reportUnsupported(m *magalixv1.ConfigMonitor, skips []skip) {
	if len(skips) == 0 {
		setCondition(m, ConditionTargetsSupported, true, "AllSupported", "every selected pod belongs to a workload that can be restarted")
		return
	}
	parts := make([]string, 0, len(skips))
	for _, s := range skips {
		skipped.WithLabelValues(s.reason).Inc()
		parts = append(parts, fmt.Sprintf("%s (%s: %s)", s.what, s.reason, s.detail))
	}
	msg := "not restarted: " + strings.Join(parts, "; ")
	if c := meta.FindStatusCondition(m.Status.Conditions, ConditionTargetsSupported); c == nil || c.Message != msg {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, "Skipped", "Restart", "%s", msg)
	}
	setCondition(m, ConditionTargetsSupported, false, "Unsupported", msg)
}

// observeReaction records the time from the configuration's watch event
// to this restart. A debounce is the user's choice, not latency: with one,
// the clock starts when the debounce ends. Both ends come from r.Now, the
// clock the debounce is measured on.
func (r *Reconciler) observeReaction(m *magalixv1.ConfigMonitor) {
	var latest time.Time
	for _, name := range []string{m.Spec.ConfigMapName(), m.Spec.Secret} {
		if v, ok := r.changedAt.Load(types.NamespacedName{Namespace: m.Namespace, Name: name}); ok && v.(time.Time).After(latest) {
			latest = v.(time.Time)
		}
	}
	if latest.IsZero() {
		return
	}
	if m.Spec.Debounce != nil && m.Status.PendingSince != nil {
		if end := m.Status.PendingSince.Add(m.Spec.Debounce.Duration); end.After(latest) {
			latest = end
		}
	}
	reaction.Observe(r.Now().Sub(latest).Seconds())
}

func configNames(m *magalixv1.ConfigMonitor) string {
	s := "ConfigMap " + m.Spec.ConfigMapName()
	if m.Spec.Secret != "" {
		s += " or Secret " + m.Spec.Secret
	}
	return s
}
