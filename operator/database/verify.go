package database

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/status"
)

// Verification: a backup is proven by restoring it. A Job per
// verification runs the engine's verify script (engine.Verifier) with the
// cluster's image: it restores the dump into a scratch server inside its
// own pod, on a generic ephemeral volume (created with the pod and removed
// with it), and checks it. Its Report lands on the backup's
// status.verification, its Verified condition, Events and metrics; the
// Job is deleted once that is recorded, whatever the outcome.
const (
	// AnnotationVerify on a DatabaseBackup asks for one verification now
	// (value "now"); the operator removes it once the request is recorded
	// in status.verification (requestTime, no outcome yet).
	AnnotationVerify = "stable.imaginedata.co/verify"
	// AnnotationVerifyRequest on a verification Job is the request time
	// of the verification it runs (status.verification.requestTime).
	AnnotationVerifyRequest = "stable.imaginedata.co/verify-request"
	// ConditionVerified is a backup's condition: True when its newest
	// verification passed.
	ConditionVerified = "Verified"
	// ConditionBackupVerified is a cluster's condition: True while its
	// newest verified backup is within backup.verify.maxAge.
	ConditionBackupVerified = "BackupVerified"

	componentVerify = "verify"
	holdVerified    = "verified"
)

// Defaults of spec.backup.verify (docs/design/database-backup.md says
// why).
var (
	// defaultVerifyMaxAge: a weekly verification of daily backups keeps
	// the newest verified backup at most 8 days old; a day more of slack.
	defaultVerifyMaxAge = 216 * time.Hour
	// defaultVerifyStartTimeout bounds the wait for a node, a scratch
	// volume or another verification.
	defaultVerifyStartTimeout = time.Hour
)

// verifyResourcesBeside is the verification's default resources (100m CPU
// and 256Mi requested, 1 CPU and 1Gi at most), never a larger CPU request
// than the database's own pods (serverResources says why). So:
//   - servers with a CPU request (or only a limit, which Kubernetes makes
//     the request) of less than 100m: that request;
//   - servers without one: no CPU request or limit (a CPU limit alone
//     would become the request);
//   - BestEffort servers (`resources: {}`, no agent): no resources at
//     all, BestEffort too.
func verifyResourcesBeside(db *Cluster) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	server := *serverResources(db)
	cpu, requested := server.Requests[corev1.ResourceCPU]
	if !requested {
		cpu, requested = server.Limits[corev1.ResourceCPU]
	}
	switch {
	case len(server.Requests) == 0 && len(server.Limits) == 0 && !failoverOn(db):
		return corev1.ResourceRequirements{}
	case !requested || cpu.IsZero():
		delete(r.Requests, corev1.ResourceCPU)
		delete(r.Limits, corev1.ResourceCPU)
	case cpu.Cmp(r.Requests[corev1.ResourceCPU]) < 0:
		r.Requests[corev1.ResourceCPU] = cpu
	}
	return r
}

// Scratch volume size: scratchFactor × the dump's size + scratchFloor. A
// custom-format dump is compressed (text and numbers shrink 3 to 5 times)
// and holds index definitions, not indexes: the restored cluster is
// typically 3 to 6 times the dump. The floor covers initdb's ~40 MB, the
// server's WAL (the scratch server runs wal_level=minimal, so the
// restore's COPY into tables created in the same transaction writes
// hardly any) and small dumps.
const scratchFactor = 8

var scratchFloor = resource.MustParse("1Gi")

// scratchSize is the scratch volume a dump of size bytes is restored into.
func scratchSize(size int64) resource.Quantity {
	q := resource.NewQuantity(size*scratchFactor, resource.BinarySI)
	q.Add(scratchFloor)
	// Whole MiB: a request a person can read.
	mi := (q.Value() + (1<<20 - 1)) >> 20
	return *resource.NewQuantity(mi<<20, resource.BinarySI)
}

// verifyJobName is the one verification Job a cluster may have at a time:
// the API server refuses a second of the same name.
func verifyJobName(cluster string) string { return cluster + "-verify" }

