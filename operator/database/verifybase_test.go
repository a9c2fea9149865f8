package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

// reportBaseBackup writes status.baseBackups as the primary's agent would
// report the archive's newest base backup (kwok's pods run no agent).
func reportBaseBackup(t *testing.T, c client.Client, db *dbv1.Database, name, id string) {
	t.Helper()
	end := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	rec := &dbv1.BaseBackupRecord{Name: name, ID: id, BeginTime: end, EndTime: end, BeginLSN: "0/2000028", EndLSN: "0/2000100", Timeline: 1}
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(db), db))
		bb := db.Status.BaseBackups
		if bb == nil {
			bb = &dbv1.BaseBackupsStatus{Oldest: rec}
		}
		bb.Count++
		bb.Newest = rec
		db.Status.BaseBackups = bb
		return c.Status().Update(context.Background(), db)
	}))
}

// verifyBaseJobOf waits for the verification Job of the base backup id.
func verifyBaseJobOf(t *testing.T, c client.Client, db *dbv1.Database, id string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: db.Namespace, Name: db.Name + "-verify-base"}, job))
		require.Contains(ct, job.Annotations["stable.imaginedata.co/base-backup"], id)
		require.True(ct, job.DeletionTimestamp.IsZero())
	}, time.Minute, 100*time.Millisecond)
	return job
}

