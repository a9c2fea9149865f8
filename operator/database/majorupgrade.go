package database

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/versionchange"
)

// A major-version upgrade, step by step (status.upgrade.step records where
// it is, so a reconcile that runs twice does each step once):
//
//	BackingUp          the fence Job locks the app user out and ends its
//	                   sessions (fence.go), then a DatabaseBackup with the
//	                   old image, servers running
//	ScalingDown        the StatefulSet at zero, until no server pod is left
//	RunningUpgradeJob  the engine's upgrade Job, NEW image, on the primary's
//	                   volume: new data directory from the dump, swapped in,
//	                   the old one kept
//	StartingNewVersion the StatefulSet back, new image; standbys re-clone
//	                   (the engine moves their old-version data aside)
//	OldDataKept        the new primary was ready: currentVersion moves,
//	                   the fence is gone with the old directory, which is
//	                   kept until the user annotates AnnotationRemoveOldData
//	RemovingOldData    the servers restart with Cluster.RemoveOldData
//	Completed
//
// A failed upgrade Job, or a new primary not ready within upgradeTimeout,
// goes RollingBack (StatefulSet at zero) → RestoringOldData (the engine's
// rollback Job, OLD image, puts the old directory back) → Failed (the old
// image runs again, condition UpgradeFailed, the unfence Job lets the app
// user in again). A failed fence Job goes to Failed at once.

const (
	// LabelUpgradeAttempt on upgrade and rollback Jobs: the attempt they
	// belong to, so a Job of an earlier attempt is never taken for this
	// one's.
	LabelUpgradeAttempt = "stable.imaginedata.co/upgrade-attempt"

	componentUpgrade  = "upgrade"
	componentRollback = "rollback"

	defaultUpgradeTimeout = 15 * time.Minute

	// AnnotationRemoveOldData: "true" on a Database lets the servers
	// remove the data directory a finished major upgrade kept. Until then
	// it stays (a way back by hand), and the upgrade waits in OldDataKept.
	AnnotationRemoveOldData = "stable.imaginedata.co/remove-old-data"
)

func upgradeJobName(db *Cluster) string  { return db.Name + "-upgrade" }
func rollbackJobName(db *Cluster) string { return db.Name + "-rollback" }

// serverPlan is what the StatefulSet runs.
type serverPlan struct {
	Image    string
	Replicas int32
	// RemoveOldData: the servers remove the data directories a finished
	// major upgrade kept (engine.Cluster.RemoveOldData).
	RemoveOldData bool
	// Keep: leave the StatefulSet as it is (the servers run on while the
	// pre-upgrade backup is taken).
	Keep bool
}

// steadyPlan runs image on every replica. The old-data removal of a
// finished upgrade stays on (turning it off would restart every server).
func steadyPlan(db *Cluster, image string) serverPlan {
	u := db.Status.Upgrade
	removeOld := u != nil && (u.Step == dbv1.UpgradeRemovingOldData || u.Step == dbv1.UpgradeCompleted)
	return serverPlan{Image: image, Replicas: replicasOf(db), RemoveOldData: removeOld}
}

// stopped: no server runs, on the image given (kept for the Jobs to come).
func stopped(image string) serverPlan { return serverPlan{Image: image} }

// upgradeRunning: an upgrade is under way (versionchange decides it; the
// backup, hold, fence and failover files ask it by this name).
var upgradeRunning = versionchange.InProgress

func upgradeTimeoutOf(db *Cluster) time.Duration {
	if db.Spec.UpgradeTimeout != nil {
		return db.Spec.UpgradeTimeout.Duration
	}
	return defaultUpgradeTimeout
}

