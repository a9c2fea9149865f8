package database

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/status"
)

// Backup bookkeeping.
const (
	// FinalizerBackupFile on a DatabaseBackup: its file is deleted (by a
	// small Job) before the object goes, so no file is left that no object
	// accounts for.
	FinalizerBackupFile = "stable.imaginedata.co/backup-file"
	// LabelBackupReason on DatabaseBackups the operator makes: scheduled,
	// final or pre-upgrade.
	LabelBackupReason = "stable.imaginedata.co/backup-reason"
	// ConditionBackupCompleted is the DatabaseBackup's condition.
	ConditionBackupCompleted = "Completed"

	reasonScheduled = "scheduled"
	reasonFinal     = "final"

	componentBackup       = "backup"
	componentBackupDelete = "backup-delete"
)

// reportGrace is how long a backup Job that succeeded may take to show its
// report: the kubelet writes the termination message before the pod
// finishes, so on a real cluster it is there at once.
const reportGrace = time.Minute

// reportWait is how much longer the grace for a succeeded Job's report
// lasts. It is measured on the wall clock, not the reconciler's (a test's
// may run days ahead): the Job controller stamped the Job's completion
// with the real time, and what the grace waits for (the pod's status in
// the cache) takes real time.
func reportWait(job *batchv1.Job) time.Duration {
	done := jobCondition(job, batchv1.JobComplete).LastTransitionTime.Time
	return time.Until(done.Add(reportGrace))
}

// pendingRecheck is how often a waiting backup looks again: what it waits
// for (another backup's Job going, a server becoming ready) belongs to
// other objects.
const pendingRecheck = 5 * time.Second

// staleRecheck: the cache lags a write of our own; look again soon.
const staleRecheck = 200 * time.Millisecond

// BackupReconciler runs each backup (a DatabaseBackup, or another Kind's):
// a Job that dumps the cluster onto its backup volume, and another that
// deletes the file when the backup is deleted.
type BackupReconciler struct {
	Client   client.Client
	Owned    client.Reader
	API      client.Reader
	Recorder events.EventRecorder
	Kind     *Kind
	// Now is the clock (tests may set one).
	Now func() time.Time
	// ArchiverImage runs the Jobs that delete base backups (Barman
	// Cloud); empty: DefaultArchiverImage.
	ArchiverImage string
}

// backupJobName is the one backup Job a cluster may have at a time: the
// API server refuses a second one of the same name, so two backups of a
// cluster never run together, whichever reconciles race.
func backupJobName(database string) string { return database + "-backup" }

// backupClaimName is a cluster's backup volume.
func backupClaimName(database string) string { return database + "-backup" }

// deleteJobName is short whatever the backup's name: Job names end up in
// label values (at most 63 characters).
func deleteJobName(b *Backup) string {
	sum := sha256.Sum256([]byte(b.UID))
	return "dbbackup-delete-" + hex.EncodeToString(sum[:6])
}

// backupFile is the dump's path on the backup volume. It carries the
// backup's UID: a later backup of the same name (after the first was
// deleted while running, failed, or lost its finalizer by hand) writes
// another file, so no old file can pass for its result.
func backupFile(b *Backup) string { return fmt.Sprintf("%s-%s.dump", b.Name, b.UID) }

// Reconcile runs one backup.
func (r *BackupReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := r.Kind.Backups.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		b := r.Kind.Backups.View(obj)
		if methodOf(b) == dbv1.BackupMethodBaseBackup {
			return r.deleteFile(ctx, b)
		}
		// A verification reading the file ends first.
		if err := r.stopVerification(ctx, b); err != nil {
			return reconcile.Result{}, err
		}
		return r.deleteFile(ctx, b)
	}
	if controllerutil.AddFinalizer(obj, r.Kind.Keys.FinalizerBackupFile) {
		if err := r.Client.Update(ctx, obj); err != nil {
			return reconcile.Result{}, err
		}
	}
	b := r.Kind.Backups.View(obj)
	before := *b.Status.DeepCopy()
	var result reconcile.Result
	var err error
	if methodOf(b) == dbv1.BackupMethodBaseBackup {
		result, err = r.runBaseBackup(ctx, b)
	} else {
		result, err = r.run(ctx, b)
	}
	return status.Outcome(ctx, result, err, r.patchStatus(ctx, before, b))
}

// patchStatus writes the status only over the version it was computed
// from: a reconcile that read a stale backup from the cache must not
// overwrite a result an earlier one recorded.
func (r *BackupReconciler) patchStatus(ctx context.Context, before dbv1.DatabaseBackupStatus, b *Backup) error {
	return patchBackupStatus(ctx, r.Client, r.Kind, before, b)
}

