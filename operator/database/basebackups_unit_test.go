package database

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

func archivingDatabase() *dbv1.Database {
	return &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "ns", UID: "db-uid"},
		Spec: dbv1.DatabaseSpec{
			Failover: &dbv1.FailoverSpec{Enabled: ptr.To(true)},
			Backup: &dbv1.BackupSpec{Storage: &dbv1.BackupStorage{ObjectStore: &dbv1.ObjectStore{
				Endpoint: "https://store.example:7070", Bucket: "wal", Path: "prod",
				Credentials: dbv1.ObjectStoreCredentials{
					AccessKeyID:     dbv1.KeyRef{Name: "store-keys", Key: "id"},
					SecretAccessKey: dbv1.KeyRef{Name: "store-keys", Key: "secret"},
				},
			}}},
		},
	}
}

func baseBackupObject(name string, phase dbv1.BackupPhase, rec *dbv1.BaseBackupRecord) *dbv1.DatabaseBackup {
	b := &dbv1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid"), Finalizers: []string{FinalizerBackupFile}},
		Spec:       dbv1.DatabaseBackupSpec{Database: "shop", Method: dbv1.BackupMethodBaseBackup},
		Status:     dbv1.DatabaseBackupStatus{Phase: phase, BaseBackup: rec},
	}
	if phase == dbv1.BackupRunning {
		b.Status.StartTime = ptr.To(metav1.Now())
		b.Status.Source = "shop-0"
	}
	if rec != nil {
		db := archivingDatabase()
		b.Status.Archive = &dbv1.RecoverySource{ObjectStore: *db.Spec.Backup.Storage.ObjectStore, ServerName: "shop"}
	}
	return b
}

func fakeClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, dbv1.AddToScheme(scheme))
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&dbv1.DatabaseBackup{}, &dbv1.Database{}).Build()
}

func backupNamed(t *testing.T, c client.Client, name string) *dbv1.DatabaseBackup {
	t.Helper()
	var b dbv1.DatabaseBackup
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, &b))
	return &b
}

