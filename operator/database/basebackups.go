package database

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/status"
)

// Base backups as DatabaseBackups (docs/design/database-backup.md, Base
// backups as DatabaseBackups): each base backup in a Database's archive
// has a DatabaseBackup of method BaseBackup, so it is listed, held
// (spec.keep) and deleted as a dump is.
//   - The Database's reconcile reads the primary's report of its archive
//     (instance.BaseBackups) at each look at the primary, so it keeps the
//     objects in line with it (syncBaseBackups): it makes an object for
//     each base backup no object names, records each one's place in the
//     archive, size and verification, asks the primary's archiver for the
//     base backups users asked for, and deletes the objects of base
//     backups the archive no longer holds (its retention policy removed
//     them).
//   - The backup reconciler refuses a base backup its Database cannot
//     take, and deletes the base backup of a deleted object with a Job
//     (delete-base.sh), unless one of the operator's holds keeps it.

const (
	// reasonArchive labels the objects the operator makes for base
	// backups it found in the archive (the scheduled ones, or any taken
	// by hand).
	reasonArchive = "archive"
	// ConditionBaseBackupDeleted is a deleted base backup object's
	// condition while its base backup is deleted from the archive.
	ConditionBaseBackupDeleted = "BaseBackupDeleted"

	componentBaseBackupDelete = "base-backup-delete"

	// baseBackupTakeBound: a base backup asked for and not in the archive
	// after this long has failed (a base backup of a few hundred GiB takes
	// hours at the tens of MB/s gzip reaches on a core).
	baseBackupTakeBound = 24 * time.Hour
)

// syncBaseBackups keeps db's base backup objects in line with what the
// primary's archiver last found in the archive; ask asks the primary's
// archiver for a base backup now, or with "" to list the archive again
// now. A report of another archive (the
// servers not rolled to a new objectStore yet) changes nothing.
func (r *Reconciler) syncBaseBackups(ctx context.Context, db *Cluster, st instance.Status, ask func(name string) error) error {
	store := objectStoreOf(db)
	found := st.BaseBackups
	if store == nil || st.Role != instance.RolePrimary || found == nil || !listsArchiveOf(found.Archive, store, db.Name) {
		return nil
	}
	objs, err := r.Kind.baseBackupsOf(ctx, r.Client, db)
	if err != nil {
		return err
	}
	byID, byName := map[string]*Backup{}, map[string]*Backup{}
	for _, b := range objs {
		if bb := b.Status.BaseBackup; bb != nil {
			byID[bb.ID] = b
		}
		byName[b.Name] = b
	}
	listed, recorded := map[string]bool{}, map[string]bool{}
	for _, f := range found.Backups {
		listed[f.ID] = true
		b := byID[f.ID]
		// One asked for by name, in the archive now; or the one made for
		// it before, whose record was not written (a conflict).
		for _, name := range []string{f.Name, baseBackupObjectName(db.Name, f)} {
			if c := byName[name]; b == nil && c != nil && c.Status.BaseBackup == nil {
				b = c
			}
		}
		if b == nil {
			if b, err = r.makeBaseBackupObject(ctx, db, f); err != nil {
				return err
			}
			if b == nil {
				continue // its name is another backup's
			}
		}
		recorded[b.Name] = true
		if err := r.recordBaseBackup(ctx, db, b, f); err != nil {
			return err
		}
	}
	for _, b := range objs {
		if recorded[b.Name] && b.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.followBaseBackup(ctx, db, b, st.Pod, found, listed, ask); err != nil {
			return err
		}
	}
	return nil
}

// listsArchiveOf: the archiver listed the archive db writes (store, under
// server).
func listsArchiveOf(a *instance.ArchiveIdentity, store *dbv1.ObjectStore, server string) bool {
	return a != nil && readsArchiveOf(dbv1.RecoverySource{
		ObjectStore: dbv1.ObjectStore{Endpoint: a.Endpoint, Bucket: a.Bucket, Path: a.Prefix}, ServerName: a.Server,
	}, server, store)
}

