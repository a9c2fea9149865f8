package database

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

func readyPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
}

func TestABackupOffersTheMostRecentStandbyByOrdinalAndFinalOnesReadThePrimary(t *testing.T) {
	db := &Cluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Kind: DatabaseKind}
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"db-0", "db-1", "db-9", "db-10", "db-2"} {
		pods[name] = readyPod(name)
	}
	src, ok := backupSource(db, pods, false, 16<<20)
	require.True(t, ok)
	assert.Equal(t, "db-rw", src.Host, "the primary is always where the Job can read")
	assert.Equal(t, "db-10", src.Standby, "db-10 is after db-9 (by number, not by string)")
	assert.Equal(t, "db-10.db-headless", src.StandbyHost)
	assert.Equal(t, int64(16<<20), src.MaxLagBytes)

	for _, reason := range []string{reasonFinal, reasonPreUpgrade} {
		b := &Backup{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelBackupReason: reason}}}
		src, ok := backupSource(db, pods, primaryOnly(DatabaseKind, b), 16<<20)
		require.True(t, ok)
		assert.Equal(t, readFrom{Primary: "db-0", Host: "db-rw"}, src, "a %s backup reads the primary only", reason)
	}
	src, _ = backupSource(db, pods, false, 0)
	assert.Empty(t, src.StandbyHost, "maxStandbyLag 0: the primary only")

	// A primary that is not ready: the backup waits, even with standbys
	// ready (the Job measures their lag against the primary).
	delete(pods, "db-0")
	_, ok = backupSource(db, pods, false, 16<<20)
	assert.False(t, ok)

	assert.Equal(t, "db-0", sourcePod(db, "db-rw"))
	assert.Equal(t, "db-10", sourcePod(db, "db-10.db-headless"))
	assert.Equal(t, "elsewhere", sourcePod(db, "elsewhere"))

	db.Spec.Backup = &dbv1.BackupSpec{MaxStandbyLag: ptr.To(resource.MustParse("1Mi"))}
	assert.Equal(t, int64(1<<20), maxStandbyLag(db))
	db.Spec.Backup = nil
	assert.Equal(t, int64(16<<20), maxStandbyLag(db), "the default: one WAL segment")
}

// finishedBackup is a running DatabaseBackup whose Job succeeded and
// reported its file, as the API server would hold them.
func finishedBackup() []client.Object {
	const ns = "ns"
	backup := &dbv1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: ns, UID: "backup-uid", ResourceVersion: "1",
			Finalizers: []string{FinalizerBackupFile}},
		Spec: dbv1.DatabaseBackupSpec{Database: "shop"},
		Status: dbv1.DatabaseBackupStatus{Phase: dbv1.BackupRunning, File: "first-backup-uid.dump", ClaimName: "shop-backup",
			Image: "postgres:17.6", Engine: dbv1.EnginePostgreSQL},
	}
	done := metav1.Now()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-backup", Namespace: ns, UID: "job-uid",
			OwnerReferences: []metav1.OwnerReference{backupOwner(DatabaseKind, &Backup{ObjectMeta: backup.ObjectMeta}, true)}},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: done}}},
	}
	job.OwnerReferences[0].Name = backup.Name
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-backup-x", Namespace: ns, Labels: map[string]string{"batch.kubernetes.io/job-name": job.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Message: `{"serverVersion":"17.6","file":"first-backup-uid.dump","size":10,"sha256":"ab","source":"shop-1.shop-headless","lagBytes":4096}`,
			}},
		}}},
	}
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns, UID: types.UID("db-uid")}}
	return []client.Object{backup, job, pod, db}
}

func TestABackupJobIsDeletedOnlyAfterItsResultIsRecorded(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, dbv1.AddToScheme(scheme))
	lose := true
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(finishedBackup()...).
		WithStatusSubresource(&dbv1.DatabaseBackup{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if lose {
					return errors.New("the status write is lost (a timeout, say)")
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	r := &BackupReconciler{Client: c, Owned: c, API: c, Recorder: events.NewFakeRecorder(100), Kind: DatabaseKind}
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "first"}}
	jobKey := client.ObjectKey{Namespace: "ns", Name: "shop-backup"}

	_, err := r.Reconcile(ctx, req)
	require.Error(t, err, "the lost write is an error, so the reconcile is retried")
	require.NoError(t, c.Get(ctx, jobKey, &batchv1.Job{}), "the Job is kept while its result is not recorded")

	// The retry records it; the Job goes once the recorded result is read
	// back.
	lose = false
	for range 2 {
		_, err = r.Reconcile(ctx, req)
		require.NoError(t, err)
	}
	var b dbv1.DatabaseBackup
	require.NoError(t, c.Get(ctx, req.NamespacedName, &b))
	assert.Equal(t, dbv1.BackupCompleted, b.Status.Phase)
	assert.Equal(t, "shop-1", b.Status.Source, "the source the Job reported")
	assert.Equal(t, ptr.To(int64(4096)), b.Status.LagBytes)
	err = c.Get(ctx, jobKey, &batchv1.Job{})
	assert.True(t, apierrors.IsNotFound(err), "the finished Job is deleted: %v", err)
}