// startMajorUpgrade records a new upgrade at its first step.
func (r *Reconciler) startMajorUpgrade(db *Cluster, eng engine.Engine, running, wanted, fromV, toV string) {
	attempt := attemptHash(db, wanted)
	db.Status.Upgrade = &dbv1.UpgradeStatus{
		Attempt:   attempt,
		FromImage: running, FromVersion: fromV,
		ToImage: wanted, ToVersion: toV,
		Backup: preUpgradeBackupOf(db, attempt),
	}
	meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgradeFailed)
	if fenceOwed(db) {
		// An earlier attempt's fence, whose lift may have run part-way (its
		// Job is stopped before this fence): this attempt fences anew.
		r.setCondition(db, ConditionWritesFenced, true, reasonFencing, fmt.Sprintf("a new upgrade attempt (%s) fences writes again", db.Status.Upgrade.Attempt))
	}
	r.toStep(db, dbv1.UpgradeBackingUp, "%s %s to %s is a major upgrade: Job %s fences writes (role %s cannot log in until the upgraded data serves, or a rollback), then DatabaseBackup %s; then the servers stop, Job %s restores it into a new data directory with %s, and the servers start on it; the old data directory is kept until the Database is annotated %s=true",
		eng.Name(), fromV, toV, fenceJobName(db), appUser(db), db.Status.Upgrade.Backup, upgradeJobName(db), wanted, db.Kind.Keys.RemoveOldData)
}

// toStep moves the upgrade to step, announcing it once.
func (r *Reconciler) toStep(db *Cluster, step dbv1.UpgradeStep, msg string, args ...any) {
	u := db.Status.Upgrade
	u.Step = step
	u.StepStartTime = ptr.To(metav1.NewTime(r.now()))
	text := fmt.Sprintf(msg, args...)
	eventType := corev1.EventTypeNormal
	if step == dbv1.UpgradeRollingBack || step == dbv1.UpgradeRestoringOldData || step == dbv1.UpgradeFailed {
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(db.Object, nil, eventType, stepEventReason(step), "Upgrade", "%s", text)
	if upgradeRunning(u) {
		r.setUpgrading(db, string(step), text)
	} else {
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgrading)
	}
}

// setUpgrading sets the Upgrading condition; while writes are fenced it
// says so.
func (r *Reconciler) setUpgrading(db *Cluster, reason, msg string) {
	if writesFenced(db) {
		msg += fmt.Sprintf(" (writes fenced: role %s cannot log in)", appUser(db))
	}
	r.setCondition(db, ConditionUpgrading, true, reason, msg)
}

// stepEventReason is the reason of the Event a step starts with.
func stepEventReason(step dbv1.UpgradeStep) string {
	switch step {
	case dbv1.UpgradeOldDataKept:
		return "Upgraded"
	case dbv1.UpgradeCompleted:
		return "OldDataRemoved"
	case dbv1.UpgradeFailed:
		return "UpgradeFailed"
	}
	return string(step)
}

// majorUpgrade carries the upgrade in status.upgrade one step further when
// what that step waits for has happened, and says what the StatefulSet
// runs meanwhile.
func (r *Reconciler) majorUpgrade(ctx context.Context, db *Cluster, eng engine.Engine, l *live) (serverPlan, error) {
	if err := r.requireFresh(ctx, db); err != nil {
		// Acting on an older step could start servers a Job is working
		// under.
		return serverPlan{Keep: true}, err
	}
	u := db.Status.Upgrade
	switch u.Step {
	case dbv1.UpgradeBackingUp:
		return r.upgradeBackup(ctx, db, eng, l)
	case dbv1.UpgradeScalingDown:
		return r.upgradeScaleDown(ctx, db, eng, l)
	case dbv1.UpgradeRunningJob:
		return r.upgradeJob(ctx, db, eng)
	case dbv1.UpgradeStartingNewVersion:
		return r.upgradeStart(ctx, db, eng, l)
	case dbv1.UpgradeOldDataKept:
		return r.keepOldData(db, eng, l), nil
	case dbv1.UpgradeRemovingOldData:
		return r.upgradeRemoveOldData(db, eng, l), nil
	case dbv1.UpgradeRollingBack:
		return r.rollbackScaleDown(ctx, db, l)
	case dbv1.UpgradeRestoringOldData:
		return r.rollbackJob(ctx, db, eng)
	}
	return steadyPlan(db, u.ToImage), nil
}

