package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/pflag"
)

// probeUsage is `deckhand probe --help`.
const probeUsage = `Usage: deckhand probe --health URL [--metrics URL] [--timeout DURATION]

Checks that a running operator answers: GET <health>/healthz and
<health>/readyz must return 200, and GET <metrics> must return Prometheus
metrics that include controller-runtime's reconcile counters (the operator's
controllers are registered). Retries until every check passes or the timeout
ends; exits 0 when they pass, 1 when they do not, 2 on bad arguments.
The chart's "helm test" Job runs it against the operator's Service.

Flags:
`

// metricWanted is a family every deckhand operator exposes once its
// controllers are set up: a metrics endpoint without it is not deckhand's.
const metricWanted = "controller_runtime_reconcile_total"

// metricStandby is what a replica that does not lead exposes instead.
const metricStandby = "leader_election_master_status"

// runProbe is `deckhand probe`; it returns the process's exit code.
func runProbe(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("probe", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	health := fs.String("health", "", "base URL of the operator's health endpoint, e.g. http://deckhand-metrics.deckhand-system.svc:8081")
	metrics := fs.String("metrics", "", "URL of the operator's metrics endpoint, e.g. http://deckhand-metrics.deckhand-system.svc:8080/metrics; empty skips the check")
	timeout := fs.Duration("timeout", 60*time.Second, "how long to retry before failing")
	fs.Usage = func() {
		fmt.Fprint(stderr, probeUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *health == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "deckhand probe: --health is required and no positional arguments are taken")
		fs.Usage()
		return 2
	}

	deadline := time.Now().Add(*timeout)
	checks := []probeCheck{
		{name: "health", url: strings.TrimSuffix(*health, "/") + "/healthz", check: expectOK},
		{name: "readiness", url: strings.TrimSuffix(*health, "/") + "/readyz", check: expectOK},
	}
	if *metrics != "" {
		checks = append(checks, probeCheck{name: "metrics", url: *metrics, check: expectMetrics})
	}
	failed := false
	for _, c := range checks {
		if err := retryUntilPass(deadline, c); err != nil {
			fmt.Fprintf(stderr, "FAIL %s: %s: %v\n", c.name, c.url, err)
			failed = true
			continue
		}
		fmt.Fprintf(stdout, "ok   %s: %s\n", c.name, c.url)
	}
	if failed {
		return 1
	}
	return 0
}

type probeCheck struct {
	name, url string
	check     func(*http.Response) error
}

// retryUntilPass runs one check every second until it passes or the
// deadline passes, and returns its last error: an operator that is still
// starting is given the time to answer. Every check is tried at least once,
// so a failure is reported with its own cause, never as a timeout.
//
// Each try opens a new connection: behind the metrics Service of several
// replicas, kube-proxy picks a replica per connection, and only the leader
// has reconcile counters (a standby starts its controllers when it leads).
// A kept-alive connection to a standby would be asked until the deadline.
func retryUntilPass(deadline time.Time, c probeCheck) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for {
		err := getAndCheck(client, c)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

func getAndCheck(client *http.Client, c probeCheck) error {
	resp, err := client.Get(c.url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return c.check(resp)
}

func expectOK(resp *http.Response) error {
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// expectMetrics accepts a 200 whose body parses as Prometheus text
// exposition and holds metricWanted.
func expectMetrics(resp *http.Response) error {
	if err := expectOK(resp); err != nil {
		return err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("not Prometheus metrics: %w", err)
	}
	if _, ok := families[metricWanted]; !ok {
		if _, standby := families[metricStandby]; standby {
			return fmt.Errorf("a replica waiting for leadership (%s, no %s); the leader answered none of the tries", metricStandby, metricWanted)
		}
		return fmt.Errorf("%d metric families but no %s: not a deckhand operator, or no controller set up", len(families), metricWanted)
	}
	return nil
}
