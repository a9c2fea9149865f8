package database

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// The write fence of a major upgrade. The pre-upgrade dump is all the new
// version gets: a write made after it starts would be lost. So before the
// dump a fence Job (engine.Fencer) makes the app user unable to log in and
// ends its sessions; the superuser, who takes the dump, still works.
//
// ConditionWritesFenced is the record: True from the fence Job's creation
// (from then on the app may be locked out) until the fence is lifted:
//   - the upgrade succeeded: the new data directory's app user logs in
//     (the engine's upgrade Job makes it so), the condition goes when the
//     new primary is ready;
//   - the upgrade was cancelled, failed before the servers stopped, or
//     was rolled back (the old directory, fenced, serves again): the
//     unfence Job lets the app user log in again.
const (
	ConditionWritesFenced = "WritesFenced"

	reasonFencing      = "Fencing"
	reasonWritesFenced = "WritesFenced"
	reasonLiftFailed   = "LiftFailed"

	componentFence   = "fence"
	componentUnfence = "unfence"
)

func fenceJobName(db *Cluster) string   { return db.Name + "-fence" }
func unfenceJobName(db *Cluster) string { return db.Name + "-unfence" }

// writesFenced: the fence Job has completed and nothing lifted it since.
func writesFenced(db *Cluster) bool {
	c := meta.FindStatusCondition(db.Status.Conditions, ConditionWritesFenced)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reasonWritesFenced
}

// fenceOwed: the app user may be locked out (a fence Job was made).
func fenceOwed(db *Cluster) bool {
	return meta.IsStatusConditionTrue(db.Status.Conditions, ConditionWritesFenced)
}

// fenceWrites runs this attempt's fence Job; true once it has completed.
// A failed fence Job fails the upgrade before anything else was touched
// (the servers run on, the unfence Job lets the app in again).
func (r *Reconciler) fenceWrites(ctx context.Context, db *Cluster, eng engine.Engine) (bool, error) {
	fencer, ok := eng.(engine.Fencer)
	if !ok || writesFenced(db) {
		return true, nil
	}
	// An unfence Job of an earlier fence must neither run after this one
	// nor be taken for its lift: it goes first.
	if gone, err := r.jobGone(ctx, db, unfenceJobName(db)); err != nil || !gone {
		return false, err
	}
	u := db.Status.Upgrade
	job, err := r.attemptJob(ctx, db, fenceJobName(db), func() (*batchv1.Job, error) {
		return fenceJob(db, eng, fencer, false, u.FromImage), nil
	})
	if err != nil || job == nil {
		return false, err
	}
	user := appUser(db)
	switch {
	case jobFinished(job, batchv1.JobComplete):
		report, _ := jobPodReport(ctx, r.Owned, job)
		msg := fmt.Sprintf("writes are fenced for the upgrade to %s: role %s cannot log in and its sessions were ended (%d by Job %s), so no write is made after DatabaseBackup %s starts; it logs in again on the upgraded data, or after a rollback",
			u.ToImage, user, report.SessionsEnded, job.Name, u.Backup)
		r.setCondition(db, ConditionWritesFenced, true, reasonWritesFenced, msg)
		r.normal(db, "WritesFenced", "Upgrade", "%s", msg)
		return true, nil
	case jobFinished(job, batchv1.JobFailed):
		u.FailureReason = "FenceJobFailed"
		msg := fmt.Sprintf("the fence Job %s failed (%s): the upgrade from %s to %s did not start, nothing was touched; the servers keep %s and Job %s lets role %s log in again. Set spec.image back to %s (clears this), fix the cause and set %s again for a new attempt",
			job.Name, jobFailure(ctx, r, job), u.FromImage, u.ToImage, u.FromImage, unfenceJobName(db), user, u.FromImage, u.ToImage)
		r.setCondition(db, ConditionUpgradeFailed, true, u.FailureReason, msg)
		r.toStep(db, dbv1.UpgradeFailed, "%s", msg)
		return false, nil
	}
	msg := fmt.Sprintf("Job %s fences writes (role %s cannot log in, its sessions are ended) before DatabaseBackup %s starts", job.Name, user, u.Backup)
	r.setCondition(db, ConditionWritesFenced, true, reasonFencing, msg)
	r.setUpgrading(db, string(u.Step), msg)
	return false, nil
}

