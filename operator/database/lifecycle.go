package database

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// Lifecycle names.
const (
	// FinalizerDeletionPolicy on a Database: its deletionPolicy is carried
	// out (a final backup first, by default) before it goes.
	FinalizerDeletionPolicy = "stable.imaginedata.co/deletion-policy"
	// AnnotationSkipFinalBackup: "true" lets a Snapshot deletion go on
	// without a final backup (the way out when it cannot succeed).
	AnnotationSkipFinalBackup = "stable.imaginedata.co/skip-final-backup"

	ConditionLastBackupSucceeded = "LastBackupSucceeded"
	ConditionBackupScheduled     = "BackupScheduled"
	ConditionDeletionBlocked     = "DeletionBlocked"
	ConditionRestored            = "Restored"

	defaultDeletionTimeout = 10 * time.Minute
)

func findCondition(conds []metav1.Condition, kind string) *metav1.Condition {
	return meta.FindStatusCondition(conds, kind)
}

func initializedOrRestored(db *Cluster) bool {
	return meta.IsStatusConditionTrue(db.Status.Conditions, ConditionInitialized)
}

// restored: the Database needs no restore or recovery, or it is done.
func restored(db *Cluster) bool {
	return !hasSource(db) || meta.IsStatusConditionTrue(db.Status.Conditions, ConditionRestored)
}

// hasSource: the Database's data comes from a DatabaseBackup (fromBackup)
// or an archive (recovery), not from an empty primary.
func hasSource(db *Cluster) bool {
	return db.Spec.FromBackup != "" || recoveryOf(db) != nil
}

func deletionPolicyOf(db *Cluster) dbv1.DeletionPolicy {
	if db.Spec.DeletionPolicy == "" {
		return dbv1.DeletionSnapshot
	}
	return db.Spec.DeletionPolicy
}

func deletionTimeoutOf(db *Cluster) time.Duration {
	if db.Spec.DeletionTimeout != nil {
		return db.Spec.DeletionTimeout.Duration
	}
	return defaultDeletionTimeout
}

// finalBackupName is the same for every reconcile of one Database (its
// UID), and differs for a later Database of the same name.
func finalBackupName(db *Cluster) string {
	return fmt.Sprintf("%s-final-%s", db.Name, strings.ReplaceAll(string(db.UID), "-", "")[:8])
}

// scheduledBackupName is the same for one schedule time, so a reconcile
// that runs twice makes one backup.
func scheduledBackupName(db *Cluster, at time.Time) string {
	return ScheduledName(db.Name, at)
}

// ensureFinalizerAndDefaults puts the finalizer on every Database before
// the operator makes anything for it, so nothing it made is deleted
// without the deletionPolicy, and records its failover, TLS and monitoring
// defaults (recordDefaults) in the same write. A write that meets a
// newer Database is errStaleDatabase: the cache is behind.
func (r *Reconciler) ensureFinalizerAndDefaults(ctx context.Context, obj client.Object) error {
	if !obj.GetDeletionTimestamp().IsZero() {
		return nil
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	added := controllerutil.AddFinalizer(obj, r.Kind.Keys.FinalizerDeletionPolicy)
	recorded := r.recordDefaults(obj)
	if !added && !recorded {
		return nil
	}
	err := r.Client.Patch(ctx, obj, patch)
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w: %w", errStaleDatabase, err)
	}
	return err
}

