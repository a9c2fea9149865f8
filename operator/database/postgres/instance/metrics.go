package instance

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"
)

// The metrics collector: PostgreSQL's own metrics for Prometheus, served
// by the agent on a port of its own (MetricsPort), in plain HTTP, for any
// scraper (the channel's port takes the operator's client certificate
// only). It runs inside `deckhand-instance serve` when failover is on, and
// alone (`deckhand-instance metrics`) when it is off. Every scrape asks
// the server afresh over its unix socket, as the superuser with its
// privileges dropped to pg_monitor's (SET ROLE at the connection's
// start); a query that fails gives deckhand_pg_collector_error{query}=1
// and the other queries' metrics still. The user's queries
// (customqueries.go) run as the app role in a read-only transaction.
// docs/guides/database-monitoring.md lists every metric.

// MetricNames are the names of the collector's own metrics (the user's
// queries add theirs, under UserMetricsPrefix): the chart's alerts and
// dashboard use no other, and docs/guides/database-monitoring.md lists
// each.
var MetricNames = []string{
	"deckhand_pg_up", "deckhand_pg_role", "deckhand_pg_in_recovery", "deckhand_pg_server_version_num",
	"deckhand_pg_scrape_duration_seconds", "deckhand_pg_collector_error",
	"deckhand_pg_connections", "deckhand_pg_max_connections", "deckhand_pg_superuser_reserved_connections",
	"deckhand_pg_wal_bytes_total",
	"deckhand_pg_replication_lag_bytes", "deckhand_pg_replication_flush_lag_bytes", "deckhand_pg_replication_sent_lag_bytes",
	"deckhand_pg_replication_lag_seconds", "deckhand_pg_replication_write_lag_seconds", "deckhand_pg_replication_flush_lag_seconds",
	"deckhand_pg_replication_streaming", "deckhand_pg_replication_synchronous", "deckhand_pg_replication_streaming_standbys",
	"deckhand_pg_standby_replay_lag_bytes", "deckhand_pg_standby_replay_lag_seconds", "deckhand_pg_standby_streaming",
	"deckhand_pg_standby_last_message_age_seconds",
	"deckhand_pg_database_xid_age", "deckhand_pg_database_mxid_age", "deckhand_pg_database_size_bytes",
	"deckhand_pg_database_dead_tuples", "deckhand_pg_database_live_tuples",
	"deckhand_pg_table_dead_tuples", "deckhand_pg_table_last_vacuum_timestamp_seconds",
	"deckhand_pg_checkpoints_timed_total", "deckhand_pg_checkpoints_requested_total",
	"deckhand_pg_checkpoint_write_seconds_total", "deckhand_pg_checkpoint_sync_seconds_total",
	"deckhand_pg_archiver_enabled", "deckhand_pg_archiver_archived_total", "deckhand_pg_archiver_failed_total",
	"deckhand_pg_archiver_seconds_since_last_archived", "deckhand_pg_archiver_seconds_since_last_failed",
	"deckhand_pg_user_queries_load_error", "deckhand_pg_user_query_error",
}

// MetricsPort is the port the collector serves /metrics on in a pod.
const MetricsPort = 9187

// MetricsPrefix starts the name of every metric the collector serves.
const MetricsPrefix = "deckhand_pg_"

// DefaultScrapeTimeout bounds one scrape: every query together.
const DefaultScrapeTimeout = 10 * time.Second

// DefaultQueryTimeout is each query's statement_timeout.
const DefaultQueryTimeout = 5 * time.Second

// maxDatabases bounds how many databases one scrape connects to for their
// tables' dead tuples (the rest are left out, and said so).
const maxDatabases = 20

// maxTables bounds the tables per database with a series of their own
// (the most dead rows first): a database of thousands of tables must not
// make thousands of series at every scrape.
const maxTables = 10

