package database

import (
	appsv1 "k8s.io/api/apps/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// PostgreSQL's own metrics (spec.monitoring): the instance agent's
// collector in every pod, on its port "metrics"
// (docs/design/database-monitoring.md).

// AnnotationMonitoringDefault on a Database says whether its pods serve
// metrics when spec.monitoring.enabled is unset ("true" or "false"): the
// operator's default when it first saw the Database, recorded then and
// never changed, as AnnotationFailoverDefault is, so that upgrading the
// operator never changes the pod template (and restarts every pod) of a
// running Database. A person may change it, as the field.
const AnnotationMonitoringDefault = "stable.imaginedata.co/monitoring-default"

// monitoringOn: the Database's pods serve metrics (PostgreSQL only), by
// spec.monitoring.enabled or, when that is unset, its recorded default.
func monitoringOn(db *Cluster) bool {
	if engineOf(db) != dbv1.EnginePostgreSQL {
		return false
	}
	if m := db.Spec.Monitoring; m != nil && m.Enabled != nil {
		return *m.Enabled
	}
	return db.Annotations[AnnotationMonitoringDefault] == "true"
}

// wireMetrics adds the collector to the desired StatefulSet when
// monitoring is on: into the agent when failover put one there, else as a
// sidecar of its own. An operator that does not know its own image cannot
// (the pods copy the agent from it): the pods are left as they are.
func (r *Reconciler) wireMetrics(db *Cluster, desired *appsv1.StatefulSet) error {
	if !monitoringOn(db) || r.OperatorImage == "" {
		return nil
	}
	spec := &desired.Spec.Template.Spec
	opts := instance.MetricsOptions{
		OperatorImage: r.OperatorImage, Server: spec.Containers[0].Name,
		AppUser: appUser(db), AppDatabase: db.Spec.Name,
	}
	if q := db.Spec.Monitoring; q != nil && q.CustomQueries != nil {
		opts.QueriesConfigMap, opts.QueriesKey = q.CustomQueries.Name, q.CustomQueries.Key
	}
	return instance.AddMetrics(spec, opts)
}