// stale reports whether the API server has a newer version of b than the
// cache gave.
func (r *BackupReconciler) stale(ctx context.Context, b *Backup) bool {
	fresh := r.Kind.Backups.New()
	err := r.API.Get(ctx, client.ObjectKeyFromObject(b.Object), fresh)
	return err != nil || fresh.GetResourceVersion() != b.ResourceVersion
}

func (r *BackupReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// run moves a backup through Pending, Running and Completed or Failed.
func (r *BackupReconciler) run(ctx context.Context, b *Backup) (reconcile.Result, error) {
	var job batchv1.Job
	jobKey := client.ObjectKey{Namespace: b.Namespace, Name: backupJobName(b.Cluster)}
	if b.Status.Phase == dbv1.BackupCompleted || b.Status.Phase == dbv1.BackupFailed {
		if err := r.releaseJob(ctx, b, jobKey); err != nil || b.Status.Phase == dbv1.BackupFailed {
			return reconcile.Result{}, err
		}
		return r.verification(ctx, b)
	}
	err := r.Owned.Get(ctx, jobKey, &job)
	if apierrors.IsNotFound(err) && b.Status.Phase == dbv1.BackupRunning {
		// The cache may not have the Job this backup just created.
		err = r.API.Get(ctx, jobKey, &job)
	}
	if client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	jobExists := err == nil
	db, err := r.Kind.getCluster(ctx, r.Client, client.ObjectKey{Namespace: b.Namespace, Name: b.Cluster})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		if jobExists && metav1.IsControlledBy(&job, b) {
			// The cluster went while its backup ran: the result still
			// counts.
			return r.observeJob(ctx, b, nil, &job)
		}
		r.fail(b, nil, r.Kind.clusterKind()+"NotFound", fmt.Sprintf("%s %s does not exist in namespace %s", r.Kind.clusterKind(), b.Cluster, b.Namespace))
		return reconcile.Result{}, nil
	}
	if jobExists {
		if metav1.IsControlledBy(&job, b) {
			return r.observeJob(ctx, b, db, &job)
		}
		if b.Status.Phase == dbv1.BackupRunning && r.stale(ctx, b) {
			return reconcile.Result{RequeueAfter: staleRecheck}, nil
		}
		if b.Status.Phase == dbv1.BackupRunning {
			r.fail(b, db, "JobLost", fmt.Sprintf("backup Job %s disappeared before it finished", jobKey.Name))
			return reconcile.Result{}, nil
		}
		owner := "another object"
		if ref := metav1.GetControllerOf(&job); ref != nil {
			owner = ref.Kind + " " + ref.Name
		}
		r.pending(b, "WaitingForAnotherBackup", fmt.Sprintf("one backup at a time per %s: Job %s of %s runs", r.Kind.clusterKind(), job.Name, owner))
		return reconcile.Result{RequeueAfter: pendingRecheck}, nil
	}
	eng, ok := r.Kind.Engines[engineOf(db)]
	if !ok {
		r.fail(b, db, "UnknownEngine", fmt.Sprintf("engine %q is not served by this operator", engineOf(db)))
		return reconcile.Result{}, nil
	}
	if !db.DeletionTimestamp.IsZero() && b.Labels[r.Kind.Keys.BackupReason] != reasonFinal {
		r.fail(b, db, r.Kind.clusterKind()+"Deleting", fmt.Sprintf("%s %s is being deleted; only its final backup runs", r.Kind.clusterKind(), db.Name))
		return reconcile.Result{}, nil
	}
	if b.Status.Phase == dbv1.BackupRunning && r.stale(ctx, b) {
		return reconcile.Result{RequeueAfter: staleRecheck}, nil
	}
	if b.Status.Phase == dbv1.BackupRunning {
		// The Job is gone from the cache: it finished, was observed and
		// deleted by an earlier reconcile whose status patch was lost, or
		// someone deleted it. Either way nothing says a file is complete.
		r.fail(b, db, "JobLost", fmt.Sprintf("backup Job %s disappeared before its result was recorded", jobKey.Name))
		return reconcile.Result{}, nil
	}
	if why := r.cannotStart(db, b); why != "" {
		r.pending(b, "Waiting", why)
		return reconcile.Result{RequeueAfter: pendingRecheck}, nil
	}
	pods, err := serverPodsOf(ctx, r.Owned, db)
	if err != nil {
		return reconcile.Result{}, err
	}
	src, ok := backupSource(db, pods, primaryOnly(r.Kind, b) || !r.Kind.StandbyBackups, maxStandbyLag(db))
	if !ok {
		r.pending(b, "WaitingForServer", fmt.Sprintf("the primary %s of %s %s is not ready to read from", currentPrimary(db), r.Kind.clusterKind(), db.Name))
		return reconcile.Result{RequeueAfter: pendingRecheck}, nil
	}
	claim, err := r.ensureBackupClaim(ctx, db, b)
	if err != nil {
		if no, ok := err.(*notOwnedError); ok {
			r.fail(b, db, "BackupVolumeNotOwned", no.Error())
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	// The image the servers run now, which differs from spec.image while
	// an image change waits for this very backup.
	image := imageOf(db, eng)
	var sts appsv1.StatefulSet
	if err := r.Owned.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: namesOf(db).StatefulSet}, &sts); err == nil && liveImage(&sts) != "" {
		image = liveImage(&sts)
	}
	desired := backupJob(db, eng, b, image, engine.Backup{
		File: backupFile(b), Host: src.Host, Standby: src.StandbyHost, MaxLagBytes: src.MaxLagBytes, ClaimName: claim,
	})
	if created, err := r.createSlotJob(ctx, desired, "backup"); err != nil || !created {
		// Not created: another backup took the slot first.
		return reconcile.Result{RequeueAfter: pendingRecheck}, err
	}
	now := metav1.NewTime(r.now())
	b.Status.Phase = dbv1.BackupRunning
	b.Status.StartTime = &now
	b.Status.ClaimName = claim
	b.Status.File = backupFile(b)
	b.Status.Image = image
	b.Status.Engine = engineOf(db)
	b.Status.RunAsUser = ptr.To(runAsUserOf(db))
	// Where it reads is known once the Job says so (a standby is used
	// only when the Job finds it close enough).
	b.Status.Source, b.Status.LagBytes, b.Status.SourceReason = "", nil, ""
	if src.StandbyHost == "" {
		b.Status.Source = src.Primary
	}
	status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBackupCompleted, false, "Running",
		fmt.Sprintf("Job %s dumps Database %s from %s to %s on PersistentVolumeClaim %s", desired.Name, db.Name, src, b.Status.File, claim))
	r.Recorder.Eventf(b.Object, nil, corev1.EventTypeNormal, "Started", "Backup", "Job %s dumps Database %s from %s", desired.Name, db.Name, src)
	return reconcile.Result{}, nil
}