// verifySettings is spec.backup.verify with its defaults.
type verifySettings struct {
	Mode         dbv1.VerifyMode
	Schedule     string
	TimeZone     string
	UserCheck    string
	MaxAge       time.Duration
	StartTimeout time.Duration
	Resources    corev1.ResourceRequirements
}

func verifySettingsOf(db *Cluster) verifySettings {
	s := verifySettings{Mode: dbv1.VerifyEachBackup, MaxAge: defaultVerifyMaxAge, StartTimeout: defaultVerifyStartTimeout, Resources: verifyResourcesBeside(db)}
	b := db.Spec.Backup
	if b == nil {
		return s
	}
	if b.TimeZone != nil {
		s.TimeZone = *b.TimeZone
	}
	v := b.Verify
	if v == nil {
		return s
	}
	if v.Mode != "" {
		s.Mode = v.Mode
	}
	s.Schedule, s.UserCheck = v.Schedule, v.UserCheck
	if v.MaxAge != nil {
		s.MaxAge = v.MaxAge.Duration
	}
	if v.StartTimeout != nil {
		s.StartTimeout = v.StartTimeout.Duration
	}
	if v.Resources != nil {
		s.Resources = *v.Resources
	}
	return s
}

// verification runs a completed backup's verifications: it records a
// finished Job's result, releases the Job, and starts one when asked.
func (r *BackupReconciler) verification(ctx context.Context, b *Backup) (reconcile.Result, error) {
	db, err := r.Kind.getCluster(ctx, r.Client, client.ObjectKey{Namespace: b.Namespace, Name: b.Cluster})
	if apierrors.IsNotFound(err) {
		// Its cluster is gone: nothing says which image or role to verify
		// with.
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	settings := verifySettingsOf(db)
	jobKey := client.ObjectKey{Namespace: b.Namespace, Name: verifyJobName(db.Name)}
	var job batchv1.Job
	err = r.Owned.Get(ctx, jobKey, &job)
	if apierrors.IsNotFound(err) && verificationRunning(b) {
		err = r.API.Get(ctx, jobKey, &job)
	}
	if client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	jobExists := err == nil
	ours := jobExists && metav1.IsControlledBy(&job, b)
	v := b.Status.Verification
	if v != nil && v.Outcome == "" {
		// The request is in the status (read back): the annotation that
		// asked for it has done its work.
		if err := r.removeVerifyAnnotation(ctx, b); err != nil {
			return reconcile.Result{}, err
		}
	}
	var newer *metav1.Time
	if ours && v != nil && v.Outcome != "" {
		newer = newerVerification(&job, v, r.Kind.Keys.VerifyRequest)
	}
	switch {
	case newer != nil:
		// The Job of a verification started after the one recorded, whose
		// status write was lost (a conflict with another write of the
		// backup): it is that verification's, recorded now and observed,
		// not deleted as the finished one's.
		if r.stale(ctx, b) {
			return reconcile.Result{RequeueAfter: staleRecheck}, nil
		}
		b.Status.Verification = &dbv1.BackupVerification{RequestTime: newer, StartTime: newer}
		verifyPending(&b.Status.Conditions, b.Generation, ConditionVerified, "Running", fmt.Sprintf("Job %s restores %s into a scratch server and checks it", job.Name, b.Status.File))
		return r.observeVerifyJob(ctx, b, db, &job, settings)
	case ours && v != nil && v.Outcome != "":
		// Recorded and read back: the Job goes. Unless this read of the
		// backup is stale: the Job may then be a newer verification's
		// (same name, same owner), started after the outcome this read
		// shows, and deleting it would lose that verification (JobLost).
		if r.stale(ctx, b) {
			return reconcile.Result{RequeueAfter: staleRecheck}, nil
		}
		if job.DeletionTimestamp.IsZero() {
			return reconcile.Result{}, r.deleteJob(ctx, &job)
		}
		return reconcile.Result{}, nil
	case ours:
		return r.observeVerifyJob(ctx, b, db, &job, settings)
	case verificationRunning(b):
		if r.stale(ctx, b) {
			return reconcile.Result{RequeueAfter: staleRecheck}, nil
		}
		r.verified(b, db, dbv1.VerificationError, nil, "JobLost", fmt.Sprintf("verification Job %s disappeared before its result was recorded", jobKey.Name))
		return reconcile.Result{}, nil
	}
	requested, next := r.verifyRequested(b, db, settings)
	if !requested {
		return reconcile.Result{RequeueAfter: next}, nil
	}
	var other *batchv1.Job
	if jobExists {
		other = &job
	}
	return r.startVerification(ctx, b, db, settings, other)
}

// startVerification starts a requested verification of b, or records why
// it waits; other is another backup's verification Job of the cluster
// (nil: none runs).
func (r *BackupReconciler) startVerification(ctx context.Context, b *Backup, db *Cluster, settings verifySettings, other *batchv1.Job) (reconcile.Result, error) {
	v := b.Status.Verification
	verifier, ok := r.Kind.Engines[engineOf(db)].(engine.Verifier)
	if !ok {
		if _, asked := b.Annotations[r.Kind.Keys.Verify]; asked {
			if err := r.removeVerifyAnnotation(ctx, b); err != nil {
				return reconcile.Result{}, err
			}
			r.verified(b, db, dbv1.VerificationError, nil, "EngineCannotVerify", fmt.Sprintf("the %s engine of %s %s cannot verify backups yet", engineOf(db), r.Kind.clusterKind(), db.Name))
		}
		return reconcile.Result{}, nil
	}
	if v == nil || v.Outcome != "" || v.RequestTime == nil {
		now := metav1.NewTime(r.now())
		b.Status.Verification = &dbv1.BackupVerification{RequestTime: &now}
		v = b.Status.Verification
	}
	if waited := r.now().Sub(v.RequestTime.Time); waited > settings.StartTimeout {
		r.verified(b, db, dbv1.VerificationError, nil, "NotStarted", fmt.Sprintf("the verification could not start within %s (startTimeout): %s", settings.StartTimeout, conditionMessage(b.Status.Conditions, ConditionVerified)))
		return reconcile.Result{}, nil
	}
	if why := r.cannotVerify(db, other); why != "" {
		verifyPending(&b.Status.Conditions, b.Generation, ConditionVerified, "Waiting", why)
		return reconcile.Result{RequeueAfter: pendingRecheck}, nil
	}
	desired := verifyJob(db, verifier, b, settings)
	metav1.SetMetaDataAnnotation(&desired.ObjectMeta, r.Kind.Keys.VerifyRequest, v.RequestTime.UTC().Format(time.RFC3339))
	if created, err := r.createSlotJob(ctx, desired, "verification"); err != nil || !created {
		return reconcile.Result{RequeueAfter: pendingRecheck}, err
	}
	now := metav1.NewTime(r.now())
	v.StartTime = &now
	msg := fmt.Sprintf("Job %s restores %s into a scratch server and checks it", desired.Name, b.Status.File)
	verifyPending(&b.Status.Conditions, b.Generation, ConditionVerified, "Running", msg)
	r.Recorder.Eventf(b.Object, nil, corev1.EventTypeNormal, "VerificationStarted", "Verify", "%s", msg)
	return reconcile.Result{RequeueAfter: settings.StartTimeout}, nil
}

// newerVerification is the request time job's annotation gives, when it
// is later than that of v, the verification recorded (both are whole
// seconds); nil for the recorded verification's Job, or one without it.
func newerVerification(job *batchv1.Job, v *dbv1.BackupVerification, key string) *metav1.Time {
	at, err := time.Parse(time.RFC3339, job.Annotations[key])
	if err != nil || v.RequestTime != nil && !at.After(v.RequestTime.Truncate(time.Second)) {
		return nil
	}
	return &metav1.Time{Time: at}
}

// verificationRunning: a Job was created for the newest verification and
// no result is recorded yet.
func verificationRunning(b *Backup) bool {
	v := b.Status.Verification
	return v != nil && v.StartTime != nil && v.Outcome == ""
}

// verifyRequested says whether b is to be verified now, and else when to
// look again (0: only when something changes). Asked: the annotation;
// EachBackup: every completed backup not verified yet; Scheduled: the
// cluster's newest completed backup, at each schedule time after it
// completed or was last verified.
func (r *BackupReconciler) verifyRequested(b *Backup, db *Cluster, s verifySettings) (bool, time.Duration) {
	v := b.Status.Verification
	if v != nil && v.Outcome == "" {
		// Asked before, waiting for its turn.
		return true, 0
	}
	if _, asked := b.Annotations[r.Kind.Keys.Verify]; asked {
		return true, 0
	}
	if b.CreationTimestamp.Before(&db.CreationTimestamp) {
		// A backup of a former cluster of the same name.
		return false, 0
	}
	switch s.Mode {
	case dbv1.VerifyEachBackup:
		return v == nil, 0
	case dbv1.VerifyScheduled:
		if db.Status.Backup == nil || db.Status.Backup.LastSuccessfulBackup != b.Name {
			return false, 0
		}
		sched, loc, err := parseSchedule(s.Schedule, s.TimeZone)
		if err != nil {
			return false, 0
		}
		since := scheduledSince(b)
		now := r.now()
		if _, due := lastDue(sched, loc, since, now); due {
			return true, 0
		}
		return false, sched.Next(now.In(loc)).Sub(now) + time.Second
	}
	return false, 0
}

// scheduledSince is when the Scheduled mode last had b verified: the
// newest of the backup's completion, its last verification's request and
// that verification's end. Schedule times that pass while a verification
// runs are covered by it (it verified this same backup), so none starts
// another, then or after it.
func scheduledSince(b *Backup) time.Time {
	since := b.Status.CompletionTime.Time
	v := b.Status.Verification
	if v == nil {
		return since
	}
	for _, t := range []*metav1.Time{v.RequestTime, v.CompletionTime} {
		if t != nil && t.After(since) {
			since = t.Time
		}
	}
	return since
}

// cannotVerify says why a verification must wait ("" when it may start).
// One runs per cluster at a time (one Job name). It does not wait for
// backups: it reads the backup volume beside them, on the same node (see
// sameNodeAsBackupVolumeUsers).
func (r *BackupReconciler) cannotVerify(db *Cluster, other *batchv1.Job) string {
	if other != nil {
		owner := "another backup"
		if ref := metav1.GetControllerOf(other); ref != nil {
			owner = ref.Kind + " " + ref.Name
		}
		return fmt.Sprintf("one verification at a time per %s: Job %s of %s runs", r.Kind.clusterKind(), other.Name, owner)
	}
	if !db.DeletionTimestamp.IsZero() {
		return fmt.Sprintf("%s %s is being deleted", r.Kind.clusterKind(), db.Name)
	}
	return ""
}

// verifyJob runs the engine's verification container, owned by the
// backup: the backup volume read-only, a scratch volume sized from the
// dump, the verification's resources, never selected by a Service (its
// component is "verify"), on the node of any pod using the backup volume.
func verifyJob(db *Cluster, verifier engine.Verifier, b *Backup, s verifySettings) *batchv1.Job {
	c := clusterOf(db, db.Kind.Engines[engineOf(db)])
	c.Resources = &s.Resources
	pod := verifier.VerifyPod(c, engine.Verify{File: b.Status.File, SHA256: b.Status.SHA256, ClaimName: b.Status.ClaimName, UserCheck: s.UserCheck})
	pod.Volumes = append(pod.Volumes, scratchVolume(db, scratchSize(b.Status.Size)))
	labels := withLabels(objectLabels(db), map[string]string{db.Kind.Keys.Component: componentVerify})
	return lifecycleJob(db.Kind, verifyJobName(db.Name), db.Namespace, labels, backupOwner(db.Kind, b, false), pod, db.Spec.PodTemplate, 0, namesOf(db).Scripts)
}

// scratchVolume is a generic ephemeral volume: a claim made with the pod
// and deleted with it, on the backup volume's StorageClass (or the
// default).
func scratchVolume(db *Cluster, size resource.Quantity) corev1.Volume {
	var class *string
	if b := db.Spec.Backup; b != nil && b.Storage != nil && b.Storage.Volume != nil {
		class = b.Storage.Volume.StorageClassName
	}
	return corev1.Volume{Name: engine.ScratchVolume, VolumeSource: corev1.VolumeSource{
		Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Labels: withLabels(objectLabels(db), map[string]string{db.Kind.Keys.Component: componentVerify})},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: class,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			},
		}},
	}}
}