// MetricsConfig is what the collector reads.
type MetricsConfig struct {
	// SocketDir and Port reach the server over its unix socket as User
	// (pg_hba.conf's "local all all trust").
	SocketDir string
	Port      int
	User      string
	// AppUser and AppDatabase run the user's queries; "" AppUser: none run.
	AppUser, AppDatabase string
	// QueriesFile holds the user's queries (CloudNativePG's custom-queries
	// format); "": none. A file that does not exist is no queries.
	QueriesFile string
	// ScrapeTimeout bounds a scrape, QueryTimeout each query (0: the
	// defaults).
	ScrapeTimeout, QueryTimeout time.Duration
	Log                         *slog.Logger
}

// Collector serves one instance's metrics.
type Collector struct {
	cfg MetricsConfig
	// monitor is the pg_monitor connection to the postgres database.
	monitor *sql.DB
	// app runs the user's queries (nil without AppUser).
	app *sql.DB
	// one scrape at a time: two scrapers would double the server's work.
	scrape sync.Mutex
}

// NewCollector is a collector for cfg; it connects at the first scrape.
func NewCollector(cfg MetricsConfig) (*Collector, error) {
	if cfg.SocketDir == "" || cfg.Port == 0 {
		return nil, errors.New("metrics: the socket directory and the port are required")
	}
	if cfg.User == "" {
		cfg.User = "postgres"
	}
	if cfg.ScrapeTimeout == 0 {
		cfg.ScrapeTimeout = DefaultScrapeTimeout
	}
	if cfg.QueryTimeout == 0 {
		cfg.QueryTimeout = DefaultQueryTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	monitor, err := openDB(monitorDSN(cfg, "postgres"), 2)
	if err != nil {
		return nil, err
	}
	c := &Collector{cfg: cfg, monitor: monitor}
	if cfg.AppUser != "" {
		db := cfg.AppDatabase
		if db == "" {
			db = cfg.AppUser
		}
		c.app, err = openDB(fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable connect_timeout=2 application_name=deckhand-metrics-user options=%s",
			quoteConninfo(cfg.SocketDir), cfg.Port, quoteConninfo(cfg.AppUser), quoteConninfo(db),
			quoteConninfo(fmt.Sprintf("-c statement_timeout=%d -c default_transaction_read_only=on", cfg.QueryTimeout.Milliseconds()))), 1)
		if err != nil {
			monitor.Close()
			return nil, err
		}
	}
	return c, nil
}

func openDB(dsn string, conns int) (*sql.DB, error) {
	connector, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(2 * time.Minute)
	return db, nil
}

// monitorDSN connects as the local superuser and drops to pg_monitor's
// privileges for the whole session (role is set at the start, so a
// pooled connection never runs as the superuser).
func monitorDSN(cfg MetricsConfig, dbname string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable connect_timeout=2 application_name=deckhand-metrics options=%s",
		quoteConninfo(cfg.SocketDir), cfg.Port, quoteConninfo(cfg.User), quoteConninfo(dbname),
		quoteConninfo(fmt.Sprintf("-c role=pg_monitor -c statement_timeout=%d -c default_transaction_read_only=on", cfg.QueryTimeout.Milliseconds())))
}

// Close releases the collector's connections.
func (c *Collector) Close() error {
	if c.app != nil {
		c.app.Close()
	}
	return c.monitor.Close()
}

// Handler serves GET /metrics.
func (c *Collector) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		c.Collect(r.Context(), &buf)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(buf.Bytes())
	})
	return mux
}

// ServeMetrics serves the collector's Handler on l in plain HTTP until ctx
// ends.
func (c *Collector) ServeMetrics(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           c.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      c.cfg.ScrapeTimeout + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(c.cfg.Log.Handler(), slog.LevelWarn),
	}
	go shutdownWhenDone(ctx, srv)
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Collect writes one scrape's metrics to w in Prometheus' text format.
func (c *Collector) Collect(ctx context.Context, w io.Writer) {
	c.scrape.Lock()
	defer c.scrape.Unlock()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ScrapeTimeout)
	defer cancel()
	m := newMetricSet()
	c.collect(ctx, m)
	m.add("scrape_duration_seconds", gauge, "How long the last scrape took.", nil, time.Since(start).Seconds())
	m.write(w)
}