// releaseJob deletes the finished backup's Job, which frees the
// Database's backup slot. It runs only once the status recording the
// Job's result has been read back: were the Job deleted first and that
// write lost, nothing would say the file is complete (JobLost) and the
// file would be orphaned.
func (r *BackupReconciler) releaseJob(ctx context.Context, b *Backup, key client.ObjectKey) error {
	var job batchv1.Job
	if err := r.Owned.Get(ctx, key, &job); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(&job, b) || !job.DeletionTimestamp.IsZero() {
		return nil
	}
	return r.deleteJob(ctx, &job)
}

// cannotStart says why a backup must wait ("" when it may start).
func (r *BackupReconciler) cannotStart(db *Cluster, b *Backup) string {
	if c := findCondition(db.Status.Conditions, ConditionRestored); c != nil && c.Status == metav1.ConditionFalse {
		return fmt.Sprintf("Database %s is being restored (%s); backups wait until it is done", db.Name, c.Reason)
	}
	if !initializedOrRestored(db) {
		return fmt.Sprintf("Database %s is not initialised yet", db.Name)
	}
	if u := db.Status.Upgrade; upgradeRunning(u) && u.Step != dbv1.UpgradeBackingUp && u.Step != dbv1.UpgradeOldDataKept {
		return fmt.Sprintf("Database %s is being upgraded to %s (step %s); backups wait until it is done", db.Name, u.ToImage, u.Step)
	}
	return ""
}

// defaultMaxStandbyLag is spec.backup.maxStandbyLag's default: one WAL
// segment (16 MiB, PostgreSQL's default segment size). A standby that
// keeps up is well within it; one that stopped replaying (its WAL removed
// on the primary, say) soon is not.
var defaultMaxStandbyLag = resource.MustParse("16Mi")

// maxStandbyLag is how far behind, in bytes, a standby may be for a
// backup to read from it.
func maxStandbyLag(db *Cluster) int64 {
	if b := db.Spec.Backup; b != nil && b.MaxStandbyLag != nil {
		return max(b.MaxStandbyLag.Value(), 0)
	}
	return defaultMaxStandbyLag.Value()
}

// primaryOnly: the final backup before a deletion (the volumes go next)
// and the backup before an image change (the data is changed next) must
// hold the last write, so they read from the primary, always.
func primaryOnly(kind *Kind, b *Backup) bool {
	reason := b.Labels[kind.Keys.BackupReason]
	return reason == reasonFinal || reason == reasonPreUpgrade
}

// readFrom is where a backup Job reads: the primary, or StandbyHost when
// the Job finds that standby streaming and within MaxLagBytes.
type readFrom struct {
	Primary, Host        string
	Standby, StandbyHost string
	MaxLagBytes          int64
}

