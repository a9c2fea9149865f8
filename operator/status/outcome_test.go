package status

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
