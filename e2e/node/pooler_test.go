package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/pooler"
	"github.com/deckhand-dev/deckhand/operator/database/pooler/pgbouncer"
)

// A Pooler on the real node, through the chart's operator: PgBouncer in
// transaction mode in front of a Database whose server takes at most 50
// connections. 500 clients of one Go program connect at once through the
// pooler's Service, with TLS verified against the pooler's CA and the
// app Secret's password (looked up in the database, never in a file),
// retrying a login refused with a retriable error as applications do, and
// each runs transactions: none fails, every row arrives, and the server
// never holds more connections than its limit. Then a switchover under
// the load of 100 writers: see switchoverUnderLoad.
func TestRealNodePoolsFiveHundredClientsAndHoldsThemAcrossASwitchover(t *testing.T) {
	parallel(t, 140*time.Second) // see the package comment: its own namespace, the shared operator
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := startFailoverCluster(ctx, t, 2, 0, func(db *dbv1.Database) {
		db.Spec.Parameters = map[string]string{"max_connections": "50"}
	})
	p := &dbv1.Pooler{
		ObjectMeta: metav1.ObjectMeta{Name: "pay-pool", Namespace: f.ns},
		Spec: dbv1.PoolerSpec{Database: f.name, Instances: ptr.To[int32](2),
			PgBouncer: dbv1.PgBouncerSpec{PoolMode: dbv1.PoolModeTransaction, DefaultPoolSize: 15}},
	}
	require.NoError(t, f.c.Create(ctx, p))
	waitPoolerReady(ctx, t, f.c, p)

	conn := secretData(ctx, t, f.cs, f.ns, "pay-pool")
	svc, err := f.cs.CoreV1().Services(f.ns).Get(ctx, "pay-pool", metav1.GetOptions{})
	require.NoError(t, err)
	connect := poolerDialer(t, conn, svc.Spec.ClusterIP)

	setup, err := connect(ctx)
	require.NoError(t, err, "a client through the pooler")
	_, err = setup.Exec(ctx, "CREATE TABLE pooled (client int NOT NULL, n int NOT NULL)")
	require.NoError(t, err)
	require.NoError(t, setup.Close(ctx))

	const clients, transactions = 500, 3
	var (
		all        sync.WaitGroup
		connected  sync.WaitGroup
		failures   atomic.Int64
		firstErr   atomic.Value
		retries    atomic.Int64
		firstRetry atomic.Value
	)
	fail := func(err error) {
		failures.Add(1)
		firstErr.CompareAndSwap(nil, err)
	}
	start := time.Now()
	connected.Add(clients)
	all.Add(clients)
	for i := range clients {
		go func() {
			defer all.Done()
			c, err := connectRetrying(ctx, connect, func(err error) {
				retries.Add(1)
				firstRetry.CompareAndSwap(nil, err)
			})
			connected.Done()
			if err != nil {
				fail(fmt.Errorf("client %d connecting: %w", i, err))
				return
			}
			defer c.Close(context.Background())
			connected.Wait() // every client holds its connection at once
			for n := range transactions {
				err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "INSERT INTO pooled (client, n) VALUES ($1, $2)", i, n)
					return err
				})
				if err != nil {
					fail(fmt.Errorf("client %d transaction %d: %w", i, n, err))
					return
				}
			}
		}()
	}
	connected.Wait()
	connectedIn := time.Since(start)
	done := make(chan struct{})
	go func() { all.Wait(); close(done) }()
	servers := mostServerConnections(ctx, t, connect, done)
	elapsed := time.Since(start)
	require.Zero(t, failures.Load(), "clients failed; the first: %v", firstErr.Load())

	check, err := connect(ctx)
	require.NoError(t, err)
	defer check.Close(ctx)
	var rows int
	require.NoError(t, check.QueryRow(ctx, "SELECT count(*) FROM pooled").Scan(&rows))
	assert.Equal(t, clients*transactions, rows, "every transaction's row")
	assert.LessOrEqual(t, servers, 50, "the server's client connections while 500 clients were connected")
	logf(t, "pooler on the node: %d clients connected through PgBouncer (transaction mode, 2 pods, pool 15) in %.1f s (%d logins retried; the first: %v), %d transactions in %.1f s; the server held at most %d client connections meanwhile (max_connections 50)",
		clients, connectedIn.Seconds(), retries.Load(), firstRetry.Load(), clients*transactions, elapsed.Seconds(), servers)
	pooledTransactionsAreCounted(t, f, p, string(conn["dbname"]), clients*transactions)

	switchoverUnderLoad(ctx, t, f, connect, p)
}

