package instance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The user's queries, in CloudNativePG's custom-queries format (the
// ConfigMap named by a Database's spec.monitoring.customQueries, mounted
// in the pod):
//
//	pg_orders:                     # the query's name: its metrics' prefix
//	  query: SELECT status, count(*) AS n FROM orders GROUP BY status
//	  primary: true                # optional: run on the primary only
//	  metrics:
//	    - status:
//	        usage: LABEL
//	        description: The order's status.
//	    - n:
//	        usage: GAUGE           # GAUGE, COUNTER, LABEL or DISCARD
//	        description: Orders by status.
//
// gives deckhand_pg_user_pg_orders_n{status="..."}. Each query runs as
// the app role, in a read-only transaction, within the collector's query
// timeout; one that fails, or whose columns do not match its metrics,
// gives deckhand_pg_user_query_error{query="pg_orders"} 1 and no metric,
// and the others run still.

// UserMetricsPrefix starts the name of every metric of a user's query.
const UserMetricsPrefix = MetricsPrefix + "user_"

// UserQuery is one entry of the file.
type UserQuery struct {
	Query string `yaml:"query"`
	// Primary (or its older name master): run on a primary only.
	Primary bool `yaml:"primary"`
	Master  bool `yaml:"master"`
	// Metrics map each column, in order, to its use.
	Metrics []map[string]UserColumn `yaml:"metrics"`
}

// UserColumn says what a column is.
type UserColumn struct {
	Usage       string `yaml:"usage"`
	Description string `yaml:"description"`
}

var metricNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// ParseUserQueries reads the file's queries, sorted by name; a query
// that is malformed is returned in bad with the reason, and the others
// are kept.
func ParseUserQueries(b []byte) (queries []NamedQuery, bad map[string]string, err error) {
	var raw map[string]yaml.Node
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, nil, err
	}
	bad = map[string]string{}
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		node := raw[name]
		var q UserQuery
		if err := node.Decode(&q); err != nil {
			bad[name] = err.Error()
			continue
		}
		if problem := checkUserQuery(name, q); problem != "" {
			bad[name] = problem
			continue
		}
		queries = append(queries, NamedQuery{Name: name, UserQuery: q})
	}
	return queries, bad, nil
}

// NamedQuery is a query with its name.
type NamedQuery struct {
	Name string
	UserQuery
}

func checkUserQuery(name string, q UserQuery) string {
	if !metricNameRE.MatchString(name) {
		return fmt.Sprintf("the name %q is not a metric name ([a-zA-Z_][a-zA-Z0-9_]*)", name)
	}
	if strings.TrimSpace(q.Query) == "" {
		return "no query"
	}
	if len(q.Metrics) == 0 {
		return "no metrics"
	}
	for _, m := range q.Metrics {
		if len(m) != 1 {
			return "each entry of metrics names one column"
		}
		for col, c := range m {
			if !metricNameRE.MatchString(col) {
				return fmt.Sprintf("the column %q is not a metric name", col)
			}
			switch strings.ToUpper(c.Usage) {
			case "GAUGE", "COUNTER", "LABEL", "DISCARD":
			default:
				return fmt.Sprintf("column %s: usage %q is not GAUGE, COUNTER, LABEL or DISCARD", col, c.Usage)
			}
		}
	}
	return ""
}

const userErrorHelp = "1 when the user's query (from the Database's spec.monitoring.customQueries) failed or is malformed at the last scrape (its metrics are missing), 0 when it ran."

// collectUser runs the user's queries into m.
func (c *Collector) collectUser(ctx context.Context, m *metricSet, v serverFacts) {
	if c.cfg.QueriesFile == "" {
		return
	}
	b, err := os.ReadFile(c.cfg.QueriesFile)
	if errors.Is(err, os.ErrNotExist) {
		m.add("user_queries_load_error", gauge, "1 when the user's queries file cannot be read or parsed (no user query runs), 0 otherwise.", nil, 0)
		return
	}
	var queries []NamedQuery
	var bad map[string]string
	if err == nil {
		queries, bad, err = ParseUserQueries(b)
	}
	if err != nil {
		c.cfg.Log.Warn("metrics: the user's queries cannot be read", "file", c.cfg.QueriesFile, "error", err.Error())
		m.add("user_queries_load_error", gauge, "1 when the user's queries file cannot be read or parsed (no user query runs), 0 otherwise.", nil, 1)
		return
	}
	m.add("user_queries_load_error", gauge, "1 when the user's queries file cannot be read or parsed (no user query runs), 0 otherwise.", nil, 0)
	names := make([]string, 0, len(bad))
	for name := range bad {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c.cfg.Log.Warn("metrics: a user's query is malformed", "query", name, "error", bad[name])
		m.add("user_query_error", gauge, userErrorHelp, labels{"query", name}, 1)
	}
	for _, q := range queries {
		if (q.Primary || q.Master) && v.inRecovery {
			continue
		}
		failed := 0.0
		if c.app == nil {
			failed = 1
		} else if err := c.runUserQuery(ctx, q, m); err != nil {
			failed = 1
			c.cfg.Log.Warn("metrics: a user's query failed", "query", q.Name, "error", err.Error())
		}
		m.add("user_query_error", gauge, userErrorHelp, labels{"query", q.Name}, failed)
	}
}

// runUserQuery runs q as the app role in a read-only transaction (the
// connection's default too) and adds its metrics to m only when every row
// converted.
func (c *Collector) runUserQuery(ctx context.Context, q NamedQuery, m *metricSet) error {
	tx, err := c.app.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", c.cfg.QueryTimeout.Milliseconds())); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, q.Query)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	type col struct {
		name  string
		usage string
		desc  string
	}
	var spec []col
	for _, entry := range q.Metrics {
		for name, u := range entry {
			spec = append(spec, col{name, strings.ToUpper(u.Usage), u.Description})
		}
	}
	byName := map[string]col{}
	for _, s := range spec {
		byName[s.name] = s
	}
	for _, name := range cols {
		if _, ok := byName[name]; !ok {
			return fmt.Errorf("the query returns column %q, which its metrics do not name", name)
		}
	}
	type pending struct {
		name, help string
		typ        metricType
		l          labels
		v          float64
	}
	var out []pending
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		var l labels
		for i, name := range cols {
			if byName[name].usage == "LABEL" {
				l = append(l, name, vals[i].String)
			}
		}
		for i, name := range cols {
			s := byName[name]
			var typ metricType
			switch s.usage {
			case "GAUGE":
				typ = gauge
			case "COUNTER":
				typ = counter
			default:
				continue
			}
			if !vals[i].Valid {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(vals[i].String), 64)
			if err != nil {
				if b, berr := strconv.ParseBool(vals[i].String); berr == nil {
					f = 0
					if b {
						f = 1
					}
				} else {
					return fmt.Errorf("column %s: %q is not a number", name, vals[i].String)
				}
			}
			metric := UserMetricsPrefix + q.Name + "_" + name
			out = append(out, pending{metric, s.desc, typ, l, f})
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, p := range out {
		if f := m.by[p.name]; f != nil && f.typ != p.typ {
			return fmt.Errorf("metric %s is both a %s and a %s", p.name, f.typ, p.typ)
		}
	}
	for _, p := range out {
		help := p.help
		if help == "" {
			help = "A user's query (" + q.Name + ")."
		}
		m.addFull(p.name, p.typ, help, p.l, p.v)
	}
	return nil
}