// finalize carries out the deletionPolicy. It reports gone once the
// finalizer is removed (the Database may then vanish at once).
func (r *Reconciler) finalize(ctx context.Context, db *Cluster) (reconcile.Result, bool, error) {
	db.Status.Phase = dbv1.PhaseDeleting
	if !controllerutil.ContainsFinalizer(db.Object, db.Kind.Keys.FinalizerDeletionPolicy) {
		return reconcile.Result{}, false, nil
	}
	policy := deletionPolicyOf(db)
	terminating, err := namespaceTerminating(ctx, r.API, db.Namespace)
	if err != nil {
		return reconcile.Result{}, false, err
	}
	switch {
	case terminating:
		// No Job can be created in a namespace being deleted, and
		// everything in it goes anyway: waiting would only hang it.
		r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "NamespaceDeleting", "Delete",
			"namespace %s is being deleted: no final backup can be taken there (deletionPolicy %s not carried out); the volumes, Secrets and backups go with the namespace", db.Namespace, policy)
		return r.removeFinalizer(ctx, db)
	case policy == dbv1.DeletionSnapshot && db.Annotations[db.Kind.Keys.SkipFinalBackup] == "true":
		r.normal(db, "FinalBackupSkipped", "Delete", "annotation %s=true: deleting without a final backup", db.Kind.Keys.SkipFinalBackup)
	case policy == dbv1.DeletionSnapshot:
		result, done, err := r.finalBackup(ctx, db)
		if err != nil || !done {
			return result, false, err
		}
	}
	if err := r.removeServers(ctx, db, policy); err != nil {
		return reconcile.Result{}, false, err
	}
	return r.removeFinalizer(ctx, db)
}

func (r *Reconciler) removeFinalizer(ctx context.Context, db *Cluster) (reconcile.Result, bool, error) {
	obj := db.Object
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(obj, db.Kind.Keys.FinalizerDeletionPolicy)
	if err := r.Client.Patch(ctx, obj, patch); err != nil {
		return reconcile.Result{}, false, client.IgnoreNotFound(err)
	}
	return reconcile.Result{}, true, nil
}

// finalBackup takes the Snapshot policy's backup and reports whether it
// completed. A failure, or a backup still not done after deletionTimeout,
// blocks the deletion with DeletionBlocked and says the way out.
func (r *Reconciler) finalBackup(ctx context.Context, db *Cluster) (reconcile.Result, bool, error) {
	name := finalBackupName(db)
	b, err := r.Kind.getBackup(ctx, r.Client, client.ObjectKey{Namespace: db.Namespace, Name: name})
	if apierrors.IsNotFound(err) {
		if _, err := r.createBackup(ctx, db, name, reasonFinal, nil, nil); err != nil {
			return reconcile.Result{}, false, err
		}
		r.normal(db, "FinalBackup", "Delete", "DatabaseBackup %s created: the StatefulSet and its volumes are removed once it completes", name)
		return reconcile.Result{RequeueAfter: deletionTimeoutOf(db)}, false, nil
	}
	if err != nil {
		return reconcile.Result{}, false, err
	}
	wayOut := fmt.Sprintf("to delete without it, annotate the Database %s=true or set spec.deletionPolicy to Retain (keeps the volumes) or Delete", db.Kind.Keys.SkipFinalBackup)
	switch b.Status.Phase {
	case dbv1.BackupCompleted:
		return reconcile.Result{}, true, nil
	case dbv1.BackupFailed:
		why := ""
		if c := findCondition(b.Status.Conditions, ConditionBackupCompleted); c != nil {
			why = ": " + c.Message
		}
		r.block(db, "FinalBackupFailed", fmt.Sprintf("the final DatabaseBackup %s failed%s; %s", name, why, wayOut))
		return reconcile.Result{}, false, nil
	}
	deadline := db.DeletionTimestamp.Add(deletionTimeoutOf(db))
	if left := time.Until(deadline); left > 0 {
		return reconcile.Result{RequeueAfter: left}, false, nil
	}
	r.block(db, "FinalBackupTimedOut", fmt.Sprintf("the final DatabaseBackup %s is still %s after deletionTimeout (%s); %s",
		name, phaseOrPending(b.Status.Phase), deletionTimeoutOf(db), wayOut))
	// It may still complete: look again now and then.
	return reconcile.Result{RequeueAfter: time.Minute}, false, nil
}

func phaseOrPending(p dbv1.BackupPhase) dbv1.BackupPhase {
	if p == "" {
		return dbv1.BackupPending
	}
	return p
}

