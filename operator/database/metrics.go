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
	upgrades = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deckhand_database_major_upgrades_total",
		Help: "Major-version upgrades seen ending, by Database and result (succeeded, rolled_back, rollback_failed).",
	}, []string{"namespace", "database", "result"})
	readyReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_ready_replicas",
		Help: "Ready replicas of each Database.",
	}, []string{"namespace", "database"})
	backupsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deckhand_database_backups_total",
		Help: "DatabaseBackups seen finishing, by Database and result (succeeded, failed).",
	}, []string{"namespace", "database", "result"})
	lastBackupSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_last_successful_backup_timestamp_seconds",
		Help: "When the newest completed backup of each Database completed (Unix time).",
	}, []string{"namespace", "database"})
	nextScheduledBackup = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_next_scheduled_backup_timestamp_seconds",
		Help: "When the next scheduled backup of each Database is due (Unix time); absent without a schedule.",
	}, []string{"namespace", "database"})
	ready = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_ready",
		Help: "1 when the Database's Ready condition is True, else 0.",
	}, []string{"namespace", "database"})
)

func init() {
	metrics.Registry.MustRegister(objectWrites, initJobs, upgrades, readyReplicas, ready, backupsTotal, lastBackupSuccess, nextScheduledBackup)
}