// errStaleDatabase: the cached Database is older than the API server's.
// The reconcile stops without writing its status (a merge patch of the
// older conditions would undo newer ones) and looks again soon.
var errStaleDatabase = errors.New("the cached Database is older than the API server's")

// requireFresh fails with errStaleDatabase unless the cached Database is
// the API server's newest.
func (r *Reconciler) requireFresh(ctx context.Context, db *Cluster) error {
	fresh := db.Kind.Clusters.New()
	if err := r.API.Get(ctx, client.ObjectKeyFromObject(db.Object), fresh); err != nil {
		return err
	}
	if fresh.GetResourceVersion() != db.ResourceVersion {
		return errStaleDatabase
	}
	return nil
}

func (r *Reconciler) upgradeBackup(ctx context.Context, db *Cluster, eng engine.Engine, l *live) (serverPlan, error) {
	u := db.Status.Upgrade
	// The servers run on as they are: even the old-data removal of an
	// earlier upgrade stays (turning it off would restart them).
	running := serverPlan{Keep: true}
	if !l.has("StatefulSet", namesOf(db).StatefulSet) {
		running = serverPlan{Image: u.FromImage, Replicas: replicasOf(db)}
	}
	b, gate, why, err := r.backupGate(ctx, db, u.Backup, func(b *Backup) string { return notThisAttempt(db, b) })
	switch {
	case err != nil:
		return running, err
	case gate == versionchange.TakeBackup:
		// No write after the dump starts: the fence first.
		if fenced, err := r.fenceWrites(ctx, db, eng); err != nil || !fenced {
			return running, err
		}
		attempt := map[string]string{db.Kind.Keys.UpgradeAttempt: u.Attempt}
		if _, err := r.createBackup(ctx, db, u.Backup, reasonPreUpgrade, attempt, nil); err != nil {
			return running, err
		}
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgradeBlocked)
		r.setUpgrading(db, string(dbv1.UpgradeBackingUp), fmt.Sprintf("DatabaseBackup %s runs before the servers stop for the upgrade to %s", u.Backup, u.ToImage))
		return running, nil
	case gate.Refuses():
		// Nothing was touched: the servers keep running; deleting the
		// backup makes a new one.
		r.refuseOnBackup(db, gate, b, why, fmt.Sprintf("upgrade from %s to %s", u.FromImage, u.ToImage), u.FromImage)
		return running, nil
	case gate == versionchange.BackupDone:
		// Held from now until the upgrade ends: retention must not prune
		// the only copy the upgrade restores.
		if err := r.hold(ctx, b, db, holdUpgrade, fmt.Sprintf("%s %s restores it in its upgrade from %s to %s (attempt %s)", r.Kind.clusterKind(), db.Name, u.FromImage, u.ToImage, u.Attempt)); err != nil {
			return running, err
		}
		if busy, err := r.backupJobRunning(ctx, db); err != nil || busy {
			// Another backup reads from the servers: stopping them would
			// fail it. Its end reconciles again.
			r.setUpgrading(db, string(dbv1.UpgradeBackingUp), fmt.Sprintf("DatabaseBackup %s completed; the servers stop for the upgrade to %s once backup Job %s has finished", b.Name, u.ToImage, backupJobName(db.Name)))
			return running, err
		}
		r.toStep(db, dbv1.UpgradeScalingDown, "DatabaseBackup %s completed (%s): the servers stop for the upgrade from %s to %s", b.Name, b.Status.File, u.FromVersion, u.ToVersion)
		return r.upgradeScaleDown(ctx, db, eng, l)
	}
	meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgradeBlocked)
	r.setUpgrading(db, string(dbv1.UpgradeBackingUp), fmt.Sprintf("DatabaseBackup %s (%s) runs before the servers stop for the upgrade to %s", b.Name, phaseOrPending(b.Status.Phase), u.ToImage))
	return running, nil
}

