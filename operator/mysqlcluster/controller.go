// Package mysqlcluster is the MySQLCluster controller (seed 000, grtl's
// mysql-operator): a MySQLCluster is run by the Database controller's core
// (operator/database: objects, Jobs, backups, restore, finalizer) with the
// MySQL/MariaDB engine (operator/database/mysql). This package holds what
// is the MySQLCluster's own: the adapters between its API and the core
// (kind.go), its RBAC, and the MySQLBackupSchedule controller, since a
// Database's schedule is in its spec and grtl's is an object of its own.
package mysqlcluster

import (
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/deckhand-dev/deckhand/operator/database"
)

// Name is the controller's name in --controllers.
const Name = "mysqlcluster"

// FieldManager owns the fields the MySQLCluster controller applies.
const FieldManager = "deckhand-mysqlcluster"

// +kubebuilder:rbac:groups=cr.mysqloperator.grtl.github.com,resources=mysqlclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=cr.mysqloperator.grtl.github.com,resources=mysqlclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cr.mysqloperator.grtl.github.com,resources=mysqlclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=cr.mysqloperator.grtl.github.com,resources=mysqlbackupinstances,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cr.mysqloperator.grtl.github.com,resources=mysqlbackupinstances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cr.mysqloperator.grtl.github.com,resources=mysqlbackupinstances/finalizers,verbs=update
// +kubebuilder:rbac:groups=cr.mysqloperator.grtl.github.com,resources=mysqlbackupschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=cr.mysqloperator.grtl.github.com,resources=mysqlbackupschedules/status,verbs=get;update;patch
// Secrets: delete only because OwnerReferencesPermissionEnforcement asks
// for it to take the cluster's owner reference off the Secrets it made
// (deletionPolicy Retain keeps them); the operator deletes no Secret
// itself, and never touches one the user made.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options are the controller's settings.
type Options struct {
	// WatchNamespaces limits the owned-object cache to these namespaces
	// (empty: all), as the manager's cache is.
	WatchNamespaces []string
	// ExcludeNamespaces leaves these namespaces out when WatchNamespaces
	// is empty, as the manager's cache does.
	ExcludeNamespaces []string
	// Now is the clock of schedules and retention (tests may set one).
	Now func() time.Time
	// TLSByDefault: a new MySQLCluster without spec.tls.enabled gets TLS
	// (the flag --mysqlcluster-tls-default, on by default; the chart's
	// controllers.mysqlCluster.tlsByDefault). Off here, the zero value,
	// for tests that run the operator on kwok.
	TLSByDefault bool
}

// Setup registers the MySQLCluster, MySQLBackupInstance and
// MySQLBackupSchedule controllers with the manager.
func Setup(mgr ctrl.Manager, o Options) error {
	core, err := database.SetupKind(mgr, Kind, database.Options{WatchNamespaces: o.WatchNamespaces, ExcludeNamespaces: o.ExcludeNamespaces, Now: o.Now, TLSByDefault: o.TLSByDefault})
	if err != nil {
		return err
	}
	s := &ScheduleReconciler{Client: mgr.GetClient(), Core: core, Recorder: mgr.GetEventRecorder("deckhand-" + Name + "-schedule"), Now: o.Now}
	return s.setup(mgr)
}
