package database

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

const componentRestore = "restore"

func restoreJobName(db *Cluster) string { return db.Name + "-restore" }

// ensureRestore restores spec.fromBackup into the new primary before the
// init Job runs. It reports whether the Database may go on to its init
// Job; until then, Restored says what it waits for, and a missing or
// failed backup keeps the Database from ever looking ready.
func (r *Reconciler) ensureRestore(ctx context.Context, db *Cluster, eng engine.Engine, primary *corev1.Pod) (bool, error) {
	if restored(db) {
		return true, nil
	}
	name := db.Spec.FromBackup
	b, err := r.Kind.getBackup(ctx, r.Client, client.ObjectKey{Namespace: db.Namespace, Name: name})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		r.notRestored(db, "BackupNotFound", fmt.Sprintf("DatabaseBackup %s (spec.fromBackup) does not exist in namespace %s: nothing is initialised until it does", name, db.Namespace))
		return false, nil
	}
	if methodOf(b) == dbv1.BackupMethodBaseBackup {
		msg := fmt.Sprintf("DatabaseBackup %s (spec.fromBackup) is a base backup, which fromBackup cannot restore: make a new Database with spec.recovery instead, its source the archive the backup's status.archive names (a recovery picks the base backup itself)", name)
		if a := b.Status.Archive; a != nil {
			msg += fmt.Sprintf(": serverName %s in bucket %s", a.ServerName, a.ObjectStore.Bucket)
		}
		r.notRestored(db, "BackupIsABaseBackup", msg)
		return false, nil
	}
	switch b.Status.Phase {
	case dbv1.BackupCompleted:
	case dbv1.BackupFailed:
		r.notRestored(db, "BackupFailed", fmt.Sprintf("DatabaseBackup %s (spec.fromBackup) failed: it has no file to restore; make a new Database from a completed backup", name))
		return false, nil
	default:
		r.notRestored(db, "BackupNotCompleted", fmt.Sprintf("DatabaseBackup %s (spec.fromBackup) is %s; the restore starts once it completes", name, phaseOrPending(b.Status.Phase)))
		return false, nil
	}

	// Held until restored: retention and deletion leave its file.
	if err := r.hold(ctx, b, db, holdRestore, fmt.Sprintf("%s %s restores from it (fromBackup)", r.Kind.clusterKind(), db.Name)); err != nil {
		return false, err
	}
	var job batchv1.Job
	exists, err := r.lookup(ctx, db, "Job", restoreJobName(db), &job, primary != nil && podReady(primary))
	if err != nil {
		return false, err
	}
	if !exists {
		if primary == nil || !podReady(primary) {
			r.notRestored(db, "WaitingForPrimary", fmt.Sprintf("the restore of DatabaseBackup %s runs once the primary %s is ready", name, currentPrimary(db)))
			return false, nil
		}
		desired := restoreJob(db, eng, b)
		if err := r.Client.Create(ctx, desired, client.FieldOwner(r.Kind.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating restore Job %s: %w", desired.Name, err)
		}
		r.Kind.metrics.objectWrites.WithLabelValues("Job", "created").Inc()
		r.normal(db, "Restoring", "Restore", "restore Job %s created: it restores %s (sha256 %s) into the primary", desired.Name, b.Status.File, b.Status.SHA256)
		r.notRestored(db, "RestoreRunning", fmt.Sprintf("restore Job %s restores DatabaseBackup %s", desired.Name, name))
		return false, nil
	}
	switch {
	case jobFinished(&job, batchv1.JobComplete):
		r.normal(db, "Restored", "Restore", "restore Job %s restored DatabaseBackup %s", job.Name, name)
		r.setCondition(db, ConditionRestored, true, "Restored", fmt.Sprintf("restored from DatabaseBackup %s (%s, sha256 %s)", name, b.Status.File, b.Status.SHA256))
		return true, nil
	case jobFinished(&job, batchv1.JobFailed):
		c := jobCondition(&job, batchv1.JobFailed)
		msg := fmt.Sprintf("restore Job %s failed (%s: %s)", job.Name, c.Reason, c.Message)
		if _, said := jobPodReport(ctx, r.Owned, &job); said != "" {
			msg += "; its pod said: " + truncate(said, 400)
		}
		msg += "; the database is not initialised: delete this Database (deletionPolicy Delete) and make a new one"
		r.warn(db, ConditionRestored, "RestoreFailed", msg)
		r.notRestored(db, "RestoreFailed", msg)
		return false, nil
	default:
		r.notRestored(db, "RestoreRunning", fmt.Sprintf("restore Job %s restores DatabaseBackup %s", job.Name, name))
		return false, nil
	}
}

func (r *Reconciler) notRestored(db *Cluster, reason, msg string) {
	if reason == "BackupNotFound" || reason == "BackupFailed" {
		r.warn(db, ConditionRestored, reason, msg)
	}
	r.setCondition(db, ConditionRestored, false, reason, msg)
}

// restoreJob runs the engine's restore container, owned by the Database,
// reading the file from the volume it is on (maybe another Database's).
func restoreJob(db *Cluster, eng engine.Engine, b *Backup) *batchv1.Job {
	pod := eng.RestorePod(clusterOf(db, eng), engine.Restore{File: b.Status.File, SHA256: b.Status.SHA256, ClaimName: b.Status.ClaimName})
	labels := withLabels(objectLabels(db), map[string]string{db.Kind.Keys.Component: componentRestore})
	return lifecycleJob(db.Kind, restoreJobName(db), db.Namespace, labels, ownerReference(db), pod, db.Spec.PodTemplate, 2, namesOf(db).Scripts)
}

// restoreProblem is the Restored condition when it keeps the Database from
// being ready (a restore or a recovery not done yet).
func restoreProblem(db *Cluster) *metav1.Condition {
	if restored(db) {
		return nil
	}
	return findCondition(db.Status.Conditions, ConditionRestored)
}