// builtinQuery is one of the collector's own queries: it fills m from db.
type builtinQuery struct {
	name string
	// primary / standby: run only on a primary, only on a standby.
	primary, standby bool
	run              func(ctx context.Context, c *Collector, m *metricSet, v serverFacts) error
}

// serverFacts are read first: whether the server answers, its role and
// version choose the queries.
type serverFacts struct {
	inRecovery bool
	versionNum int
}

func (c *Collector) collect(ctx context.Context, m *metricSet) {
	var v serverFacts
	err := c.monitor.QueryRowContext(ctx, `SELECT pg_catalog.pg_is_in_recovery(), pg_catalog.current_setting('server_version_num')::int`).Scan(&v.inRecovery, &v.versionNum)
	if err != nil {
		m.add("up", gauge, "1 when the server answered the collector over its socket, 0 when it did not.", nil, 0)
		c.cfg.Log.Debug("metrics: the server did not answer", "error", err.Error())
		return
	}
	m.add("up", gauge, "1 when the server answered the collector over its socket, 0 when it did not.", nil, 1)
	primary, standby := 1.0, 0.0
	if v.inRecovery {
		primary, standby = 0, 1
	}
	const roleHelp = "The server's role: 1 for the role it has (primary or standby), 0 for the other."
	m.add("role", gauge, roleHelp, labels{"role", "primary"}, primary)
	m.add("role", gauge, roleHelp, labels{"role", "standby"}, standby)
	m.add("in_recovery", gauge, "pg_is_in_recovery(): 1 on a standby.", nil, standby)
	m.add("server_version_num", gauge, "server_version_num, e.g. 150004.", nil, float64(v.versionNum))
	for _, q := range builtinQueries {
		if (q.primary && v.inRecovery) || (q.standby && !v.inRecovery) {
			continue
		}
		failed := 0.0
		if err := q.run(ctx, c, m, v); err != nil {
			failed = 1
			c.cfg.Log.Warn("metrics: a query failed", "query", q.name, "error", err.Error())
		}
		m.add("collector_error", gauge, "1 when the collector's query failed at the last scrape (its metrics are missing), 0 when it ran.", labels{"query", q.name}, failed)
	}
	c.collectUser(ctx, m, v)
}

var builtinQueries = []builtinQuery{
	{name: "connections", run: queryConnections},
	{name: "wal", run: queryWAL},
	{name: "replication", primary: true, run: queryReplication},
	{name: "standby", standby: true, run: queryStandby},
	{name: "databases", run: queryDatabases},
	{name: "dead_tuples", run: queryDeadTuples},
	{name: "checkpoints", run: queryCheckpoints},
	{name: "archiver", run: queryArchiver},
}

func queryConnections(ctx context.Context, c *Collector, m *metricSet, _ serverFacts) error {
	db := c.monitor
	var maxConns, reserved float64
	if err := db.QueryRowContext(ctx, `SELECT current_setting('max_connections')::float8, current_setting('superuser_reserved_connections')::float8`).Scan(&maxConns, &reserved); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, `
SELECT s.state, coalesce(a.n, 0)
FROM unnest(ARRAY['active','idle','idle in transaction','idle in transaction (aborted)','fastpath function call','disabled']) AS s(state)
LEFT JOIN (SELECT coalesce(state, 'disabled') AS state, count(*)::float8 AS n
           FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend' GROUP BY 1) a USING (state)`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var state string
		var n float64
		if err := rows.Scan(&state, &n); err != nil {
			return err
		}
		m.add("connections", gauge, "Client connections (pg_stat_activity's client backends) by state.", labels{"state", state}, n)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	m.add("max_connections", gauge, "The server's max_connections.", nil, maxConns)
	m.add("superuser_reserved_connections", gauge, "The server's superuser_reserved_connections: of max_connections, kept for superusers.", nil, reserved)
	return nil
}