func (r *Reconciler) block(db *Cluster, reason, msg string) {
	if c := findCondition(db.Status.Conditions, ConditionDeletionBlocked); c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
		r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, reason, "Delete", "%s", msg)
	}
	r.setCondition(db, ConditionDeletionBlocked, true, reason, msg)
}

// removeServers deletes the StatefulSet, and the data volumes unless the
// policy is Retain, which also keeps the Secrets (kept data is useless
// without its passwords) by taking the Database's ownership off them.
// The backup volume and the DatabaseBackups are never touched.
func (r *Reconciler) removeServers(ctx context.Context, db *Cluster, policy dbv1.DeletionPolicy) error {
	n := namesOf(db)
	var sts appsv1.StatefulSet
	if exists, err := r.lookup(ctx, db, "StatefulSet", n.StatefulSet, &sts, false); err == nil && exists {
		if err := r.Client.Delete(ctx, &sts, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting StatefulSet %s: %w", sts.Name, err)
		}
		r.Kind.metrics.objectWrites.WithLabelValues("StatefulSet", "deleted").Inc()
		r.normal(db, "Deleted", "Delete", "StatefulSet %s deleted (deletionPolicy %s)", sts.Name, policy)
	}
	if policy == dbv1.DeletionRetain {
		return r.keepSecrets(ctx, db)
	}
	claims, err := r.dataClaims(ctx, db)
	if err != nil {
		return err
	}
	for _, pvc := range claims {
		if !pvc.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.Client.Delete(ctx, pvc); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting PersistentVolumeClaim %s: %w", pvc.Name, err)
		}
		r.Kind.metrics.objectWrites.WithLabelValues("PersistentVolumeClaim", "deleted").Inc()
		r.normal(db, "Deleted", "Delete", "PersistentVolumeClaim %s deleted (deletionPolicy %s)", pvc.Name, policy)
	}
	return nil
}

// keepSecrets removes the Database's owner reference from its Secrets, so
// garbage collection leaves them, and records on them and on the kept
// volumes which Database kept them (its UID, AnnotationKeptFrom): a new
// Database of the same name adopts the Secrets when both agree
// (adoptKeptSecrets). The volumes are marked first, so a pass cut short
// leaves no kept Secret without its volume's mark; each step is repeated
// until the finalizer goes.
func (r *Reconciler) keepSecrets(ctx context.Context, db *Cluster) error {
	if err := r.markKeptClaims(ctx, db); err != nil {
		return err
	}
	n := namesOf(db)
	for _, name := range []string{n.Superuser, n.App, n.Replication} {
		if name == "" {
			continue
		}
		s := secretMetadata()
		if exists, err := r.lookup(ctx, db, "Secret", name, s, false); err != nil || !exists {
			continue
		}
		// Controlled by db until now: its owner reference vouches for the
		// identity recorded (Secrets made before AnnotationDatabaseUID
		// existed get it here too).
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"ownerReferences": nil,
			"annotations":     map[string]string{db.Kind.Keys.KeptFrom: string(db.UID), db.Kind.Keys.ClusterUID: string(db.UID)},
			"resourceVersion": s.ResourceVersion,
		}})
		if err != nil {
			return err
		}
		target := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name}}
		if err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("keeping Secret %s: %w", name, err)
		}
		r.normal(db, "Kept", "Delete", "Secret %s kept (deletionPolicy Retain): the kept volumes need its password; a new %s named %s adopts it", name, db.Kind.clusterKind(), db.Name)
	}
	return nil
}

// markKeptClaims records on each kept data volume the UID of the Database
// that kept it.
func (r *Reconciler) markKeptClaims(ctx context.Context, db *Cluster) error {
	claims, err := r.dataClaims(ctx, db)
	if err != nil {
		return err
	}
	for _, pvc := range claims {
		if pvc.Annotations[db.Kind.Keys.KeptFrom] == string(db.UID) {
			continue
		}
		if err := r.setKeptMark(ctx, db, pvc, string(db.UID)); err != nil {
			return err
		}
	}
	return nil
}

