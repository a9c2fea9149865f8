package instance

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A malformed query is set apart with its reason and the others are kept;
// a file that is not YAML is an error.
func TestParseUserQueriesKeepsTheGoodOnes(t *testing.T) {
	queries, bad, err := ParseUserQueries([]byte(`
good:
  query: SELECT 1 AS n
  primary: true
  metrics:
    - n: {usage: gauge, description: One.}
bad-name:
  query: SELECT 1 AS n
  metrics: [{n: {usage: GAUGE}}]
no_query:
  metrics: [{n: {usage: GAUGE}}]
bad_usage:
  query: SELECT 1 AS n
  metrics: [{n: {usage: HISTOGRAM}}]
two_columns_in_one:
  query: SELECT 1 AS a, 2 AS b
  metrics: [{a: {usage: LABEL}, b: {usage: GAUGE}}]
not_a_map: 3
`))
	require.NoError(t, err)
	require.Len(t, queries, 1)
	assert.Equal(t, "good", queries[0].Name)
	assert.True(t, queries[0].Primary)
	assert.Equal(t, []string{"bad-name", "bad_usage", "no_query", "not_a_map", "two_columns_in_one"}, slices.Sorted(maps.Keys(bad)))
	assert.Contains(t, bad["bad_usage"], `usage "HISTOGRAM" is not GAUGE, COUNTER, LABEL or DISCARD`)

	_, _, err = ParseUserQueries([]byte("a: [b\n"))
	assert.Error(t, err)
}

// The exposition parses as Prometheus parses it: label values escaped,
// one HELP and TYPE per family, a repeated series kept once.
func TestMetricSetWritesTheTextFormat(t *testing.T) {
	m := newMetricSet()
	m.add("connections", gauge, "Connections\nby state.", labels{"state", `idle "in" \ transaction`}, 2)
	m.add("connections", gauge, "ignored", labels{"state", "active"}, 1)
	m.add("connections", gauge, "ignored", labels{"state", "active"}, 5)
	m.add("wal_bytes_total", counter, "WAL.", nil, 1.5e10)
	var buf bytes.Buffer
	m.write(&buf)
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err, buf.String())
	c := families["deckhand_pg_connections"]
	require.NotNil(t, c)
	require.Len(t, c.Metric, 2)
	assert.Equal(t, `idle "in" \ transaction`, c.Metric[0].Label[0].GetValue())
	assert.Equal(t, 1.0, c.Metric[1].Gauge.GetValue(), "the first of a repeated series")
	assert.Equal(t, 1.5e10, families["deckhand_pg_wal_bytes_total"].Metric[0].Counter.GetValue())
	assert.Equal(t, 1, strings.Count(buf.String(), "# TYPE deckhand_pg_connections gauge"))
}
