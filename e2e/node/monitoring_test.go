package node

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// PostgreSQL's own metrics, served by a real Database pod on the node on
// its metrics port (the one the chart's PodMonitor scrapes; here through
// the API server's pod proxy): the primary reports its standby streaming,
// caught up. With the standby's server frozen (the cgroup freezer) while
// about a megabyte of WAL is written, the primary's replication lag for
// it grows past that; thawed, the standby catches up and the lag falls
// back.
func TestRealNodeServesPostgreSQLMetricsWhoseLagFollowsTheStandby(t *testing.T) {
	parallel(t, 60*time.Second) // see the package comment: its own namespace, the shared operator
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f := startFailoverCluster(ctx, t, 2, 0)
	primary := f.primary()
	standby := f.standbyOf(primary)
	lag := func(ct require.TestingT) float64 {
		v, ok := f.scrapeValue(ct, primary, "deckhand_pg_replication_lag_bytes", "application_name", standby)
		require.True(ct, ok, "the primary reports no replication lag for %s", standby)
		return v
	}
	const caughtUp = 64 << 10
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		streaming, ok := f.scrapeValue(ct, primary, "deckhand_pg_replication_streaming", "application_name", standby)
		require.True(ct, ok)
		assert.Equal(ct, 1.0, streaming)
		assert.Less(ct, lag(ct), float64(caughtUp))
	}, 2*time.Minute, time.Second, "the primary's metrics say %s streams, caught up", standby)

	thaw := f.freezeServer(standby)
	w := f.startWriter("writer")
	psql(ctx, t, f.cfg, f.cs, w.pod, "rw", "INSERT INTO acks (id) SELECT -g FROM generate_series(1, 10000) g")
	var behind float64
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		behind = lag(ct)
		assert.Greater(ct, behind, float64(512<<10))
	}, time.Minute, time.Second, "the lag of the frozen standby grows")

	thaw()
	var after float64
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		after = lag(ct)
		assert.Less(ct, after, float64(caughtUp))
	}, 2*time.Minute, time.Second, "the thawed standby catches up")
	w.stop()
	logf(t, "PostgreSQL metrics on the node: %s's replication lag %.0f bytes while frozen, %.0f once thawed", standby, behind, after)
}

// scrapeValue reads one sample of pod's PostgreSQL metrics (its metrics
// port, through the API server's pod proxy): the metric name with the
// label pairs want; false when it is not served.
func (f *failoverCluster) scrapeValue(t require.TestingT, pod, name string, want ...string) (float64, bool) {
	return f.scrapePortValue(t, pod, instance.MetricsPort, name, want...)
}

// scrapePortValue is scrapeValue of the metrics served on another port.
func (f *failoverCluster) scrapePortValue(t require.TestingT, pod string, port int, name string, want ...string) (float64, bool) {
	body, err := f.cs.CoreV1().Pods(f.ns).ProxyGet("http", pod, strconv.Itoa(port), "/metrics", nil).DoRaw(f.ctx)
	require.NoError(t, err, "scraping %s", pod)
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		matches := true
		for i := 0; i+1 < len(want); i += 2 {
			matches = matches && strings.Contains(line, want[i]+`="`+want[i+1]+`"`)
		}
		if !matches {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		require.NoError(t, err, line)
		return v, true
	}
	return 0, false
}
