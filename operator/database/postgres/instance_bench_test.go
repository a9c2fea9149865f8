package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// BenchmarkInstanceStatus times the operator's GET /status of a real
// primary's agent (host PostgreSQL, the agent binary as the servers'
// user): over a kept TLS connection, as the operator polls once a second,
// and with a new connection each time (a full TLS 1.3 handshake with
// client certificates); and, as the floor measured in the same run, the
// same kind of query asked of the server directly over its unix socket.
// Medians and 99th percentiles of 200 calls each:
//
//	go test -bench InstanceStatus -run x -benchtime 1x ./operator/database/postgres/
func BenchmarkInstanceStatus(b *testing.B) {
	h := newHost(b)
	primary := h.primary("data-0")
	ch := newChannel(b, h, h.cluster.Name+"-0")
	host := ch.startAgent(b, h, 0, "data-0")
	db, err := sql.Open("postgres", fmt.Sprintf("host=/var/run/postgresql port=%s user=postgres dbname=postgres sslmode=disable", primary.Port))
	require.NoError(b, err)
	defer db.Close()
	ctx := context.Background()
	const calls = 200
	measure := func(call func()) (median, p99 time.Duration) {
		d := make([]time.Duration, 0, calls)
		for range calls {
			start := time.Now()
			call()
			d = append(d, time.Since(start))
		}
		slices.Sort(d)
		return d[calls/2], d[calls*99/100]
	}
	for b.Loop() {
		kept, keptP99 := measure(func() {
			_, err := ch.client.Status(ctx, host)
			require.NoError(b, err)
		})
		fresh, freshP99 := measure(func() {
			ch.client.CloseIdleConnections()
			_, err := ch.client.Status(ctx, host)
			require.NoError(b, err)
		})
		floor, floorP99 := measure(func() {
			var rec bool
			var lsn string
			require.NoError(b, db.QueryRowContext(ctx, "SELECT pg_is_in_recovery(), pg_current_wal_lsn()::text").Scan(&rec, &lsn))
		})
		b.ReportMetric(float64(kept.Microseconds())/1000, "status-ms")
		b.ReportMetric(float64(fresh.Microseconds())/1000, "status-new-conn-ms")
		b.ReportMetric(float64(floor.Microseconds())/1000, "direct-query-ms")
		b.Logf("GET /status, median (p99) of %d: kept connection %v (%v), new TLS connection %v (%v); floor, the query over the socket: %v (%v); the client's bound is %v",
			calls, kept, keptP99, fresh, freshP99, floor, floorP99, instance.StatusTimeout)
	}
}