func (s readFrom) String() string {
	if s.StandbyHost == "" {
		return "the primary " + s.Primary
	}
	return fmt.Sprintf("standby %s if its replay lag is at most %d bytes, else the primary %s", s.Standby, s.MaxLagBytes, s.Primary)
}

// backupSource picks where to read: the primary, which must be ready (the
// Job reads from it, or measures a standby's lag against it), and, unless
// primaryOnly or maxLag is 0, the healthy standby with the highest ordinal
// (by number: db-10 comes after db-9) for the Job to use when its lag
// allows.
func backupSource(db *Cluster, pods map[string]*corev1.Pod, primaryOnly bool, maxLag int64) (readFrom, bool) {
	n := namesOf(db)
	if !primaryServes(db, pods) {
		return readFrom{}, false
	}
	src := readFrom{Primary: currentPrimary(db), Host: n.ReadWrite}
	if primaryOnly || maxLag <= 0 {
		return src, true
	}
	for _, s := range standbysOf(db, pods) {
		if s.Healthy {
			src.Standby = s.Pod
		}
	}
	if src.Standby != "" {
		src.StandbyHost, src.MaxLagBytes = src.Standby+"."+n.Headless, maxLag
	}
	return src, true
}

// podOrdinal reads a server pod's ordinal from its name (<cluster>-<n>).
func podOrdinal(db *Cluster, pod string) (int64, bool) {
	digits, ok := strings.CutPrefix(pod, db.Name+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 32)
	return n, err == nil && n >= 0 && strconv.FormatInt(n, 10) == digits
}

// sourcePod names the pod behind a host a backup Job reported reading
// from (a standby's headless name, or the read-write Service); another
// host is kept as it is.
func sourcePod(db *Cluster, host string) string {
	if db == nil || host == "" {
		return host
	}
	n := namesOf(db)
	if host == n.ReadWrite {
		return currentPrimary(db)
	}
	if pod, ok := strings.CutSuffix(host, "."+n.Headless); ok {
		if _, ok := podOrdinal(db, pod); ok {
			return pod
		}
	}
	return host
}

// ensureBackupClaim creates the Database's backup volume on first need. It
// is labelled with the Database (so it is in the operator's cache) but not
// owned by it: it outlives the Database.
func (r *BackupReconciler) ensureBackupClaim(ctx context.Context, db *Cluster, b *Backup) (string, error) {
	name := backupClaimName(db.Name)
	var pvc corev1.PersistentVolumeClaim
	key := client.ObjectKey{Namespace: db.Namespace, Name: name}
	err := r.Owned.Get(ctx, key, &pvc)
	if apierrors.IsNotFound(err) {
		err = r.API.Get(ctx, key, &pvc)
	}
	if err == nil {
		if pvc.Labels[r.Kind.Keys.Cluster] != db.Name || pvc.Labels[r.Kind.Keys.Component] != componentBackup {
			return "", &notOwnedError{Kind: "PersistentVolumeClaim", Name: name, Owner: r.Kind.clusterKind()}
		}
		return name, nil
	}
	if !apierrors.IsNotFound(err) {
		return "", err
	}
	size, class, err := r.Kind.Backups.VolumeSize(ctx, r.Client, db, b)
	if err != nil {
		return "", err
	}
	desired := backupClaim(db, size, class)
	if err := r.Client.Create(ctx, desired, client.FieldOwner(r.Kind.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating backup PersistentVolumeClaim %s: %w", name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("PersistentVolumeClaim", "created").Inc()
	r.Recorder.Eventf(db.Object, nil, corev1.EventTypeNormal, "Created", "Backup",
		"backup PersistentVolumeClaim %s created (%s); it is not owned by the Database and outlives it", name, desired.Spec.Resources.Requests.Storage())
	return name, nil
}

// backupClaim is a cluster's backup volume, of the size (and
// StorageClass) its Kind says (BackupAPI.VolumeSize).
func backupClaim(db *Cluster, size string, class *string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name: backupClaimName(db.Name), Namespace: db.Namespace,
			Labels: withLabels(objectLabels(db), map[string]string{db.Kind.Keys.Component: componentBackup}),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(size),
			}},
		},
	}
}

// backupJob runs the engine's backup container from the Database's own
// image, owned by the DatabaseBackup.
func backupJob(db *Cluster, eng engine.Engine, b *Backup, image string, spec engine.Backup) *batchv1.Job {
	c := clusterOf(db, eng)
	c.Image = image
	pod := eng.BackupPod(c, spec)
	labels := withLabels(objectLabels(db), map[string]string{db.Kind.Keys.Component: componentBackup})
	// A verification may read the same ReadWriteOnce volume meanwhile
	// (lifecycleJob places them together).
	return lifecycleJob(db.Kind, backupJobName(db.Name), db.Namespace, labels, backupOwner(db.Kind, b, true), pod, db.Spec.PodTemplate, 2, namesOf(db).Scripts)
}