// The primary's report of its archive becomes DatabaseBackups of method
// BaseBackup: one made for each base backup no object names, a requested
// one completed when its name is listed, one the archiver could not take
// failed with its reason, a pending one asked for (and asked again only
// when the primary changed), the object of a base backup the archive no
// longer holds deleted, and a report of another archive ignored. The
// holds key keeps those with spec.keep.
func TestTheArchivesBaseBackupsAreDatabaseBackups(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	gone := &dbv1.BaseBackupRecord{Name: "base-20261130T030000Z", ID: "20261130T030001", EndTime: metav1.NewTime(t0.Add(-24 * time.Hour))}
	kept := baseBackupObject("shop-kept", dbv1.BackupCompleted, &dbv1.BaseBackupRecord{Name: "kept", ID: "20261129T000000", EndTime: metav1.NewTime(t0.Add(-48 * time.Hour))})
	kept.Spec.Keep = true
	// Deleted from the archive by its Job, waiting for the archive to be
	// listed again: the report still lists it.
	deleted := baseBackupObject("shop-deleted", dbv1.BackupCompleted, &dbv1.BaseBackupRecord{Name: "deleted", ID: "20261128T000000", EndTime: metav1.NewTime(t0.Add(-72 * time.Hour))})
	deleted.DeletionTimestamp = ptr.To(metav1.Now())
	deleted.Status.Conditions = []metav1.Condition{{Type: ConditionBaseBackupDeleted, Status: metav1.ConditionTrue, Reason: "WaitingForListing", LastTransitionTime: metav1.Now()}}
	// Made for a base backup that left the archive before its record was
	// written.
	orphan := baseBackupObject("shop-base-20261125t000000z", dbv1.BackupPending, nil)
	orphan.Labels = map[string]string{LabelBackupReason: reasonArchive}
	bad := baseBackupObject("bad-one", dbv1.BackupRunning, nil)
	bad.Status.StartTime = ptr.To(metav1.NewTime(t0))
	// Asked for after the report was made: the failure it lists is an
	// earlier object's of the same name.
	again := baseBackupObject("again", dbv1.BackupRunning, nil)
	again.Status.StartTime = ptr.To(metav1.NewTime(t0.Add(3 * time.Hour)))
	db := archivingDatabase()
	c := fakeClient(t, db, orphan, bad, again,
		baseBackupObject("before-migration", dbv1.BackupRunning, nil),
		baseBackupObject("later", dbv1.BackupPending, nil),
		baseBackupObject("shop-base-20261130t030000z", dbv1.BackupCompleted, gone),
		// Made for a base backup by an earlier pass, whose record was not
		// written (a conflict with the finalizer's write); the backup
		// reconciler made it Pending meanwhile.
		baseBackupObject("shop-base-20261201t050000z", dbv1.BackupPending, nil),
		deleted,
		kept)
	// The clock an hour after "again" was asked for: well within the
	// bound for a base backup to reach the archive.
	now := t0.Add(4 * time.Hour)
	r := &Reconciler{Client: c, Owned: c, API: c, Recorder: events.NewFakeRecorder(100), Kind: DatabaseKind, Now: func() time.Time { return now }}
	ctx := context.Background()
	var asked []string
	ask := func(name string) error { asked = append(asked, name); return nil }
	scheduled := instance.BaseBackup{Name: "base-20261201T030000Z", ID: "20261201T030001", BeginTime: t0, EndTime: t0.Add(time.Minute),
		BeginLSN: "0/5000028", EndLSN: "0/5000100", Timeline: 2, Size: 4 << 20}
	requested := instance.BaseBackup{Name: "before-migration", ID: "20261201T040001", BeginTime: t0.Add(time.Hour), EndTime: t0.Add(time.Hour + time.Minute),
		BeginLSN: "0/7000028", EndLSN: "0/7000100", Timeline: 2, Size: 5 << 20}
	keptBackup := instance.BaseBackup{Name: "kept", ID: "20261129T000000", EndTime: t0.Add(-48 * time.Hour), Kept: "full"}
	unrecorded := instance.BaseBackup{Name: "base-20261201T050000Z", ID: "20261201T050001", EndTime: t0.Add(2*time.Hour + time.Minute)}
	report := func(primary string, archive instance.ArchiveIdentity) instance.Status {
		return instance.Status{Pod: primary, ServerUp: true, Role: instance.RolePrimary, BaseBackups: &instance.BaseBackups{
			CheckedAt: t0.Add(2 * time.Hour), Count: 3, Archive: &archive,
			Backups: []instance.BaseBackup{{Name: "deleted", ID: "20261128T000000", EndTime: t0.Add(-72 * time.Hour)}, keptBackup, scheduled, requested, unrecorded},
			Failed:  map[string]string{"bad-one": "barman-cloud-backup: ERROR: could not connect", "again": "an earlier failure"},
		}}
	}
	this := instance.ArchiveIdentity{Endpoint: "https://store.example:7070", Bucket: "wal", Prefix: "prod/", Server: "shop"}

	other := this
	other.Bucket = "elsewhere"
	require.NoError(t, r.syncBaseBackups(ctx, DatabaseKind.Clusters.View(db), report("shop-0", other), ask))
	var list dbv1.DatabaseBackupList
	require.NoError(t, c.List(ctx, &list))
	assert.Len(t, list.Items, 9, "a report of another archive changes nothing")
	assert.Empty(t, asked)

	require.NoError(t, r.syncBaseBackups(ctx, DatabaseKind.Clusters.View(db), report("shop-0", this), ask))
	made := backupNamed(t, c, "shop-base-20261201t030000z")
	assert.Equal(t, dbv1.BackupMethodBaseBackup, made.Spec.Method)
	assert.Equal(t, "shop", made.Spec.Database)
	assert.Equal(t, reasonArchive, made.Labels[LabelBackupReason])
	assert.Equal(t, dbv1.BackupCompleted, made.Status.Phase)
	assert.Equal(t, "20261201T030001", made.Status.BaseBackup.ID)
	assert.Equal(t, "0/5000100", made.Status.BaseBackup.EndLSN)
	assert.Equal(t, int64(4<<20), made.Status.Size)
	assert.Equal(t, t0.Add(time.Minute), made.Status.CompletionTime.Time.UTC())
	require.NotNil(t, made.Status.Archive)
	assert.Equal(t, "shop", made.Status.Archive.ServerName)
	assert.Equal(t, "wal", made.Status.Archive.ObjectStore.Bucket)
	assert.Contains(t, findCondition(made.Status.Conditions, ConditionBackupCompleted).Message, "a recovery from it reaches any moment after 2026-12-01T03:01:00Z")

	req := backupNamed(t, c, "before-migration")
	assert.Equal(t, dbv1.BackupCompleted, req.Status.Phase, "the requested one is completed once the archive lists its name")
	assert.Equal(t, "20261201T040001", req.Status.BaseBackup.ID)

	bad = backupNamed(t, c, "bad-one")
	assert.Equal(t, dbv1.BackupFailed, bad.Status.Phase)
	assert.Equal(t, "BaseBackupFailed", findCondition(bad.Status.Conditions, ConditionBackupCompleted).Reason)
	assert.Contains(t, findCondition(bad.Status.Conditions, ConditionBackupCompleted).Message, "could not connect")
	assert.Equal(t, dbv1.BackupRunning, backupNamed(t, c, "again").Status.Phase, "a failure listed before it was asked for is not its own")

	assert.Equal(t, "20261201T050001", backupNamed(t, c, "shop-base-20261201t050000z").Status.BaseBackup.ID, "the object made before gets its record")
	assert.ElementsMatch(t, []string{"later", ""}, asked, "the pending one is asked for, and a look at the archive for the deleted one")
	asked = nil
	later := backupNamed(t, c, "later")
	assert.Equal(t, dbv1.BackupRunning, later.Status.Phase)
	assert.Equal(t, "shop-0", later.Status.Source)

	err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "shop-base-20261130t030000z"}, &dbv1.DatabaseBackup{})
	assert.True(t, apierrors.IsNotFound(err), "the object of a base backup the archive no longer holds is deleted: %v", err)
	assert.Equal(t, dbv1.BackupCompleted, backupNamed(t, c, "shop-kept").Status.Phase)
	assert.False(t, backupNamed(t, c, orphan.Name).DeletionTimestamp.IsZero(),
		"an object made for a base backup that is gone, never recorded, is deleted (its finalizer has nothing to delete), not asked for")

	// The same report again: nothing asked again; a failover asks the new
	// primary.
	require.NoError(t, r.syncBaseBackups(ctx, DatabaseKind.Clusters.View(db), report("shop-0", this), ask))
	assert.Equal(t, []string{""}, asked, "the pending one is not asked for again")
	asked = nil
	require.NoError(t, r.syncBaseBackups(ctx, DatabaseKind.Clusters.View(db), report("shop-1", this), ask))
	assert.ElementsMatch(t, []string{"later", "again", ""}, asked, "after a failover the new primary is asked for each running one")
	assert.Equal(t, "shop-1", backupNamed(t, c, "later").Status.Source)

	holds, err := r.baseBackupHoldsOf(ctx, DatabaseKind.Clusters.View(db))
	require.NoError(t, err)
	assert.Equal(t, postgres.KeepHold("20261129T000000", "DatabaseBackup ns/shop-kept has spec.keep"), holds)
}