// liftFence runs the unfence Job when a fence is owed and no upgrade
// runs (cancelled, failed or rolled back): the app user logs in again.
func (r *Reconciler) liftFence(ctx context.Context, db *Cluster, eng engine.Engine) error {
	fence := meta.FindStatusCondition(db.Status.Conditions, ConditionWritesFenced)
	if fence == nil || fence.Status != metav1.ConditionTrue || upgradeRunning(db.Status.Upgrade) {
		return nil
	}
	fencer, ok := eng.(engine.Fencer)
	if !ok {
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionWritesFenced)
		return nil
	}
	// A fence Job still at work (a cancel while it ran) is stopped first:
	// it must not lock the app out after the lift.
	if idle, err := r.jobIdle(ctx, db, fenceJobName(db)); err != nil || !idle {
		return err
	}
	var job batchv1.Job
	exists, err := r.lookup(ctx, db, "Job", unfenceJobName(db), &job, true)
	if err != nil {
		return err
	}
	if exists && !job.CreationTimestamp.After(fence.LastTransitionTime.Time) {
		// An earlier fence's lift: this fence needs its own.
		return r.deleteJob(ctx, &job)
	}
	if !exists {
		desired := fenceJob(db, eng, fencer, true, runningImage(db, eng))
		if err := r.Client.Create(ctx, desired, client.FieldOwner(FieldManager)); err != nil {
			return client.IgnoreAlreadyExists(err)
		}
		r.Kind.metrics.objectWrites.WithLabelValues("Job", "created").Inc()
		r.normal(db, "Created", "Upgrade", "Job %s created: role %s logs in again", desired.Name, appUser(db))
		return nil
	}
	switch {
	case jobFinished(&job, batchv1.JobComplete):
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionWritesFenced)
		r.normal(db, "FenceLifted", "Upgrade", "Job %s lifted the write fence: role %s logs in again", job.Name, appUser(db))
	case jobFinished(&job, batchv1.JobFailed):
		msg := fmt.Sprintf("Job %s could not lift the write fence (%s): role %s still cannot log in. Delete Job %s to try again, or run %s as the superuser",
			job.Name, jobFailure(ctx, r, &job), appUser(db), job.Name, fencer.LiftByHand(appUser(db)))
		if fence.Reason != reasonLiftFailed {
			r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, reasonLiftFailed, "Upgrade", "%s", msg)
		}
		r.setCondition(db, ConditionWritesFenced, true, reasonLiftFailed, msg)
	}
	return nil
}

// fenceLiftedByUpgrade: the upgraded data directory serves, its app user
// logs in (the engine's upgrade Job made it so); the old one stays fenced.
func (r *Reconciler) fenceLiftedByUpgrade(db *Cluster) {
	if !fenceOwed(db) {
		return
	}
	meta.RemoveStatusCondition(&db.Status.Conditions, ConditionWritesFenced)
	r.normal(db, "FenceLifted", "Upgrade", "the upgraded data directory serves: role %s logs in again (the kept old directory stays fenced)", appUser(db))
}

// runningImage is the image the servers run, for Jobs that talk to them.
func runningImage(db *Cluster, eng engine.Engine) string {
	if db.Status.CurrentImage != "" {
		return db.Status.CurrentImage
	}
	return imageOf(db, eng)
}

// fenceJob runs the engine's fence (or, with lift, unfence) container
// with image against the primary.
func fenceJob(db *Cluster, eng engine.Engine, fencer engine.Fencer, lift bool, image string) *batchv1.Job {
	c := clusterOf(db, eng)
	c.Image = image
	name, component := fenceJobName(db), componentFence
	if lift {
		name, component = unfenceJobName(db), componentUnfence
	}
	labels := withLabels(objectLabels(db), map[string]string{db.Kind.Keys.Component: component})
	if u := db.Status.Upgrade; u != nil {
		labels[LabelUpgradeAttempt] = u.Attempt
	}
	return lifecycleJob(db.Kind, name, db.Namespace, labels, ownerReference(db), fencer.FencePod(c, lift), db.Spec.PodTemplate, 2, namesOf(db).Scripts)
}

// jobIdle: the Job of that name has finished or is gone. One still at
// work is deleted, and waited for.
func (r *Reconciler) jobIdle(ctx context.Context, db *Cluster, name string) (bool, error) {
	var job batchv1.Job
	exists, err := r.lookup(ctx, db, "Job", name, &job, false)
	if err != nil || !exists {
		return err == nil, err
	}
	if jobFinished(&job, batchv1.JobComplete) || jobFinished(&job, batchv1.JobFailed) {
		return true, nil
	}
	return false, r.deleteJob(ctx, &job)
}

// jobGone: no Job of that name is left; one that is, is deleted.
func (r *Reconciler) jobGone(ctx context.Context, db *Cluster, name string) (bool, error) {
	var job batchv1.Job
	exists, err := r.lookup(ctx, db, "Job", name, &job, false)
	if err != nil || !exists {
		return err == nil, err
	}
	return false, r.deleteJob(ctx, &job)
}

// deleteJob deletes a Job and its pods (foreground), once.
func (r *Reconciler) deleteJob(ctx context.Context, job *batchv1.Job) error {
	if !job.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := r.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting Job %s: %w", job.Name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("Job", "deleted").Inc()
	return nil
}
