package jmxexporter

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics on the operator's /metrics endpoint.
var (
	attaches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deckhand_jmxexporter_attaches_total",
		Help: "Attach attempts by result (Attached, AlreadyAttached, Failed, Unknown) and reason (NoJVM, AmbiguousJVM, PortInUse, AttachDisabled, ...), so failing attaches can be alerted on.",
	}, []string{"result", "reason"})
	configCopies = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "deckhand_jmxexporter_config_updates_total",
		Help: "Configuration changes copied into containers whose agent re-reads them.",
	})
	execDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "deckhand_jmxexporter_exec_seconds",
		Help:    "Duration of the execs into containers, by step (probe, copy, discover, attach, verify).",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	}, []string{"step"})
)

func init() {
	metrics.Registry.MustRegister(attaches, configCopies, execDuration)
}