func backupOwner(kind *Kind, b *Backup, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: kind.BackupGVK.GroupVersion().String(), Kind: kind.backupKind(), Name: b.Name, UID: b.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(block),
	}
}

// lifecycleJob is the shape of backup, restore, upgrade, verification and
// delete Jobs: one pod of the engine's, a few retries with the Job
// controller's exponential backoff, and a deadline so a Job that never
// starts fails. One that mounts a backup claim runs beside that claim's
// other users (sameNodeAsBackupVolumeUsers): every such Job gets it here,
// so none can forget it.
func lifecycleJob(kind *Kind, name, namespace string, labels map[string]string, owner metav1.OwnerReference, pod engine.Pod, placement *dbv1.PodTemplate, retries int32, scripts string) *batchv1.Job {
	spec := corev1.PodSpec{
		RestartPolicy:      corev1.RestartPolicyNever,
		Containers:         []corev1.Container{pod.Container},
		SecurityContext:    pod.SecurityContext,
		Volumes:            pod.Volumes,
		EnableServiceLinks: ptr.To(false),
	}
	if scripts != "" {
		spec.Volumes = append([]corev1.Volume{{Name: engine.ScriptsVolume, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: scripts},
				DefaultMode:          ptr.To(int32(0o444)),
			},
		}}}, spec.Volumes...)
	}
	placement.Place(&spec)
	job := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To(retries),
			ActiveDeadlineSeconds: ptr.To(int64(6 * 3600)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       spec,
			},
		},
	}
	sameNodeAsBackupVolumeUsers(kind, &job.Spec.Template, backupClaimOf(job))
	return job
}

// observeJob records the result of the backup's Job. The Job is deleted
// by a later reconcile, once the recorded result is read back
// (releaseJob).
func (r *BackupReconciler) observeJob(ctx context.Context, b *Backup, db *Cluster, job *batchv1.Job) (reconcile.Result, error) {
	report, failMsg := jobPodReport(ctx, r.Owned, job)
	finished := jobFinished(job, batchv1.JobComplete) || jobFinished(job, batchv1.JobFailed)
	if finished && r.stale(ctx, b) {
		// An earlier reconcile may have recorded this result already.
		return reconcile.Result{RequeueAfter: staleRecheck}, nil
	}
	recordJobStart(b, db, job)
	switch {
	case jobFinished(job, batchv1.JobComplete):
		if report.SHA256 == "" || report.File == "" {
			if wait := reportWait(job); wait > 0 {
				status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBackupCompleted, false, "WaitingForReport",
					fmt.Sprintf("Job %s succeeded; waiting for its report (file, size, checksum)", job.Name))
				return reconcile.Result{RequeueAfter: wait}, nil
			}
			r.fail(b, db, "NoReport", fmt.Sprintf("Job %s succeeded but its pod reported no file and checksum: the file cannot be trusted", job.Name))
			return reconcile.Result{}, nil
		}
		if b.Status.File != "" && report.File != b.Status.File {
			r.fail(b, db, "ReportedAnotherFile", fmt.Sprintf("Job %s reported the file %s, not %s which this backup asked for: a file it did not write cannot be trusted as this backup", job.Name, report.File, b.Status.File))
			return reconcile.Result{}, nil
		}
		r.complete(b, db, report)
		return reconcile.Result{}, nil
	case jobFinished(job, batchv1.JobFailed):
		r.fail(b, db, "JobFailed", failedJobMessage("backup", job, failMsg))
		return reconcile.Result{}, nil
	default:
		b.Status.Phase = dbv1.BackupRunning
		return reconcile.Result{}, nil
	}
}

// recordJobStart fills what the write after the Job's creation records
// (startBackup: the claim, the file, the image, the start), where that
// write was lost, from the Job itself. A status patch refused after the
// Job was created (a Conflict: the reconcile read a stale copy of the
// backup) leaves the Job running and the status without them; the backup
// then completed without its claim, so its verification mounted no
// backup volume ("not found on the backup volume") and its deletion
// would have left the file.
func recordJobStart(b *Backup, db *Cluster, job *batchv1.Job) {
	s := &b.Status
	if s.ClaimName == "" {
		s.ClaimName = backupClaimOf(job)
	}
	if s.File == "" {
		s.File = backupFile(b)
	}
	if s.StartTime == nil && !job.CreationTimestamp.IsZero() {
		s.StartTime = job.CreationTimestamp.DeepCopy()
	}
	pod := job.Spec.Template.Spec
	if s.Image == "" && len(pod.Containers) > 0 {
		s.Image = pod.Containers[0].Image
	}
	if s.RunAsUser == nil && pod.SecurityContext != nil && pod.SecurityContext.RunAsUser != nil {
		s.RunAsUser = ptr.To(*pod.SecurityContext.RunAsUser)
	}
	if s.Engine == "" && db != nil {
		s.Engine = engineOf(db)
	}
}

