package status

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