// LabelBackupClaim on backup and verification pods names the backup
// claim they mount.
const labelBackupClaimSuffix = "backup-claim"

// sameNodeAsBackupVolumeUsers makes a pod that mounts a ReadWriteOnce
// backup claim run on the node of any other pod mounting it (a backup, a
// verification, a restore, an upgrade, a file's deletion; lifecycleJob
// applies it to each): a ReadWriteOnce volume can be mounted by
// several pods of one node, never of two. The first of them goes
// anywhere (a required pod affinity that only the pod itself matches is
// ignored), the next joins it, so neither waits for the other.
func sameNodeAsBackupVolumeUsers(kind *Kind, t *corev1.PodTemplateSpec, claim string) {
	if claim == "" {
		return
	}
	key := backupClaimLabel(kind)
	t.Labels = withLabels(t.Labels, map[string]string{key: claim})
	if t.Spec.Affinity == nil {
		t.Spec.Affinity = &corev1.Affinity{}
	} else {
		t.Spec.Affinity = t.Spec.Affinity.DeepCopy()
	}
	if t.Spec.Affinity.PodAffinity == nil {
		t.Spec.Affinity.PodAffinity = &corev1.PodAffinity{}
	}
	pa := t.Spec.Affinity.PodAffinity
	pa.RequiredDuringSchedulingIgnoredDuringExecution = append(pa.RequiredDuringSchedulingIgnoredDuringExecution, corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: claim}},
		TopologyKey:   corev1.LabelHostname,
	})
}