// A backup Job that had a standby to read and read the primary instead
// (the database holds unlogged tables, whose rows a dump on a standby
// leaves out) says why; the DatabaseBackup's status, its Completed
// condition and the Event it completes with say it too.
func TestACompletedBackupSaysWhyItReadWhereItDid(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, dbv1.AddToScheme(scheme))
	objs := finishedBackup()
	const why = "the database holds 1 unlogged table (public.sessions), whose rows a dump from a standby leaves out"
	objs[2].(*corev1.Pod).Status.ContainerStatuses[0].State.Terminated.Message =
		`{"serverVersion":"17.6","file":"first-backup-uid.dump","size":10,"sha256":"ab","source":"shop-rw","sourceReason":"` + why + `"}`
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&dbv1.DatabaseBackup{}).Build()
	rec := events.NewFakeRecorder(100)
	r := &BackupReconciler{Client: c, Owned: c, API: c, Recorder: rec, Kind: DatabaseKind}
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "first"}}
	_, err := r.Reconcile(ctx, req)
	require.NoError(t, err)

	var b dbv1.DatabaseBackup
	require.NoError(t, c.Get(ctx, req.NamespacedName, &b))
	require.Equal(t, dbv1.BackupCompleted, b.Status.Phase)
	assert.Equal(t, "shop-0", b.Status.Source)
	assert.Nil(t, b.Status.LagBytes)
	assert.Equal(t, why, b.Status.SourceReason)
	completed := findCondition(b.Status.Conditions, ConditionBackupCompleted)
	require.NotNil(t, completed)
	assert.Contains(t, completed.Message, "read from shop-0: "+why)
	var said []string
	for len(rec.Events) > 0 {
		said = append(said, <-rec.Events)
	}
	assert.Contains(t, strings.Join(said, "\n"), "read from shop-0: "+why)
}

// The status write right after the backup Job's creation is refused (a
// Conflict: the reconcile read a stale copy of the backup, as under a busy
// API server); the Job runs on and succeeds. The completed backup must
// still name its claim, so that its verification mounts the backup
// volume; without the claim a verification Job has no backup volume and
// fails with "backup file ... not found on the backup volume".
func TestABackupWhoseStartWasNotRecordedStillNamesItsClaim(t *testing.T) {
	const ns = "ns"
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns, UID: "db-uid"},
		Spec:   dbv1.DatabaseSpec{Image: "postgres:17.6", Replicas: 1, Port: 5432, Name: "app", StorageSize: "1Gi"},
		Status: dbv1.DatabaseStatus{Conditions: []metav1.Condition{{Type: ConditionInitialized, Status: metav1.ConditionTrue, Reason: "Done", LastTransitionTime: metav1.Now()}}}}
	cl := &Cluster{ObjectMeta: db.ObjectMeta, Kind: DatabaseKind}
	server := readyPod("shop-0")
	server.Namespace, server.Labels = ns, selectorLabels(cl, componentServer)
	server.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "shop", UID: "sts-uid", Controller: ptr.To(true)}}
	backup := &dbv1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Name: "newest", Namespace: ns, UID: "b-uid", CreationTimestamp: metav1.Now()},
		Spec: dbv1.DatabaseBackupSpec{Database: "shop"}}
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, dbv1.AddToScheme(scheme))
	jobCreated, refused := false, false
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(db, server, backup).WithStatusSubresource(&dbv1.DatabaseBackup{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*batchv1.Job); ok {
					jobCreated = true
				}
				return c.Create(ctx, obj, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if jobCreated && !refused {
					refused = true
					return apierrors.NewConflict(schema.GroupResource{Resource: "databasebackups"}, obj.GetName(), errors.New("stale"))
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	r := &BackupReconciler{Client: c, Owned: c, API: c, Recorder: events.NewFakeRecorder(100), Kind: DatabaseKind}
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "newest"}}
	reconcileAll := func() {
		for range 3 {
			_, _ = r.Reconcile(ctx, req)
		}
	}
	reconcileAll()
	require.True(t, refused, "the write after the Job's creation was refused")

	// The Job succeeds and its pod reports the file.
	var job batchv1.Job
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-backup"}, &job))
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	require.NoError(t, c.Status().Update(ctx, &job))
	require.NoError(t, c.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-backup-x", Namespace: ns, Labels: map[string]string{"batch.kubernetes.io/job-name": job.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Message: `{"serverVersion":"17.6","file":"newest-b-uid.dump","size":10,"sha256":"ab","source":"shop-rw"}`}}}}},
	}))
	reconcileAll()

	var got dbv1.DatabaseBackup
	require.NoError(t, c.Get(ctx, req.NamespacedName, &got))
	assert.Equal(t, dbv1.BackupCompleted, got.Status.Phase)
	assert.Equal(t, "shop-backup", got.Status.ClaimName, "the claim the Job wrote to")
	assert.Equal(t, "newest-b-uid.dump", got.Status.File)
	assert.Equal(t, "postgres:17.6", got.Status.Image)
	var verify batchv1.Job
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-verify"}, &verify), "each backup is verified (the default)")
	assert.Equal(t, "shop-backup", backupClaimOf(&verify), "the verification mounts the backup volume")
}

