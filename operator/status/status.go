// Package status holds the status bookkeeping every deckhand controller
// does the same way: True/False conditions stamped with the generation they
// describe, and a status patch sent only when something changed.
package status

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SetCondition records condition kind as True (ok) or False, never Unknown,
// observed at generation.
func SetCondition(conditions *[]metav1.Condition, generation int64, kind string, ok bool, reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type: kind, Status: s, Reason: reason, Message: msg, ObservedGeneration: generation,
	})
}

// Patch sends obj's status as a merge patch against before, and nothing
// when the reconcile changed nothing, so a steady state makes no writes.
// A object deleted meanwhile is not an error.
//
// It overwrites whatever the status holds now: use it only where no
// status field decides what a later pass does (PatchLocked otherwise).
func Patch(ctx context.Context, c client.Client, before, obj client.Object) error {
	return patch(ctx, c, before, obj, client.MergeFrom(before))
}

// PatchLocked is Patch with an optimistic lock: the patch carries before's
// resourceVersion, so the API server refuses it (a Conflict) when the
// object changed since it was read. A pass that worked from a stale cache
// then cannot write back old conditions or steps over newer ones; Outcome
// requeues it, and the next pass starts from the newer object.
func PatchLocked(ctx context.Context, c client.Client, before, obj client.Object) error {
	return patch(ctx, c, before, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

func patch(ctx context.Context, c client.Client, before, obj client.Object, p client.Patch) error {
	if equality.Semantic.DeepEqual(before, obj) {
		return nil
	}
	err := c.Status().Patch(ctx, obj, p)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