// backupClaimLabel is the Kind's label naming the backup claim a pod
// mounts.
func backupClaimLabel(kind *Kind) string {
	prefix, _, _ := strings.Cut(kind.Keys.Component, "/")
	return prefix + "/" + labelBackupClaimSuffix
}

// observeVerifyJob records a finished verification Job's result, or ends
// one whose pod did not start within startTimeout.
func (r *BackupReconciler) observeVerifyJob(ctx context.Context, b *Backup, db *Cluster, job *batchv1.Job, s verifySettings) (reconcile.Result, error) {
	report, failMsg := jobPodReport(ctx, r.Owned, job)
	finished := jobFinished(job, batchv1.JobComplete) || jobFinished(job, batchv1.JobFailed)
	if finished && r.stale(ctx, b) {
		return reconcile.Result{RequeueAfter: staleRecheck}, nil
	}
	switch {
	case jobFinished(job, batchv1.JobComplete):
		if report.Verification == nil || len(report.Verification.Checks) == 0 {
			if wait := reportWait(job); wait > 0 {
				return reconcile.Result{RequeueAfter: wait}, nil
			}
			r.verified(b, db, dbv1.VerificationError, nil, "NoReport", fmt.Sprintf("verification Job %s succeeded but its pod reported no checks", job.Name))
			return reconcile.Result{}, nil
		}
		outcome, reason, msg := dbv1.VerificationVerified, "Verified", verifiedMessage(report.Verification)
		if failed := report.Verification.Failed(); failed != nil {
			outcome, reason = dbv1.VerificationFailed, checkReason(failed.Name)
			msg = fmt.Sprintf("check %s failed: %s", failed.Name, failed.Message)
		}
		r.verified(b, db, outcome, report.Verification, reason, msg)
		return reconcile.Result{}, nil
	case jobFinished(job, batchv1.JobFailed):
		r.verified(b, db, dbv1.VerificationError, nil, "JobFailed", failedJobMessage("verification", job, failMsg))
		return reconcile.Result{}, nil
	}
	started, err := jobPodStarted(ctx, r.Owned, job)
	if err != nil {
		return reconcile.Result{}, err
	}
	if started {
		return reconcile.Result{}, nil
	}
	waited := r.now().Sub(verifyRequestTime(b, job))
	if waited > s.StartTimeout {
		r.verified(b, db, dbv1.VerificationError, nil, "NotStarted", fmt.Sprintf("the pod of verification Job %s did not start within %s (startTimeout): no node with room, or its scratch volume was not provisioned", job.Name, s.StartTimeout))
		return reconcile.Result{}, nil
	}
	return reconcile.Result{RequeueAfter: s.StartTimeout - waited + time.Second}, nil
}

