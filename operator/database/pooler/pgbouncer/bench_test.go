package pgbouncer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/pooler/pgbouncer"
)

// benchPhase is how long each of the benchmark's four loads runs.
const benchPhase = 3 * time.Second

// BenchmarkConnectionsThroughThePoolerAgainstDirect measures what an
// application sees through the real PgBouncer (Debian's 1.18, transaction
// mode, default_pool_size 20) in front of the host's PostgreSQL 15
// (max_connections 50), against the same load on the server directly,
// measured in the same run. TLS everywhere, as the operator runs it: the
// server refuses clients without TLS, every client verifies the
// certificate it is shown (verify-full), the pooler verifies the
// server's; every login is SCRAM-SHA-256, as the app role.
//
//   - short-lived connections: 32 goroutines, each in a loop for
//     benchPhase: connect, SELECT 1, close; connections/s and the p50 and
//     p99 of connect and query (the close not in them);
//   - held connections: 200 goroutines each holding one connection
//     through the pooler, running SELECT 1 (one transaction, no BEGIN) in
//     a loop; the floor: 40 goroutines holding 40 connections to the
//     server, what max_connections 50 leaves room for.
//
// The server logs no statement here (the tests' servers log every one).
//
//	go test -run '^$' -bench ConnectionsThroughThePooler -benchtime 1x ./operator/database/pooler/pgbouncer/
func BenchmarkConnectionsThroughThePoolerAgainstDirect(b *testing.B) {
	ctx := context.Background()
	ca := newTestCA(b)
	pg := startPostgres(b, ca)
	pg.sql(b, "postgres", `CREATE ROLE app LOGIN PASSWORD 'app-pw'`)
	pg.sql(b, "postgres", `CREATE DATABASE app OWNER app`)
	pg.sql(b, "postgres", `ALTER SYSTEM SET log_statement = 'none'`)
	pg.sql(b, "postgres", `SELECT pg_reload_conf()`)
	require.NoError(b, pg.setup("deckhand_pooler_test", authPassword))
	bouncer := pg.startPgBouncer(b, pgbouncer.Config{ServerHost: "127.0.0.1", ServerPort: pg.port, PoolMode: "transaction",
		DefaultPoolSize: 20, MaxClientConn: 600, AuthUser: "deckhand_pooler_test", ServerTLS: true, ClientTLS: true}, authPassword, ca)
	bouncerCA := filepath.Join(bouncer.dir, "client-ca.crt")
	require.NoError(b, os.WriteFile(bouncerCA, ca.pem, 0o644))
	direct, err := clientConfig(pg.port, pg.caFile, "app", "app-pw", "app")
	require.NoError(b, err)
	pooled, err := clientConfig(bouncer.port, bouncerCA, "app", "app-pw", "app")
	require.NoError(b, err)

	for b.Loop() {
		// The pooler's server connections of the last round are gone: the
		// direct floors need the server's slots.
		require.Eventually(b, func() bool {
			return pg.sql(b, "postgres", `SELECT count(*) FROM pg_stat_activity
				 WHERE backend_type = 'client backend' AND usename <> 'postgres'`) == "0"
		}, 10*time.Second, 50*time.Millisecond)
		loadBefore := loadAverage()

		directShort := shortLived(ctx, b, pg, direct, 32)
		directHeld := held(ctx, b, pg, direct, 40)
		pooledShort := shortLived(ctx, b, pg, pooled, 32)
		pooledHeld := held(ctx, b, pg, pooled, 200)

		// Empty the pooler's pools (KILL leaves the database paused).
		admin := adminConsoleTLS(ctx, b, bouncer.port, bouncerCA, authPassword)
		admin.exec(ctx, b, "KILL app")
		admin.exec(ctx, b, "RESUME app")
		require.NoError(b, admin.conn.Close(ctx))

		b.ReportMetric(directShort.perSecond, "direct_conn/s")
		b.ReportMetric(ms(directShort.p50), "direct_p50_ms")
		b.ReportMetric(ms(directShort.p99), "direct_p99_ms")
		b.ReportMetric(pooledShort.perSecond, "pooled_conn/s")
		b.ReportMetric(ms(pooledShort.p50), "pooled_p50_ms")
		b.ReportMetric(ms(pooledShort.p99), "pooled_p99_ms")
		b.ReportMetric(directHeld.perSecond, "direct_held40_tx/s")
		b.ReportMetric(ms(directHeld.p99), "direct_held40_p99_ms")
		b.ReportMetric(pooledHeld.perSecond, "pooled_held200_tx/s")
		b.ReportMetric(ms(pooledHeld.p99), "pooled_held200_p99_ms")
		b.ReportMetric(float64(pooledHeld.peak.app), "pooled_held200_server_conns")
		b.Logf("short-lived (32 clients, connect+SELECT 1+close, TLS, SCRAM), %v each: direct %.0f conn/s p50 %v p99 %v (%d); pooled %.0f conn/s p50 %v p99 %v (%d); "+
			"held: 40 direct %.0f tx/s p50 %v p99 %v; 200 pooled %.0f tx/s p50 %v p99 %v (the app's server connections at most %d, all %d); "+
			"server connections at most: direct short %d, pooled short %d (app %d); /proc/loadavg before %s, after %s",
			benchPhase, directShort.perSecond, round(directShort.p50), round(directShort.p99), directShort.n,
			pooledShort.perSecond, round(pooledShort.p50), round(pooledShort.p99), pooledShort.n,
			directHeld.perSecond, round(directHeld.p50), round(directHeld.p99),
			pooledHeld.perSecond, round(pooledHeld.p50), round(pooledHeld.p99), pooledHeld.peak.app, pooledHeld.peak.all,
			directShort.peak.all, pooledShort.peak.all, pooledShort.peak.app, loadBefore, loadAverage())
	}
}

