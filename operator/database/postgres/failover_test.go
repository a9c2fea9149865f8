package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/failover"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// countingChannel is the operator's client, counting the promotions the
// agents carried out.
type countingChannel struct {
	*instance.Client
	mu       sync.Mutex
	promoted []string
}

func (c *countingChannel) Promote(ctx context.Context, host string, slots ...string) (instance.Status, error) {
	st, err := c.Client.Promote(ctx, host, slots...)
	if err == nil {
		c.mu.Lock()
		c.promoted = append(c.promoted, host)
		c.mu.Unlock()
	}
	return st, err
}

// statusStore is the Database's status as the failover saves it: a copy,
// as the API server keeps it; failAt makes the save of that phase fail,
// as an operator stopped before it wrote.
type statusStore struct {
	rec    *dbv1.FailoverRecord
	failAt dbv1.FailoverPhase
	events []string
}

func (s *statusStore) save(_ context.Context, rec *dbv1.FailoverRecord) error {
	if rec.Phase == s.failAt {
		return errors.New("the operator stopped")
	}
	s.rec = rec.DeepCopy()
	return nil
}

func (s *statusStore) event(warning bool, reason, msg string) {
	s.events = append(s.events, reason)
}

// TestAPrimaryKilledIsFailedOverOnceEvenAcrossAnOperatorRestart: a real
// primary and its streaming standby, each with its agent on 127.0.0.1.
// While the primary serves, it is healthy; its server killed (and not
// restarted) it is gone past the bound; the failover fences it (its agent
// answers: the marker keeps it from starting again), chooses the standby
// and records the choice, promotes it, and the new primary takes writes
// holding every committed row. The first operator stops after the
// promotion, before it recorded it: the next resumes from the record and
// finds the standby a primary already: no second promotion.
func TestAPrimaryKilledIsFailedOverOnceEvenAcrossAnOperatorRestart(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary := h.primary("data-0")
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)
	standby := h.standby(1, "data-1", primary.Port)
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming")
	pod0, pod1 := h.cluster.Name+"-0", h.cluster.Name+"-1"
	ch := newChannel(t, h, pod0, pod1)
	hosts := map[string]string{pod0: ch.startAgent(t, h, 0, "data-0"), pod1: ch.startAgent(t, h, 1, "data-1")}
	ctx := context.Background()

	// The operator watches the primary: healthy, writing at fromLSN once
	// the last row is committed.
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)
	st := statusOf(t, ch.client, hosts[pod0])
	watched := failover.Observation{Pod: pod0, Status: &st, PodReady: true}
	require.True(t, failover.PrimaryHealthy(watched), "%+v", st)
	lastHealthy, fromLSN := time.Now(), st.CurrentLSN
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		s, err := ch.client.Status(ctx, hosts[pod1])
		require.NoError(ct, err)
		assert.GreaterOrEqual(ct, s.ReplayLSN, fromLSN, "the standby replayed what the primary was seen writing")
	}, 60*time.Second, 100*time.Millisecond)

	kill(t, primary)
	const bound = time.Second
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		o := failover.Observation{Pod: pod0}
		if s, err := ch.client.Status(ctx, hosts[pod0]); err == nil {
			o.Status = &s
		}
		assert.False(ct, failover.PrimaryHealthy(o), "the killed primary is not healthy")
		assert.True(ct, failover.PrimaryGone(o, lastHealthy, lastHealthy, time.Now(), bound), "gone past %s", bound)
	}, 60*time.Second, 100*time.Millisecond)

	// The first operator: it promotes, and stops before it records so.
	counting := &countingChannel{Client: ch.client}
	store := &statusStore{failAt: dbv1.FailoverCompleted}
	steps := failover.Steps{
		Channel: counting, Host: func(pod string) string { return hosts[pod] }, Pods: []string{pod0, pod1},
		Save: store.save, Event: store.event, Now: time.Now,
	}
	err = steps.Run(ctx, failover.Start(pod0, fromLSN, time.Now()), false)
	require.ErrorContains(t, err, "the operator stopped")
	require.NotNil(t, store.rec)
	assert.Equal(t, dbv1.FailoverPromoting, store.rec.Phase, "the choice was recorded before the promotion")
	assert.Equal(t, pod1, store.rec.To)
	assert.True(t, store.rec.Fenced, store.rec.FenceMessage)
	assert.Equal(t, []string{hosts[pod1]}, counting.promoted)
	assert.Equal(t, "f", inRecovery(h, standby.Port), "the standby was promoted")

	// The next operator resumes from the status: nothing promoted again.
	next := &statusStore{rec: store.rec.DeepCopy()}
	steps.Save, steps.Event = next.save, next.event
	rec := next.rec.DeepCopy()
	require.NoError(t, steps.Run(ctx, rec, true))
	assert.Equal(t, []string{hosts[pod1]}, counting.promoted, "one promotion in all")
	assert.Equal(t, dbv1.FailoverCompleted, next.rec.Phase)
	assert.NotNil(t, next.rec.Finished)
	assert.Equal(t, pod0, next.rec.From)
	assert.Equal(t, pod1, next.rec.To)
	assert.Equal(t, fromLSN.String(), next.rec.FromLSN)
	toLSN, err := instance.ParseLSN(next.rec.ToLSN)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, toLSN, fromLSN)
	require.NotNil(t, next.rec.BytesPossiblyLost)
	assert.Equal(t, int64(0), *next.rec.BytesPossiblyLost, "the standby had replayed all the primary was seen writing")
	assert.Equal(t, []string{"PrimaryGone", "Fenced", "Promoting"}, store.events)
	assert.Equal(t, []string{"FailedOver"}, next.events)

	promoted := statusOf(t, ch.client, hosts[pod1])
	assert.Equal(t, instance.RolePrimary, promoted.Role)
	assert.Equal(t, int64(2), promoted.Timeline, "promoted once: one new timeline")
	out, err = h.appSQL(standby.Port, "INSERT INTO rows VALUES (3)")
	require.NoError(t, err, "the new primary takes writes: %s", out)
	out, err = h.appSQL(standby.Port, "SELECT string_agg(id::text, ',' ORDER BY id) FROM rows")
	require.NoError(t, err, out)
	assert.Equal(t, "1,2,3", out, "every committed row")
	fenced := statusOf(t, ch.client, hosts[pod0])
	assert.True(t, fenced.Fenced, "the old primary stays fenced")

	// A completed record is done: running it again asks nothing.
	require.NoError(t, steps.Run(ctx, next.rec.DeepCopy(), true))
	assert.Len(t, counting.promoted, 1)
}