// connectRetrying connects as an application does: a login refused with
// a retriable error (on a loaded node PgBouncer may answer "server login
// has been failing, try again later", 08P01, for a second after a slow
// server login) is tried again, for up to a minute; each such error is
// handed to retried.
func connectRetrying(ctx context.Context, connect func(context.Context) (*pgx.Conn, error), retried func(error)) (*pgx.Conn, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := connect(ctx)
		if err == nil || !retriable(err) || time.Now().After(deadline) {
			return c, err
		}
		retried(err)
		time.Sleep(200 * time.Millisecond)
	}
}

// retriable is whether a client may simply run a failed transaction
// again: connection exceptions (class 08, and a connection that broke
// without a SQLSTATE), the server shutting down or starting (57P01,
// 57P02, 57P03), serialization failures and deadlocks (40001, 40P01).
func retriable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true // the connection broke: no SQLSTATE
	}
	switch pgErr.Code {
	case "57P01", "57P02", "57P03", "40001", "40P01":
		return true
	}
	return strings.HasPrefix(pgErr.Code, "08")
}

// switchoverUnderLoad switches the Database's primary over while 100
// clients write through the pooler in transactions: the operator pauses
// PgBouncer before the primary stops and resumes it once -rw is the new
// primary, so no client sees an error a retry would not cure (none at
// all, when the pause held the queries), and every acknowledged row is on
// the new primary.
func switchoverUnderLoad(ctx context.Context, t *testing.T, f *failoverCluster, connect func(context.Context) (*pgx.Conn, error), p *dbv1.Pooler) {
	t.Helper()
	old := f.primary()
	target := f.standbyOf(old)
	const writers = 100
	var (
		stop       atomic.Bool
		wg         sync.WaitGroup
		acked      atomic.Int64
		mu         sync.Mutex
		retried    []error
		notRetried []error
	)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *pgx.Conn
			defer func() {
				if c != nil {
					c.Close(context.Background())
				}
			}()
			for n := 0; !stop.Load(); {
				if c == nil || c.IsClosed() {
					var err error
					if c, err = connect(ctx); err != nil {
						c = nil
						mu.Lock()
						retried = append(retried, err)
						mu.Unlock()
						time.Sleep(100 * time.Millisecond)
						continue
					}
				}
				err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "INSERT INTO pooled (client, n) VALUES ($1, $2)", 1000+i, n)
					return err
				})
				mu.Lock()
				switch {
				case err == nil:
					acked.Add(1)
					n++
				case retriable(err):
					retried = append(retried, err)
				default:
					notRetried = append(notRetried, err)
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	before := acked.Load()
	start := time.Now()
	f.updateDatabase(func(db *dbv1.Database) { db.Spec.Failover.SwitchoverTo = target })
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		var cur dbv1.Database
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.name}, &cur); err != nil {
			return false, nil
		}
		return cur.Status.CurrentPrimary == target, nil
	}), "the switchover to %s never finished", target)
	switched := time.Since(start)
	var cur dbv1.Pooler
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKeyFromObject(p), &cur)
		return err == nil && cur.Status.Paused == nil, nil
	}), "the pooler stays paused: %+v", cur.Status.Paused)
	resumed := time.Since(start)
	time.Sleep(3 * time.Second)
	afterResume := acked.Load()
	stop.Store(true)
	wg.Wait()

	assert.Empty(t, notRetried, "errors a retry would not cure (%d)", len(notRetried))
	assert.Greater(t, afterResume, before, "writes went on after the switchover")
	reasons := eventReasonsOf(ctx, t, f.cs, f.ns, p.Name)
	assert.Contains(t, reasons, "Paused", "the pause is reported")
	assert.Contains(t, reasons, "Resumed")

	// An application retries what the pooler's clients may retry.
	var check *pgx.Conn
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		check, err = connect(ctx)
		if err != nil && !retriable(err) {
			return false, err
		}
		return err == nil, nil
	}))
	defer check.Close(ctx)
	var rows int64
	require.NoError(t, check.QueryRow(ctx, "SELECT count(*) FROM pooled WHERE client >= 1000").Scan(&rows))
	// A commit whose acknowledgement a broken connection lost is there
	// too: more rows than acknowledgements is not a loss.
	assert.GreaterOrEqual(t, rows, acked.Load(), "every acknowledged write is on the new primary")
	logf(t, "switchover through the pooler under load (%d writers): primary %s -> %s in %.1f s, pooler resumed %.1f s after the request; %d writes acknowledged, %d retriable errors, %d others",
		writers, old, target, switched.Seconds(), resumed.Seconds(), acked.Load(), len(retried), len(notRetried))
}