// load is what one of the benchmark's loads measured: n operations (a
// connection or a transaction) at perSecond over the load's whole time,
// the p50 and p99 of their latencies, and the most client backends the
// server had meanwhile.
type load struct {
	n         int
	perSecond float64
	p50, p99  time.Duration
	peak      peakConnections
}

// shortLived runs clients goroutines for benchPhase, each connecting with
// cfg, running SELECT 1 and closing, again and again.
func shortLived(ctx context.Context, b *testing.B, pg *postgres, cfg *pgx.ConnConfig, clients int) load {
	b.Helper()
	return measure(ctx, b, pg, clients, func(int) (func(deadline time.Time) ([]time.Duration, error), error) {
		return func(deadline time.Time) ([]time.Duration, error) {
			var took []time.Duration
			for time.Now().Before(deadline) {
				start := time.Now()
				conn, err := pgx.ConnectConfig(ctx, cfg)
				if err != nil {
					return took, err
				}
				err = selectOne(ctx, conn)
				took = append(took, time.Since(start))
				if err := errors.Join(err, conn.Close(ctx)); err != nil {
					return took, err
				}
			}
			return took, nil
		}, nil
	})
}

// held opens clients connections with cfg, all at once and untimed, then
// runs SELECT 1 on each, again and again, for benchPhase.
func held(ctx context.Context, b *testing.B, pg *postgres, cfg *pgx.ConnConfig, clients int) load {
	b.Helper()
	conns := make([]*pgx.Conn, clients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close(ctx)
			}
		}
	}()
	return measure(ctx, b, pg, clients, func(i int) (func(deadline time.Time) ([]time.Duration, error), error) {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		conns[i] = conn
		return func(deadline time.Time) ([]time.Duration, error) {
			var took []time.Duration
			for time.Now().Before(deadline) {
				start := time.Now()
				if err := selectOne(ctx, conn); err != nil {
					return took, err
				}
				took = append(took, time.Since(start))
			}
			return took, nil
		}, nil
	})
}

// measure starts clients goroutines, each getting ready (untimed: its
// connection made, for held) and then, once all are, running its loop
// until the same deadline, benchPhase away. The rate is over the time
// until the last loop ended.
func measure(ctx context.Context, b *testing.B, pg *postgres, clients int,
	ready func(i int) (func(deadline time.Time) ([]time.Duration, error), error)) load {
	b.Helper()
	var l load
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchServerConnections(ctx, pg, &l.peak, stop)
	}()

	var prepared, done sync.WaitGroup
	prepared.Add(clients)
	start := make(chan time.Time)
	took := make([][]time.Duration, clients)
	errs := make([]error, clients)
	for i := range clients {
		done.Add(1)
		go func() {
			defer done.Done()
			run, err := ready(i)
			prepared.Done()
			deadline := <-start
			if err != nil {
				errs[i] = err
				return
			}
			took[i], errs[i] = run(deadline)
		}()
	}
	prepared.Wait()
	began := time.Now()
	deadline := began.Add(benchPhase)
	for range clients {
		start <- deadline
	}
	done.Wait()
	elapsed := time.Since(began)
	close(stop)
	<-watched

	var all []time.Duration
	for _, d := range took {
		all = append(all, d...)
	}
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("client %d: %v", i, err))
		}
	}
	require.Empty(b, failed, "%d of %d clients failed", len(failed), clients)
	require.NotEmpty(b, all)
	slices.Sort(all)
	l.n = len(all)
	l.perSecond = float64(len(all)) / elapsed.Seconds()
	l.p50, l.p99 = all[len(all)/2], all[len(all)*99/100]
	return l
}

func selectOne(ctx context.Context, conn *pgx.Conn) error {
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return err
	}
	if one != 1 {
		return fmt.Errorf("SELECT 1 read %d", one)
	}
	return nil
}

func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fields := strings.Fields(string(raw))
	return strings.Join(fields[:min(3, len(fields))], " ")
}
