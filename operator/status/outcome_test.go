package status

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestOutcomeNeverReturnsARequeueAndAnErrorTogether(t *testing.T) {
	ctx := context.Background()
	failed, refused := errors.New("patching the workload: 500"), errors.New("status write: 429")
	planned := ctrl.Result{RequeueAfter: 200 * time.Millisecond}

	res, err := Outcome(ctx, planned, failed, refused)
	assert.Equal(t, failed, err, "a failed pass is an error, retried with backoff")
	assert.Zero(t, res)

	res, err = Outcome(ctx, planned, nil, refused)
	assert.NoError(t, err, "a refused status write after a pass that made progress must not grow the backoff")
	assert.Equal(t, planned, res, "the planned requeue is kept")

	res, err = Outcome(ctx, ctrl.Result{RequeueAfter: time.Hour}, nil, refused)
	assert.NoError(t, err)
	assert.Equal(t, RetryStatusAfter, res.RequeueAfter, "the status is written again soon, not in an hour")

	res, err = Outcome(ctx, ctrl.Result{}, nil, refused)
	assert.Equal(t, refused, err, "with nothing planned, the status write is retried with backoff")
	assert.Zero(t, res)

	res, err = Outcome(ctx, planned, nil, nil)
	assert.NoError(t, err)
	assert.Equal(t, planned, res)
}

func TestOutcomeRequeuesSoonWhenTheLockedStatusWriteMetANewerObject(t *testing.T) {
	ctx := context.Background()
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "stable.imaginedata.co", Resource: "databases"}, "db", errors.New("the object has been modified"))

	res, err := Outcome(ctx, ctrl.Result{RequeueAfter: time.Hour}, nil, conflict)
	assert.NoError(t, err, "a stale read is no failure: no error, no growing backoff")
	assert.Equal(t, RetryConflictAfter, res.RequeueAfter, "the pass runs again soon, from the newer object")

	res, err = Outcome(ctx, ctrl.Result{}, nil, conflict)
	assert.NoError(t, err)
	assert.Equal(t, RetryConflictAfter, res.RequeueAfter, "even with nothing planned")

	res, err = Outcome(ctx, ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil, conflict)
	assert.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, res.RequeueAfter, "a sooner planned pass is kept")
}

// What the API server answers when an object is created in a namespace
// being deleted (the namespace lifecycle admission plugin).
func namespaceTerminating() error {
	err := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "db-superuser",
		errors.New("unable to create new content in namespace ns because it is being terminated"))
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: corev1.NamespaceTerminatingCause, Message: "ns", Field: "metadata.namespace"})
	return err
}

func TestOutcomeWaitsQuietlyWhenTheNamespaceIsBeingDeleted(t *testing.T) {
	ctx := context.Background()
	wrapped := fmt.Errorf("creating Secret db-superuser: %w", namespaceTerminating())

	res, err := Outcome(ctx, ctrl.Result{RequeueAfter: time.Minute}, wrapped, nil)
	assert.NoError(t, err, "no error to retry with backoff: nothing can be created there again")
	assert.Zero(t, res, "the object's deletion brings the next pass")

	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "db-superuser", errors.New("RBAC: access denied"))
	_, err = Outcome(ctx, ctrl.Result{}, forbidden, nil)
	assert.Equal(t, forbidden, err, "any other refusal stays an error")
}