// verifyRequestTime is when the verification job runs for was asked for:
// the status's request time, or the Job's creation when an operator
// stopped between creating the Job and recording the request.
func verifyRequestTime(b *Backup, job *batchv1.Job) time.Time {
	if v := b.Status.Verification; v != nil && v.RequestTime != nil {
		return v.RequestTime.Time
	}
	return job.CreationTimestamp.Time
}

// jobPodStarted: a pod of the Job runs or ran.
func jobPodStarted(ctx context.Context, c client.Reader, job *batchv1.Job) (bool, error) {
	if job.Status.Succeeded+job.Status.Failed > 0 || (job.Status.Ready != nil && *job.Status.Ready > 0) {
		return true, nil
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}); err != nil {
		return false, err
	}
	for _, p := range pods.Items {
		if metav1.IsControlledBy(&p, job) && p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
			return true, nil
		}
	}
	return false, nil
}

// checkReason is a failed check's condition reason: "rowCounts" ->
// "RowCountsFailed".
func checkReason(check string) string {
	if check == "" {
		return "CheckFailed"
	}
	return strings.ToUpper(check[:1]) + check[1:] + "Failed"
}

func verifiedMessage(v *engine.Verification) string {
	return fmt.Sprintf("restored into a scratch server: %d tables, %d rows; checks passed: %s", v.Tables, v.Rows, strings.Join(checkNamesOf(v), ", "))
}