// upgradeJobIdle: the upgrade Job has finished or is gone. One that
// never started (unschedulable) is deleted, and waited for, so it cannot
// start while the rollback Job works on the same volume.
func (r *Reconciler) upgradeJobIdle(ctx context.Context, db *Cluster) (bool, error) {
	return r.jobIdle(ctx, db, upgradeJobName(db))
}

// backupJobRunning: a backup Job of the Database is still at work.
func (r *Reconciler) backupJobRunning(ctx context.Context, db *Cluster) (bool, error) {
	var job batchv1.Job
	err := r.Owned.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: backupJobName(db.Name)}, &job)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	finished := jobFinished(&job, batchv1.JobComplete) || jobFinished(&job, batchv1.JobFailed)
	return !finished && job.DeletionTimestamp.IsZero(), nil
}

// serversGone: the StatefulSet has settled at zero replicas and no server
// pod is left, so a Job may use the data volumes.
func (r *Reconciler) serversGone(ctx context.Context, db *Cluster, l *live) (bool, error) {
	sts := &l.statefulSet
	if !l.has("StatefulSet", namesOf(db).StatefulSet) {
		return false, nil
	}
	if ptr.Deref(sts.Spec.Replicas, 1) != 0 || sts.Status.ObservedGeneration < sts.Generation || sts.Status.Replicas != 0 {
		return false, nil
	}
	pods, err := r.serverPods(ctx, db)
	return len(pods) == 0, err
}

// notThisAttempt says why b is not this upgrade attempt's backup ("" when
// it is): it must have been made for this Database (its UID) and this
// attempt.
func notThisAttempt(db *Cluster, b *Backup) string {
	return notOurBackup(db, b, "upgrade attempt", b.Labels[db.Kind.Keys.UpgradeAttempt], db.Status.Upgrade.Attempt)
}

// preUpgradeBackupGone says why the upgrade can no longer use its backup
// ("" when it can): deleted (its hold notwithstanding: a finalizer
// removed by hand), or no longer the completed backup of this attempt.
func (r *Reconciler) preUpgradeBackupGone(ctx context.Context, db *Cluster) (string, error) {
	u := db.Status.Upgrade
	b, err := r.Kind.getBackup(ctx, r.Client, client.ObjectKey{Namespace: db.Namespace, Name: u.Backup})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the pre-upgrade DatabaseBackup %s is gone", u.Backup), nil
	case err != nil:
		return "", err
	case !b.DeletionTimestamp.IsZero():
		return fmt.Sprintf("the pre-upgrade DatabaseBackup %s is being deleted", u.Backup), nil
	case b.Status.Phase != dbv1.BackupCompleted:
		return fmt.Sprintf("the pre-upgrade DatabaseBackup %s is %s, not Completed", u.Backup, phaseOrPending(b.Status.Phase)), nil
	}
	if why := notThisAttempt(db, b); why != "" {
		return fmt.Sprintf("the pre-upgrade DatabaseBackup %s %s", u.Backup, why), nil
	}
	return "", nil
}

// errNoPreUpgradeBackup: the upgrade Job was not made, its backup is gone.
var errNoPreUpgradeBackup = errors.New("the pre-upgrade backup is gone")

// rollBackWithoutBackup: the servers are stopped and the upgrade cannot
// run without its backup. Nothing was changed on the data yet; the
// rollback puts the servers back on the old image (and, should a swap
// have begun, the old directory back).
func (r *Reconciler) rollBackWithoutBackup(db *Cluster, why string) serverPlan {
	u := db.Status.Upgrade
	u.FailureReason = "PreUpgradeBackupGone"
	r.toStep(db, dbv1.UpgradeRollingBack, "%s: the upgrade to %s cannot run without it; rolling back to %s", why, u.ToImage, u.FromImage)
	return stopped(u.FromImage)
}

