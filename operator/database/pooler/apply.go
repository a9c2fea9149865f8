package pooler

import (
	"context"
	"fmt"
	"reflect"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// fieldOwner is the server-side apply manager of a Pooler's objects.
const fieldOwner = client.FieldOwner("deckhand-pooler")

// nameTakenError: an object of the name a Pooler needs exists and is not
// the Pooler's. It is never changed or deleted.
type nameTakenError struct{ kind, name string }

func (e *nameTakenError) Error() string {
	return fmt.Sprintf("%s %s exists and does not belong to this Pooler: the pooler leaves it alone; delete it or rename the Pooler", e.kind, e.name)
}

// apply writes desired with server-side apply, after checking that an
// object of its name, if one exists, is the Pooler's own.
func (r *Reconciler) apply(ctx context.Context, p *dbv1.Pooler, desired client.Object) error {
	gvk := desired.GetObjectKind().GroupVersionKind()
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(gvk)
	err := r.API.Get(ctx, client.ObjectKeyFromObject(desired), live)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case !metav1.IsControlledBy(live, p):
		return &nameTakenError{kind: gvk.Kind, name: desired.GetName()}
	}
	if _, isJob := desired.(*batchv1.Job); isJob && err == nil {
		return nil // a Job's template cannot change; new settings make a Job of a new name
	}
	return r.Client.Patch(ctx, desired, client.Apply, fieldOwner, client.ForceOwnership)
}

// removeOldSetupJobs deletes the setup Jobs of earlier settings, once the
// current one exists: they are the Pooler's own.
func (r *Reconciler) removeOldSetupJobs(ctx context.Context, p *dbv1.Pooler, current *batchv1.Job) error {
	if current == nil {
		return nil
	}
	var jobs batchv1.JobList
	if err := r.Owned.List(ctx, &jobs, client.InNamespace(p.Namespace), client.MatchingLabels{LabelPooler: p.Name}); err != nil {
		return err
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.Name == current.Name || !metav1.IsControlledBy(j, p) {
			continue
		}
		err := r.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// setupJobState is the setup Job's outcome as the cache sees it.
func (r *Reconciler) setupJobState(ctx context.Context, j *batchv1.Job) (done, failed bool, err error) {
	var live batchv1.Job
	if err := r.Owned.Get(ctx, types.NamespacedName{Namespace: j.Namespace, Name: j.Name}, &live); err != nil {
		return false, false, client.IgnoreNotFound(err)
	}
	for _, c := range live.Status.Conditions {
		if c.Status != "True" {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, false, nil
		case batchv1.JobFailed:
			return false, true, nil
		}
	}
	return false, false, nil
}

func equalStatus(a, b *dbv1.PoolerStatus) bool { return reflect.DeepEqual(a, b) }
