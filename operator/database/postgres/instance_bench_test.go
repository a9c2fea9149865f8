package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/assert"
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

// BenchmarkInstanceFailoverSteps times a failover's two actions through
// the channel on real servers (a primary with a streaming standby and a
// little data): POST /fence of the primary (marker, fast shutdown, the
// check that the server is down) and POST /promote of the standby, until
// each answers; and, as the floor measured in the same run on a second
// such pair, `pg_ctl stop -m fast -w` and `pg_ctl promote -w` run
// directly. What the 30 s write outage leaves after detection
// (failover.DefaultPrimaryGoneAfter):
//
//	go test -bench InstanceFailoverSteps -run x -benchtime 1x ./operator/database/postgres/
func BenchmarkInstanceFailoverSteps(b *testing.B) {
	h := newHost(b)
	ch := newChannel(b, h, h.cluster.Name+"-0", h.cluster.Name+"-1")
	ctx := context.Background()
	round := 0
	pair := func() (primary, standby string) {
		round++
		p, s := fmt.Sprintf("data-%d-0", round), fmt.Sprintf("data-%d-1", round)
		primaryServer := h.primary(p)
		h.init(primaryServer.Port)
		h.sql(primaryServer.Port, h.cluster.Database, "CREATE TABLE rows AS SELECT g AS id FROM generate_series(1, 100000) g")
		h.standby(1, s, primaryServer.Port)
		require.EventuallyWithT(b, func(ct *assert.CollectT) {
			assert.Equal(ct, "deckhand_replication name-of-database-1 streaming", h.sql(primaryServer.Port, "postgres", replicationState))
		}, time.Minute, 100*time.Millisecond)
		return p, s
	}
	pgCtl := func(volume string, args ...string) time.Duration {
		start := time.Now()
		out, err := h.u.Command(map[string]string{"PATH": h.bin + ":/usr/bin:/bin"},
			append([]string{filepath.Join(h.bin, "pg_ctl"), "-D", filepath.Join(h.volume(volume), "pgdata")}, args...)).CombinedOutput()
		require.NoError(b, err, "%s", out)
		return time.Since(start)
	}
	for b.Loop() {
		p, s := pair()
		primaryHost := ch.startAgent(b, h, 0, p)
		standbyHost := ch.startAgent(b, h, 1, s)
		start := time.Now()
		_, err := ch.client.Fence(ctx, primaryHost)
		require.NoError(b, err)
		fence := time.Since(start)
		start = time.Now()
		_, err = ch.client.Promote(ctx, standbyHost)
		require.NoError(b, err)
		promote := time.Since(start)

		p, s = pair()
		stop := pgCtl(p, "stop", "-m", "fast", "-w")
		promoteFloor := pgCtl(s, "promote", "-w")

		b.ReportMetric(fence.Seconds()*1000, "fence-ms")
		b.ReportMetric(promote.Seconds()*1000, "promote-ms")
		b.ReportMetric(stop.Seconds()*1000, "pg_ctl-stop-ms")
		b.ReportMetric(promoteFloor.Seconds()*1000, "pg_ctl-promote-ms")
		b.Logf("through the channel: fence %v, promote %v; floor, pg_ctl directly: stop -m fast %v, promote %v",
			fence.Round(time.Millisecond), promote.Round(time.Millisecond), stop.Round(time.Millisecond), promoteFloor.Round(time.Millisecond))
	}
}