func (r *Reconciler) upgradeScaleDown(ctx context.Context, db *Cluster, eng engine.Engine, l *live) (serverPlan, error) {
	u := db.Status.Upgrade
	gone, err := r.serversGone(ctx, db, l)
	if err != nil || !gone {
		return stopped(u.FromImage), err
	}
	if why, err := r.preUpgradeBackupGone(ctx, db); err != nil || why != "" {
		if err != nil {
			return stopped(u.FromImage), err
		}
		return r.rollBackWithoutBackup(db, why), nil
	}
	r.toStep(db, dbv1.UpgradeRunningJob, "no server runs: Job %s upgrades the primary's data (PersistentVolumeClaim %s) to %s", upgradeJobName(db), primaryClaim(db), u.ToImage)
	return r.upgradeJob(ctx, db, eng)
}

func (r *Reconciler) upgradeJob(ctx context.Context, db *Cluster, eng engine.Engine) (serverPlan, error) {
	u := db.Status.Upgrade
	var gone string
	job, err := r.attemptJob(ctx, db, upgradeJobName(db), func() (*batchv1.Job, error) {
		// Checked again just before the Job is made: it may have gone
		// since the servers stopped.
		why, err := r.preUpgradeBackupGone(ctx, db)
		if err != nil {
			return nil, err
		}
		if why != "" {
			gone = why
			return nil, errNoPreUpgradeBackup
		}
		b, err := r.Kind.getBackup(ctx, r.Client, client.ObjectKey{Namespace: db.Namespace, Name: u.Backup})
		if err != nil {
			return nil, fmt.Errorf("reading the pre-upgrade backup %s: %w", u.Backup, err)
		}
		return upgradeJob(db, eng, b, false), nil
	})
	if errors.Is(err, errNoPreUpgradeBackup) {
		return r.rollBackWithoutBackup(db, gone), nil
	}
	if err != nil || job == nil {
		return stopped(u.FromImage), err
	}
	switch {
	case jobFinished(job, batchv1.JobComplete):
		r.toStep(db, dbv1.UpgradeStartingNewVersion, "Job %s upgraded the data to %s: the servers start on it (standbys clone the new primary); the old data directory is kept until the primary is ready, at most %s (upgradeTimeout)",
			job.Name, u.ToVersion, upgradeTimeoutOf(db))
		return serverPlan{Image: u.ToImage, Replicas: replicasOf(db)}, nil
	case jobFinished(job, batchv1.JobFailed):
		u.FailureReason = "UpgradeJobFailed"
		r.toStep(db, dbv1.UpgradeRollingBack, "upgrade Job %s failed (%s): rolling back to %s with the old data directory", job.Name, jobFailure(ctx, r, job), u.FromImage)
		return stopped(u.FromImage), nil
	}
	msg := fmt.Sprintf("Job %s upgrades the primary's data (PersistentVolumeClaim %s) to %s", job.Name, primaryClaim(db), u.ToImage)
	if why := unschedulable(ctx, r.Owned, job); why != "" {
		// Node-local volumes: the data and backup volumes may be bound on
		// different nodes, and no pod can mount both. The servers are down
		// meanwhile: give up after upgradeTimeout.
		why = fmt.Sprintf("its pod cannot be scheduled (%s): with node-local volumes, %s and the backup volume %s must be on one node (docs/guides/database.md, Upgrades)",
			truncate(why, 300), primaryClaim(db), backupClaimOf(job))
		if !r.now().Before(u.StepStartTime.Add(upgradeTimeoutOf(db))) {
			u.FailureReason = "UpgradeJobUnschedulable"
			r.toStep(db, dbv1.UpgradeRollingBack, "upgrade Job %s did not start within %s (upgradeTimeout): %s; rolling back to %s", job.Name, upgradeTimeoutOf(db), why, u.FromImage)
			return stopped(u.FromImage), nil
		}
		msg += fmt.Sprintf("; %s; if it still cannot start after %s (upgradeTimeout) the upgrade is rolled back", why, upgradeTimeoutOf(db))
	}
	r.setUpgrading(db, string(dbv1.UpgradeRunningJob), msg)
	return stopped(u.FromImage), nil
}