// Retention (keepLast 1) leaves a held backup and a backup a Database is
// being restored from, and prunes the others beyond the newest; a hold
// whose holder is gone counts no more.
func TestRetentionLeavesHeldBackups(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, dbv1.AddToScheme(scheme))
	created := metav1.Now()
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "ns", UID: "db-uid", CreationTimestamp: metav1.NewTime(created.Add(-time.Hour))}}
	copyDB := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: "ns", UID: "copy-uid"}, Spec: dbv1.DatabaseSpec{FromBackup: "restoring"}}
	backup := func(name string, minutes int, annotations map[string]string) *dbv1.DatabaseBackup {
		done := metav1.NewTime(created.Add(time.Duration(minutes) * time.Minute))
		return &dbv1.DatabaseBackup{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: created, Annotations: annotations},
			Spec:       dbv1.DatabaseBackupSpec{Database: "shop"},
			Status:     dbv1.DatabaseBackupStatus{Phase: dbv1.BackupCompleted, CompletionTime: &done},
		}
	}
	objs := []client.Object{db, copyDB,
		backup("upgrade", 1, map[string]string{AnnotationPrefixHeldBy + "upgrade.db-uid": "Database shop restores it in its upgrade"}),
		backup("restoring", 2, nil),
		backup("stale-hold", 3, map[string]string{AnnotationPrefixHeldBy + "upgrade.gone-uid": "a Database that is gone"}),
		backup("old", 4, nil),
		backup("newest", 5, nil),
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	r := &Reconciler{Client: c, Owned: c, API: c, Recorder: events.NewFakeRecorder(100), Kind: DatabaseKind}
	ctx := context.Background()
	backups, err := DatabaseKind.backupsOf(ctx, c, DatabaseKind.Clusters.View(db))
	require.NoError(t, err)
	require.NoError(t, r.Prune(ctx, DatabaseKind.Clusters.View(db), backups, 1, 0))
	var left dbv1.DatabaseBackupList
	require.NoError(t, c.List(ctx, &left))
	var names []string
	for _, b := range left.Items {
		names = append(names, b.Name)
	}
	assert.ElementsMatch(t, []string{"upgrade", "restoring", "newest"}, names)
}

// Every Job that reads or writes a Database's backup volume (backup,
// restore, upgrade and its rollback, fence and unfence) runs as the
// Database's spec.podTemplate.runAsUser, with it as its group and its
// volumes' group, for both engines.
func TestEveryJobOnTheBackupVolumeRunsAsTheSpecsUser(t *testing.T) {
	for name, eng := range Engines {
		db := &Cluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "u"}, Kind: DatabaseKind}
		db.Spec = dbv1.DatabaseSpec{Name: "app", Port: 5432, Engine: name, PodTemplate: &dbv1.PodTemplate{RunAsUser: ptr.To(int64(26))}}
		db.Status.Upgrade = &dbv1.UpgradeStatus{FromImage: "old:1", ToImage: "new:2", Attempt: "a"}
		b := &Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "bu"}}
		b.Status.File, b.Status.ClaimName = "b-bu.dump", "db-backup"
		jobs := map[string]*batchv1.Job{
			"backup":   backupJob(db, eng, b, "old:1", engine.Backup{File: "b-bu.dump", ClaimName: "db-backup"}),
			"restore":  restoreJob(db, eng, b),
			"upgrade":  upgradeJob(db, eng, b, false),
			"rollback": upgradeJob(db, eng, b, true),
		}
		if fencer, ok := eng.(engine.Fencer); ok {
			jobs["fence"] = fenceJob(db, eng, fencer, false, "old:1")
			jobs["unfence"] = fenceJob(db, eng, fencer, true, "old:1")
		}
		for what, job := range jobs {
			sc := job.Spec.Template.Spec.SecurityContext
			require.NotNil(t, sc, "%s %s", name, what)
			assert.Equal(t, []int64{26, 26, 26}, []int64{ptr.Deref(sc.RunAsUser, 0), ptr.Deref(sc.RunAsGroup, 0), ptr.Deref(sc.FSGroup, 0)},
				"%s's %s Job runs as the spec's user, group and volume group", name, what)
		}
	}
}
