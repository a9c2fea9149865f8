package database

import (
	"fmt"
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// Continuous WAL archiving (spec.backup.storage.objectStore): every server
// pod gets the archiver sidecar, and the servers archive_mode on with the
// hand-off as archive_command (postgres/archiver.go,
// docs/design/database-backup.md).

// AnnotationArchiveSkipEmptyCheck on a Database ("true") lets its
// primary archive into an archive that already holds WAL: for a Database
// that continues the archive it was restored from, never for a second
// Database beside the first (docs/guides/database-backup.md).
const AnnotationArchiveSkipEmptyCheck = "stable.imaginedata.co/archive-skip-empty-check"

// AnnotationArchiveScripts on the pod template of an archiving Database is
// the archiving scripts' hash: new scripts restart the sidecars.
const AnnotationArchiveScripts = "stable.imaginedata.co/archive-scripts"

// DefaultArchiverImage is the archiver sidecar's image when the operator
// is given none (--database-archiver-image): Barman Cloud and the
// PostgreSQL client from Debian's packages, tagged with Barman's version.
const DefaultArchiverImage = "ghcr.io/deckhand-dev/archiver:3.4.0"

// DefaultArchiveTimeout is archive_timeout when
// spec.backup.storage.objectStore.archiveTimeout is unset.
const DefaultArchiveTimeout = 60 * time.Second

// objectStoreOf is the Database's object store; nil: it does not archive
// (a MySQL cluster never does).
func objectStoreOf(db *Cluster) *dbv1.ObjectStore {
	if engineOf(db) != dbv1.EnginePostgreSQL {
		return nil
	}
	if b := db.Spec.Backup; b != nil && b.Storage != nil {
		return b.Storage.ObjectStore
	}
	return nil
}

// archiveParameters are the servers' parameters: the spec's, and with an
// object store the archive settings over them (admission refuses them in
// spec.parameters then).
func archiveParameters(db *Cluster, params map[string]string) map[string]string {
	s := objectStoreOf(db)
	if s == nil {
		return params
	}
	timeout := DefaultArchiveTimeout
	if s.ArchiveTimeout != nil {
		timeout = s.ArchiveTimeout.Duration
	}
	out := maps.Clone(params)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, postgres.ArchiveParameters(timeout))
	return out
}

// archiveScripts are the scripts ConfigMap's keys for archiving: none
// without an object store, so no other Database's ConfigMap changes.
func archiveScripts(db *Cluster) map[string]string {
	if objectStoreOf(db) == nil {
		return nil
	}
	return postgres.ArchiveScripts()
}

func archiveScriptsHash() string { return hashScripts(postgres.ArchiveScripts()) }

// archiverImage is the sidecar's image.
func (r *Reconciler) archiverImage() string {
	if r.ArchiverImage != "" {
		return r.ArchiverImage
	}
	return DefaultArchiverImage
}

