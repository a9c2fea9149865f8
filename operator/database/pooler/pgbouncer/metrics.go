package pgbouncer

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// MetricsPort is where a PgBouncer pod's metrics sidecar serves
// /metrics (plain HTTP, as the Database's servers serve theirs).
const MetricsPort = 9127

// Collector reads PgBouncer's admin console at each scrape (SHOW POOLS,
// SHOW STATS, SHOW LISTS) and turns it into Prometheus metrics. The names
// are those of the Prometheus community's pgbouncer_exporter, which
// dashboards and alerts for PgBouncer already use.
type Collector struct {
	// Console is the admin console's connection: the database
	// "pgbouncer", as a user in admin_users or stats_users.
	Console *pgx.ConnConfig
	// Timeout bounds one scrape (0: 5 s).
	Timeout time.Duration
	// Log says why a scrape failed (nil: slog's default).
	Log *slog.Logger
}

// column is one numeric column of a SHOW command, as a metric.
type column struct {
	name  string // the column
	scale float64
	desc  *prometheus.Desc
	kind  prometheus.ValueType
}

func newColumn(name, metric, help string, kind prometheus.ValueType, scale float64, labels ...string) column {
	return column{name: name, scale: scale, kind: kind, desc: prometheus.NewDesc("pgbouncer_"+metric, help, labels, nil)}
}

const microseconds = 1e-6

var (
	upDesc = prometheus.NewDesc("pgbouncer_up", "1 if PgBouncer's admin console answered the last scrape.", nil, nil)

	poolColumns = []column{
		newColumn("cl_active", "pools_client_active_connections", "Client connections linked to a server connection or idle with no queries waiting.", prometheus.GaugeValue, 1, "database", "user"),
		newColumn("cl_waiting", "pools_client_waiting_connections", "Client connections that sent queries and wait for a server connection.", prometheus.GaugeValue, 1, "database", "user"),
		newColumn("sv_active", "pools_server_active_connections", "Server connections linked to a client.", prometheus.GaugeValue, 1, "database", "user"),
		newColumn("sv_idle", "pools_server_idle_connections", "Server connections unused and ready for a client.", prometheus.GaugeValue, 1, "database", "user"),
		newColumn("sv_used", "pools_server_used_connections", "Server connections idle longer than server_check_delay, to be checked before use.", prometheus.GaugeValue, 1, "database", "user"),
		newColumn("sv_tested", "pools_server_testing_connections", "Server connections running server_reset_query or server_check_query.", prometheus.GaugeValue, 1, "database", "user"),
		newColumn("sv_login", "pools_server_login_connections", "Server connections logging in.", prometheus.GaugeValue, 1, "database", "user"),
	}
	// maxwait and maxwait_us together are the oldest waiting client's wait.
	maxWaitDesc = prometheus.NewDesc("pgbouncer_pools_client_maxwait_seconds",
		"How long the oldest waiting client has waited for a server connection.", []string{"database", "user"}, nil)

	statsColumns = []column{
		newColumn("total_xact_count", "stats_sql_transactions_pooled_total", "SQL transactions pooled.", prometheus.CounterValue, 1, "database"),
		newColumn("total_query_count", "stats_queries_pooled_total", "SQL queries pooled.", prometheus.CounterValue, 1, "database"),
		newColumn("total_received", "stats_received_bytes_total", "Bytes received from clients.", prometheus.CounterValue, 1, "database"),
		newColumn("total_sent", "stats_sent_bytes_total", "Bytes sent to clients.", prometheus.CounterValue, 1, "database"),
		newColumn("total_xact_time", "stats_server_in_transaction_seconds_total", "Time spent in transactions, or idle in transaction, on a server connection.", prometheus.CounterValue, microseconds, "database"),
		newColumn("total_query_time", "stats_queries_duration_seconds_total", "Time spent running queries on a server connection.", prometheus.CounterValue, microseconds, "database"),
		newColumn("total_wait_time", "stats_client_wait_seconds_total", "Time clients spent waiting for a server connection.", prometheus.CounterValue, microseconds, "database"),
	}

	listColumns = map[string]*prometheus.Desc{
		"databases":    prometheus.NewDesc("pgbouncer_databases", "Databases PgBouncer knows.", nil, nil),
		"pools":        prometheus.NewDesc("pgbouncer_pools", "Pools (a database and a user).", nil, nil),
		"used_clients": prometheus.NewDesc("pgbouncer_used_clients", "Client connections in use.", nil, nil),
		"used_servers": prometheus.NewDesc("pgbouncer_used_servers", "Server connections in use.", nil, nil),
	}
)

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upDesc
	ch <- maxWaitDesc
	for _, cols := range [][]column{poolColumns, statsColumns} {
		for _, col := range cols {
			ch <- col.desc
		}
	}
	for _, d := range listColumns {
		ch <- d
	}
}

