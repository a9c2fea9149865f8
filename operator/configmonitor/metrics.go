package configmonitor

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics on the operator's /metrics endpoint.
var (
	restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deckhand_configmonitor_restarts_total",
		Help: "Workloads restarted (or pods deleted) because their configuration changed, by kind.",
	}, []string{"kind"})
	restartFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deckhand_configmonitor_restart_failures_total",
		Help: "Restarts that failed and will be retried, by kind.",
	}, []string{"kind"})
	skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deckhand_configmonitor_skips_total",
		Help: "Restarts not done, by reason (Baseline, Suspended, Paused, BarePod, UnsupportedOwner, AlreadyCurrent).",
	}, []string{"reason"})
	reaction = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "deckhand_configmonitor_reaction_seconds",
		Help:    "Time from the ConfigMap or Secret watch event to the workload's restart patch.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
)

func init() {
	metrics.Registry.MustRegister(restarts, restartFailures, skipped, reaction)
}