func queryWAL(ctx context.Context, c *Collector, m *metricSet, v serverFacts) error {
	db := c.monitor
	// A primary's write position, a standby's replay position: the bytes
	// of WAL the server has written (or applied) since the cluster began.
	var pos float64
	q := `SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), '0/0')::float8`
	if v.inRecovery {
		q = `SELECT coalesce(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_last_wal_replay_lsn(), '0/0'), 0)::float8`
	}
	if err := db.QueryRowContext(ctx, q).Scan(&pos); err != nil {
		return err
	}
	m.add("wal_bytes_total", counter, "WAL position in bytes: a primary's pg_current_wal_lsn(), a standby's pg_last_wal_replay_lsn(). Its rate is the WAL generated per second.", nil, pos)
	return nil
}

func queryReplication(ctx context.Context, c *Collector, m *metricSet, _ serverFacts) error {
	db := c.monitor
	rows, err := db.QueryContext(ctx, `
SELECT coalesce(application_name, ''), coalesce(state, ''), coalesce(sync_state, ''),
  coalesce(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), sent_lsn), 0)::float8,
  coalesce(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), flush_lsn), 0)::float8,
  coalesce(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), replay_lsn), 0)::float8,
  coalesce(extract(epoch FROM write_lag), 0)::float8,
  coalesce(extract(epoch FROM flush_lag), 0)::float8,
  coalesce(extract(epoch FROM replay_lag), 0)::float8
FROM pg_catalog.pg_stat_replication ORDER BY 1`)
	if err != nil {
		return err
	}
	defer rows.Close()
	streaming := 0.0
	for rows.Next() {
		var app, state, syncState string
		var sent, flush, replay, writeLag, flushLag, replayLag float64
		if err := rows.Scan(&app, &state, &syncState, &sent, &flush, &replay, &writeLag, &flushLag, &replayLag); err != nil {
			return err
		}
		l := labels{"application_name", app}
		m.add("replication_lag_bytes", gauge, "On a primary, per standby (pg_stat_replication; application_name is its pod): how far the standby's replayed WAL is behind the primary's, in bytes.", l, replay)
		m.add("replication_flush_lag_bytes", gauge, "On a primary, per standby: how far the standby's flushed WAL is behind, in bytes.", l, flush)
		m.add("replication_sent_lag_bytes", gauge, "On a primary, per standby: WAL not yet sent to it, in bytes.", l, sent)
		m.add("replication_lag_seconds", gauge, "On a primary, per standby: pg_stat_replication.replay_lag, the time between a commit on the primary and its replay on the standby (0 when idle).", l, replayLag)
		m.add("replication_write_lag_seconds", gauge, "On a primary, per standby: pg_stat_replication.write_lag.", l, writeLag)
		m.add("replication_flush_lag_seconds", gauge, "On a primary, per standby: pg_stat_replication.flush_lag.", l, flushLag)
		s := 0.0
		if state == "streaming" {
			s, streaming = 1, streaming+1
		}
		m.add("replication_streaming", gauge, "On a primary, per standby connected: 1 when its state is streaming (0: catching up or starting).", l, s)
		sync := 0.0
		if syncState == "sync" || syncState == "quorum" {
			sync = 1
		}
		m.add("replication_synchronous", gauge, "On a primary, per standby: 1 when it is a synchronous (or quorum) standby.", l, sync)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	m.add("replication_streaming_standbys", gauge, "On a primary: how many standbys stream from it now.", nil, streaming)
	return nil
}

func queryStandby(ctx context.Context, c *Collector, m *metricSet, _ serverFacts) error {
	db := c.monitor
	var receiveLag, replayLagSeconds float64
	var streaming bool
	var msgAge sql.NullFloat64
	err := db.QueryRowContext(ctx, `
SELECT coalesce(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_last_wal_receive_lsn(), pg_catalog.pg_last_wal_replay_lsn()), 0)::float8,
  CASE WHEN pg_catalog.pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_catalog.pg_last_wal_replay_lsn() THEN 0
       ELSE coalesce(extract(epoch FROM now() - pg_catalog.pg_last_xact_replay_timestamp()), 0) END::float8,
  coalesce((SELECT status = 'streaming' FROM pg_catalog.pg_stat_wal_receiver), false),
  (SELECT extract(epoch FROM now() - last_msg_receipt_time)::float8 FROM pg_catalog.pg_stat_wal_receiver)`).Scan(&receiveLag, &replayLagSeconds, &streaming, &msgAge)
	if err != nil {
		return err
	}
	m.add("standby_replay_lag_bytes", gauge, "On a standby: WAL received but not yet replayed, in bytes.", nil, receiveLag)
	m.add("standby_replay_lag_seconds", gauge, "On a standby: now minus the commit time of the last transaction replayed, while WAL received waits to be replayed; 0 when everything received is replayed.", nil, replayLagSeconds)
	s := 0.0
	if streaming {
		s = 1
	}
	m.add("standby_streaming", gauge, "On a standby: 1 when its WAL receiver streams from a primary (pg_stat_wal_receiver.status = streaming).", nil, s)
	if msgAge.Valid {
		m.add("standby_last_message_age_seconds", gauge, "On a standby with a WAL receiver: seconds since the last message from its primary.", nil, msgAge.Float64)
	}
	return nil
}

func queryDatabases(ctx context.Context, c *Collector, m *metricSet, _ serverFacts) error {
	db := c.monitor
	rows, err := db.QueryContext(ctx, `
SELECT datname, pg_catalog.age(datfrozenxid)::float8, pg_catalog.mxid_age(datminmxid)::float8,
  CASE WHEN datallowconn THEN pg_catalog.pg_database_size(oid)::float8 END
FROM pg_catalog.pg_database WHERE NOT datistemplate ORDER BY datname`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var xid, mxid float64
		var size sql.NullFloat64
		if err := rows.Scan(&name, &xid, &mxid, &size); err != nil {
			return err
		}
		l := labels{"datname", name}
		m.add("database_xid_age", gauge, "Per database: age(datfrozenxid), transactions since its oldest unfrozen transaction ID. At about 2^31 (2147483648) the server stops taking writes to prevent wraparound.", l, xid)
		m.add("database_mxid_age", gauge, "Per database: mxid_age(datminmxid), the multixact counterpart of xid_age.", l, mxid)
		if size.Valid {
			m.add("database_size_bytes", gauge, "Per database: pg_database_size().", l, size.Float64)
		}
	}
	return rows.Err()
}

// queryDeadTuples connects to each database (pg_stat_user_tables is per
// database), at most maxDatabases of them.
func queryDeadTuples(ctx context.Context, c *Collector, m *metricSet, _ serverFacts) error {
	db := c.monitor
	var names []string
	rows, err := db.QueryContext(ctx, `SELECT datname FROM pg_catalog.pg_database WHERE datallowconn AND NOT datistemplate ORDER BY datname`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(names) > maxDatabases {
		names = names[:maxDatabases]
	}
	var errs []error
	for _, name := range names {
		if err := deadTuplesOf(ctx, c.cfg, name, m); err != nil {
			errs = append(errs, fmt.Errorf("database %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// deadTuplesOf reads one database's tables on a connection of its own;
// the DSN is the collector's with another dbname.
func deadTuplesOf(ctx context.Context, cfg MetricsConfig, name string, m *metricSet) error {
	connector, err := pq.NewConnector(monitorDSN(cfg, name))
	if err != nil {
		return err
	}
	conn := sql.OpenDB(connector)
	defer conn.Close()
	var dead, live float64
	if err := conn.QueryRowContext(ctx, `SELECT coalesce(sum(n_dead_tup), 0)::float8, coalesce(sum(n_live_tup), 0)::float8 FROM pg_catalog.pg_stat_user_tables`).Scan(&dead, &live); err != nil {
		return err
	}
	l := labels{"datname", name}
	m.add("database_dead_tuples", gauge, "Per database: dead rows in its tables (the sum of pg_stat_user_tables.n_dead_tup), which vacuum has yet to remove.", l, dead)
	m.add("database_live_tuples", gauge, "Per database: live rows in its tables (the sum of pg_stat_user_tables.n_live_tup, an estimate).", l, live)
	return worstTablesOf(ctx, conn, name, m)
}

// worstTablesOf adds the dead rows and the last vacuum of the maxTables
// tables of one database with the most dead rows (none with none).
func worstTablesOf(ctx context.Context, conn *sql.DB, name string, m *metricSet) error {
	rows, err := conn.QueryContext(ctx, `SELECT schemaname, relname, n_dead_tup::float8,
  coalesce(extract(epoch FROM greatest(last_vacuum, last_autovacuum)), 0)::float8
FROM pg_catalog.pg_stat_user_tables WHERE n_dead_tup > 0
ORDER BY n_dead_tup DESC, schemaname, relname LIMIT $1`, maxTables)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var schema, table string
		var dead, vacuumed float64
		if err := rows.Scan(&schema, &table, &dead, &vacuumed); err != nil {
			return err
		}
		l := labels{"datname", name, "schemaname", schema, "relname", table}
		m.add("table_dead_tuples", gauge, fmt.Sprintf("Per table, for the %d tables of each database with the most dead rows: its dead rows (pg_stat_user_tables.n_dead_tup).", maxTables), l, dead)
		m.add("table_last_vacuum_timestamp_seconds", gauge, "Per table, for the same tables: when it was last vacuumed, by hand or by autovacuum (Unix time; 0: never since the statistics were reset).", l, vacuumed)
	}
	return rows.Err()
}

func queryCheckpoints(ctx context.Context, c *Collector, m *metricSet, v serverFacts) error {
	db := c.monitor
	// PostgreSQL 17 moved the checkpointer's counters out of
	// pg_stat_bgwriter into pg_stat_checkpointer.
	q := `SELECT checkpoints_timed::float8, checkpoints_req::float8, checkpoint_write_time::float8 / 1000, checkpoint_sync_time::float8 / 1000 FROM pg_catalog.pg_stat_bgwriter`
	if v.versionNum >= 170000 {
		q = `SELECT num_timed::float8, num_requested::float8, write_time::float8 / 1000, sync_time::float8 / 1000 FROM pg_catalog.pg_stat_checkpointer`
	}
	var timed, requested, write, syncTime float64
	if err := db.QueryRowContext(ctx, q).Scan(&timed, &requested, &write, &syncTime); err != nil {
		return err
	}
	m.add("checkpoints_timed_total", counter, "Checkpoints started by checkpoint_timeout (pg_stat_bgwriter.checkpoints_timed; pg_stat_checkpointer.num_timed on 17).", nil, timed)
	m.add("checkpoints_requested_total", counter, "Checkpoints requested: by max_wal_size, CHECKPOINT, a backup (pg_stat_bgwriter.checkpoints_req; pg_stat_checkpointer.num_requested on 17).", nil, requested)
	m.add("checkpoint_write_seconds_total", counter, "Time checkpoints spent writing files.", nil, write)
	m.add("checkpoint_sync_seconds_total", counter, "Time checkpoints spent syncing files.", nil, syncTime)
	return nil
}

func queryArchiver(ctx context.Context, c *Collector, m *metricSet, _ serverFacts) error {
	db := c.monitor
	var archived, failed float64
	var sinceArchived, sinceFailed sql.NullFloat64
	var mode string
	err := db.QueryRowContext(ctx, `
SELECT archived_count::float8, failed_count::float8,
  extract(epoch FROM now() - last_archived_time)::float8,
  extract(epoch FROM now() - last_failed_time)::float8,
  current_setting('archive_mode')
FROM pg_catalog.pg_stat_archiver`).Scan(&archived, &failed, &sinceArchived, &sinceFailed, &mode)
	if err != nil {
		return err
	}
	on := 0.0
	if mode == "on" || mode == "always" {
		on = 1
	}
	m.add("archiver_enabled", gauge, "1 when archive_mode is on (or always).", nil, on)
	m.add("archiver_archived_total", counter, "WAL files archived (pg_stat_archiver.archived_count).", nil, archived)
	m.add("archiver_failed_total", counter, "Failed attempts to archive a WAL file (pg_stat_archiver.failed_count).", nil, failed)
	if sinceArchived.Valid {
		m.add("archiver_seconds_since_last_archived", gauge, "Seconds since a WAL file was last archived (absent until one is).", nil, sinceArchived.Float64)
	}
	if sinceFailed.Valid {
		m.add("archiver_seconds_since_last_failed", gauge, "Seconds since an archiving attempt last failed (absent until one does).", nil, sinceFailed.Float64)
	}
	return nil
}

// The exposition: Prometheus' text format 0.0.4.

type metricType string

const (
	gauge   metricType = "gauge"
	counter metricType = "counter"
)

// labels are name, value pairs.
type labels []string

type sample struct {
	labels labels
	value  float64
}

type family struct {
	name, help string
	typ        metricType
	samples    []sample
}

// metricSet keeps families in the order first added; a family added again
// with another type or help keeps the first (a user's query cannot turn
// a built-in metric into something else: it fails instead).
type metricSet struct {
	order []string
	by    map[string]*family
}

func newMetricSet() *metricSet { return &metricSet{by: map[string]*family{}} }

// add adds a sample to the family MetricsPrefix+name.
func (m *metricSet) add(name string, typ metricType, help string, l labels, v float64) {
	m.addFull(MetricsPrefix+name, typ, help, l, v)
}

func (m *metricSet) addFull(name string, typ metricType, help string, l labels, v float64) {
	f := m.by[name]
	if f == nil {
		f = &family{name: name, help: help, typ: typ}
		m.by[name] = f
		m.order = append(m.order, name)
	}
	f.samples = append(f.samples, sample{labels: l, value: v})
}

func (m *metricSet) has(name string) bool { _, ok := m.by[name]; return ok }

func (m *metricSet) write(w io.Writer) {
	var b strings.Builder
	for _, name := range m.order {
		f := m.by[name]
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.typ)
		seen := map[string]bool{}
		for _, s := range f.samples {
			ls := formatLabels(s.labels)
			if seen[ls] {
				// The same series twice (a user's query returning a
				// label set twice): the first is kept, as a scrape
				// with duplicates would be refused whole.
				continue
			}
			seen[ls] = true
			fmt.Fprintf(&b, "%s%s %s\n", f.name, ls, formatValue(s.value))
		}
	}
	_, _ = io.WriteString(w, b.String())
}

func formatLabels(l labels) string {
	if len(l) == 0 {
		return ""
	}
	type pair struct{ k, v string }
	var pairs []pair
	for i := 0; i+1 < len(l); i += 2 {
		pairs = append(pairs, pair{l[i], l[i+1]})
	}
	sort.SliceStable(pairs, func(i, j int) bool { return pairs[i].k < pairs[j].k })
	var b strings.Builder
	b.WriteByte('{')
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.k)
		b.WriteString(`="`)
		b.WriteString(strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(p.v))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