// backupClaimOf names the backup volume a Job mounts.
func backupClaimOf(job *batchv1.Job) string {
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == engine.BackupVolume && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

// unschedulable is why the scheduler cannot place a pod of the Job ("" when
// it can).
func unschedulable(ctx context.Context, owned client.Reader, job *batchv1.Job) string {
	var pods corev1.PodList
	if err := owned.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}); err != nil {
		return ""
	}
	for i := range pods.Items {
		if why := podUnschedulable(&pods.Items[i]); why != "" {
			return why
		}
	}
	return ""
}

// jobFailure is a failed Job's reason and what its pod said.
func jobFailure(ctx context.Context, r *Reconciler, job *batchv1.Job) string {
	_, said := jobPodReport(ctx, r.Owned, job)
	return failureOf(job, said)
}

// failureOf is a failed Job's reason and the end of what its pod said.
func failureOf(job *batchv1.Job, podSaid string) string {
	c := jobCondition(job, batchv1.JobFailed)
	msg := c.Reason + ": " + c.Message
	if podSaid != "" {
		msg += "; its pod said: " + truncate(podSaid, 400)
	}
	return msg
}

// attemptJob finds this attempt's Job of that name, creating it (from
// build) when there is none. A Job of an earlier attempt is deleted first,
// and nil returned until it is gone: two never run at once.
func (r *Reconciler) attemptJob(ctx context.Context, db *Cluster, name string, build func() (*batchv1.Job, error)) (*batchv1.Job, error) {
	attempt := db.Status.Upgrade.Attempt
	var job batchv1.Job
	exists, err := r.lookup(ctx, db, "Job", name, &job, true)
	if err != nil {
		return nil, err
	}
	if exists && job.Labels[LabelUpgradeAttempt] == attempt {
		return &job, nil
	}
	if exists {
		// Of an earlier attempt.
		return nil, r.deleteJob(ctx, &job)
	}
	desired, err := build()
	if err != nil {
		return nil, err
	}
	if err := r.Client.Create(ctx, desired, client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("creating Job %s: %w", name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("Job", "created").Inc()
	r.normal(db, "Created", "Upgrade", "Job %s created with image %s", name, jobImage(desired))
	return desired, nil
}

// upgradeJob runs the engine's upgrade container (the new image) or, with
// rollback, its way back (the old image), on the primary's data volume.
func upgradeJob(db *Cluster, eng engine.Engine, b *Backup, rollback bool) *batchv1.Job {
	u := db.Status.Upgrade
	c := clusterOf(db, eng)
	name, component := upgradeJobName(db), componentUpgrade
	c.Image = u.ToImage
	if rollback {
		name, component = rollbackJobName(db), componentRollback
		c.Image = u.FromImage
	}
	spec := engine.Upgrade{
		DataClaimName: primaryClaim(db), FromVersion: u.FromVersion, ToVersion: u.ToVersion, Rollback: rollback,
	}
	if b != nil {
		spec.File, spec.SHA256, spec.ClaimName = b.Status.File, b.Status.SHA256, b.Status.ClaimName
		if spec.ClaimName == "" {
			spec.ClaimName = backupClaimName(db.Name)
		}
	}
	pod := eng.UpgradePod(c, spec)
	labels := withLabels(objectLabels(db), map[string]string{db.Kind.Keys.Component: component, LabelUpgradeAttempt: u.Attempt})
	return lifecycleJob(db.Kind, name, db.Namespace, labels, ownerReference(db), pod, db.Spec.PodTemplate, 2, namesOf(db).Scripts)
}

func (r *Reconciler) upgradeStart(ctx context.Context, db *Cluster, eng engine.Engine, l *live) (serverPlan, error) {
	u := db.Status.Upgrade
	starting := serverPlan{Image: u.ToImage, Replicas: replicasOf(db)}
	pods, err := r.serverPods(ctx, db)
	if err != nil {
		return starting, err
	}
	if p := primaryPod(db, pods); p != nil && podReady(p) && p.DeletionTimestamp.IsZero() && len(p.Spec.Containers) > 0 && p.Spec.Containers[0].Image == u.ToImage {
		db.Status.CurrentImage, db.Status.CurrentVersion = u.ToImage, u.ToVersion
		r.Kind.metrics.upgrades.WithLabelValues(db.Namespace, db.Name, "succeeded").Inc()
		r.fenceLiftedByUpgrade(db)
		r.toStep(db, dbv1.UpgradeOldDataKept, "%s %s is ready on the upgraded data; the old data directory (%s) is kept on PersistentVolumeClaim %s until the %s is annotated %s=true (then the servers restart once more to remove it)",
			eng.Name(), u.ToVersion, u.FromVersion, primaryClaim(db), r.Kind.clusterKind(), db.Kind.Keys.RemoveOldData)
		return r.keepOldData(db, eng, l), nil
	}
	deadline := u.StepStartTime.Add(upgradeTimeoutOf(db))
	if r.now().Before(deadline) {
		return starting, nil
	}
	u.FailureReason = "NewPrimaryNotReady"
	r.toStep(db, dbv1.UpgradeRollingBack, "primary %s was not ready on %s within %s (upgradeTimeout): rolling back to %s with the old data directory",
		currentPrimary(db), u.ToImage, upgradeTimeoutOf(db), u.FromImage)
	return stopped(u.FromImage), nil
}

// upgradeRecheck is when an upgrade waiting for its Job or its new primary
// must look again: a pod that is never scheduled or never ready sends no
// event.
func upgradeRecheck(db *Cluster, now time.Time) time.Duration {
	u := db.Status.Upgrade
	if u == nil || u.StepStartTime == nil {
		return 0
	}
	left := u.StepStartTime.Add(upgradeTimeoutOf(db)).Sub(now)
	switch {
	case u.Step == dbv1.UpgradeStartingNewVersion:
		return max(left, time.Second)
	case u.Step == dbv1.UpgradeRunningJob && left > 0:
		return left
	case u.Step == dbv1.UpgradeRunningJob:
		// A long restore is fine; only an unschedulable pod (which
		// sends no event) is given up on, and it is looked at now and then.
		return time.Minute
	}
	return 0
}

// keepOldData: the servers run the new version beside the kept old data
// directory until the user asks for its removal.
func (r *Reconciler) keepOldData(db *Cluster, eng engine.Engine, l *live) serverPlan {
	u := db.Status.Upgrade
	if db.Annotations[db.Kind.Keys.RemoveOldData] == "true" {
		r.toStep(db, dbv1.UpgradeRemovingOldData, "annotation %s=true: the servers restart once more to remove the old data directory (%s)", db.Kind.Keys.RemoveOldData, u.FromVersion)
		return r.upgradeRemoveOldData(db, eng, l)
	}
	if wanted := imageOf(db, eng); wanted != u.ToImage {
		r.setUpgrading(db, string(u.Step), fmt.Sprintf(
			"spec.image %s waits: the old data directory (%s) of the upgrade to %s is still kept; annotate the %s %s=true to remove it first",
			wanted, u.FromVersion, u.ToImage, r.Kind.clusterKind(), db.Kind.Keys.RemoveOldData))
	}
	return steadyPlan(db, u.ToImage)
}

func (r *Reconciler) upgradeRemoveOldData(db *Cluster, eng engine.Engine, l *live) serverPlan {
	u := db.Status.Upgrade
	plan := steadyPlan(db, u.ToImage)
	sts := &l.statefulSet
	desired := statefulSetRunning(db, eng, sts.Spec.VolumeClaimTemplates, plan)
	replicas := replicasOf(db)
	// The live StatefulSet has the plan's template as converge writes it
	// (with the agent and the metrics collector; the API server adds
	// defaults, so compare what the plan sets) and every server restarted
	// with it.
	err := r.addPodExtras(db, desired, l)
	state, stateErr := desiredState(desired)
	err = errors.Join(err, stateErr)
	applied, _ := upToDate(state, sts)
	rolled := err == nil && applied &&
		sts.Status.ObservedGeneration >= sts.Generation && sts.Status.CurrentRevision == sts.Status.UpdateRevision &&
		sts.Status.UpdatedReplicas == replicas && sts.Status.ReadyReplicas == replicas
	if rolled {
		r.toStep(db, dbv1.UpgradeCompleted, "upgrade from %s to %s done: every server restarted with the old data directories removed", u.FromVersion, u.ToVersion)
	}
	return plan
}

func (r *Reconciler) rollbackScaleDown(ctx context.Context, db *Cluster, l *live) (serverPlan, error) {
	u := db.Status.Upgrade
	gone, err := r.serversGone(ctx, db, l)
	if err != nil || !gone {
		return stopped(u.FromImage), err
	}
	if idle, err := r.upgradeJobIdle(ctx, db); err != nil || !idle {
		return stopped(u.FromImage), err
	}
	r.toStep(db, dbv1.UpgradeRestoringOldData, "no server runs: Job %s puts the old data directory (%s) back with image %s", rollbackJobName(db), u.FromVersion, u.FromImage)
	return stopped(u.FromImage), nil
}

func (r *Reconciler) rollbackJob(ctx context.Context, db *Cluster, eng engine.Engine) (serverPlan, error) {
	u := db.Status.Upgrade
	job, err := r.attemptJob(ctx, db, rollbackJobName(db), func() (*batchv1.Job, error) {
		return upgradeJob(db, eng, nil, true), nil
	})
	if err != nil || job == nil {
		return stopped(u.FromImage), err
	}
	switch {
	case jobFinished(job, batchv1.JobComplete):
		r.Kind.metrics.upgrades.WithLabelValues(db.Namespace, db.Name, "rolled_back").Inc()
		msg := fmt.Sprintf("the upgrade from %s to %s failed (%s) and was rolled back: the servers run %s on the old data directory, nothing of it lost; the pre-upgrade DatabaseBackup %s is kept. See Job %s's log, then set spec.image back to %s (clears this), fix the cause and set %s again for a new attempt",
			u.FromImage, u.ToImage, u.FailureReason, u.FromImage, u.Backup, upgradeJobName(db), u.FromImage, u.ToImage)
		r.setCondition(db, ConditionUpgradeFailed, true, u.FailureReason, msg)
		r.toStep(db, dbv1.UpgradeFailed, "%s", msg)
		return steadyPlan(db, u.FromImage), nil
	case jobFinished(job, batchv1.JobFailed):
		msg := fmt.Sprintf("the upgrade from %s to %s failed (%s) and rollback Job %s failed too (%s): the servers stay stopped so none starts on a directory of the wrong version. Look at the primary's volume %s (docs/design/database-backup.md, upgrade.sh, says where the old directory is kept), then delete Job %s to run it again",
			u.FromImage, u.ToImage, u.FailureReason, job.Name, jobFailure(ctx, r, job), primaryClaim(db), job.Name)
		if c := meta.FindStatusCondition(db.Status.Conditions, ConditionUpgradeFailed); c == nil || c.Reason != "RollbackFailed" {
			r.Kind.metrics.upgrades.WithLabelValues(db.Namespace, db.Name, "rollback_failed").Inc()
			r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "RollbackFailed", "Upgrade", "%s", msg)
		}
		r.setCondition(db, ConditionUpgradeFailed, true, "RollbackFailed", msg)
		r.setUpgrading(db, string(dbv1.UpgradeRestoringOldData), msg)
	}
	return stopped(u.FromImage), nil
}