// followBaseBackup moves one object on: asks for the base backup of a
// pending one (again after a failover: the request was the old
// primary's), fails one the archiver could not take, and deletes one
// whose base backup the archive no longer lists.
func (r *Reconciler) followBaseBackup(ctx context.Context, db *Cluster, b *Backup, primary string, found *instance.BaseBackups, listed map[string]bool, ask func(string) error) error {
	if !b.DeletionTimestamp.IsZero() {
		if c := findCondition(b.Status.Conditions, ConditionBaseBackupDeleted); c != nil && c.Reason == "WaitingForListing" {
			// Its base backup is gone: the archiver lists the archive
			// again now rather than at its next look.
			return ask("")
		}
		return nil
	}
	before := *b.Status.DeepCopy()
	if bb := b.Status.BaseBackup; bb != nil {
		if a := b.Status.Archive; !listed[bb.ID] && a != nil && readsArchiveOf(*a, db.Name, objectStoreOf(db)) && found.CheckedAt.After(bb.EndTime.Time) {
			return r.forgetBaseBackup(ctx, db, b)
		}
		return nil
	}
	switch {
	case b.Status.Phase == dbv1.BackupFailed || b.Status.Phase == "":
		// Failed, or not looked at by the backup reconciler yet.
		return nil
	case b.Labels[r.Kind.Keys.BackupReason] == reasonArchive:
		// Made for a base backup that left the archive before its record
		// was written: it stands for nothing, and is never asked for.
		return client.IgnoreNotFound(r.Client.Delete(ctx, b.Object))
	case found.Failed[b.Name] != "" && b.Status.StartTime != nil && found.CheckedAt.After(b.Status.StartTime.Time):
		// A failure listed since it was asked for: one listed before is
		// an earlier object's of the same name (the agent drops its
		// record with the new request).
		failBaseBackup(r.Recorder, b, db, "BaseBackupFailed", fmt.Sprintf("the primary's archiver could not take base backup %s: %s", b.Name, truncate(found.Failed[b.Name], 600)), r.now())
	case b.Status.Phase == dbv1.BackupRunning && r.now().Sub(b.Status.StartTime.Time) > baseBackupTakeBound:
		failBaseBackup(r.Recorder, b, db, "NotTaken", fmt.Sprintf("no base backup named %s reached the archive within %s of the request", b.Name, baseBackupTakeBound), r.now())
	case b.Status.Phase == dbv1.BackupPending || b.Status.Source != primary:
		r.askForBaseBackup(db, b, primary, ask)
	}
	return patchBackupStatus(ctx, r.Client, r.Kind, before, b)
}

// askForBaseBackup asks the primary's archiver for b's base backup, and
// records that it runs, or why it could not be asked.
func (r *Reconciler) askForBaseBackup(db *Cluster, b *Backup, primary string, ask func(string) error) {
	if err := ask(b.Name); err != nil {
		status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBackupCompleted, false, "WaitingForPrimary",
			fmt.Sprintf("asking primary %s for base backup %s failed (asked again at the next look): %s", primary, b.Name, truncate(err.Error(), 300)))
		return
	}
	msg := fmt.Sprintf("the archiver of primary %s takes base backup %s into %s", primary, b.Name, archiveLocation(objectStoreOf(db), db.Name))
	if b.Status.Phase != dbv1.BackupRunning {
		now := metav1.NewTime(r.now())
		b.Status.Phase, b.Status.StartTime = dbv1.BackupRunning, &now
		r.Recorder.Eventf(b.Object, nil, corev1.EventTypeNormal, "Started", "Backup", "%s", msg)
	}
	b.Status.Source = primary
	status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBackupCompleted, false, "Running", msg)
}