// Collect reads the console once. A console that does not answer gives
// pgbouncer_up 0 and no other metric, and the reason in the log.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := c.collect(ctx, ch)
	up := 1.0
	if err != nil {
		up = 0
		log := c.Log
		if log == nil {
			log = slog.Default()
		}
		log.Warn("PgBouncer's admin console did not answer the scrape", "error", err)
	}
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up)
}

func (c *Collector) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	cfg := c.Console.Copy()
	// The admin console speaks only the simple query protocol.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	// Every row is read before any metric is sent: a failure halfway
	// sends none of a partial scrape.
	var out []prometheus.Metric
	pools, err := show(ctx, conn, "POOLS")
	if err != nil {
		return err
	}
	for _, row := range pools {
		labels := []string{row["database"], row["user"]}
		ms, err := rowMetrics(row, poolColumns, labels)
		if err != nil {
			return fmt.Errorf("SHOW POOLS: %w", err)
		}
		out = append(out, ms...)
		wait, hasWait, err := number(row, "maxwait", 1)
		if err != nil {
			return fmt.Errorf("SHOW POOLS: %w", err)
		}
		waitUS, _, err := number(row, "maxwait_us", microseconds)
		if err != nil {
			return fmt.Errorf("SHOW POOLS: %w", err)
		}
		if hasWait {
			out = append(out, prometheus.MustNewConstMetric(maxWaitDesc, prometheus.GaugeValue, wait+waitUS, labels...))
		}
	}
	stats, err := show(ctx, conn, "STATS")
	if err != nil {
		return err
	}
	for _, row := range stats {
		ms, err := rowMetrics(row, statsColumns, []string{row["database"]})
		if err != nil {
			return fmt.Errorf("SHOW STATS: %w", err)
		}
		out = append(out, ms...)
	}
	lists, err := show(ctx, conn, "LISTS")
	if err != nil {
		return err
	}
	for _, row := range lists {
		d, known := listColumns[row["list"]]
		if !known {
			continue
		}
		v, ok, err := number(row, "items", 1)
		if err != nil {
			return fmt.Errorf("SHOW LISTS: %w", err)
		}
		if ok {
			out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v))
		}
	}
	for _, m := range out {
		ch <- m
	}
	return nil
}

// show runs SHOW what and returns its rows as column name -> text.
func show(ctx context.Context, conn *pgx.Conn, what string) ([]map[string]string, error) {
	rows, err := conn.Query(ctx, "SHOW "+what)
	if err != nil {
		return nil, fmt.Errorf("SHOW %s: %w", what, err)
	}
	defer rows.Close()
	fields := rows.FieldDescriptions()
	var out []map[string]string
	for rows.Next() {
		row := make(map[string]string, len(fields))
		for i, v := range rows.RawValues() {
			row[fields[i].Name] = string(v)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("SHOW %s: %w", what, err)
	}
	return out, nil
}

func rowMetrics(row map[string]string, cols []column, labels []string) ([]prometheus.Metric, error) {
	out := make([]prometheus.Metric, 0, len(cols))
	for _, col := range cols {
		v, ok, err := number(row, col.name, col.scale)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, prometheus.MustNewConstMetric(col.desc, col.kind, v, labels...))
		}
	}
	return out, nil
}

// number is a column's value times scale; false when this PgBouncer
// version has no such column (its metric is left out, not sent as 0).
func number(row map[string]string, name string, scale float64) (float64, bool, error) {
	s, ok := row[name]
	if !ok {
		return 0, false, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false, fmt.Errorf("column %s: %q is not a number", name, s)
	}
	return v * scale, true, nil
}
