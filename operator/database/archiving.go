package database

import (
	"fmt"
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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

// DefaultBaseBackupInterval is how old the archive's newest base backup
// may be before the primary takes another, when
// spec.backup.storage.objectStore.baseBackupInterval is unset.
const DefaultBaseBackupInterval = 24 * time.Hour

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

// archiveScripts are the scripts ConfigMap's keys for archiving and
// recovery: none without an object store or a recovery, so no other
// Database's ConfigMap changes. A recovering Database's also say whether
// its recovery is still to be done.
func archiveScripts(db *Cluster) map[string]string {
	if objectStoreOf(db) == nil && recoveryOf(db) == nil {
		return nil
	}
	out := postgres.ArchiveScripts()
	if recoveryOf(db) != nil {
		out[postgres.ScriptsRecoveryKey] = recoveryState(db)
	}
	return out
}

func archiveScriptsHash() string { return hashScripts(postgres.ArchiveScripts()) }

// archiverImage is the sidecar's image.
func (r *Reconciler) archiverImage() string { return archiverImageOr(r.ArchiverImage) }

// archiverImageOr is image, or the default when the operator was given
// none.
func archiverImageOr(image string) string {
	if image != "" {
		return image
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
	o := storeOptions(s, db.Name)
	o.Image = r.archiverImage()
	o.SkipEmptyCheck = db.Annotations[AnnotationArchiveSkipEmptyCheck] == "true"
	o.MaxParallel = s.MaxParallel
	o.BaseBackupEvery = DefaultBaseBackupInterval
	if s.BaseBackupInterval != nil {
		o.BaseBackupEvery = s.BaseBackupInterval.Duration
	}
	o.RetentionPolicy = barmanRetention(s.RetentionPolicy)
	if err := postgres.AddArchiver(spec, spec.Containers[0].Name, o); err != nil {
		return err
	}
	setTemplateAnnotation(desired, AnnotationArchiveScripts, archiveScriptsHash())
	return nil
}

// barmanRetention is objectStore.retentionPolicy (30d, 4w, 6m) as
// Barman's policy ("RECOVERY WINDOW OF 30 DAYS"); "" for none. Admission
// refuses anything else.
func barmanRetention(policy string) string {
	if policy == "" {
		return ""
	}
	unit := map[byte]string{'d': "DAYS", 'w': "WEEKS", 'm': "MONTHS"}[policy[len(policy)-1]]
	if unit == "" {
		return ""
	}
	return "RECOVERY WINDOW OF " + policy[:len(policy)-1] + " " + unit
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
	for _, g := range []*prometheus.GaugeVec{archiveFailing, archiveFailed, archiveLast, archivePending, primaryVolumeFree, baseBackups, lastBaseBackup, recoverableFrom,
		baseBackupVerifyFailed, lastBaseBackupVerified} {
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
		db.Status.RecoverableFrom, db.Status.RecoverableUntil, db.Status.BaseBackups = nil, nil, nil
		return
	}
	if !st.ServerUp || st.Role != instance.RolePrimary || st.Archiver == nil {
		return
	}
	ok, reason, msg := archivingState(st.Pod, *st.Archiver, st.DataVolume)
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
	archivePending.WithLabelValues(db.Namespace, db.Name).Set(float64(st.Archiver.PendingBytes))
	if v := st.DataVolume; v != nil {
		primaryVolumeFree.WithLabelValues(db.Namespace, db.Name).Set(float64(v.FreeBytes))
	}
	if t := st.Archiver.LastArchivedTime; t != nil {
		archiveLast.WithLabelValues(db.Namespace, db.Name).Set(float64(t.Unix()))
		// Only while the archive keeps up: with segments waiting, the one
		// archived last was switched long before it was archived, and its
		// time would claim commits the archive does not hold yet. One
		// waiting is the segment being archived now. At most every 30 s:
		// a busy primary archives a segment a second, and each would be a
		// status write.
		u := db.Status.RecoverableUntil
		if st.Archiver.PendingSegments <= 1 && (u == nil || t.Sub(u.Time) >= 30*time.Second || t.Before(u.Time)) {
			db.Status.RecoverableUntil = &metav1.Time{Time: t.UTC().Truncate(time.Second)}
		}
	}
	r.observeBaseBackups(db, st.BaseBackups)
}

// observeBaseBackups records what the primary's archiver last found in the
// archive (status.baseBackups, status.recoverableFrom), with an Event for
// each new base backup and a Warning for a failed one, and the metrics.
func (r *Reconciler) observeBaseBackups(db *Cluster, found *instance.BaseBackups) {
	if found == nil {
		return
	}
	prev := db.Status.BaseBackups
	now := &dbv1.BaseBackupsStatus{
		Count:       int32(found.Count),
		Oldest:      baseBackupRecord(found.Oldest),
		Newest:      baseBackupRecord(found.Newest),
		LastError:   found.Error,
		CheckedTime: &metav1.Time{Time: found.CheckedAt},
	}
	if prev != nil {
		now.Verification, now.LastVerified = prev.Verification, prev.LastVerified
	}
	for _, h := range found.Held {
		now.Held = append(now.Held, dbv1.HeldBaseBackup{BaseBackupRef: dbv1.BaseBackupRef{Name: h.Name, ID: h.ID}, Reason: h.Reason})
	}
	if n := now.Newest; n != nil && (prev == nil || prev.Newest == nil || prev.Newest.ID != n.ID) {
		r.normal(db, "BaseBackupTaken", "Archive", "base backup %s (%s) ended at %s, WAL %s to %s: the archive holds %d",
			n.Name, n.ID, n.EndTime.UTC().Format(time.RFC3339), n.BeginLSN, n.EndLSN, now.Count)
	}
	if now.LastError != "" && (prev == nil || prev.LastError != now.LastError) {
		r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "BaseBackupFailed", "Archive", "%s", truncate(now.LastError, 600))
	}
	db.Status.BaseBackups = now
	baseBackups.WithLabelValues(db.Namespace, db.Name).Set(float64(now.Count))
	if o := now.Oldest; o != nil {
		db.Status.RecoverableFrom = &metav1.Time{Time: o.EndTime.Time}
		recoverableFrom.WithLabelValues(db.Namespace, db.Name).Set(float64(o.EndTime.Unix()))
	}
	if n := now.Newest; n != nil {
		lastBaseBackup.WithLabelValues(db.Namespace, db.Name).Set(float64(n.EndTime.Unix()))
	}
}

func baseBackupRecord(b *instance.BaseBackup) *dbv1.BaseBackupRecord {
	if b == nil {
		return nil
	}
	return &dbv1.BaseBackupRecord{
		Name: b.Name, ID: b.ID, BeginTime: metav1.Time{Time: b.BeginTime}, EndTime: metav1.Time{Time: b.EndTime},
		BeginLSN: b.BeginLSN, EndLSN: b.EndLSN, Timeline: b.Timeline,
	}
}

// archivingState is the condition for a primary's pg_stat_archiver. The
// message changes only when the state does (not at every segment), so a
// healthy archive does not rewrite the status; a failing one says how
// much WAL waits and how full the volume is, in whole percent, so that
// it is rewritten about once a segment, not at every look.
func archivingState(pod string, a instance.ArchiverStatus, volume *instance.VolumeUsage) (ok bool, reason, msg string) {
	if a.Failing() {
		last := "nothing archived since the server started"
		if a.LastArchivedWAL != "" {
			last = "last archived: " + a.LastArchivedWAL
		}
		room := ""
		if volume != nil && volume.TotalBytes > 0 {
			room = fmt.Sprintf(", and the data volume is %d%% full", 100-volume.FreeBytes*100/volume.TotalBytes)
		}
		return false, "ArchiveFailing", fmt.Sprintf("primary %s cannot archive WAL file %s (%s): PostgreSQL keeps it and the files after it in pg_wal until archiving succeeds; %d segments (%d MiB) wait there now%s; the archiver container's log says why",
			pod, a.LastFailedWAL, last, a.PendingSegments, a.PendingBytes>>20, room)
	}
	return true, "Archiving", fmt.Sprintf("primary %s archives its WAL: its last attempt succeeded", pod)
}