// dataClaims are the cluster's data volumes (of every ordinal, the ones
// beyond replicas too).
func (r *Reconciler) dataClaims(ctx context.Context, db *Cluster) ([]*corev1.PersistentVolumeClaim, error) {
	var list corev1.PersistentVolumeClaimList
	if err := r.Owned.List(ctx, &list, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db, componentServer))); err != nil {
		return nil, err
	}
	var out []*corev1.PersistentVolumeClaim
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Name, fmt.Sprintf("%s-%s-", engine.DataVolume, db.Name)) {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// setKeptMark sets AnnotationKeptFrom on a volume to uid, or removes it
// ("").
func (r *Reconciler) setKeptMark(ctx context.Context, db *Cluster, pvc *corev1.PersistentVolumeClaim, uid string) error {
	value := any(uid)
	if uid == "" {
		value = nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{db.Kind.Keys.KeptFrom: value}}})
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, pvc, client.RawPatch(types.MergePatchType, body)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("PersistentVolumeClaim %s: setting the kept mark: %w", pvc.Name, err)
	}
	return nil
}

// manageBackups makes scheduled backups, applies retention and reports the
// newest backup; it returns when to look again (the next schedule time).
func (r *Reconciler) manageBackups(ctx context.Context, db *Cluster) (time.Duration, error) {
	backups, err := r.Kind.backupsOf(ctx, r.Client, db)
	if err != nil {
		return 0, err
	}
	r.observeBackups(db, backups)
	verifyRecheck := r.observeVerifications(db, backups)
	if db.Status.Backup == nil {
		db.Status.Backup = &dbv1.BackupStatus{}
	}
	if err := r.releaseHolds(ctx, db); err != nil {
		return 0, err
	}
	if err := r.holdNewestVerified(ctx, db, backups); err != nil {
		return 0, err
	}
	if err := r.prune(ctx, db, backups); err != nil {
		return 0, err
	}
	next, err := r.schedule(ctx, db, backups)
	if verifyRecheck > 0 && (next == 0 || verifyRecheck < next) {
		next = verifyRecheck
	}
	return next, err
}

// observeBackups sets LastBackupSucceeded from the newest finished backup.
func (r *Reconciler) observeBackups(db *Cluster, backups []*Backup) {
	var last, lastOK *Backup
	for _, b := range backups {
		if b.Status.CompletionTime == nil || b.CreationTimestamp.Before(&db.CreationTimestamp) {
			continue
		}
		if last == nil || finishedAfter(b, last) {
			last = b
		}
		if b.Status.Phase == dbv1.BackupCompleted && (lastOK == nil || finishedAfter(b, lastOK)) {
			lastOK = b
		}
	}
	if db.Status.Backup == nil && last == nil {
		return
	}
	if db.Status.Backup == nil {
		db.Status.Backup = &dbv1.BackupStatus{}
	}
	if last != nil && last.Status.ClaimName != "" {
		db.Status.Backup.ClaimName = last.Status.ClaimName
	}
	if lastOK != nil {
		db.Status.Backup.LastSuccessfulBackup = lastOK.Name
		db.Status.Backup.LastSuccessTime = lastOK.Status.CompletionTime
		r.Kind.metrics.lastBackupSuccess.WithLabelValues(db.Namespace, db.Name).Set(float64(lastOK.Status.CompletionTime.Unix()))
	}
	if last == nil {
		return
	}
	db.Status.Backup.LastBackup = last.Name
	if last.Status.Phase == dbv1.BackupCompleted {
		r.setCondition(db, ConditionLastBackupSucceeded, true, "BackupCompleted",
			fmt.Sprintf("DatabaseBackup %s completed at %s (%d bytes)", last.Name, last.Status.CompletionTime.UTC().Format(time.RFC3339), last.Status.Size))
		return
	}
	why := ""
	if c := findCondition(last.Status.Conditions, ConditionBackupCompleted); c != nil {
		why = ": " + c.Message
	}
	msg := fmt.Sprintf("DatabaseBackup %s failed%s", last.Name, why)
	if lastOK != nil {
		msg += fmt.Sprintf("; the newest completed backup is %s", lastOK.Name)
	}
	r.warn(db, ConditionLastBackupSucceeded, "BackupFailed", msg)
	r.setCondition(db, ConditionLastBackupSucceeded, false, "BackupFailed", msg)
}