// failBaseBackup ends a base backup object that has no base backup;
// db may be nil (it does not exist).
func failBaseBackup(rec events.EventRecorder, b *Backup, db *Cluster, reason, msg string, now time.Time) {
	t := metav1.NewTime(now)
	b.Status.Phase, b.Status.CompletionTime = dbv1.BackupFailed, &t
	status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBackupCompleted, false, reason, msg)
	rec.Eventf(b.Object, nil, corev1.EventTypeWarning, reason, "Backup", "%s", msg)
	if db != nil {
		rec.Eventf(db.Object, nil, corev1.EventTypeWarning, "BackupFailed", "Backup", "DatabaseBackup %s failed: %s", b.Name, msg)
	}
}

// makeBaseBackupObject makes the object of a base backup the archive
// holds and no object names: <db>-<Barman's name> (or ID), lower-cased.
// nil when that name is taken by an object of another backup: the base
// backup stays in the archive, unlisted, and the Warning says so.
func (r *Reconciler) makeBaseBackupObject(ctx context.Context, db *Cluster, f instance.BaseBackup) (*Backup, error) {
	name := baseBackupObjectName(db.Name, f)
	obj := &dbv1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: db.Namespace,
			Labels:      map[string]string{db.Kind.Keys.Cluster: db.Name, db.Kind.Keys.BackupReason: reasonArchive},
			Annotations: map[string]string{db.Kind.Keys.ClusterUID: string(db.UID)},
		},
		Spec: dbv1.DatabaseBackupSpec{Database: db.Name, Method: dbv1.BackupMethodBaseBackup},
	}
	if err := r.Client.Create(ctx, obj); err != nil {
		if apierrors.IsAlreadyExists(err) {
			r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "BaseBackupNotListed", "Archive",
				"base backup %s (%s) is in the archive, but DatabaseBackup %s, the name it would be listed under, is another backup's", f.Name, f.ID, name)
			return nil, nil
		}
		return nil, fmt.Errorf("creating DatabaseBackup %s for base backup %s: %w", name, f.ID, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("DatabaseBackup", "created").Inc()
	return r.Kind.Backups.View(obj), nil
}

var notInObjectNames = regexp.MustCompile(`[^a-z0-9.-]+`)

// baseBackupObjectName is <db>-<Barman's name, or its ID>, lower-cased,
// in the letters an object name may hold.
func baseBackupObjectName(db string, f instance.BaseBackup) string {
	n := f.Name
	if n == "" {
		n = f.ID
	}
	name := db + "-" + strings.Trim(notInObjectNames.ReplaceAllString(strings.ToLower(n), "-"), "-.")
	if len(name) > 253 {
		name = strings.TrimRight(name[:253], "-.")
	}
	return name
}

// recordBaseBackup writes what the archive says of b's base backup f
// into b's status: completed, its record and size, its archive, and the
// verification of it the Database holds.
func (r *Reconciler) recordBaseBackup(ctx context.Context, db *Cluster, b *Backup, f instance.BaseBackup) error {
	if !b.DeletionTimestamp.IsZero() {
		return nil
	}
	before := *b.Status.DeepCopy()
	s := &b.Status
	rec := baseBackupRecord(&f)
	newly := s.Phase != dbv1.BackupCompleted
	s.Phase = dbv1.BackupCompleted
	s.StartTime, s.CompletionTime = &rec.BeginTime, &rec.EndTime
	s.Size = f.Size
	s.BaseBackup = rec
	if s.Archive == nil {
		s.Archive = &dbv1.RecoverySource{ObjectStore: *objectStoreOf(db).DeepCopy(), ServerName: db.Name}
	}
	s.Engine = dbv1.EnginePostgreSQL
	if s.Image == "" {
		s.Image, s.Version = db.Status.CurrentImage, db.Status.CurrentVersion
	}
	msg := fmt.Sprintf("base backup %s (%s) in %s, WAL %s to %s on timeline %d, %d bytes: a recovery from it reaches any moment after %s",
		f.Name, f.ID, archiveLocation(&s.Archive.ObjectStore, s.Archive.ServerName), f.BeginLSN, f.EndLSN, f.Timeline, f.Size, f.EndTime.UTC().Format(time.RFC3339))
	status.SetCondition(&s.Conditions, b.Generation, ConditionBackupCompleted, true, "Completed", msg)
	if bb := db.Status.BaseBackups; bb != nil && bb.Verification != nil && bb.Verification.BackupID == f.ID && bb.Verification.Outcome != "" {
		v := bb.Verification.BackupVerification
		s.Verification = &v
		status.SetCondition(&s.Conditions, b.Generation, ConditionVerified, v.Outcome == dbv1.VerificationVerified, string(v.Outcome), v.Message)
	}
	if equality.Semantic.DeepEqual(before, b.Status) {
		return nil
	}
	if newly {
		r.Recorder.Eventf(b.Object, nil, corev1.EventTypeNormal, "Completed", "Backup", "%s", msg)
	}
	return patchBackupStatus(ctx, r.Client, r.Kind, before, b)
}

