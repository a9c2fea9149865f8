package postgres_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// The metrics collector on real servers: a primary whose agent serves the
// channel and, on a port of its own, the metrics (failover on), and its
// streaming standby whose agent runs in metrics-only mode (failover off),
// each scraped over plain HTTP as Prometheus would.

// metricsQueries are the user's queries of the test: one that works, one
// that writes (refused: the transaction is read-only), one malformed (an
// unknown usage) and one for the primary only.
const metricsQueries = `
rows_by_kind:
  query: SELECT CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END AS kind, count(*) AS n FROM rows GROUP BY 1
  metrics:
    - kind:
        usage: LABEL
        description: Parity of the id.
    - n:
        usage: GAUGE
        description: Rows by parity.
writes:
  query: INSERT INTO rows VALUES (1000) RETURNING id
  metrics:
    - id:
        usage: GAUGE
malformed:
  query: SELECT 1 AS one
  metrics:
    - one:
        usage: HISTOGRAMME
on_primary:
  query: SELECT 1 AS one
  primary: true
  metrics:
    - one:
        usage: COUNTER
`

// startCollector runs the agent of ordinal's server on port: in
// metrics-only mode without a channel (ch nil), else serve with the
// metrics port too. It returns the metrics URL.
func startCollector(t *testing.T, h *host, ch *channel, ordinal int, dataVolume, queries string) string {
	t.Helper()
	env := h.serverEnv(postgres.Engine{}.ServerPod(h.cluster), ordinal, dataVolume, "")
	listen := "127.0.0.1:" + pgtest.FreePort(t)
	flags := []string{"--metrics-listen", listen, "--app-user", h.cluster.AppUser, "--app-database", h.cluster.Database, "--queries", queries}
	if ch != nil {
		ch.startAgentFor(t, h, ordinal, env["PGDATA"], env["PGPORT"], flags...)
		return "http://" + listen + "/metrics"
	}
	cmd := h.u.Command(map[string]string{"PATH": h.bin + ":/usr/bin:/bin", "PGPORT": env["PGPORT"]},
		append([]string{pgtest.AgentBinary(t), "metrics"}, flags...))
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		assert.NotContains(t, log.String(), h.appPassword(), "the collector's log")
		assert.NotContains(t, log.String(), h.superPassword(), "the collector's log")
	})
	url := "http://" + listen + "/metrics"
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := http.Get(url)
		assert.NoError(ct, err, "collector log:\n%s", log.String())
	}, 30*time.Second, 100*time.Millisecond)
	return url
}

// scrape is one scrape, parsed as Prometheus parses it.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t require.TestingT, url string) scrape {
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(b))
	require.NoError(t, err, "%s", b)
	return families
}