// Each new base backup of an archiving Database is verified by a Job of
// its own: the restore (archiver image) and the archiver sidecar as init
// containers, verify-base.sh in the Database's image, a scratch volume the
// size of the data volume and a little more. Its Report becomes
// status.baseBackups.verification with an Event (a failed check named, with
// why), and the Job is deleted; a newer base backup is verified next; mode
// Off verifies none.
func TestEachNewBaseBackupIsVerifiedByAJobThatRestoresIt(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	startOperatorWith(t, ns, database.Options{ArchiverImage: "example.org/archiver:test"})

	db := newDatabase(ns, "vb", 1)
	s := objectStore()
	s.Path = "clusters/ns"
	withObjectStore(db, s)
	// newDatabase turns verification off; EachBackup is the default.
	db.Spec.Backup.Verify = &dbv1.BackupVerify{Mode: dbv1.VerifyEachBackup}
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)
	_, err := getJob(c, ns, "vb-verify-base")
	require.True(t, apierrors.IsNotFound(err), "no base backup, no verification: %v", err)

	reportBaseBackup(t, c, db, "base-20261130T050000Z", "20261130T050001")
	job := verifyBaseJobOf(t, c, db, "20261130T050001")
	spec := job.Spec.Template.Spec
	require.Len(t, spec.InitContainers, 2)
	restore, sidecar := spec.InitContainers[0], spec.InitContainers[1]
	assert.Equal(t, "restore", restore.Name)
	assert.Equal(t, "example.org/archiver:test", restore.Image)
	assert.Equal(t, []string{"sh", "/deckhand/scripts/verify-base-restore.sh"}, restore.Command)
	env := testenv.EnvOf(restore)
	assert.Equal(t, "20261130T050001", env["BACKUP_ID"])
	assert.Equal(t, "base-20261130T050000Z", env["RECOVERY_TARGET_NAME"])
	assert.Equal(t, "wal-archive", env["STORE_BUCKET"])
	assert.Equal(t, "vb", env["STORE_SERVER"])
	assert.Equal(t, "archiver", sidecar.Name)
	require.NotNil(t, sidecar.RestartPolicy)
	assert.Equal(t, corev1.ContainerRestartPolicyAlways, *sidecar.RestartPolicy, "a native sidecar: the Job ends with the verification")
	assert.Equal(t, "clusters/ns", testenv.EnvOf(sidecar)["SOURCE_STORE_PREFIX"])
	require.Len(t, spec.Containers, 1)
	verify := spec.Containers[0]
	assert.Equal(t, get(t, c, ns, "vb", &dbv1.Database{}).Status.CurrentImage, verify.Image, "the Database's image")
	assert.Equal(t, []string{"sh", "/deckhand/scripts/verify-base.sh"}, verify.Command)
	assert.Equal(t, "base-20261130T050000Z", testenv.EnvOf(verify)["BACKUP_NAME"])
	var scratch *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == "scratch" {
			scratch = &spec.Volumes[i]
		}
	}
	require.NotNil(t, scratch)
	require.NotNil(t, scratch.Ephemeral)
	want := resource.MustParse(db.Spec.StorageSize)
	want.Add(resource.MustParse("1Gi"))
	got := scratch.Ephemeral.VolumeClaimTemplate.Spec.Resources.Requests[corev1.ResourceStorage]
	assert.Zero(t, want.Cmp(got), "scratch of %s, got %s", want.String(), got.String())
	running := waitFor(t, c, db, "verification recorded as started", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotNil(ct, d.Status.BaseBackups.Verification)
	}).Status.BaseBackups.Verification
	assert.Equal(t, "20261130T050001", running.BackupID)
	assert.Empty(t, running.Outcome)
	assertEvent(t, c, ns, "vb", corev1.EventTypeNormal, "BaseBackupVerifying")

	writeTerminationMessage(t, c, job, `{"serverVersion":"17.6","verification":{"checks":[`+
		`{"name":"archive","passed":true},{"name":"restore","passed":true},`+
		`{"name":"recovery","passed":false,"message":"recovery ended before configured recovery target was reached; the last segment replayed was 000000010000000000000002, the next (000000010000000000000003) is missing from the archive or unreadable"}]}}`)
	failed := waitFor(t, c, db, "verification failed", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, dbv1.VerificationFailed, d.Status.BaseBackups.Verification.Outcome)
	}).Status.BaseBackups.Verification
	assert.Equal(t, "recovery", failed.FailedCheck)
	assert.Nil(t, get(t, c, ns, "vb", &dbv1.Database{}).Status.BaseBackups.LastVerified, "a failed verification holds nothing")
	assert.Contains(t, failed.Message, "check recovery failed: ")
	assert.Contains(t, failed.Message, "000000010000000000000003")
	assert.Len(t, failed.Checks, 3)
	assertEvent(t, c, ns, "vb", corev1.EventTypeWarning, "BaseBackupVerificationFailed")
	require.Eventually(t, func() bool {
		j, err := getJob(c, ns, "vb-verify-base")
		return apierrors.IsNotFound(err) || !j.DeletionTimestamp.IsZero()
	}, time.Minute, 100*time.Millisecond, "the Job is deleted once its result is recorded")

	// The next base backup: verified by a new Job, and passes.
	reportBaseBackup(t, c, db, "base-20261201T050000Z", "20261201T050001")
	job = verifyBaseJobOf(t, c, db, "20261201T050001")
	writeTerminationMessage(t, c, job, `{"serverVersion":"17.6","verification":{"checks":[`+
		`{"name":"archive","passed":true},{"name":"restore","passed":true},{"name":"recovery","passed":true},`+
		`{"name":"marker","passed":true},{"name":"amcheck","passed":true},{"name":"writable","passed":true}]}}`)
	passed := waitFor(t, c, db, "verification passed", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, dbv1.VerificationVerified, d.Status.BaseBackups.Verification.Outcome)
	}).Status.BaseBackups.Verification
	assert.Equal(t, "base-20261201T050000Z", passed.BackupName)
	assert.Empty(t, passed.FailedCheck)
	assert.Contains(t, passed.Message, "checks passed: archive, restore, recovery, marker, amcheck, writable")
	assertEvent(t, c, ns, "vb", corev1.EventTypeNormal, "BaseBackupVerified")
	assert.Equal(t, &dbv1.BaseBackupRef{Name: "base-20261201T050000Z", ID: "20261201T050001"},
		get(t, c, ns, "vb", &dbv1.Database{}).Status.BaseBackups.LastVerified)

	// The newest verified base backup is held in the archive (the
	// primary's archiver reads the scripts ConfigMap's holds key); a
	// Database recovering from the archive pauses retention until it is
	// recovered.
	holds := func(ct require.TestingT) string {
		var cm corev1.ConfigMap
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vb-scripts"}, &cm))
		return cm.Data[postgres.BaseBackupHoldsKey]
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, "keep 20261201T050001 the newest verified base backup (base-20261201T050000Z) of Database "+ns+"/vb\n", holds(ct))
	}, time.Minute, 100*time.Millisecond)
	cp := newDatabase(ns, "copy", 1)
	cp.Spec.Recovery = &dbv1.Recovery{Source: dbv1.RecoverySource{ObjectStore: *s, ServerName: "vb"}}
	require.NoError(t, c.Create(ctx, cp))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Contains(ct, holds(ct), "pause Database "+ns+"/copy recovers from this archive\n")
	}, time.Minute, 100*time.Millisecond, "a recovery from the archive pauses its retention")
	require.NoError(t, c.Delete(ctx, cp))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NotContains(ct, holds(ct), "pause")
	}, time.Minute, 100*time.Millisecond, "the pause ends with the recovery")

	wide, err := testenv.Kubectl(t, "get", "databases", "-n", ns, "-o", "wide")
	require.NoError(t, err, wide)
	assert.Equal(t, "Verified", column(t, wide, "vb", "BASE BACKUP VERIFIED"), "kubectl get -o wide shows the last verification's outcome")

	// Mode Off: the next base backup is not verified.
	update(t, c, db, func(d *dbv1.Database) {
		d.Spec.Backup.Verify = &dbv1.BackupVerify{Mode: dbv1.VerifyOff}
	})
	require.Eventually(t, func() bool {
		_, err := getJob(c, ns, "vb-verify-base")
		return apierrors.IsNotFound(err)
	}, time.Minute, 100*time.Millisecond)
	reportBaseBackup(t, c, db, "base-20261202T050000Z", "20261202T050001")
	time.Sleep(3 * time.Second)
	_, err = getJob(c, ns, "vb-verify-base")
	assert.True(t, apierrors.IsNotFound(err), "mode Off verifies no base backup: %v", err)
	assert.Equal(t, "20261201T050001", get(t, c, ns, "vb", &dbv1.Database{}).Status.BaseBackups.Verification.BackupID, "the last verification stays")
}

func getJob(c client.Client, ns, name string) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, job)
	return job, err
}
