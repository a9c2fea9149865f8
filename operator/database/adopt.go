package database

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// adoptKeptSecrets takes over the Secrets that a Retain deletion of an
// earlier cluster of this name kept, so the kept data is served with the
// passwords it answers to. Only when:
//   - the kept volume of the primary (primaryClaim: ordinal 0's for a new
//     cluster) exists, labelled with this
//     cluster's name and marked with the UID of the cluster that kept it;
//   - the Secret has no controller, and both its creation mark (the UID it
//     was made for) and its kept mark name that same UID.
//
// Labels are not enough: anyone can copy them onto a Secret of their own.
// A Secret that does not match is left as it is, and the lookup refuses it
// as someone else's (SecretNotOwned). Once every Secret is the cluster's,
// the volumes' marks are removed, so later passes skip this at once. It
// reports whether it adopted any: the cache shows that a moment later.
func (r *Reconciler) adoptKeptSecrets(ctx context.Context, db *Cluster) (bool, error) {
	var pvc corev1.PersistentVolumeClaim
	err := r.Owned.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: primaryClaim(db)}, &pvc)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	kept := pvc.Annotations[db.Kind.Keys.KeptFrom]
	if kept == "" || pvc.Labels[db.Kind.Keys.Cluster] != db.Name {
		return false, nil
	}
	allOurs, adopted := true, false
	for _, name := range r.generatedSecrets(db) {
		s := secretMetadata()
		err := r.Owned.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, s)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, err
		}
		switch {
		case metav1.IsControlledBy(s, db.Object):
		case keptBy(db, s, kept):
			if err := r.adoptSecret(ctx, db, s, pvc.Name); err != nil {
				return adopted, err
			}
			adopted = true
		default:
			allOurs = false
		}
	}
	if !allOurs || adopted {
		return adopted, nil
	}
	return false, r.unmarkKeptClaims(ctx, db, kept)
}

// generatedSecrets are the Secrets the operator made for the cluster (a
// Secret the user named is used whoever made it: nothing to adopt).
func (r *Reconciler) generatedSecrets(db *Cluster) []string {
	n := namesOf(db)
	var out []string
	if !db.Secrets.SuperuserNamedByUser {
		out = append(out, n.Superuser)
	}
	for _, name := range []string{n.App, n.Replication} {
		if name != "" {
			out = append(out, name)
		}
	}
	return out
}

// keptBy: the Secret was made for, and kept by, the cluster with UID kept,
// of this name, and nothing controls it now.
func keptBy(db *Cluster, s *metav1.PartialObjectMetadata, kept string) bool {
	return metav1.GetControllerOf(s) == nil &&
		s.Labels[db.Kind.Keys.Cluster] == db.Name &&
		s.Annotations[db.Kind.Keys.KeptFrom] == kept &&
		s.Annotations[db.Kind.Keys.ClusterUID] == kept
}

// adoptSecret makes the cluster the Secret's controller and its creation
// mark the cluster's UID; the password is neither read nor changed.
func (r *Reconciler) adoptSecret(ctx context.Context, db *Cluster, s *metav1.PartialObjectMetadata, claim string) error {
	kept := s.Annotations[db.Kind.Keys.KeptFrom]
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []metav1.OwnerReference{ownerReference(db)},
		"annotations":     map[string]any{db.Kind.Keys.KeptFrom: nil, db.Kind.Keys.ClusterUID: string(db.UID)},
		// Adopt what was checked, nothing changed since.
		"resourceVersion": s.ResourceVersion,
	}})
	if err != nil {
		return err
	}
	target := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: s.Name}}
	if err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body), client.FieldOwner(db.Kind.FieldManager)); err != nil {
		return fmt.Errorf("adopting the kept Secret %s: %w", s.Name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("Secret", "adopted").Inc()
	r.normal(db, "Adopted", "Apply", "Secret %s adopted with its password: kept by the deleted %s %s (uid %s) with volume %s (deletionPolicy Retain)",
		s.Name, db.Kind.clusterKind(), db.Name, kept, claim)
	return nil
}

// unmarkKeptClaims removes the kept mark from the cluster's volumes once
// their Secrets are adopted.
func (r *Reconciler) unmarkKeptClaims(ctx context.Context, db *Cluster, kept string) error {
	claims, err := r.dataClaims(ctx, db)
	if err != nil {
		return err
	}
	for _, pvc := range claims {
		if pvc.Annotations[db.Kind.Keys.KeptFrom] != kept {
			continue
		}
		if err := r.setKeptMark(ctx, db, pvc, ""); err != nil {
			return err
		}
	}
	return nil
}