// value is the sample of family name whose labels include want (name,
// value pairs); ok false when there is none.
func (s scrape) value(name string, want ...string) (float64, bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if got[want[i]] != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func (s scrape) must(t require.TestingT, name string, want ...string) float64 {
	v, ok := s.value(name, want...)
	require.True(t, ok, "no %s%v in the scrape", name, want)
	return v
}

// TestCollectorServesThePrimarysAndTheStandbysMetrics scrapes a primary
// and its streaming standby: up and role; the standby's lag on the
// primary (per standby) and on the standby, both growing while the
// standby's replay is paused; WAL written; connections by state against
// max_connections; XID age and size per database; checkpoints; the
// archiver's counters (archive_mode on, a command that fails once); the
// user's queries (a metric from the good one, an error metric for the one
// that writes and the malformed one, beside every other metric; a
// primary-only query skipped on the standby).
func TestCollectorServesThePrimarysAndTheStandbysMetrics(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	archive := h.u.Dir(t, h.root, "archive")
	h.cluster.Parameters = map[string]string{
		"archive_mode": "on",
		// Fails once (a marker file), then copies: one failure, then
		// every segment archived.
		"archive_command": fmt.Sprintf("if [ ! -e %[1]s/failed-once ]; then touch %[1]s/failed-once; exit 1; fi; cp %%p %[1]s/%%f", archive),
	}
	primary := h.primary("data-0")
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows SELECT generate_series(1, 5); CREATE TABLE churn AS SELECT generate_series(1, 40) AS g; DELETE FROM churn")
	require.NoError(t, err, out)
	standby := h.standby(1, "data-1", primary.Port)
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming")

	queries := filepath.Join(h.root, "queries.yaml")
	require.NoError(t, os.WriteFile(queries, []byte(metricsQueries), 0o644))
	ch := newChannel(t, h, h.cluster.Name+"-0")
	primaryURL := startCollector(t, h, ch, 0, "data-0", queries)
	standbyURL := startCollector(t, h, nil, 1, "data-1", queries)

	// A session of the app idle in a transaction, counted by state.
	app, err := sql.Open("postgres", fmt.Sprintf("host=127.0.0.1 port=%s user=%s password=%s dbname=%s sslmode=disable",
		primary.Port, h.cluster.AppUser, quoteDSN(h.appPassword()), h.cluster.Database))
	require.NoError(t, err)
	t.Cleanup(func() { app.Close() })
	tx, err := app.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	_, err = tx.Exec("SELECT 1")
	require.NoError(t, err)

	// A segment switched out, so the archiver fails once and then archives.
	h.sql(primary.Port, "postgres", "SELECT pg_switch_wal()")
	var p scrape
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p = scrapeMetrics(ct, primaryURL)
		archived, _ := p.value("deckhand_pg_archiver_archived_total")
		assert.GreaterOrEqual(ct, archived, 1.0, "archived")
		failed, _ := p.value("deckhand_pg_archiver_failed_total")
		assert.GreaterOrEqual(ct, failed, 1.0, "failed")
		assert.Equal(ct, 1.0, p.must(ct, "deckhand_pg_replication_streaming", "application_name", "name-of-database-1"))
		dead, _ := p.value("deckhand_pg_database_dead_tuples", "datname", h.cluster.Database)
		assert.GreaterOrEqual(ct, dead, 40.0, "churn's deleted rows")
		churn, _ := p.value("deckhand_pg_table_dead_tuples", "datname", h.cluster.Database, "schemaname", "public", "relname", "churn")
		assert.GreaterOrEqual(ct, churn, 40.0, "churn's deleted rows, by table")
	}, 60*time.Second, 500*time.Millisecond)

	assert.Equal(t, 1.0, p.must(t, "deckhand_pg_up"))
	assert.Equal(t, 1.0, p.must(t, "deckhand_pg_role", "role", "primary"))
	assert.Equal(t, 0.0, p.must(t, "deckhand_pg_role", "role", "standby"))
	assert.Equal(t, 1.0, p.must(t, "deckhand_pg_replication_streaming_standbys"))
	p.must(t, "deckhand_pg_replication_lag_bytes", "application_name", "name-of-database-1")
	p.must(t, "deckhand_pg_replication_lag_seconds", "application_name", "name-of-database-1")
	assert.Greater(t, p.must(t, "deckhand_pg_wal_bytes_total"), 0.0)
	assert.Equal(t, 100.0, p.must(t, "deckhand_pg_max_connections"))
	assert.GreaterOrEqual(t, p.must(t, "deckhand_pg_connections", "state", "idle in transaction"), 1.0)
	p.must(t, "deckhand_pg_connections", "state", "active")
	assert.Equal(t, 1.0, p.must(t, "deckhand_pg_archiver_enabled"))
	p.must(t, "deckhand_pg_archiver_seconds_since_last_archived")
	p.must(t, "deckhand_pg_archiver_seconds_since_last_failed")
	p.must(t, "deckhand_pg_checkpoints_timed_total")
	assert.GreaterOrEqual(t, p.must(t, "deckhand_pg_checkpoints_requested_total"), 1.0, "the standby's clone asked for one")
	xid := p.must(t, "deckhand_pg_database_xid_age", "datname", h.cluster.Database)
	after, err := strconv.ParseFloat(h.sql(primary.Port, "postgres", "SELECT age(datfrozenxid) FROM pg_database WHERE datname = '"+h.cluster.Database+"'"), 64)
	require.NoError(t, err)
	assert.Greater(t, xid, 0.0)
	assert.LessOrEqual(t, xid, after)
	assert.Greater(t, p.must(t, "deckhand_pg_database_size_bytes", "datname", h.cluster.Database), 1e6)
	assert.GreaterOrEqual(t, p.must(t, "deckhand_pg_database_live_tuples", "datname", h.cluster.Database), 5.0)
	for _, q := range []string{"connections", "wal", "replication", "databases", "dead_tuples", "checkpoints", "archiver"} {
		assert.Equal(t, 0.0, p.must(t, "deckhand_pg_collector_error", "query", q), q)
	}
	// Every metric of the collector's own is one the docs and the chart
	// know (instance.MetricNames); the user's have their prefix.
	for _, sc := range []scrape{p, scrapeMetrics(t, standbyURL)} {
		for name := range sc {
			if !slices.Contains(instance.MetricNames, name) {
				assert.True(t, strings.HasPrefix(name, instance.UserMetricsPrefix), "%s is not in instance.MetricNames", name)
			}
		}
	}
	_, ok := p.value("deckhand_pg_collector_error", "query", "standby")
	assert.False(t, ok, "the standby's query does not run on a primary")

	// The user's queries: the good one's metric beside the broken ones'
	// error metrics; the primary-only one ran.
	assert.Equal(t, 3.0, p.must(t, "deckhand_pg_user_rows_by_kind_n", "kind", "odd"))
	assert.Equal(t, 2.0, p.must(t, "deckhand_pg_user_rows_by_kind_n", "kind", "even"))
	assert.Equal(t, 0.0, p.must(t, "deckhand_pg_user_query_error", "query", "rows_by_kind"))
	assert.Equal(t, 1.0, p.must(t, "deckhand_pg_user_query_error", "query", "writes"))
	assert.Equal(t, 1.0, p.must(t, "deckhand_pg_user_query_error", "query", "malformed"))
	assert.Equal(t, 1.0, p.must(t, "deckhand_pg_user_on_primary_one"))
	assert.Equal(t, 0.0, p.must(t, "deckhand_pg_user_queries_load_error"))
	_, ok = p.value("deckhand_pg_user_writes_id")
	assert.False(t, ok)
	assert.Equal(t, "5", h.sql(primary.Port, h.cluster.Database, "SELECT count(*) FROM rows"), "the writing query wrote nothing")

	// The standby: role, streaming, lag of its own, no replication rows.
	s := scrapeMetrics(t, standbyURL)
	assert.Equal(t, 1.0, s.must(t, "deckhand_pg_up"))
	assert.Equal(t, 1.0, s.must(t, "deckhand_pg_role", "role", "standby"))
	assert.Equal(t, 1.0, s.must(t, "deckhand_pg_standby_streaming"))
	s.must(t, "deckhand_pg_standby_replay_lag_bytes")
	s.must(t, "deckhand_pg_standby_replay_lag_seconds")
	s.must(t, "deckhand_pg_standby_last_message_age_seconds")
	assert.Greater(t, s.must(t, "deckhand_pg_wal_bytes_total"), 0.0)
	assert.Equal(t, 0.0, s.must(t, "deckhand_pg_collector_error", "query", "standby"))
	_, ok = s.value("deckhand_pg_replication_lag_bytes")
	assert.False(t, ok)
	assert.Equal(t, 3.0, s.must(t, "deckhand_pg_user_rows_by_kind_n", "kind", "odd"), "the user's queries run on the standby too")
	_, ok = s.value("deckhand_pg_user_on_primary_one")
	assert.False(t, ok, "a primary-only query is skipped on a standby")

	// The standby's replay paused: the WAL the primary writes meanwhile
	// shows as lag on both sides.
	// A commit replayed first: the lag in seconds counts from the last
	// one replayed.
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (6)")
	require.NoError(t, err, out)
	waitForRow(t, h, standby.Port, "6")
	h.sql(standby.Port, "postgres", "SELECT pg_wal_replay_pause()")
	out, err = h.appSQL(primary.Port, "INSERT INTO rows SELECT generate_series(7, 20000)")
	require.NoError(t, err, out)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := scrapeMetrics(ct, primaryURL)
		assert.Greater(ct, p.must(ct, "deckhand_pg_replication_lag_bytes", "application_name", "name-of-database-1"), 100000.0)
		s := scrapeMetrics(ct, standbyURL)
		assert.Greater(ct, s.must(ct, "deckhand_pg_standby_replay_lag_bytes"), 100000.0)
		assert.Greater(ct, s.must(ct, "deckhand_pg_standby_replay_lag_seconds"), 0.0)
	}, 30*time.Second, 500*time.Millisecond)
	h.sql(standby.Port, "postgres", "SELECT pg_wal_replay_resume()")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		s := scrapeMetrics(ct, standbyURL)
		assert.Equal(ct, 0.0, s.must(ct, "deckhand_pg_standby_replay_lag_bytes"))
	}, 30*time.Second, 500*time.Millisecond)

	// A server that is down: up 0, and still a scrape.
	standby.Stop(t)
	s = scrapeMetrics(t, standbyURL)
	assert.Equal(t, 0.0, s.must(t, "deckhand_pg_up"))
	_, ok = s.value("deckhand_pg_role", "role", "standby")
	assert.False(t, ok)
}