func checkNamesOf(v *engine.Verification) []string {
	names := make([]string, len(v.Checks))
	for i, c := range v.Checks {
		names[i] = c.Name
	}
	return names
}

// recordChecks puts what a verification Job found (nil: nothing, it did
// not run to its report) into v: the checks, the one that failed, the
// restored tables and rows.
func recordChecks(v *dbv1.BackupVerification, found *engine.Verification) {
	v.FailedCheck, v.Checks, v.Tables, v.Rows = "", nil, 0, 0
	if found == nil {
		return
	}
	for _, c := range found.Checks {
		v.Checks = append(v.Checks, dbv1.VerificationCheck{Name: c.Name, Passed: c.Passed, Message: c.Message})
	}
	if failed := found.Failed(); failed != nil {
		v.FailedCheck = failed.Name
	}
	v.Tables, v.Rows = int32(found.Tables), found.Rows
}

// verified records a verification's end on the backup (status, condition,
// Events on it and its cluster, metric).
func (r *BackupReconciler) verified(b *Backup, db *Cluster, outcome dbv1.VerificationOutcome, found *engine.Verification, reason, msg string) {
	now := metav1.NewTime(r.now())
	v := b.Status.Verification
	if v == nil {
		v = &dbv1.BackupVerification{RequestTime: &now}
		b.Status.Verification = v
	}
	v.CompletionTime = &now
	if v.StartTime != nil {
		v.Duration = &metav1.Duration{Duration: now.Sub(v.StartTime.Time).Round(time.Second)}
	}
	v.Outcome, v.Message = outcome, msg
	recordChecks(v, found)
	status.SetCondition(&b.Status.Conditions, b.Generation, ConditionVerified, outcome == dbv1.VerificationVerified, reason, msg)
	r.Kind.metrics.verifications.WithLabelValues(b.Namespace, b.Cluster, strings.ToLower(string(outcome))).Inc()
	kind := r.Kind.backupKind()
	if outcome == dbv1.VerificationVerified {
		r.Recorder.Eventf(b.Object, nil, corev1.EventTypeNormal, "Verified", "Verify", "%s", msg)
		if db != nil {
			r.Recorder.Eventf(db.Object, nil, corev1.EventTypeNormal, "BackupVerified", "Verify", "%s %s verified: %s", kind, b.Name, msg)
		}
		return
	}
	event := "VerificationFailed"
	if outcome == dbv1.VerificationError {
		event = "VerificationError"
	}
	r.Recorder.Eventf(b.Object, nil, corev1.EventTypeWarning, event, "Verify", "%s: %s", reason, msg)
	if db != nil {
		r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "Backup"+event, "Verify", "%s %s: %s: %s", kind, b.Name, reason, msg)
	}
}

