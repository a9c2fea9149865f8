package status

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
)

// RetryConflictAfter is when a pass whose locked status write was refused
// (the object changed since it was read) runs again, from the newer object.
const RetryConflictAfter = time.Second

// RetryStatusAfter bounds how long a failed status write waits for the next
// pass when the pass planned to come back anyway.
const RetryStatusAfter = 5 * time.Second

// Outcome is what a Reconcile returns once its status write is done: a
// planned requeue or an error, never both, because controller-runtime
// ignores the requeue when an error comes with it.
//
//   - The pass failed (err): the error, retried with the controller's
//     per-object backoff. The retry recomputes the plan.
//   - Only the status write failed and the pass planned to come back: the
//     planned requeue, no sooner than needed and no later than
//     RetryStatusAfter, and no error. The pass made progress; an error would
//     grow the per-object backoff with every refused write and turn a paced
//     rollout into one slowed down exponentially. The next pass writes the
//     status again; the failure is logged.
//   - Only the status write failed, nothing planned: its error.
//   - The status write was refused by its optimistic lock (PatchLocked): a
//     requeue after RetryConflictAfter and no error. The pass read a stale
//     object; nothing is wrong, the next pass reads the newer one.
//   - The pass failed only because its namespace is being deleted (the API
//     server refuses new objects there): no error and no requeue. Nothing
//     can be made there again; the object's own deletion, which the
//     namespace's brings, is an event that starts its next pass. Retrying
//     would only log an error every backoff step until then.
func Outcome(ctx context.Context, result ctrl.Result, err, statusErr error) (ctrl.Result, error) {
	switch {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		ctrl.LoggerFrom(ctx).V(1).Info("nothing can be created: the namespace is being deleted; waiting for this object's deletion", "refused", err.Error())
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, err
	case apierrors.IsConflict(statusErr):
		ctrl.LoggerFrom(ctx).V(1).Info("status not written: the object changed since it was read; looking again")
		if result.RequeueAfter == 0 || result.RequeueAfter > RetryConflictAfter {
			result.RequeueAfter = RetryConflictAfter
		}
		return result, nil
	case statusErr != nil && result.RequeueAfter > 0:
		// A write cut short by the operator shutting down is no failure.
		if ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).Error(statusErr, "writing status failed; written again at the planned requeue")
		}
		result.RequeueAfter = min(result.RequeueAfter, RetryStatusAfter)
		return result, nil
	case statusErr != nil:
		return ctrl.Result{}, statusErr
	}
	return result, nil
}