// eventReasonsOf lists the reasons of the Events about an object.
func eventReasonsOf(ctx context.Context, t testing.TB, cs clientset, ns, name string) []string {
	t.Helper()
	evs, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var out []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name {
			out = append(out, e.Reason)
		}
	}
	return out
}

// waitPoolerReady waits for the Pooler's Ready condition.
func waitPoolerReady(ctx context.Context, t testing.TB, c client.Client, p *dbv1.Pooler) {
	t.Helper()
	var cur dbv1.Pooler
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(cur.Status.Conditions, pooler.ConditionReady), nil
	})
	require.NoError(t, err, "Pooler %s not Ready: %+v", p.Name, cur.Status)
}

func secretData(ctx context.Context, t testing.TB, cs clientset, ns, name string) map[string][]byte {
	t.Helper()
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	return s.Data
}

// poolerDialer connects as the connection Secret says, to the Service's
// address, verifying the pooler's certificate for the Secret's host
// name. pgx's exec mode: PgBouncer 1.18 in transaction mode does not
// carry named prepared statements between transactions.
func poolerDialer(t testing.TB, conn map[string][]byte, address string) func(context.Context) (*pgx.Conn, error) {
	t.Helper()
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(conn[pooler.CAKey]), "the connection Secret's ca.crt")
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%s dbname=%s user=%s connect_timeout=60 sslmode=require",
		address, conn["port"], conn["dbname"], conn["user"]))
	require.NoError(t, err)
	cfg.Password = string(conn["password"])
	cfg.TLSConfig = &tls.Config{RootCAs: roots, ServerName: string(conn["host"]), MinVersion: tls.VersionTLS12}
	cfg.Fallbacks = nil
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	return func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) }
}

// mostServerConnections is the most client connections the server held
// until done, asked through the pooler every 100 ms.
func mostServerConnections(ctx context.Context, t testing.TB, connect func(context.Context) (*pgx.Conn, error), done <-chan struct{}) int {
	t.Helper()
	c, err := connect(ctx)
	require.NoError(t, err)
	defer c.Close(ctx)
	most := 0
	for {
		var n int
		require.NoError(t, c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").Scan(&n))
		most = max(most, n)
		select {
		case <-done:
			return most
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pooledTransactionsAreCounted: every PgBouncer pod's metrics container
// answers (pgbouncer_up 1), and the pods' counters of dbname's pooled
// transactions add up to at least want.
func pooledTransactionsAreCounted(t *testing.T, f *failoverCluster, p *dbv1.Pooler, dbname string, want int) {
	pods, err := f.cs.CoreV1().Pods(f.ns).List(f.ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(map[string]string{
		pooler.LabelPooler: p.Name, "stable.imaginedata.co/component": "pgbouncer",
	}).String()})
	require.NoError(t, err)
	require.Len(t, pods.Items, int(*p.Spec.Instances))
	var total float64
	for _, pod := range pods.Items {
		up, ok := f.scrapePortValue(t, pod.Name, pgbouncer.MetricsPort, "pgbouncer_up")
		require.True(t, ok, "%s serves no pgbouncer_up", pod.Name)
		assert.Equal(t, 1.0, up, "%s: PgBouncer's console answered its metrics container", pod.Name)
		n, _ := f.scrapePortValue(t, pod.Name, pgbouncer.MetricsPort, "pgbouncer_stats_sql_transactions_pooled_total", "database", dbname)
		total += n
	}
	assert.GreaterOrEqual(t, total, float64(want), "the PgBouncer pods' pooled transactions of database %s", dbname)
	logf(t, "PgBouncer's metrics on the node: %.0f transactions pooled by %d pods", total, len(pods.Items))
}