// finishedAfter orders finished backups. Times have a resolution of a
// second: of two that finished in the same second, the one started later
// counts as newer, and when that ties too, a failure does (an alert on
// it is better than a failure hidden).
func finishedAfter(a, b *Backup) bool {
	if !a.Status.CompletionTime.Equal(b.Status.CompletionTime) {
		return b.Status.CompletionTime.Before(a.Status.CompletionTime)
	}
	if as, bs := ptrTime(a.Status.StartTime), ptrTime(b.Status.StartTime); !as.Equal(bs) {
		return bs.Before(as)
	}
	return a.Status.Phase == dbv1.BackupFailed && b.Status.Phase != dbv1.BackupFailed
}

func ptrTime(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// schedule creates the backup of the most recent schedule time not yet
// made (one, however many were missed) and returns the wait until the
// next one.
func (r *Reconciler) schedule(ctx context.Context, db *Cluster, backups []*Backup) (time.Duration, error) {
	spec := db.Spec.Backup
	st := db.Status.Backup
	if spec == nil || spec.Schedule == "" {
		st.NextScheduleTime = nil
		r.Kind.metrics.nextScheduledBackup.DeleteLabelValues(db.Namespace, db.Name)
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionBackupScheduled)
		return 0, nil
	}
	tz := ""
	if spec.TimeZone != nil {
		tz = *spec.TimeZone
	}
	sched, loc, err := parseSchedule(spec.Schedule, tz)
	if err != nil {
		r.warn(db, ConditionBackupScheduled, "InvalidSchedule", err.Error())
		r.setCondition(db, ConditionBackupScheduled, false, "InvalidSchedule", err.Error())
		return 0, nil
	}
	if spec.Suspend || db.Spec.Suspend {
		st.NextScheduleTime = nil
		r.Kind.metrics.nextScheduledBackup.DeleteLabelValues(db.Namespace, db.Name)
		r.setCondition(db, ConditionBackupScheduled, false, "Suspended", "scheduled backups are suspended")
		return 0, nil
	}
	now := r.now()
	last := db.CreationTimestamp.Time
	if st.LastScheduleTime != nil {
		last = st.LastScheduleTime.Time
	}
	waiting := Unfinished(scheduledOf(db, backups))
	if made := LastMade(last, db.Name, waiting); made.After(last) {
		last = made
		st.LastScheduleTime = &metav1.Time{Time: made}
	}
	if due, ok := lastDue(sched, loc, last, now); ok {
		// due is after the waiting backup's own time (LastMade), so a
		// backup waiting stands for it.
		if waiting != "" {
			r.missSchedule(db, waiting, due, timesDue(sched, loc, last, now))
		} else if err := r.createScheduledBackup(ctx, db, due); err != nil {
			return 0, err
		}
		st.LastScheduleTime = &metav1.Time{Time: due}
	}
	next := sched.Next(now.In(loc))
	st.NextScheduleTime = &metav1.Time{Time: next}
	r.Kind.metrics.nextScheduledBackup.WithLabelValues(db.Namespace, db.Name).Set(float64(next.Unix()))
	msg := fmt.Sprintf("next backup at %s (schedule %q, time zone %s)", next.UTC().Format(time.RFC3339), spec.Schedule, loc)
	if waiting != "" && st.MissedSchedules > 0 {
		msg += fmt.Sprintf("; scheduled DatabaseBackup %s has not finished yet, so schedule times pass without a new backup (%d missed so far, status.backup.missedSchedules)", waiting, st.MissedSchedules)
	}
	r.setCondition(db, ConditionBackupScheduled, true, "Scheduled", msg)
	return next.Sub(now), nil
}