// forgetBaseBackup deletes the object of a base backup the archive no
// longer holds (removed by its retention policy, or by hand). Its
// finalizer comes off first: there is nothing left to delete.
func (r *Reconciler) forgetBaseBackup(ctx context.Context, db *Cluster, b *Backup) error {
	if controllerutil.RemoveFinalizer(b.Object, r.Kind.Keys.FinalizerBackupFile) {
		if err := r.Client.Update(ctx, b.Object); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	if err := r.Client.Delete(ctx, b.Object); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting DatabaseBackup %s, whose base backup left the archive: %w", b.Name, err)
	}
	bb := b.Status.BaseBackup
	r.normal(db, "BaseBackupRemoved", "Archive", "DatabaseBackup %s deleted: base backup %s (%s) is no longer in the archive (its retention policy removed it, or someone did by hand)", b.Name, bb.Name, bb.ID)
	return nil
}

// keptBaseBackups are the holds key's lines for the base backup objects
// of db with spec.keep.
func keptBaseBackups(objs []*Backup) string {
	var out strings.Builder
	for _, b := range objs {
		if bb := b.Status.BaseBackup; b.Keep && bb != nil && b.DeletionTimestamp.IsZero() {
			out.WriteString(postgres.KeepHold(bb.ID, fmt.Sprintf("DatabaseBackup %s/%s has spec.keep", b.Namespace, b.Name)))
		}
	}
	return out.String()
}

// patchBackupStatus writes b's status only over the version it was
// computed from: a write from a stale cache must not overwrite a result
// another recorded.
func patchBackupStatus(ctx context.Context, c client.Client, kind *Kind, before dbv1.DatabaseBackupStatus, b *Backup) error {
	if equality.Semantic.DeepEqual(before, b.Status) {
		return nil
	}
	original := b.Object.DeepCopyObject().(client.Object)
	kind.Backups.SetStatus(b.Object, b)
	err := c.Status().Patch(ctx, b.Object, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{}))
	return client.IgnoreNotFound(err)
}

// runBaseBackup is the backup reconciler's part for a base backup object
// not in the archive yet: it fails one whose Database cannot take it, and
// leaves the rest to the Database's reconcile (which asks its primary).
func (r *BackupReconciler) runBaseBackup(ctx context.Context, b *Backup) (reconcile.Result, error) {
	if b.Status.BaseBackup != nil || b.Status.Phase == dbv1.BackupFailed || b.Status.Phase == dbv1.BackupCompleted {
		return reconcile.Result{}, nil
	}
	db, err := r.Kind.getCluster(ctx, r.Client, client.ObjectKey{Namespace: b.Namespace, Name: b.Cluster})
	if client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	if why := cannotTakeBaseBackup(db, b.Cluster); why != "" {
		failBaseBackup(r.Recorder, b, db, "CannotTakeBaseBackup", why, r.now())
		return reconcile.Result{}, nil
	}
	if b.Status.Phase == "" {
		r.pending(b, "WaitingForPrimary", fmt.Sprintf("the Database's reconcile asks the archiver of primary %s for base backup %s", currentPrimary(db), b.Name))
	}
	return reconcile.Result{}, nil
}

