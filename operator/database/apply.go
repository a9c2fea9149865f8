package database

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// notOwnedError: an object the Database needs exists and belongs to
// someone else. It is never touched.
type notOwnedError struct {
	Kind, Name string
	// Owner is the kind of the cluster that needs the object.
	Owner string
}

func (e *notOwnedError) Error() string {
	owner := e.Owner
	if owner == "" {
		owner = "Database"
	}
	return fmt.Sprintf("%s %s exists and is not owned by this %s; it is left untouched (rename the %s or delete the %s)", e.Kind, e.Name, owner, owner, e.Kind)
}

// lookup fills live with the object of that name and reports whether it
// exists. The owned cache holds only labelled objects, so an object missing
// there is asked for from the API server: one that exists there is someone
// else's (or ours, just created, not yet in the cache). An object that is
// not controlled by db gives a *notOwnedError. The API server is asked
// only when the object is about to be created (toCreate), so a reconcile of
// a Database whose objects all exist makes no request.
func (r *Reconciler) lookup(ctx context.Context, db *Cluster, kind, name string, live client.Object, toCreate bool) (bool, error) {
	key := client.ObjectKey{Namespace: db.Namespace, Name: name}
	err := r.Owned.Get(ctx, key, live)
	if apierrors.IsNotFound(err) {
		if !toCreate {
			return false, nil
		}
		err = r.API.Get(ctx, key, live)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
	}
	if err != nil {
		return false, err
	}
	if !metav1.IsControlledBy(live, db) {
		return true, &notOwnedError{Kind: kind, Name: name, Owner: db.Kind.clusterKind()}
	}
	return true, nil
}

// lookupNamedSecret finds a Secret the user named (MySQLCluster's
// spec.secret), as metadata: it is used whoever made it, so it is never
// refused as someone else's. One the operator did not make is not in the
// owned cache, and is asked for from the API server.
func (r *Reconciler) lookupNamedSecret(ctx context.Context, db *Cluster, name string, live *metav1.PartialObjectMetadata) (bool, error) {
	key := client.ObjectKey{Namespace: db.Namespace, Name: name}
	err := r.Owned.Get(ctx, key, live)
	if apierrors.IsNotFound(err) {
		err = r.API.Get(ctx, key, live)
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// desiredState is the object as the apply request sends it: JSON without
// status, nulls or type information, which the API server fills in.
func desiredState(obj client.Object) (map[string]any, error) {
	m, err := toJSONMap(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	pruneNulls(m)
	return m, nil
}

func toJSONMap(obj any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func pruneNulls(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			pruneNulls(e)
		}
	case []any:
		for _, e := range t {
			pruneNulls(e)
		}
	}
}

// upToDate reports whether live already has every value desired sets, so
// a steady state makes no API writes. Fields the API server or others add
// do not count; a value of ours that someone changed does.
func upToDate(desired map[string]any, live client.Object) (bool, error) {
	l, err := toJSONMap(live)
	if err != nil {
		return false, err
	}
	d := make(map[string]any, len(desired))
	for k, v := range desired {
		if k != "apiVersion" && k != "kind" {
			d[k] = v
		}
	}
	return contains(l, d), nil
}

// contains: every field of want has the same value in have. Lists must
// have the same length, item by item.
func contains(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, _ := have.(map[string]any)
		for k, v := range w {
			if !contains(h[k], v) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return len(w) == 0 && have == nil
		}
		for i := range w {
			if !contains(h[i], w[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(have, want)
	}
}

// apply server-side applies desired (the fields the operator owns) unless
// live already matches it. It reports whether it wrote.
func (r *Reconciler) apply(ctx context.Context, desired client.Object, live client.Object, exists bool) (bool, error) {
	state, err := desiredState(desired)
	if err != nil {
		return false, err
	}
	if exists {
		same, err := upToDate(state, live)
		if err != nil || same {
			return false, err
		}
	}
	u := &unstructured.Unstructured{Object: state}
	err = r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(r.Kind.FieldManager), client.ForceOwnership)
	return err == nil, err
}