// scheduledOf are the scheduled backups made for this Database (not a
// former one of the same name).
func scheduledOf(db *Cluster, backups []*Backup) []*Backup {
	var out []*Backup
	for _, b := range backups {
		if b.Labels[db.Kind.Keys.BackupReason] == reasonScheduled && !b.CreationTimestamp.Before(&db.CreationTimestamp) {
			out = append(out, b)
		}
	}
	return out
}

// missSchedule counts schedule times that pass while the previous
// scheduled backup has not finished, and says so: they are not queued.
func (r *Reconciler) missSchedule(db *Cluster, waiting string, due time.Time, times int64) {
	db.Status.Backup.MissedSchedules += max(times, 1)
	r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "BackupScheduleMissed", "Backup",
		"no DatabaseBackup for the schedule time %s: the scheduled DatabaseBackup %s has not finished, and it stands for this time too (%d schedule times missed so far)",
		due.UTC().Format(time.RFC3339), waiting, db.Status.Backup.MissedSchedules)
}

func (r *Reconciler) createScheduledBackup(ctx context.Context, db *Cluster, due time.Time) error {
	name := scheduledBackupName(db, due)
	created, err := r.createBackup(ctx, db, name, reasonScheduled, nil, nil)
	if err != nil || !created {
		return err
	}
	r.normal(db, "BackupScheduled", "Backup", "DatabaseBackup %s created for the schedule time %s", name, due.UTC().Format(time.RFC3339))
	return nil
}

// prune deletes what retention no longer keeps; each DatabaseBackup's
// finalizer deletes its file. Only backups made for this Database (not a
// former one of the same name) count.
func (r *Reconciler) prune(ctx context.Context, db *Cluster, backups []*Backup) error {
	spec := db.Spec.Backup
	if spec == nil || spec.Retention == nil {
		return nil
	}
	keep, maxAge := int32(0), time.Duration(0)
	if spec.Retention.KeepLast != nil {
		keep = *spec.Retention.KeepLast
	}
	if spec.Retention.MaxAge != nil {
		maxAge = spec.Retention.MaxAge.Duration
	}
	return r.Prune(ctx, db, backups, keep, maxAge)
}

// Prune deletes the backups of db that retention (keepLast, maxAge; 0:
// no limit) no longer keeps. Only backups made for this cluster (not a
// former one of the same name) count.
func (r *Reconciler) Prune(ctx context.Context, db *Cluster, backups []*Backup, keep int32, maxAge time.Duration) error {
	var records []backupRecord
	for _, b := range backups {
		if b.CreationTimestamp.Before(&db.CreationTimestamp) || !b.DeletionTimestamp.IsZero() {
			continue
		}
		rec := backupRecord{Name: b.Name, Completed: b.Status.Phase == dbv1.BackupCompleted, Created: b.CreationTimestamp.Time}
		rec.Finished = rec.Completed || b.Status.Phase == dbv1.BackupFailed
		if b.Status.CompletionTime != nil {
			rec.Time = b.Status.CompletionTime.Time
		}
		if holders, err := heldBy(ctx, r.Kind, r.Client, b); err != nil || len(holders) > 0 || b.Keep {
			rec.InUse = true
		}
		// Its hold may have been written in this very pass, after the list
		// was read.
		if st := db.Status.Backup; st != nil && st.LastVerifiedBackup == b.Name {
			rec.InUse = true
		}
		records = append(records, rec)
	}
	for _, name := range toPrune(records, keep, maxAge, r.now()) {
		b := r.Kind.Backups.New()
		b.SetNamespace(db.Namespace)
		b.SetName(name)
		if err := r.Client.Delete(ctx, b); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting DatabaseBackup %s (retention): %w", name, err)
		}
		r.normal(db, "BackupPruned", "Retention", "DatabaseBackup %s deleted by retention; its finalizer deletes its file", name)
	}
	return nil
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