// createSlotJob creates a Job whose name is a cluster's one slot (its
// backup Job, its verification Job); false when another took it first.
func (r *BackupReconciler) createSlotJob(ctx context.Context, job *batchv1.Job, what string) (bool, error) {
	if err := r.Client.Create(ctx, job, client.FieldOwner(r.Kind.FieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("creating %s Job %s: %w", what, job.Name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("Job", "created").Inc()
	return true, nil
}

// failedJobMessage says which Job failed and why.
func failedJobMessage(what string, job *batchv1.Job, podSaid string) string {
	return fmt.Sprintf("%s Job %s failed (%s)", what, job.Name, failureOf(job, podSaid))
}

func (r *BackupReconciler) deleteJob(ctx context.Context, job *batchv1.Job) error {
	err := r.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting finished Job %s: %w", job.Name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("Job", "deleted").Inc()
	return nil
}

func (r *BackupReconciler) complete(b *Backup, db *Cluster, report engine.Report) {
	now := metav1.NewTime(r.now())
	b.Status.Phase = dbv1.BackupCompleted
	b.Status.CompletionTime = &now
	b.Status.File = report.File
	b.Status.Size = report.Size
	b.Status.SHA256 = report.SHA256
	if report.Source != "" {
		b.Status.Source = sourcePod(db, report.Source)
	}
	b.Status.LagBytes = report.LagBytes
	b.Status.SourceReason = report.SourceReason
	b.Status.Tables, b.Status.Rows = int32(report.Tables), report.Rows
	if v := report.Version(); v != "" {
		b.Status.Version = v
	} else if eng, ok := r.Kind.Engines[b.Status.Engine]; ok {
		b.Status.Version, _ = eng.VersionFromImage(b.Status.Image)
	}
	msg := fmt.Sprintf("%s (%d bytes, sha256 %s) on PersistentVolumeClaim %s", b.Status.File, b.Status.Size, b.Status.SHA256, b.Status.ClaimName)
	if b.Status.SourceReason != "" {
		// Where it read decides what it holds (a dump taken on a standby
		// has no rows of unlogged tables): say it where the result is read.
		msg += fmt.Sprintf("; read from %s: %s", b.Status.Source, b.Status.SourceReason)
	}
	status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBackupCompleted, true, "Completed", msg)
	r.Kind.metrics.backupsTotal.WithLabelValues(b.Namespace, b.Cluster, "succeeded").Inc()
	r.Recorder.Eventf(b.Object, nil, corev1.EventTypeNormal, "Completed", "Backup", "%s", msg)
	if db != nil {
		r.Recorder.Eventf(db.Object, nil, corev1.EventTypeNormal, "BackupCompleted", "Backup", "%s %s completed: %s", r.Kind.backupKind(), b.Name, msg)
	}
}

// fail ends a backup for good; db may be nil (it does not exist).
func (r *BackupReconciler) fail(b *Backup, db *Cluster, reason, msg string) {
	now := metav1.NewTime(r.now())
	b.Status.Phase = dbv1.BackupFailed
	b.Status.CompletionTime = &now
	status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBackupCompleted, false, reason, msg)
	r.Kind.metrics.backupsTotal.WithLabelValues(b.Namespace, b.Cluster, "failed").Inc()
	r.Recorder.Eventf(b.Object, nil, corev1.EventTypeWarning, reason, "Backup", "%s", msg)
	if db != nil {
		r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "BackupFailed", "Backup", "DatabaseBackup %s failed: %s", b.Name, msg)
	}
}

func (r *BackupReconciler) pending(b *Backup, reason, msg string) {
	b.Status.Phase = dbv1.BackupPending
	status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBackupCompleted, false, reason, msg)
}

// deleteFile runs the finalizer: a small Job deletes the backup's file
// (or base backup: basebackups.go) before the DatabaseBackup goes, once
// nothing holds it (holds.go: an upgrade, a restore, the newest verified
// backup).
func (r *BackupReconciler) deleteFile(ctx context.Context, b *Backup) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(b.Object, r.Kind.Keys.FinalizerBackupFile) {
		return reconcile.Result{}, nil
	}
	before := *b.Status.DeepCopy()
	steps := r.deleteFileSteps
	if methodOf(b) == dbv1.BackupMethodBaseBackup {
		steps = r.deleteBaseBackupSteps
	}
	result, done, err := steps(ctx, b)
	if err != nil || !done {
		return status.Outcome(ctx, result, err, r.patchStatus(ctx, before, b))
	}
	controllerutil.RemoveFinalizer(b.Object, r.Kind.Keys.FinalizerBackupFile)
	return reconcile.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, b.Object))
}