// wireArchiving adds the archiver sidecar to the desired StatefulSet of
// a Database with an object store.
func (r *Reconciler) wireArchiving(db *Cluster, desired *appsv1.StatefulSet) error {
	s := objectStoreOf(db)
	if s == nil {
		return nil
	}
	spec := &desired.Spec.Template.Spec
	o := postgres.ArchiverOptions{
		Image:          r.archiverImage(),
		Endpoint:       s.Endpoint,
		Bucket:         s.Bucket,
		Prefix:         s.Path,
		Server:         db.Name,
		Region:         s.Region,
		PathStyle:      s.PathStyle == nil || *s.PathStyle,
		Compression:    string(s.Compression),
		AccessKey:      postgres.KeyRef(s.Credentials.AccessKeyID),
		SecretKey:      postgres.KeyRef(s.Credentials.SecretAccessKey),
		SkipEmptyCheck: db.Annotations[AnnotationArchiveSkipEmptyCheck] == "true",
	}
	if o.Compression == "" {
		o.Compression = string(dbv1.CompressionGzip)
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if ca := s.CABundle; ca != nil {
		// The engine's KeyRef has the API's fields, without its tags.
		o.CASecret = (*postgres.KeyRef)(ca.SecretKeyRef)
		o.CAConfigMap = (*postgres.KeyRef)(ca.ConfigMapKeyRef)
	}
	if err := postgres.AddArchiver(spec, spec.Containers[0].Name, o); err != nil {
		return err
	}
	ann := desired.Spec.Template.Annotations
	if ann == nil {
		ann = map[string]string{}
		desired.Spec.Template.Annotations = ann
	}
	ann[AnnotationArchiveScripts] = archiveScriptsHash()
	return nil
}

// ConditionWALArchiving says whether the primary's archive_command
// succeeds (a Database with an object store and failover on: the
// instance agent reads pg_stat_archiver). True, reason Archiving: the
// last attempt succeeded, or none was made yet; False, reason
// ArchiveFailing: the last attempt failed, and PostgreSQL keeps the
// segments in pg_wal until one succeeds; Unknown, reason NotReported:
// failover is off, so no agent reports it.
const ConditionWALArchiving = "WALArchiving"

func forgetArchivingMetrics(namespace, name string) {
	for _, g := range []*prometheus.GaugeVec{archiveFailing, archiveFailed, archiveLast} {
		g.DeleteLabelValues(namespace, name)
	}
}

// reportArchivingUnwatched says, as an Unknown WALArchiving condition,
// that a Database whose primary the operator does not watch (failover
// off: no instance agent to read pg_stat_archiver from) archives without
// the operator knowing how it goes, and where to look instead.
func reportArchivingUnwatched(db *Cluster) {
	if objectStoreOf(db) == nil {
		return
	}
	meta.SetStatusCondition(&db.Status.Conditions, metav1.Condition{
		Type: ConditionWALArchiving, Status: metav1.ConditionUnknown, Reason: "NotReported", ObservedGeneration: db.Generation,
		Message: "the archiver runs beside every server, but the operator reads the primary's pg_stat_archiver through the instance agent, which runs with failover on (spec.failover.enabled); without it, the archiver container's log and PostgreSQL's metrics (deckhand_pg_archiver_*, spec.monitoring) say how archiving goes",
	})
	forgetArchivingMetrics(db.Namespace, db.Name)
}

// observeArchiving sets the WALArchiving condition, its Events and the
// metrics from the primary's status. A Database without an object store
// has no condition and no metrics.
func (r *Reconciler) observeArchiving(db *Cluster, st instance.Status) {
	if objectStoreOf(db) == nil {
		if meta.FindStatusCondition(db.Status.Conditions, ConditionWALArchiving) != nil {
			meta.RemoveStatusCondition(&db.Status.Conditions, ConditionWALArchiving)
			forgetArchivingMetrics(db.Namespace, db.Name)
		}
		return
	}
	if !st.ServerUp || st.Role != instance.RolePrimary || st.Archiver == nil {
		return
	}
	ok, reason, msg := archivingState(st.Pod, *st.Archiver)
	prev := meta.FindStatusCondition(db.Status.Conditions, ConditionWALArchiving)
	if !ok {
		r.warn(db, ConditionWALArchiving, reason, msg)
	} else if prev != nil && prev.Status == metav1.ConditionFalse {
		r.normal(db, "ArchiveRecovered", "Archive", "%s", msg)
	}
	r.setCondition(db, ConditionWALArchiving, ok, reason, msg)
	failing := 0.0
	if !ok {
		failing = 1
	}
	archiveFailing.WithLabelValues(db.Namespace, db.Name).Set(failing)
	archiveFailed.WithLabelValues(db.Namespace, db.Name).Set(float64(st.Archiver.FailedCount))
	if t := st.Archiver.LastArchivedTime; t != nil {
		archiveLast.WithLabelValues(db.Namespace, db.Name).Set(float64(t.Unix()))
	}
}

// archivingState is the condition for a primary's pg_stat_archiver. The
// message changes only when the state does (not at every segment), so a
// healthy archive does not rewrite the status.
func archivingState(pod string, a instance.ArchiverStatus) (ok bool, reason, msg string) {
	if a.Failing() {
		last := "nothing archived since the server started"
		if a.LastArchivedWAL != "" {
			last = "last archived: " + a.LastArchivedWAL
		}
		return false, "ArchiveFailing", fmt.Sprintf("primary %s cannot archive WAL file %s (%s): PostgreSQL keeps it and the files after it in pg_wal, which grows until archiving succeeds; the archiver container's log says why",
			pod, a.LastFailedWAL, last)
	}
	return true, "Archiving", fmt.Sprintf("primary %s archives its WAL: its last attempt succeeded", pod)
}
