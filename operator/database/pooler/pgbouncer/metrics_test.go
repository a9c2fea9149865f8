package pgbouncer_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/pooler/pgbouncer"
)

// metricsSayWhoWaits: a query held by PAUSE shows as a waiting client
// with its wait; once it ran, the pooled counters count it; a console
// that refuses the collector's login gives pgbouncer_up 0 and nothing
// else.
func metricsSayWhoWaits(ctx context.Context, t *testing.T, b *bouncer) {
	cfg, err := clientConfig(b.port, "", "deckhand_pooler_test", authPassword, "pgbouncer")
	require.NoError(t, err)
	collector := &pgbouncer.Collector{Console: cfg}
	before := scrape(t, collector)
	assert.Equal(t, 1.0, before["pgbouncer_up"])

	admin := adminConsole(ctx, t, b.port, authPassword)
	app, err := connect(ctx, b.port, "app", "app-pw", "app")
	require.NoError(t, err)
	defer app.Close(ctx)
	admin.exec(ctx, t, "PAUSE")
	done := make(chan error, 1)
	go func() { _, err := app.Exec(ctx, "SELECT 1"); done <- err }()
	pool := `{database="app",user="app"}`
	require.Eventually(t, func() bool {
		m := scrape(t, collector)
		return m["pgbouncer_pools_client_waiting_connections"+pool] == 1 && m["pgbouncer_pools_client_maxwait_seconds"+pool] >= 1
	}, 30*time.Second, 200*time.Millisecond, "a waiting client, waiting a second or more:\n%s", dump(scrape(t, collector)))
	admin.exec(ctx, t, "RESUME")
	require.NoError(t, <-done)

	after := scrape(t, collector)
	t.Logf("after the held query ran:\n%s", dump(after))
	assert.Equal(t, 0.0, after["pgbouncer_pools_client_waiting_connections"+pool], dump(after))
	assert.Greater(t, after[`pgbouncer_stats_queries_pooled_total{database="app"}`], before[`pgbouncer_stats_queries_pooled_total{database="app"}`], dump(after))
	assert.Greater(t, after[`pgbouncer_stats_client_wait_seconds_total{database="app"}`], 1.0, "the held query's wait: %s", dump(after))
	assert.GreaterOrEqual(t, after["pgbouncer_used_clients"], 2.0, "the app client and the collector's own connection")

	wrong, err := clientConfig(b.port, "", "deckhand_pooler_test", "wrong", "pgbouncer")
	require.NoError(t, err)
	refused := scrape(t, &pgbouncer.Collector{Console: wrong})
	assert.Equal(t, map[string]float64{"pgbouncer_up": 0}, refused)
}

// scrape collects once, keyed by name{labels} as Prometheus prints them.
func scrape(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := f.GetName()
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func dump(m map[string]float64) string {
	var lines []string
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s %g", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