// removeVerifyAnnotation takes the verify annotation off b, once the
// request it made is recorded in the status (or answered at once).
func (r *BackupReconciler) removeVerifyAnnotation(ctx context.Context, b *Backup) error {
	if _, asked := b.Annotations[r.Kind.Keys.Verify]; !asked {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{r.Kind.Keys.Verify: nil}}})
	if err != nil {
		return err
	}
	obj := r.Kind.Backups.New()
	obj.SetNamespace(b.Namespace)
	obj.SetName(b.Name)
	if err := r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, body)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("removing %s from %s %s: %w", r.Kind.Keys.Verify, r.Kind.backupKind(), b.Name, err)
	}
	// The status this pass writes is based on the version before this
	// patch, which changed nothing else: the status patch's optimistic
	// lock takes the new version.
	delete(b.Annotations, r.Kind.Keys.Verify)
	b.Object.SetResourceVersion(obj.GetResourceVersion())
	annotations := b.Object.GetAnnotations()
	delete(annotations, r.Kind.Keys.Verify)
	b.Object.SetAnnotations(annotations)
	return nil
}

// verifyPending sets the Verified condition False while a verification
// waits or runs (as Completed is while a backup runs): the backup is not
// known to restore until it passes.
func verifyPending(conds *[]metav1.Condition, generation int64, kind, reason, msg string) {
	status.SetCondition(conds, generation, kind, false, reason, msg)
}

func conditionMessage(conds []metav1.Condition, kind string) string {
	if c := findCondition(conds, kind); c != nil {
		return c.Message
	}
	return "it was never started"
}

