package database

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A StatefulSet's podManagementPolicy cannot change in place. With
// failover on, OrderedReady can deadlock: after a failover to ordinal 1
// or more, a restart of every pod starts ordinal 0 first and waits for it
// to be ready, and a standby is ready only while it streams from the
// primary, which waits behind it. A Database made before failover was
// turned on has such a StatefulSet, so the operator recreates it: the
// old one is deleted with orphan propagation (its pods and their volumes
// are kept, running; the garbage collector removes their owner
// reference), and the next pass makes it again with Parallel, which
// adopts the same pods by its selector. The data volumes belong to the
// claims, never to the StatefulSet, so nothing is lost either way.

// recreateForParallel deletes an existing StatefulSet that is not
// Parallel, orphaning its pods, and reports whether the StatefulSet
// must not be written this pass (deleted now, or still being deleted).
func (r *Reconciler) recreateForParallel(ctx context.Context, db *Cluster, existing *appsv1.StatefulSet) (bool, error) {
	if existing == nil {
		return false, nil
	}
	if !existing.DeletionTimestamp.IsZero() {
		// The garbage collector is orphaning its pods: made again once
		// it is gone.
		return true, nil
	}
	if existing.Spec.PodManagementPolicy == appsv1.ParallelPodManagement {
		return false, nil
	}
	err := r.Client.Delete(ctx, existing,
		client.PropagationPolicy(metav1.DeletePropagationOrphan),
		client.Preconditions{UID: &existing.UID, ResourceVersion: &existing.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return true, fmt.Errorf("recreating StatefulSet %s as Parallel (deleting it, its pods kept): %w", existing.Name, err)
	}
	r.normal(db, "StatefulSetRecreated", "Failover", "%s", fmt.Sprintf("StatefulSet %s was %s: deleted with its pods kept (orphaned), made again as Parallel so a primary at any ordinal starts after a restart of every pod", existing.Name, existing.Spec.PodManagementPolicy))
	return true, nil
}
