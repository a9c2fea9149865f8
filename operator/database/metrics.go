package database

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics on the operator's /metrics endpoint.
var (
	objectWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deckhand_database_object_writes_total",
		Help: "Objects the Database controller created, updated or deleted, by kind and action.",
	}, []string{"kind", "action"})
	initJobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deckhand_database_init_jobs_total",
		Help: "Init Jobs seen finishing, by result (succeeded, failed).",
	}, []string{"result"})
	readyReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_ready_replicas",
		Help: "Ready replicas of each Database.",
	}, []string{"namespace", "database"})
	ready = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_ready",
		Help: "1 when the Database's Ready condition is True, else 0.",
	}, []string{"namespace", "database"})
)

func init() {
	metrics.Registry.MustRegister(objectWrites, initJobs, readyReplicas, ready)
}
