package database

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// metrics of one Kind on the operator's /metrics endpoint. Each Kind's
// names start with deckhand_<kind name>_ (deckhand_database_...,
// deckhand_mysqlcluster_...), so a Database's numbers never mix with a
// MySQLCluster's.
type metrics struct {
	objectWrites        *prometheus.CounterVec
	initJobs            *prometheus.CounterVec
	upgrades            *prometheus.CounterVec
	readyReplicas       *prometheus.GaugeVec
	ready               *prometheus.GaugeVec
	backupsTotal        *prometheus.CounterVec
	lastBackupSuccess   *prometheus.GaugeVec
	nextScheduledBackup *prometheus.GaugeVec
	verifications       *prometheus.CounterVec
	lastVerifiedBackup  *prometheus.GaugeVec
	verifiedStale       *prometheus.GaugeVec
	failovers           *prometheus.CounterVec
	failoverPending     *prometheus.GaugeVec
	certificateExpiry   *prometheus.GaugeVec
	// names of the above, for MetricNames.
	names []string
}

// newMetrics registers a Kind's metrics (once per name: a second Kind of
// the same name shares them).
func newMetrics(name, kind, label string) *metrics {
	var names []string
	named := func(suffix string) string {
		names = append(names, "deckhand_"+name+"_"+suffix)
		return names[len(names)-1]
	}
	m := &metrics{
		objectWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: named("object_writes_total"),
			Help: "Objects the " + kind + " controller created, updated or deleted, by kind and action.",
		}, []string{"kind", "action"}),
		initJobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: named("init_jobs_total"),
			Help: "Init Jobs seen finishing, by result (succeeded, failed).",
		}, []string{"result"}),
		upgrades: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: named("major_upgrades_total"),
			Help: "Major-version upgrades seen ending, by " + kind + " and result (succeeded, rolled_back, rollback_failed).",
		}, []string{"namespace", label, "result"}),
		readyReplicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: named("ready_replicas"),
			Help: "Ready replicas of each " + kind + ".",
		}, []string{"namespace", label}),
		backupsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: named("backups_total"),
			Help: "Backups seen finishing, by " + kind + " and result (succeeded, failed).",
		}, []string{"namespace", label, "result"}),
		lastBackupSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: named("last_successful_backup_timestamp_seconds"),
			Help: "When the newest completed backup of each " + kind + " completed (Unix time).",
		}, []string{"namespace", label}),
		nextScheduledBackup: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: named("next_scheduled_backup_timestamp_seconds"),
			Help: "When the next scheduled backup of each " + kind + " is due (Unix time); absent without a schedule.",
		}, []string{"namespace", label}),
		verifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: named("backup_verification_total"),
			Help: "Backup verifications seen ending, by " + kind + " and result (verified, failed: a check failed; error: it could not run).",
		}, []string{"namespace", label, "result"}),
		lastVerifiedBackup: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: named("last_verified_backup_timestamp_seconds"),
			Help: "When the newest verified backup of each " + kind + " completed (Unix time): time() minus it is the age of the newest backup known to restore.",
		}, []string{"namespace", label}),
		verifiedStale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: named("backup_verified_stale"),
			Help: "1 when the " + kind + "'s BackupVerified condition is False: its newest verified backup is older than backup.verify.maxAge, or none is verified and its oldest completed backup is that old; else 0.",
		}, []string{"namespace", label}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: named("failovers_total"),
			Help: "Primary changes completed, by " + kind + " and kind (failover: a primary that was gone; switchover: asked for by spec.failover.switchoverTo).",
		}, []string{"namespace", label, "kind"}),
		failoverPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: named("failover_pending"),
			Help: "1 while the " + kind + "'s primary is gone and not replaced: a failover or switchover under way (not completed) or blocked (no healthy standby) or refused (it could lose a synchronous commit); else 0. The Failover condition says why.",
		}, []string{"namespace", label}),
		certificateExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: named("server_certificate_expiry_timestamp_seconds"),
			Help: "When the certificate the " + kind + "'s servers present expires (Unix time); absent without TLS. A generated one is renewed at two thirds of its life; a user's is renewed by its issuer.",
		}, []string{"namespace", label}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: named("ready"),
			Help: "1 when the " + kind + "'s Ready condition is True, else 0.",
		}, []string{"namespace", label}),
	}
	m.names = names
	m.objectWrites = register(m.objectWrites)
	m.initJobs = register(m.initJobs)
	m.upgrades = register(m.upgrades)
	m.readyReplicas = register(m.readyReplicas)
	m.ready = register(m.ready)
	m.backupsTotal = register(m.backupsTotal)
	m.lastBackupSuccess = register(m.lastBackupSuccess)
	m.nextScheduledBackup = register(m.nextScheduledBackup)
	m.verifications = register(m.verifications)
	m.lastVerifiedBackup = register(m.lastVerifiedBackup)
	m.verifiedStale = register(m.verifiedStale)
	m.failovers = register(m.failovers)
	m.failoverPending = register(m.failoverPending)
	m.certificateExpiry = register(m.certificateExpiry)
	return m
}