// Deleting a base backup's object deletes the base backup from the
// archive with a Job in the archiver image, once none of the operator's
// holds keeps it; the object goes once the primary's archiver has looked
// at the archive since, so that its older report cannot make the object
// anew.
func TestDeletingABaseBackupObjectDeletesItFromTheArchive(t *testing.T) {
	rec := &dbv1.BaseBackupRecord{Name: "base-20261201T030000Z", ID: "20261201T030001"}
	db := archivingDatabase()
	db.Status.BaseBackups = &dbv1.BaseBackupsStatus{LastVerified: &dbv1.BaseBackupRef{Name: rec.Name, ID: rec.ID}}
	b := baseBackupObject("shop-base-20261201t030000z", dbv1.BackupCompleted, rec)
	c := fakeClient(t, db, b)
	r := &BackupReconciler{Client: c, Owned: c, API: c, Recorder: events.NewFakeRecorder(100), Kind: DatabaseKind, ArchiverImage: "example.org/archiver:test"}
	ctx := context.Background()
	key := client.ObjectKeyFromObject(b)
	require.NoError(t, c.Delete(ctx, b))
	reconcileOnce := func() {
		t.Helper()
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		require.NoError(t, err)
	}
	jobName := deleteJobName(DatabaseKind.Backups.View(b))

	reconcileOnce()
	held := findCondition(backupNamed(t, c, b.Name).Status.Conditions, ConditionBaseBackupDeleted)
	require.NotNil(t, held)
	assert.Equal(t, "InUse", held.Reason)
	assert.Contains(t, held.Message, "the newest verified base backup of Database shop")
	_, err := getJobIn(c, jobName)
	assert.True(t, apierrors.IsNotFound(err), "no Job while held")

	// A newer base backup is verified: the hold moves on.
	db.Status.BaseBackups.LastVerified = &dbv1.BaseBackupRef{Name: "base-20261202T030000Z", ID: "20261202T030001"}
	require.NoError(t, c.Status().Update(ctx, db))
	reconcileOnce()
	job, err := getJobIn(c, jobName)
	require.NoError(t, err)
	ctr := job.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "example.org/archiver:test", ctr.Image)
	assert.Equal(t, []string{"sh", "/deckhand/scripts/" + postgres.DeleteBaseScript}, ctr.Command)
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, "20261201T030001", env["BACKUP_ID"])
	assert.Equal(t, "wal", env["STORE_BUCKET"])
	assert.Equal(t, "prod", env["STORE_PREFIX"])
	assert.Equal(t, "shop", env["STORE_SERVER"])
	var scripts corev1.ConfigMap
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: jobName}, &scripts))
	assert.Contains(t, scripts.Data, postgres.DeleteBaseScript, "the Job's scripts are its own: the Database may be gone")
	assert.Equal(t, b.Name, scripts.OwnerReferences[0].Name)

	// The Job ends; the object waits for the archive's next listing.
	done := time.Now().Add(-time.Second).Truncate(time.Second)
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(done)}}
	require.NoError(t, c.Status().Update(ctx, job))
	db.Status.BaseBackups.CheckedTime = ptr.To(metav1.NewTime(done.Add(-time.Minute)))
	require.NoError(t, c.Status().Update(ctx, db))
	reconcileOnce()
	assert.Equal(t, "WaitingForListing", findCondition(backupNamed(t, c, b.Name).Status.Conditions, ConditionBaseBackupDeleted).Reason)
	db.Status.BaseBackups.CheckedTime = ptr.To(metav1.NewTime(done.Add(time.Minute)))
	require.NoError(t, c.Status().Update(ctx, db))
	reconcileOnce()
	err = c.Get(ctx, key, &dbv1.DatabaseBackup{})
	assert.True(t, apierrors.IsNotFound(err), "the object goes once the archive was listed after the deletion: %v", err)
}

func getJobIn(c client.Client, name string) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, job)
	return job, err
}
