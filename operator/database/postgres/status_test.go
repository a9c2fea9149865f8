package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// statusOf asks an agent for its status until it answers (at most 30 s).
// One request can outlast the client's bound (instance.StatusTimeout, 1 s)
// when the tests load the machine (make test: load 10-14 on 2 cores),
// which is not what the tests that call this check; the tests of that
// bound and of refused clients call the client directly.
func statusOf(t testing.TB, c *instance.Client, host string) instance.Status {
	t.Helper()
	var st instance.Status
	var err error
	poll := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		st, err = c.Status(ctx, host)
		return err == nil, nil
	})
	require.NoError(t, poll, "the agent at %s never answered in 30 s: %v", host, err)
	return st
}
