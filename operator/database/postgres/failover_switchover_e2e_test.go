package postgres_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// TestASwitchoverHandsOverWithoutLosingACommittedRow: rows are committed
// through fo-rw, one connection each, all along; spec.failover.switchoverTo
// names the standby fo-1. The operator fences fo-0 (a clean shutdown),
// waits for fo-1 to replay fo-0's last record, promotes it and records a
// switchover; the writes resume on fo-1 through fo-rw, and every row
// whose commit was acknowledged, before or after the handover, is there.
func TestASwitchoverHandsOverWithoutLosingACommittedRow(t *testing.T) {
	t.Parallel()
	f := newFailoverSetup(t)
	e := f.e
	w := f.startWriter()

	w.waitCommitted(t, 20)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur dbv1.Database
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: "fo"}, &cur); err != nil {
			return err
		}
		cur.Spec.Failover.SwitchoverTo = "fo-1"
		return e.c.Update(context.Background(), &cur)
	}))
	got := waitDatabase(t, e, "switched over", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotEmpty(ct, d.Status.Failovers)
		rec := d.Status.Failovers[len(d.Status.Failovers)-1]
		assert.Equal(ct, dbv1.KindSwitchover, rec.Kind)
		assert.Equal(ct, dbv1.FailoverCompleted, rec.Phase, "%+v", rec)
	})
	rec := got.Status.Failovers[len(got.Status.Failovers)-1]
	assert.Len(t, got.Status.Failovers, 1, "one handover")
	assert.Equal(t, "fo-0", rec.From)
	assert.Equal(t, "fo-1", rec.To)
	assert.Equal(t, "fo-1", got.Status.CurrentPrimary)
	assert.True(t, rec.Fenced, rec.FenceMessage)
	require.NotNil(t, rec.BytesPossiblyLost)
	assert.Zero(t, *rec.BytesPossiblyLost)
	waitDatabase(t, e, "fo-1 watched as the primary", func(ct *assert.CollectT, d *dbv1.Database) {
		c := conditionOf(d, database.ConditionFailover)
		require.NotNil(ct, c)
		assert.Equal(ct, "PrimaryHealthy", c.Reason, c.Message)
		assert.Contains(ct, c.Message, "watching primary fo-1")
	})

	// Writes resume on fo-1 through fo-rw.
	after := w.committedCount()
	w.waitCommitted(t, after+20)
	committed := w.stop()
	inRecovery, err := f.psql("fo-1", "SELECT pg_is_in_recovery()")
	require.NoError(t, err, inRecovery)
	assert.Equal(t, "f", inRecovery)
	have, err := f.psql("fo-1", "SELECT string_agg(id::text, ',' ORDER BY id) FROM rows")
	require.NoError(t, err, have)
	present := map[string]bool{}
	for _, id := range splitComma(have) {
		present[id] = true
	}
	var lost []int
	for _, id := range committed {
		if !present[strconv.Itoa(id)] {
			lost = append(lost, id)
		}
	}
	assert.Empty(t, lost, "committed rows missing on the new primary (of %d committed)", len(committed))
	t.Logf("%d rows committed through fo-rw, %d of them after the handover; %d failed (the handover's outage)", len(committed), len(committed)-after, w.failures())
	assertEventReason(t, e, "Switchover")
	assertEventReason(t, e, "SwitchedOver")
	assert.Equal(t, 1.0, metricValue(t, "deckhand_database_failovers_total", map[string]string{"namespace": e.ns, "database": "fo", "kind": "switchover"}))
	assert.Equal(t, 0.0, metricValue(t, "deckhand_database_failover_pending", map[string]string{"namespace": e.ns, "database": "fo"}))
}

// readWriteDSN connects to fo-rw as the superuser.
func (f *failoverSetup) readWriteDSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%s user=postgres password=%s dbname=%s sslmode=disable connect_timeout=5", f.rwPort, quoteDSN(f.superuser), quoteDSN(appDatabase))
}

// quoteDSN is v as a libpq key=value string value.
func quoteDSN(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// writer commits rows 1000, 1001, ... through fo-rw, a new connection
// for each (so each goes where the Service routes it then), and keeps
// the ids whose commit was acknowledged.
type writer struct {
	mu        sync.Mutex
	committed []int
	failed    int
	lastErr   error
	done      chan struct{}
	finished  chan struct{}
}

func (f *failoverSetup) startWriter() *writer {
	w := &writer{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(w.finished)
		for id := 1000; ; id++ {
			select {
			case <-w.done:
				return
			default:
			}
			if err := f.commitThroughReadWrite(id, 10*time.Second); err == nil {
				w.mu.Lock()
				w.committed = append(w.committed, id)
				w.mu.Unlock()
			} else {
				w.mu.Lock()
				w.failed++
				w.lastErr = err
				w.mu.Unlock()
				time.Sleep(100 * time.Millisecond) // not a synchronisation: a retry pace
			}
		}
	}()
	f.e.t.Cleanup(func() { w.stop() })
	return w
}

func (w *writer) committedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.committed)
}

func (w *writer) lastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

func (w *writer) failures() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

func (w *writer) waitCommitted(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return w.committedCount() >= n }, 2*time.Minute, 100*time.Millisecond, "%d rows committed through fo-rw (%d failed, the last: %v)", n, w.failures(), w.lastError())
}

// stop ends the writer and returns the acknowledged ids.
func (w *writer) stop() []int {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	<-w.finished
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.committed...)
}

// metricValue is the operator's metric name with labels (a subset), 0
// when absent; the operator runs in this process.
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