// observeVerifications sets the cluster's newest verified backup (held
// against retention by holdsWanted), its metrics, and BackupVerified: False
// with an Event when that backup is older than verify.maxAge, or when
// none is verified and the oldest completed backup is that old. It returns
// when that will next change by time alone (0: never), so the condition
// and its Event come on time without any other change.
func (r *Reconciler) observeVerifications(db *Cluster, backups []*Backup) time.Duration {
	if _, ok := r.Kind.Engines[engineOf(db)].(engine.Verifier); !ok {
		// Nothing verifies this engine's backups: no bound to hold them to.
		return 0
	}
	s := verifySettingsOf(db)
	var newest, oldestCompleted *Backup
	for _, b := range backups {
		if b.Status.Phase != dbv1.BackupCompleted || b.Status.CompletionTime == nil || b.CreationTimestamp.Before(&db.CreationTimestamp) || !b.DeletionTimestamp.IsZero() {
			continue
		}
		if oldestCompleted == nil || finishedAfter(oldestCompleted, b) {
			oldestCompleted = b
		}
		if v := b.Status.Verification; v != nil && v.Outcome == dbv1.VerificationVerified && (newest == nil || finishedAfter(b, newest)) {
			newest = b
		}
	}
	if newest != nil {
		if db.Status.Backup == nil {
			db.Status.Backup = &dbv1.BackupStatus{}
		}
		db.Status.Backup.LastVerifiedBackup = newest.Name
		db.Status.Backup.LastVerifiedBackupTime = newest.Status.CompletionTime
		r.Kind.metrics.lastVerifiedBackup.WithLabelValues(db.Namespace, db.Name).Set(float64(newest.Status.CompletionTime.Unix()))
	} else if db.Status.Backup != nil {
		db.Status.Backup.LastVerifiedBackup, db.Status.Backup.LastVerifiedBackupTime = "", nil
	}
	stale := r.Kind.metrics.verifiedStale.WithLabelValues(db.Namespace, db.Name)
	now := r.now()
	switch {
	case s.Mode == dbv1.VerifyOff && newest == nil:
		// Nothing is verified unless asked: no bound to keep.
		if findCondition(db.Status.Conditions, ConditionBackupVerified) != nil {
			r.setCondition(db, ConditionBackupVerified, true, "VerificationOff", "backup.verify.mode is Off and no backup has been verified")
		}
		stale.Set(0)
		return 0
	case newest != nil && now.Sub(newest.Status.CompletionTime.Time) > s.MaxAge:
		msg := fmt.Sprintf("the newest verified backup, %s %s, completed at %s, is older than backup.verify.maxAge (%s)", r.Kind.backupKind(), newest.Name, newest.Status.CompletionTime.UTC().Format(time.RFC3339), s.MaxAge)
		r.warn(db, ConditionBackupVerified, "VerifiedBackupTooOld", msg)
		r.setCondition(db, ConditionBackupVerified, false, "VerifiedBackupTooOld", msg)
		stale.Set(1)
		return 0
	case newest != nil:
		r.setCondition(db, ConditionBackupVerified, true, "Verified", fmt.Sprintf("the newest verified backup is %s %s, completed at %s", r.Kind.backupKind(), newest.Name, newest.Status.CompletionTime.UTC().Format(time.RFC3339)))
		stale.Set(0)
		return newest.Status.CompletionTime.Add(s.MaxAge).Sub(now) + time.Second
	case oldestCompleted != nil && now.Sub(oldestCompleted.Status.CompletionTime.Time) > s.MaxAge:
		msg := fmt.Sprintf("no backup has been verified, and the oldest completed one, %s %s, is older than backup.verify.maxAge (%s)", r.Kind.backupKind(), oldestCompleted.Name, s.MaxAge)
		r.warn(db, ConditionBackupVerified, "NoVerifiedBackup", msg)
		r.setCondition(db, ConditionBackupVerified, false, "NoVerifiedBackup", msg)
		stale.Set(1)
		return 0
	case oldestCompleted != nil:
		stale.Set(0)
		return oldestCompleted.Status.CompletionTime.Add(s.MaxAge).Sub(now) + time.Second
	}
	stale.Set(0)
	return 0
}

// stopVerification deletes a verification Job of b that still runs (b is
// being deleted: its file goes).
func (r *BackupReconciler) stopVerification(ctx context.Context, b *Backup) error {
	var job batchv1.Job
	err := r.Owned.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: verifyJobName(b.Cluster)}, &job)
	if err != nil || !metav1.IsControlledBy(&job, b) || !job.DeletionTimestamp.IsZero() {
		return client.IgnoreNotFound(err)
	}
	return r.deleteJob(ctx, &job)
}

// holdNewestVerified puts db's hold on its newest verified backup, so
// retention keeps it; releaseHolds takes it off once a newer one is
// verified.
func (r *Reconciler) holdNewestVerified(ctx context.Context, db *Cluster, backups []*Backup) error {
	if db.Status.Backup == nil || db.Status.Backup.LastVerifiedBackup == "" {
		return nil
	}
	for _, b := range backups {
		if b.Name == db.Status.Backup.LastVerifiedBackup {
			return r.hold(ctx, b, db, holdVerified, fmt.Sprintf("the newest verified backup of %s %s (retention keeps it)", r.Kind.clusterKind(), db.Name))
		}
	}
	return nil
}