// register adds c to controller-runtime's registry, or returns the
// collector already registered under its name.
func register[C prometheus.Collector](c C) C {
	err := crmetrics.Registry.Register(c)
	var exists prometheus.AlreadyRegisteredError
	if errors.As(err, &exists) {
		if same, ok := exists.ExistingCollector.(C); ok {
			return same
		}
	}
	if err != nil {
		panic(err)
	}
	return c
}

// The archiving metrics of a Database, from its primary's
// pg_stat_archiver as the instance agent reports it.
var (
	archiveFailing = register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_wal_archive_failing",
		Help: "1 while the Database's WALArchiving condition is False (the primary's last archive attempt failed), else 0; absent without an object store or without failover (no agent reads the server).",
	}, []string{"namespace", "database"}))
	archiveFailed = register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_wal_archive_failed_attempts",
		Help: "Failed archive attempts of the Database's primary since its server started (pg_stat_archiver.failed_count).",
	}, []string{"namespace", "database"}))
	archiveLast = register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_wal_archive_last_archived_timestamp_seconds",
		Help: "When the Database's primary last archived a WAL file (pg_stat_archiver.last_archived_time, Unix time); absent until it does.",
	}, []string{"namespace", "database"}))
	archivePending = register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_wal_archive_pending_bytes",
		Help: "WAL waiting in the Database's primary's pg_wal to be archived (its .ready segments), in bytes: what piles up while archiving fails.",
	}, []string{"namespace", "database"}))
	primaryVolumeFree = register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_primary_volume_free_bytes",
		Help: "Free space of the archiving primary's data volume, which holds pg_wal, in bytes.",
	}, []string{"namespace", "database"}))
	baseBackups = register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_base_backups",
		Help: "The finished base backups in the Database's archive, as its primary's archiver last found them.",
	}, []string{"namespace", "database"}))
	lastBaseBackup = register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_last_base_backup_timestamp_seconds",
		Help: "When the newest base backup in the Database's archive ended (Unix time); absent while it has none.",
	}, []string{"namespace", "database"}))
	recoverableFrom = register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_recoverable_from_timestamp_seconds",
		Help: "The earliest moment the Database's archive recovers to: the end of its oldest base backup (Unix time); absent while it has none.",
	}, []string{"namespace", "database"}))
	baseBackupVerifyFailed = register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_base_backup_verification_failed",
		Help: "1 when the last verification by restore of a base backup of the Database's archive failed or could not run, 0 when it passed; absent before the first.",
	}, []string{"namespace", "database"}))
	lastBaseBackupVerified = register(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "deckhand_database_last_verified_base_backup_timestamp_seconds",
		Help: "When the newest base backup a verification by restore passed ended (Unix time); absent while none has.",
	}, []string{"namespace", "database"}))
)