// cannotTakeBaseBackup says why db (nil: it does not exist) cannot take
// a base backup now; "" when it can.
func cannotTakeBaseBackup(db *Cluster, name string) string {
	switch {
	case db == nil:
		return fmt.Sprintf("Database %s does not exist", name)
	case !db.DeletionTimestamp.IsZero():
		return fmt.Sprintf("Database %s is being deleted", db.Name)
	case objectStoreOf(db) == nil:
		return fmt.Sprintf("Database %s has no WAL archive (spec.backup.storage.objectStore): a base backup goes into one; method Dump takes a dump", db.Name)
	case !failoverOn(db):
		return fmt.Sprintf("Database %s runs without the instance agent (spec.failover.enabled is false), through which the operator asks its primary for a base backup and reads its archive", db.Name)
	}
	return ""
}

// deleteBaseBackupSteps runs a deleted base backup object's finalizer:
// its base backup is deleted from the archive by a Job, once none of the
// operator's holds keeps it. An object with no base backup yet has
// nothing to delete (a base backup it asked for and that ends later gets
// an object of its own). In a namespace being deleted no Job can run:
// the base backup stays in the archive, as the archive outlives its
// Database.
func (r *BackupReconciler) deleteBaseBackupSteps(ctx context.Context, b *Backup) (reconcile.Result, bool, error) {
	bb, a := b.Status.BaseBackup, b.Status.Archive
	if bb == nil || a == nil {
		return reconcile.Result{}, true, nil
	}
	if terminating, err := namespaceTerminating(ctx, r.API, b.Namespace); err != nil || terminating {
		return reconcile.Result{}, terminating, err
	}
	db, err := r.Kind.getCluster(ctx, r.Client, client.ObjectKey{Namespace: b.Namespace, Name: b.Cluster})
	if client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, false, err
	}
	writer := db != nil && objectStoreOf(db) != nil && readsArchiveOf(*a, db.Name, objectStoreOf(db))
	if writer {
		holders, err := baseBackupHeldBy(ctx, r.Kind, r.Client, r.Owned, db, bb.ID)
		if err != nil {
			return reconcile.Result{}, false, err
		}
		if len(holders) > 0 {
			status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBaseBackupDeleted, false, "InUse",
				fmt.Sprintf("held (%s); the base backup is deleted once nothing holds it", strings.Join(holders, "; ")))
			return reconcile.Result{RequeueAfter: archiveRecheck}, false, nil
		}
	}
	name := deleteJobName(b)
	var job batchv1.Job
	err = r.Owned.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, &job)
	if apierrors.IsNotFound(err) {
		return reconcile.Result{}, false, r.startBaseBackupDelete(ctx, b)
	}
	if err != nil {
		return reconcile.Result{}, false, err
	}
	where := archiveLocation(&a.ObjectStore, a.ServerName)
	switch {
	case jobFinished(&job, batchv1.JobComplete):
		done := jobCondition(&job, batchv1.JobComplete).LastTransitionTime.Time
		if writer && !listedSince(db, done) {
			// Until the primary's archiver has looked at the archive
			// again, its last report still lists the base backup, and
			// the object would be made anew.
			status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBaseBackupDeleted, true, "WaitingForListing",
				fmt.Sprintf("Job %s deleted base backup %s from %s; the object goes once the primary's archiver has looked at the archive again", name, bb.ID, where))
			return reconcile.Result{RequeueAfter: pendingRecheck}, false, nil
		}
		r.Recorder.Eventf(b.Object, nil, corev1.EventTypeNormal, "BaseBackupDeleted", "Delete", "Job %s deleted base backup %s (%s) from %s", name, bb.Name, bb.ID, where)
		return reconcile.Result{}, true, nil
	case jobFinished(&job, batchv1.JobFailed):
		_, said := jobPodReport(ctx, r.Owned, &job)
		msg := fmt.Sprintf("%s; the DatabaseBackup stays so the base backup stays accounted for (remove the finalizer %s by hand to let it go anyway)",
			failedJobMessage("delete", &job, said), r.Kind.Keys.FinalizerBackupFile)
		if c := findCondition(b.Status.Conditions, ConditionBaseBackupDeleted); c == nil || c.Reason != "DeleteJobFailed" {
			r.Recorder.Eventf(b.Object, nil, corev1.EventTypeWarning, "DeleteJobFailed", "Delete", "%s", msg)
		}
		status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBaseBackupDeleted, false, "DeleteJobFailed", msg)
	}
	return reconcile.Result{}, false, nil
}

