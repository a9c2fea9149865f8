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
func Patch(ctx context.Context, c client.Client, before, obj client.Object) error {
	if equality.Semantic.DeepEqual(before, obj) {
		return nil
	}
	err := c.Status().Patch(ctx, obj, client.MergeFrom(before))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