func (r *BackupReconciler) deleteFileSteps(ctx context.Context, b *Backup) (reconcile.Result, bool, error) {
	if b.Status.Phase != dbv1.BackupCompleted || b.Status.File == "" || b.Status.ClaimName == "" {
		// No complete file; a running Job goes with the DatabaseBackup.
		return reconcile.Result{}, true, nil
	}
	if terminating, err := namespaceTerminating(ctx, r.API, b.Namespace); err != nil || terminating {
		// No Job can be created; the backup volume goes with the namespace.
		return reconcile.Result{}, terminating, err
	}
	if holders, err := heldBy(ctx, r.Kind, r.Client, b); err != nil || len(holders) > 0 {
		if len(holders) > 0 {
			msg := fmt.Sprintf("held (%s); the file is deleted once nothing holds it", strings.Join(holders, "; "))
			status.SetCondition(&b.Status.Conditions, b.Generation, "FileDeleted", false, "InUse", msg)
		}
		return reconcile.Result{RequeueAfter: pendingRecheck}, false, err
	}
	var pvc corev1.PersistentVolumeClaim
	err := r.API.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Status.ClaimName}, &pvc)
	if apierrors.IsNotFound(err) || (err == nil && !pvc.DeletionTimestamp.IsZero()) {
		return reconcile.Result{}, true, nil // the volume, and the file with it, is gone
	}
	if err != nil {
		return reconcile.Result{}, false, err
	}
	var job batchv1.Job
	name := deleteJobName(b)
	err = r.Owned.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, &job)
	if apierrors.IsNotFound(err) {
		desired, err := r.deleteFileJob(ctx, b)
		if err != nil {
			status.SetCondition(&b.Status.Conditions, b.Generation, "FileDeleted", false, "CannotDelete", err.Error())
			return reconcile.Result{}, false, nil
		}
		if err := r.Client.Create(ctx, desired, client.FieldOwner(r.Kind.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
			return reconcile.Result{}, false, fmt.Errorf("creating Job %s: %w", name, err)
		}
		r.Kind.metrics.objectWrites.WithLabelValues("Job", "created").Inc()
		return reconcile.Result{}, false, nil
	}
	if err != nil {
		return reconcile.Result{}, false, err
	}
	switch {
	case jobFinished(&job, batchv1.JobComplete):
		r.Recorder.Eventf(b.Object, nil, corev1.EventTypeNormal, "FileDeleted", "Delete", "Job %s deleted %s from PersistentVolumeClaim %s", name, b.Status.File, b.Status.ClaimName)
		return reconcile.Result{}, true, nil
	case jobFinished(&job, batchv1.JobFailed):
		msg := fmt.Sprintf("Job %s could not delete %s from PersistentVolumeClaim %s; the DatabaseBackup stays so the file stays accounted for (remove the finalizer %s by hand to let it go anyway)",
			name, b.Status.File, b.Status.ClaimName, r.Kind.Keys.FinalizerBackupFile)
		if c := findCondition(b.Status.Conditions, "FileDeleted"); c == nil || c.Reason != "DeleteJobFailed" {
			r.Recorder.Eventf(b.Object, nil, corev1.EventTypeWarning, "DeleteJobFailed", "Delete", "%s", msg)
		}
		status.SetCondition(&b.Status.Conditions, b.Generation, "FileDeleted", false, "DeleteJobFailed", msg)
		return reconcile.Result{}, false, nil
	default:
		return reconcile.Result{}, false, nil
	}
}

