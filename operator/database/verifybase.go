package database

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

// Verification of base backups (docs/design/database-backup.md): each new
// base backup of an archiving Database is proven by restoring it, as each
// dump is. One Job at a time, <db>-verify-base, runs the pod
// postgres.VerifyBasePod builds for the archive's newest base backup; its
// Report lands on status.baseBackups.verification, with Events and
// metrics, and the Job is deleted once that is recorded. A newer base
// backup taken meanwhile is verified next. spec.backup.verify.mode Off
// verifies none (as for dumps, bar the annotation); the other modes
// verify each base backup: there is one a baseBackupInterval.

const (
	componentVerifyBase = "verify-base"
	// annotationBaseBackup on the Job names the base backup it verifies
	// ("<name> <Barman ID>").
	annotationBaseBackup = "stable.imaginedata.co/base-backup"
)

func verifyBaseJobName(db string) string { return db + "-verify-base" }

// verifyBaseBackups records a finished verification Job's result and
// starts one for the newest base backup when it has none yet.
func (r *Reconciler) verifyBaseBackups(ctx context.Context, db *Cluster) error {
	bb := db.Status.BaseBackups
	if objectStoreOf(db) == nil || bb == nil {
		return nil
	}
	var job batchv1.Job
	err := r.Owned.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: verifyBaseJobName(db.Name)}, &job)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		return r.observeVerifyBaseJob(ctx, db, &job)
	}
	newest := bb.Newest
	if newest == nil || verifySettingsOf(db).Mode == dbv1.VerifyOff {
		return nil
	}
	// Recorded as started but no Job: it was deleted before its result
	// was; verified again.
	if v := bb.Verification; v != nil && v.BackupID == newest.ID && v.Outcome != "" {
		return nil
	}
	desired, err := r.verifyBaseJob(db, newest)
	if err != nil {
		return err
	}
	if err := r.Client.Create(ctx, desired); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Job %s: %w", desired.Name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("Job", "created").Inc()
	now := metav1.NewTime(r.now())
	bb.Verification = &dbv1.BaseBackupVerification{BackupName: newest.Name, BackupID: newest.ID,
		BackupVerification: dbv1.BackupVerification{RequestTime: &now, StartTime: &now}}
	r.normal(db, "BaseBackupVerifying", "Verify", "verifying base backup %s (%s) by restoring it: Job %s", newest.Name, newest.ID, desired.Name)
	return nil
}

// verifyBaseJob is the verification Job of the base backup b.
func (r *Reconciler) verifyBaseJob(db *Cluster, b *dbv1.BaseBackupRecord) (*batchv1.Job, error) {
	s := verifySettingsOf(db)
	c := clusterOf(db, db.Kind.Engines[engineOf(db)])
	c.Resources = &s.Resources
	o := storeOptions(objectStoreOf(db), db.Name)
	pod, inits := postgres.VerifyBasePod(c, postgres.BaseBackupVerify{Image: r.archiverImage(), Store: o, BackupID: b.ID, BackupName: b.Name})
	size, err := resource.ParseQuantity(db.Spec.StorageSize)
	if err != nil {
		return nil, fmt.Errorf("storage-size %q: %w", db.Spec.StorageSize, err)
	}
	// The restored directory is at most the data volume's size.
	size.Add(scratchFloor)
	pod.Volumes = append(pod.Volumes, scratchVolume(db, size))
	labels := withLabels(objectLabels(db), map[string]string{db.Kind.Keys.Component: componentVerifyBase})
	job := lifecycleJob(db.Kind, verifyBaseJobName(db.Name), db.Namespace, labels, ownerReference(db), pod, db.Spec.PodTemplate, 0, namesOf(db).Scripts)
	job.Annotations = map[string]string{annotationBaseBackup: b.Name + " " + b.ID}
	job.Spec.Template.Spec.InitContainers = append(job.Spec.Template.Spec.InitContainers, inits...)
	return job, nil
}

// observeVerifyBaseJob records the Job's result once it finished, and
// deletes the Job once the status read back holds that result (deleted
// before the status write, a result would be lost); a running Job is
// left alone.
func (r *Reconciler) observeVerifyBaseJob(ctx context.Context, db *Cluster, job *batchv1.Job) error {
	if !job.DeletionTimestamp.IsZero() {
		return nil
	}
	name, id, _ := strings.Cut(job.Annotations[annotationBaseBackup], " ")
	finished := jobFinished(job, batchv1.JobComplete) || jobFinished(job, batchv1.JobFailed)
	if v := db.Status.BaseBackups.Verification; finished && v != nil && v.BackupID == id && v.Outcome != "" {
		return r.deleteJob(ctx, job)
	}
	report, failMsg := jobPodReport(ctx, r.Owned, job)
	switch {
	case jobFinished(job, batchv1.JobComplete):
		if report.Verification == nil || len(report.Verification.Checks) == 0 {
			if reportWait(job) > 0 {
				return nil
			}
			r.baseBackupVerified(db, name, id, job, dbv1.VerificationError, nil, "NoReport",
				fmt.Sprintf("verification Job %s succeeded but its pod reported no checks", job.Name))
		} else if failed := report.Verification.Failed(); failed != nil {
			r.baseBackupVerified(db, name, id, job, dbv1.VerificationFailed, report.Verification, checkReason(failed.Name),
				fmt.Sprintf("check %s failed: %s", failed.Name, failed.Message))
		} else {
			r.baseBackupVerified(db, name, id, job, dbv1.VerificationVerified, report.Verification, "Verified",
				"restored, recovered to its restore point and checked; checks passed: "+strings.Join(checkNamesOf(report.Verification), ", "))
		}
	case jobFinished(job, batchv1.JobFailed):
		r.baseBackupVerified(db, name, id, job, dbv1.VerificationError, nil, "JobFailed", failedJobMessage("verification", job, failMsg))
	}
	return nil
}

// baseBackupVerified records a base backup's verification in
// status.baseBackups.verification, with an Event and the metrics.
func (r *Reconciler) baseBackupVerified(db *Cluster, name, id string, job *batchv1.Job, outcome dbv1.VerificationOutcome, found *engine.Verification, reason, msg string) {
	now := metav1.NewTime(r.now())
	start := job.CreationTimestamp
	v := &dbv1.BaseBackupVerification{BackupName: name, BackupID: id, BackupVerification: dbv1.BackupVerification{
		RequestTime: &start, StartTime: &start, CompletionTime: &now,
		Duration: &metav1.Duration{Duration: now.Sub(start.Time).Round(time.Second)},
		Outcome:  outcome, Message: msg,
	}}
	recordChecks(&v.BackupVerification, found)
	if db.Status.BaseBackups != nil {
		db.Status.BaseBackups.Verification = v
	}
	failed := 1.0
	if outcome == dbv1.VerificationVerified {
		failed = 0
		r.normal(db, "BaseBackupVerified", "Verify", "base backup %s (%s) verified: %s", name, id, msg)
		if b := db.Status.BaseBackups; b != nil {
			// Held from now on (baseholds.go), in place of the one before.
			b.LastVerified = &dbv1.BaseBackupRef{Name: name, ID: id}
			if b.Newest != nil && b.Newest.ID == id {
				lastBaseBackupVerified.WithLabelValues(db.Namespace, db.Name).Set(float64(b.Newest.EndTime.Unix()))
			}
		}
	} else {
		r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "BaseBackupVerification"+string(outcome), "Verify",
			"base backup %s (%s): %s: %s", name, id, reason, truncate(msg, 600))
	}
	baseBackupVerifyFailed.WithLabelValues(db.Namespace, db.Name).Set(failed)
}