// listedSince: db's primary's archiver looked at the archive after t.
func listedSince(db *Cluster, t time.Time) bool {
	bb := db.Status.BaseBackups
	return bb != nil && bb.CheckedTime != nil && bb.CheckedTime.After(t)
}

// baseBackupHeldBy says what keeps the base backup id of db's archive:
// the operator's holds (baseholds.go: the newest verified base backup,
// the Databases recovering from the archive), and its verification while
// it runs (deleted under it, the verification would fail, and alert, for
// a backup nobody wants). clusters reads Databases, owned Jobs.
func baseBackupHeldBy(ctx context.Context, kind *Kind, clusters, owned client.Reader, db *Cluster, id string) ([]string, error) {
	var out []string
	if bb := db.Status.BaseBackups; bb != nil && bb.LastVerified != nil && bb.LastVerified.ID == id {
		out = append(out, fmt.Sprintf("the newest verified base backup of Database %s, until a newer one is verified", db.Name))
	}
	var job batchv1.Job
	err := owned.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: verifyBaseJobName(db.Name)}, &job)
	if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	if _, verifying, _ := strings.Cut(job.Annotations[annotationBaseBackup], " "); err == nil && verifying == id &&
		!jobFinished(&job, batchv1.JobComplete) && !jobFinished(&job, batchv1.JobFailed) {
		out = append(out, fmt.Sprintf("its verification runs (Job %s)", job.Name))
	}
	recoveries, err := recoveriesFrom(ctx, kind, clusters, db)
	for _, rc := range recoveries {
		out = append(out, fmt.Sprintf("Database %s recovers from this archive", rc))
	}
	return out, err
}

// startBaseBackupDelete creates the delete Job of b's base backup, and
// the ConfigMap of the scripts it runs (the Database's may be gone), both
// owned by b.
func (r *BackupReconciler) startBaseBackupDelete(ctx context.Context, b *Backup) error {
	name := deleteJobName(b)
	labels := withLabels(objectLabels(&Cluster{ObjectMeta: metav1.ObjectMeta{Name: b.Cluster}, Kind: r.Kind}),
		map[string]string{r.Kind.Keys.Component: componentBaseBackupDelete})
	owner := backupOwner(r.Kind, b, false)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.Namespace, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Data:       postgres.ArchiveScripts(),
	}
	if err := r.Client.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ConfigMap %s: %w", name, err)
	}
	a := b.Status.Archive
	pod := postgres.DeleteBasePod(archiverImageOr(r.ArchiverImage), r.fileOwner(ctx, b), storeOptions(&a.ObjectStore, a.ServerName), b.Status.BaseBackup.ID)
	job := lifecycleJob(r.Kind, name, b.Namespace, labels, owner, pod, r.placementOf(ctx, b), 3, name)
	if err := r.Client.Create(ctx, job, client.FieldOwner(r.Kind.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Job %s: %w", name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("Job", "created").Inc()
	status.SetCondition(&b.Status.Conditions, b.Generation, ConditionBaseBackupDeleted, false, "Deleting",
		fmt.Sprintf("Job %s deletes base backup %s from %s", name, b.Status.BaseBackup.ID, archiveLocation(&a.ObjectStore, a.ServerName)))
	return nil
}