// deleteFileJob removes the file with the image that wrote it, as the
// user that wrote it, in the shape of the engine's backup pod (its
// security context and the backup volume's mount), without the Database's
// Secrets: the Database may be gone.
func (r *BackupReconciler) deleteFileJob(ctx context.Context, b *Backup) (*batchv1.Job, error) {
	eng, ok := r.Kind.Engines[b.Status.Engine]
	if !ok {
		eng, ok = r.Kind.Engines[dbv1.EnginePostgreSQL]
		if !ok {
			return nil, fmt.Errorf("no engine to delete the file with")
		}
	}
	c := engine.Cluster{Name: b.Cluster, Namespace: b.Namespace, Image: b.Status.Image, RunAsUser: r.fileOwner(ctx, b)}
	pod := eng.BackupPod(c, engine.Backup{File: b.Status.File, ClaimName: b.Status.ClaimName})
	mount := ""
	var mounts []corev1.VolumeMount
	for _, m := range pod.Container.VolumeMounts {
		if m.Name == engine.BackupVolume {
			mount = m.MountPath
			mounts = append(mounts, m)
		}
	}
	if mount == "" {
		return nil, fmt.Errorf("the engine's backup pod mounts no backup volume")
	}
	var volumes []corev1.Volume
	for _, v := range pod.Volumes {
		if v.Name == engine.BackupVolume {
			volumes = append(volumes, v)
		}
	}
	pod.Volumes = volumes
	pod.Container.Name = "delete"
	pod.Container.VolumeMounts = mounts
	pod.Container.Env = nil
	pod.Container.EnvFrom = nil
	pod.Container.Args = nil
	file := path.Join(mount, path.Clean("/"+b.Status.File))
	pod.Container.Command = append([]string{"rm", "-f", "--"}, engine.BackupFiles(file)...)
	pod.Container.Resources = corev1.ResourceRequirements{}
	labels := withLabels(objectLabels(&Cluster{ObjectMeta: metav1.ObjectMeta{Name: b.Cluster}, Kind: r.Kind}),
		map[string]string{r.Kind.Keys.Component: componentBackupDelete})
	return lifecycleJob(r.Kind, deleteJobName(b), b.Namespace, labels, backupOwner(r.Kind, b, false), pod, r.placementOf(ctx, b), 3, ""), nil
}

// placementOf is where the Job that deletes b's file may run: the pod
// template (nodeSelector, tolerations, affinity, priority) of the cluster
// of b's name. A later cluster of that name counts too: it uses the same
// backup claim, so its nodes are the ones that claim's users run on. With
// no cluster, nothing says: the scheduler's choice (nil).
func (r *BackupReconciler) placementOf(ctx context.Context, b *Backup) *dbv1.PodTemplate {
	db, err := r.Kind.getCluster(ctx, r.Client, client.ObjectKey{Namespace: b.Namespace, Name: b.Cluster})
	if err != nil {
		return nil
	}
	return db.Spec.PodTemplate
}

// fileOwner is the UID a backup's file was written as: the one its status
// recorded; for a backup made before the status recorded it, its
// cluster's user when that cluster (not a later one of the same name) is
// still there, else the default.
func (r *BackupReconciler) fileOwner(ctx context.Context, b *Backup) int64 {
	if b.Status.RunAsUser != nil {
		return *b.Status.RunAsUser
	}
	db, err := r.Kind.getCluster(ctx, r.Client, client.ObjectKey{Namespace: b.Namespace, Name: b.Cluster})
	if uid := b.Annotations[r.Kind.Keys.ClusterUID]; err == nil && (uid == "" || uid == string(db.UID)) {
		return runAsUserOf(db)
	}
	return DefaultRunAsUser
}

func namespaceTerminating(ctx context.Context, c client.Reader, name string) (bool, error) {
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return !ns.DeletionTimestamp.IsZero() || ns.Status.Phase == corev1.NamespaceTerminating, nil
}

// jobPodReport reads the termination message of the Job's newest finished
// pod: a Report when it succeeded, the raw message when it failed.
func jobPodReport(ctx context.Context, c client.Reader, job *batchv1.Job) (engine.Report, string) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}); err != nil {
		return engine.Report{}, ""
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if !metav1.IsControlledBy(p, job) || (p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed) {
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&p.CreationTimestamp) ||
			(p.Status.Phase == corev1.PodSucceeded && newest.Status.Phase != corev1.PodSucceeded) {
			newest = p
		}
	}
	if newest == nil {
		return engine.Report{}, ""
	}
	for _, cs := range newest.Status.ContainerStatuses {
		t := cs.State.Terminated
		if t == nil || t.Message == "" {
			continue
		}
		if newest.Status.Phase == corev1.PodFailed {
			return engine.Report{}, t.Message
		}
		report, err := engine.ParseReport(t.Message)
		if err != nil {
			logf.FromContext(ctx).Info("Job pod's termination message is not a report", "pod", newest.Name, "error", err.Error())
		}
		return report, ""
	}
	return engine.Report{}, ""
}

// backupOfJob maps a Job (or a Job's pod) to the DatabaseBackup that owns
// it.
func backupOfJob(kind *Kind, owned client.Reader) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		job, ok := o.(*batchv1.Job)
		if !ok {
			name := o.GetLabels()["batch.kubernetes.io/job-name"]
			if name == "" {
				return nil
			}
			job = &batchv1.Job{}
			if err := owned.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: name}, job); err != nil {
				return nil
			}
		}
		ref := metav1.GetControllerOf(job)
		if ref == nil || ref.Kind != kind.backupKind() {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: job.Namespace, Name: ref.Name}}}
	}
}
