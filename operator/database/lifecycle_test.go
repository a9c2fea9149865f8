package database_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// The cluster tests wait on Jobs and the API server far more than they use
// CPU, and each has a namespace and an operator of its own: they run side
// by side (t.Parallel).

func newBackup(ns, name, database string) *dbv1.DatabaseBackup {
	return &dbv1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       dbv1.DatabaseBackupSpec{Database: database},
	}
}

func waitForBackup(t *testing.T, c client.Client, ns, name, what string, check func(*assert.CollectT, *dbv1.DatabaseBackup)) *dbv1.DatabaseBackup {
	t.Helper()
	var cur dbv1.DatabaseBackup
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cur))
		check(ct, &cur)
	}, wait, 100*time.Millisecond, "DatabaseBackup %s: %s", name, what)
	return &cur
}

func backupPhase(phase dbv1.BackupPhase) func(*assert.CollectT, *dbv1.DatabaseBackup) {
	return func(ct *assert.CollectT, b *dbv1.DatabaseBackup) {
		require.Equal(ct, phase, b.Status.Phase, "conditions: %+v", b.Status.Conditions)
	}
}

// backupJobOf waits for the Database's backup Job to belong to the backup.
func backupJobOf(t *testing.T, c client.Client, ns, db, backup string) *batchv1.Job {
	t.Helper()
	var job batchv1.Job
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: db + "-backup"}, &job))
		owner := metav1.GetControllerOf(&job)
		require.NotNil(ct, owner)
		require.Equal(ct, backup, owner.Name)
	}, wait, 100*time.Millisecond, "backup Job of %s", backup)
	return &job
}

// reportBackup writes the report backup.sh writes into the termination
// message of the backup Job's pod (kwok writes none), once kwok has
// completed it.
func reportBackup(t *testing.T, c client.Client, ns, db, backup string, size int64) string {
	t.Helper()
	return reportBackupAs(t, c, ns, db, backup, size, "")
}

// reportBackupAs is reportBackup with more of the report (extra JSON
// members, such as the source a standby-capable Job read from).
func reportBackupAs(t *testing.T, c client.Client, ns, db, backup string, size int64, extra string) string {
	t.Helper()
	job := backupJobOf(t, c, ns, db, backup)
	sum := fmt.Sprintf("%064x", size)
	// The file the Job was asked to write (it names the backup's UID).
	file := testenv.EnvOf(job.Spec.Template.Spec.Containers[0])["BACKUP_FILE"]
	message := fmt.Sprintf(`{"serverVersion":"17.6 (Debian 17.6-1.pgdg12+1)","file":"%s","size":%d,"sha256":"%s"%s}`, file, size, sum, extra)
	writeTerminationMessage(t, c, job, message)
	return sum
}

// writeTerminationMessage writes message as the termination message of
// the Job's container, once kwok has completed its pod (kwok writes
// none): what the Job's script would have written.
func writeTerminationMessage(t *testing.T, c client.Client, job *batchv1.Job, message string) {
	t.Helper()
	var pod corev1.Pod
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var pods corev1.PodList
		require.NoError(ct, c.List(context.Background(), &pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}))
		var found bool
		for _, p := range pods.Items {
			if metav1.IsControlledBy(&p, job) && p.Status.Phase == corev1.PodSucceeded && len(p.Status.ContainerStatuses) == 1 {
				pod, found = p, true
			}
		}
		require.True(ct, found, "no succeeded pod of Job %s", job.Name)
	}, wait, 100*time.Millisecond)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(&pod), &pod))
		pod.Status.ContainerStatuses[0].State.Terminated.Message = message
		return c.Status().Update(context.Background(), &pod)
	}))
}

// completedBackup takes one backup by hand, start to end.
func completedBackup(t *testing.T, c client.Client, ns, db, name string) *dbv1.DatabaseBackup {
	t.Helper()
	require.NoError(t, c.Create(context.Background(), newBackup(ns, name, db)))
	reportBackup(t, c, ns, db, name, 1000)
	return waitForBackup(t, c, ns, name, "Completed", backupPhase(dbv1.BackupCompleted))
}

func backupsResult(t *testing.T, ns, db, result string) float64 {
	t.Helper()
	return testenv.CounterValue(t, "deckhand_database_backups_total", map[string]string{"namespace": ns, "database": db, "result": result})
}

func TestAnOnDemandBackupReadsAStandbyAndRecordsItsFile(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()

	db := newDatabase(ns, "shop", 2)
	db.Spec.Image = "postgres:17.6"
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)

	require.NoError(t, c.Create(ctx, newBackup(ns, "first", "shop")))
	job := backupJobOf(t, c, ns, "shop", "first")
	container := job.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "postgres:17.6", container.Image, "the Database's own image")
	assert.Equal(t, "shop-rw", testenv.EnvOf(container)["SOURCE_HOST"], "the primary: the Job falls back to it, or measures the standby against it")
	first := get(t, c, ns, "first", &dbv1.DatabaseBackup{})
	assert.Equal(t, "first-"+string(first.UID)+".dump", testenv.EnvOf(container)["BACKUP_FILE"], "the file names the backup's UID")
	var claimVolume string
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claimVolume = v.PersistentVolumeClaim.ClaimName
		}
	}
	assert.Equal(t, "shop-backup", claimVolume)
	assert.True(t, *job.Spec.Template.Spec.SecurityContext.RunAsNonRoot)

	// The backup volume: created on first need, sized like the data
	// volume, on the default StorageClass, owned by nothing.
	pvc := get(t, c, ns, "shop-backup", &corev1.PersistentVolumeClaim{})
	assert.Empty(t, pvc.OwnerReferences)
	assert.Equal(t, "1Gi", ptr.To(pvc.Spec.Resources.Requests[corev1.ResourceStorage]).String())
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc))
		require.Equal(ct, corev1.ClaimBound, pvc.Status.Phase)
	}, wait, 100*time.Millisecond)
	assert.Equal(t, "standard", ptr.Deref(pvc.Spec.StorageClassName, ""))

	running := waitForBackup(t, c, ns, "first", "Running", backupPhase(dbv1.BackupRunning))
	assert.Empty(t, running.Status.Source, "known once the Job says where it read")
	// Where it reads, in the Started Event: the Running condition says so
	// only until kwok ends the Job's pod, at once.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.True(ct, slices.ContainsFunc(listEvents(t, c, ns, "first"), func(e eventsv1.Event) bool {
			return e.Reason == "Started" && strings.Contains(e.Note, "from standby shop-1 if its replay lag is at most 16777216 bytes, else the primary shop-0")
		}))
	}, wait, 200*time.Millisecond, "a Started Event naming where the Job reads")

	// One backup at a time: a second waits while the first runs.
	require.NoError(t, c.Create(ctx, newBackup(ns, "second", "shop")))
	second := waitForBackup(t, c, ns, "second", "Pending", backupPhase(dbv1.BackupPending))
	assert.Contains(t, second.Status.Conditions[0].Message, "one backup at a time per Database")

	sum := reportBackupAs(t, c, ns, "shop", "first", 123456, `,"source":"shop-1.shop-headless","lagBytes":8192`)
	first = waitForBackup(t, c, ns, "first", "Completed", backupPhase(dbv1.BackupCompleted))
	assert.Equal(t, "shop-1", first.Status.Source, "the standby the Job read from")
	assert.Equal(t, ptr.To(int64(8192)), first.Status.LagBytes, "its lag, as the Job measured it")
	assert.Equal(t, "first-"+string(first.UID)+".dump", first.Status.File)
	assert.Equal(t, int64(123456), first.Status.Size)
	assert.Equal(t, sum, first.Status.SHA256)
	assert.Equal(t, "17.6", first.Status.Version)
	assert.Equal(t, "postgres:17.6", first.Status.Image)
	assert.Equal(t, "shop-backup", first.Status.ClaimName)
	assert.NotNil(t, first.Status.StartTime)
	assert.NotNil(t, first.Status.CompletionTime)

	// Then the second runs, and completes too.
	reportBackup(t, c, ns, "shop", "second", 654321)
	waitForBackup(t, c, ns, "second", "Completed", backupPhase(dbv1.BackupCompleted))
	cur := waitFor(t, c, db, "LastBackupSucceeded", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, metav1.ConditionTrue, condition(d, database.ConditionLastBackupSucceeded).Status)
		require.NotNil(ct, d.Status.Backup)
		require.Equal(ct, "second", d.Status.Backup.LastSuccessfulBackup)
	})
	assert.Contains(t, condition(cur, database.ConditionLastBackupSucceeded).Message, "654321 bytes")
	assertEvent(t, c, ns, "shop", corev1.EventTypeNormal, "BackupCompleted")
	assert.Equal(t, 2.0, backupsResult(t, ns, "shop", "succeeded"))

	out, err := testenv.Kubectl(t, "-n", ns, "get", "dbbackup")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^NAME\s+DATABASE\s+METHOD\s+PHASE\s+SIZE\s+VERSION\s+COMPLETED\s+VERIFIED\s+AGE$`, out)
	assert.Regexp(t, `(?m)^first\s+shop\s+Dump\s+Completed\s+123456\s+17\.6\s`, out)

	// kwok cannot run a verification (its pods end with no report): the
	// kwok tests' Databases verify nothing (newDatabase), so no
	// verification Job runs and none ends NoReport in the middle of a test.
	var done dbv1.DatabaseBackup
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "second"}, &done))
	assert.Nil(t, done.Status.Verification)
	assert.True(t, apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-verify"}, &batchv1.Job{})), "no verification Job")
}

func TestAFailedBackupShowsOnTheDatabase(t *testing.T) {
	t.Parallel()
	c, ns, db := readyDatabase(t, "flaky", 1)
	ctx := context.Background()
	completedBackup(t, c, ns, "flaky", "good")

	testenv.PodQuota(t, c, ns, 1)
	require.NoError(t, c.Create(ctx, newBackup(ns, "bad", "flaky")))
	testenv.FailJob(t, c, backupJobOf(t, c, ns, "flaky", "bad"))

	bad := waitForBackup(t, c, ns, "bad", "Failed", backupPhase(dbv1.BackupFailed))
	assert.Contains(t, bad.Status.Conditions[0].Message, "BackoffLimitExceeded")
	cur := waitFor(t, c, db, "LastBackupSucceeded False", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "BackupFailed", condition(d, database.ConditionLastBackupSucceeded).Reason)
	})
	assert.Contains(t, condition(cur, database.ConditionLastBackupSucceeded).Message, "DatabaseBackup bad failed")
	assert.Contains(t, condition(cur, database.ConditionLastBackupSucceeded).Message, "the newest completed backup is good")
	assert.Equal(t, "good", cur.Status.Backup.LastSuccessfulBackup)
	assertEvent(t, c, ns, "flaky", corev1.EventTypeWarning, "BackupFailed")
	assert.Equal(t, 1.0, backupsResult(t, ns, "flaky", "failed"))
	// The failed Job is gone: the next backup may run.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "flaky-backup"}, &batchv1.Job{})
		require.True(ct, apierrors.IsNotFound(err))
	}, wait, 100*time.Millisecond)

	// A backup of a Database that does not exist fails with a reason.
	require.NoError(t, c.Create(ctx, newBackup(ns, "orphan", "nothing-here")))
	orphan := waitForBackup(t, c, ns, "orphan", "Failed", backupPhase(dbv1.BackupFailed))
	assert.Equal(t, "DatabaseNotFound", orphan.Status.Conditions[0].Reason)
}

// A DatabaseBackup deleted while it ran leaves its Job's file behind; one
// made again under the same name (the operator's own advice after a
// failed pre-upgrade backup) writes another file, and a report of a file
// it did not ask for fails it.
func TestABackupMadeAgainUnderTheSameNameNeverTakesTheOldFile(t *testing.T) {
	t.Parallel()
	c, ns, _ := readyDatabase(t, "again", 1)
	ctx := context.Background()

	require.NoError(t, c.Create(ctx, newBackup(ns, "try", "again")))
	firstJob := backupJobOf(t, c, ns, "again", "try")
	oldFile := testenv.EnvOf(firstJob.Spec.Template.Spec.Containers[0])["BACKUP_FILE"]
	waitForBackup(t, c, ns, "try", "Running", backupPhase(dbv1.BackupRunning))
	require.NoError(t, c.Delete(ctx, newBackup(ns, "try", "again")))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "try"}, &dbv1.DatabaseBackup{})
		require.True(ct, apierrors.IsNotFound(err), "the first try is still there")
		err = c.Get(ctx, client.ObjectKeyFromObject(firstJob), &batchv1.Job{})
		require.True(ct, apierrors.IsNotFound(err), "the first try's Job is still there")
	}, wait, 100*time.Millisecond)

	require.NoError(t, c.Create(ctx, newBackup(ns, "try", "again")))
	secondJob := backupJobOf(t, c, ns, "again", "try")
	newFile := testenv.EnvOf(secondJob.Spec.Template.Spec.Containers[0])["BACKUP_FILE"]
	assert.NotEqual(t, oldFile, newFile, "the second try writes a file of its own")
	second := get(t, c, ns, "try", &dbv1.DatabaseBackup{})
	assert.Equal(t, "try-"+string(second.UID)+".dump", newFile)

	// The Job says it found the old file: that is not this backup.
	job := backupJobOf(t, c, ns, "again", "try")
	var pod corev1.Pod
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var pods corev1.PodList
		require.NoError(ct, c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}))
		require.Len(ct, pods.Items, 1)
		pod = pods.Items[0]
		require.Equal(ct, corev1.PodSucceeded, pod.Status.Phase)
		require.Len(ct, pod.Status.ContainerStatuses, 1)
	}, wait, 100*time.Millisecond)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(&pod), &pod))
		pod.Status.ContainerStatuses[0].State.Terminated.Message = fmt.Sprintf(`{"serverVersion":"17.6","file":%q,"size":1,"sha256":"%064x"}`, oldFile, 1)
		return c.Status().Update(ctx, &pod)
	}))
	failed := waitForBackup(t, c, ns, "try", "Failed", backupPhase(dbv1.BackupFailed))
	assert.Equal(t, "ReportedAnotherFile", failed.Status.Conditions[0].Reason)
	assert.Contains(t, failed.Status.Conditions[0].Message, oldFile)
	assert.Empty(t, failed.Status.SHA256)
}

func TestMissedSchedulesGiveOneBackupAndRetentionDeletesOldFiles(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	// The operator is down while the schedule passes a dozen times. Its
	// clock starts an hour into a two-hour interval, so no schedule time
	// passes while the test runs, whenever it runs.
	base := time.Now().UTC().Truncate(2 * time.Hour).Add(time.Hour)
	db := newDatabase(ns, "nightly", 1)
	db.Spec.Backup.Schedule, db.Spec.Backup.Retention = "0 */2 * * *", &dbv1.Retention{KeepLast: ptr.To(int32(2))}
	require.NoError(t, c.Create(ctx, db))
	hourAgo := metav1.NewTime(base.Add(-9 * time.Hour))
	db.Status.Backup = &dbv1.BackupStatus{LastScheduleTime: &hourAgo}
	require.NoError(t, c.Status().Update(ctx, db))

	now, _ := testenv.ClockFrom(base)
	startOperatorAt(t, ns, now)
	waitFor(t, c, db, "Ready", ready)
	var scheduled []dbv1.DatabaseBackup
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var list dbv1.DatabaseBackupList
		require.NoError(ct, c.List(ctx, &list, client.InNamespace(ns)))
		scheduled = list.Items
		require.NotEmpty(ct, scheduled)
	}, wait, 100*time.Millisecond)
	time.Sleep(2 * time.Second)
	var list dbv1.DatabaseBackupList
	require.NoError(t, c.List(ctx, &list, client.InNamespace(ns)))
	require.Len(t, list.Items, 1, "one catch-up backup, not one per missed time")
	last := base.Add(-time.Hour)
	catchUp := list.Items[0]
	assert.Equal(t, "nightly-"+last.Format("20060102-1504"), catchUp.Name, "the most recent missed time")
	assert.Equal(t, "scheduled", catchUp.Labels[database.LabelBackupReason])

	cur := waitFor(t, c, db, "next schedule time", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotNil(ct, d.Status.Backup)
		require.NotNil(ct, d.Status.Backup.NextScheduleTime)
	})
	assert.Equal(t, last.Add(2*time.Hour), cur.Status.Backup.NextScheduleTime.UTC())
	assert.Equal(t, last, cur.Status.Backup.LastScheduleTime.UTC())
	assertEvent(t, c, ns, "nightly", corev1.EventTypeNormal, "BackupScheduled")

	// Retention keeps the last 2: the third completed backup deletes the
	// oldest, whose finalizer deletes its file with a Job first.
	reportBackup(t, c, ns, "nightly", catchUp.Name, 1)
	waitForBackup(t, c, ns, catchUp.Name, "Completed", backupPhase(dbv1.BackupCompleted))
	completedBackup(t, c, ns, "nightly", "by-hand-1")
	var deleteJob batchv1.Job
	require.NoError(t, c.Create(ctx, newBackup(ns, "by-hand-2", "nightly")))
	reportBackup(t, c, ns, "nightly", "by-hand-2", 3)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var jobs batchv1.JobList
		require.NoError(ct, c.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{database.LabelComponent: "backup-delete"}))
		require.Len(ct, jobs.Items, 1)
		deleteJob = jobs.Items[0]
	}, wait, 100*time.Millisecond, "the file-deleting Job")
	file := "/deckhand/backup/" + catchUp.Name + "-" + string(catchUp.UID) + ".dump"
	assert.Equal(t, []string{"rm", "-f", "--", file, file + ".owner", file + ".counts"}, deleteJob.Spec.Template.Spec.Containers[0].Command,
		"the file, the record of the Job that wrote it and its row counts go together")
	assert.Equal(t, "postgres:17.6", deleteJob.Spec.Template.Spec.Containers[0].Image, "the image that wrote it")
	assert.Empty(t, deleteJob.Spec.Template.Spec.Containers[0].Env, "no Secrets: the Database may be gone")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: catchUp.Name}, &dbv1.DatabaseBackup{})
		require.True(ct, apierrors.IsNotFound(err), "the oldest backup is still there")
	}, wait, 100*time.Millisecond)
	assertEvent(t, c, ns, catchUp.Name, corev1.EventTypeNormal, "FileDeleted")
	assertEvent(t, c, ns, "nightly", corev1.EventTypeNormal, "BackupPruned")
	for _, kept := range []string{"by-hand-1", "by-hand-2"} {
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: kept}, &dbv1.DatabaseBackup{}), kept)
	}

	// Suspended: no next time.
	update(t, c, db, func(d *dbv1.Database) { d.Spec.Backup.Suspend = true })
	cur = waitFor(t, c, db, "suspended", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "Suspended", condition(d, database.ConditionBackupScheduled).Reason)
	})
	assert.Nil(t, cur.Status.Backup.NextScheduleTime)
}

// poke changes an annotation of the Database, so it is reconciled (at
// the test clock's time).
func poke(t *testing.T, c client.Client, db *dbv1.Database, value string) {
	t.Helper()
	update(t, c, db, func(d *dbv1.Database) { d.Annotations = map[string]string{"poke": value} })
}

func scheduledBackups(t require.TestingT, c client.Client, ns string) []dbv1.DatabaseBackup {
	var list dbv1.DatabaseBackupList
	require.NoError(t, c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{database.LabelBackupReason: "scheduled"}))
	return list.Items
}

// While a scheduled backup has not finished (the database down, its Job
// not done), schedule times pass without new backups: they are counted
// and reported, and the one waiting stands for them.
func TestScheduledBackupsDoNotPileUpWhileOneHasNotFinished(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	// The operator's clock starts half an hour into an hour, and the
	// schedule counts from there, so the hours the test moves it on decide
	// what is due, not the hour the test runs in (run at 11:59 a real hour
	// would pass as well).
	base := time.Now().UTC().Truncate(time.Hour).Add(30 * time.Minute)
	db := newDatabase(ns, "busy", 1)
	db.Spec.Backup.Schedule = "@hourly"
	require.NoError(t, c.Create(ctx, db))
	lastTime := metav1.NewTime(base)
	db.Status.Backup = &dbv1.BackupStatus{LastScheduleTime: &lastTime}
	require.NoError(t, c.Status().Update(ctx, db))
	now, offset := testenv.ClockFrom(base)
	startOperatorAt(t, ns, now)
	waitFor(t, c, db, "Ready", ready)

	offset.Store(int64(time.Hour + 5*time.Minute))
	poke(t, c, db, "1")
	var first dbv1.DatabaseBackup
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		items := scheduledBackups(ct, c, ns)
		require.Len(ct, items, 1)
		first = items[0]
	}, wait, 100*time.Millisecond, "the first scheduled backup")
	// Its Job reports nothing yet: it has not finished.
	waitForBackup(t, c, ns, first.Name, "Running", backupPhase(dbv1.BackupRunning))

	for i, hours := range []time.Duration{2, 3} {
		offset.Store(int64(hours*time.Hour + 5*time.Minute))
		poke(t, c, db, fmt.Sprint(hours))
		waitFor(t, c, db, "a missed schedule time counted", func(ct *assert.CollectT, d *dbv1.Database) {
			require.NotNil(ct, d.Status.Backup)
			require.Equal(ct, int64(i+1), d.Status.Backup.MissedSchedules)
		})
	}
	assert.Len(t, scheduledBackups(t, c, ns), 1, "no backup queued behind the one that has not finished")
	cur := get(t, c, ns, "busy", &dbv1.Database{})
	assert.Contains(t, condition(cur, database.ConditionBackupScheduled).Message, "scheduled DatabaseBackup "+first.Name+" has not finished yet")
	assert.Contains(t, condition(cur, database.ConditionBackupScheduled).Message, "2 missed so far")
	assertEvent(t, c, ns, "busy", corev1.EventTypeWarning, "BackupScheduleMissed")

	// Once it finished, the next time makes a backup again.
	reportBackup(t, c, ns, "busy", first.Name, 10)
	waitForBackup(t, c, ns, first.Name, "Completed", backupPhase(dbv1.BackupCompleted))
	// The operator must have seen it finish before the clock moves on: a
	// schedule time that comes while its view still says Running is
	// missed, as it should be (in one loaded make test run no second
	// backup came; this race is the likely cause, not proven).
	waitFor(t, c, db, "the finished backup seen", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotNil(ct, d.Status.Backup)
		assert.Equal(ct, first.Name, d.Status.Backup.LastSuccessfulBackup)
	})
	offset.Store(int64(4*time.Hour + 5*time.Minute))
	poke(t, c, db, "4")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.Len(ct, scheduledBackups(ct, c, ns), 2)
	}, wait, 100*time.Millisecond, "the next scheduled backup")
	cur = get(t, c, ns, "busy", &dbv1.Database{})
	assert.Equal(t, int64(2), cur.Status.Backup.MissedSchedules, "a count, kept")
}

func TestSnapshotDeletionBacksUpBeforeTheStatefulSetGoesAndKeepsBackups(t *testing.T) {
	t.Parallel()
	c, ns, db := readyDatabase(t, "precious", 2)
	ctx := context.Background()
	completedBackup(t, c, ns, "precious", "earlier")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), db))
	assert.Contains(t, db.Finalizers, database.FinalizerDeletionPolicy)

	require.NoError(t, c.Delete(ctx, db))
	final := fmt.Sprintf("precious-final-%s", strings.ReplaceAll(string(db.UID), "-", "")[:8])
	finalJob := backupJobOf(t, c, ns, "precious", final)
	// The volumes go next: the final backup reads the primary, never a
	// standby that may be behind.
	assert.Equal(t, "precious-rw", testenv.EnvOf(finalJob.Spec.Template.Spec.Containers[0])["SOURCE_HOST"])
	running := waitForBackup(t, c, ns, final, "Running", backupPhase(dbv1.BackupRunning))
	assert.Equal(t, "precious-0", running.Status.Source)
	assert.Contains(t, running.Status.Conditions[0].Message, "from the primary precious-0 to")
	// The final backup runs (no report yet): the servers and data stay.
	time.Sleep(2 * time.Second)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "precious"}, &appsv1.StatefulSet{}))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data-precious-0"}, &corev1.PersistentVolumeClaim{}))
	cur := waitFor(t, c, db, "Deleting", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, dbv1.PhaseDeleting, d.Status.Phase)
	})
	assert.NotNil(t, cur.DeletionTimestamp)

	reportBackup(t, c, ns, "precious", final, 42)
	finalBackup := waitForBackup(t, c, ns, final, "Completed", backupPhase(dbv1.BackupCompleted))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{})
		require.True(ct, apierrors.IsNotFound(err), "Database still there")
		err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "precious"}, &appsv1.StatefulSet{})
		require.True(ct, apierrors.IsNotFound(err), "StatefulSet still there")
		for i := range 2 {
			var pvc corev1.PersistentVolumeClaim
			err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("data-precious-%d", i)}, &pvc)
			require.True(ct, apierrors.IsNotFound(err) || !pvc.DeletionTimestamp.IsZero(), "data volume %d not deleted", i)
		}
	}, 60*time.Second, 250*time.Millisecond)
	// Ordering: the StatefulSet was deleted after the final backup completed.
	var deletedAt time.Time
	for _, e := range listEvents(t, c, ns, "precious") {
		if e.Reason == "Deleted" && strings.Contains(e.Note, "StatefulSet precious deleted") {
			deletedAt = e.EventTime.Time
		}
	}
	require.False(t, deletedAt.IsZero(), "no StatefulSet deletion event")
	assert.False(t, deletedAt.Before(finalBackup.Status.CompletionTime.Time.Truncate(time.Second)), "StatefulSet deleted at %s, final backup completed at %s", deletedAt, finalBackup.Status.CompletionTime)

	// Backups and the backup volume outlive the Database.
	for _, name := range []string{"earlier", final} {
		var b dbv1.DatabaseBackup
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &b), name)
		assert.True(t, b.DeletionTimestamp.IsZero(), name)
	}
	var pvc corev1.PersistentVolumeClaim
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "precious-backup"}, &pvc))
	assert.True(t, pvc.DeletionTimestamp.IsZero())
}

func TestABlockedFinalBackupSaysTheWayOut(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()

	skip := newDatabase(ns, "skip", 1)
	toDelete := newDatabase(ns, "switch", 1)
	for _, db := range []*dbv1.Database{skip, toDelete} {
		db.Spec.DeletionTimeout = &metav1.Duration{Duration: 2 * time.Second}
		require.NoError(t, c.Create(ctx, db))
		waitFor(t, c, db, "Ready", ready)
		require.NoError(t, c.Delete(ctx, db))
	}
	for _, db := range []*dbv1.Database{skip, toDelete} {
		// The final backup never reports: after deletionTimeout the
		// deletion is blocked, with the way out.
		cur := waitFor(t, c, db, "DeletionBlocked", func(ct *assert.CollectT, d *dbv1.Database) {
			require.Equal(ct, metav1.ConditionTrue, condition(d, database.ConditionDeletionBlocked).Status)
		})
		msg := condition(cur, database.ConditionDeletionBlocked).Message
		assert.Equal(t, "FinalBackupTimedOut", condition(cur, database.ConditionDeletionBlocked).Reason)
		assert.Contains(t, msg, "annotate the Database stable.imaginedata.co/skip-final-backup=true")
		assert.Contains(t, msg, "set spec.deletionPolicy to Retain")
		assertEvent(t, c, ns, db.Name, corev1.EventTypeWarning, "FinalBackupTimedOut")
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: db.Name}, &appsv1.StatefulSet{}), "nothing removed while blocked")
	}

	// Way out 1: the annotation.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(skip), skip))
		skip.Annotations = map[string]string{database.AnnotationSkipFinalBackup: "true"}
		return c.Update(ctx, skip)
	}))
	// Way out 2: deletionPolicy Delete removes the volumes and Secrets.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(toDelete), toDelete))
		toDelete.Spec.DeletionPolicy = dbv1.DeletionDelete
		return c.Update(ctx, toDelete)
	}))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, name := range []string{"skip", "switch"} {
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &dbv1.Database{})
			require.True(ct, apierrors.IsNotFound(err), "Database %s still there", name)
			var pvc corev1.PersistentVolumeClaim
			err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data-" + name + "-0"}, &pvc)
			require.True(ct, apierrors.IsNotFound(err) || !pvc.DeletionTimestamp.IsZero(), "data volume of %s not deleted", name)
			for _, secret := range []string{"-superuser", "-app", "-replication"} {
				err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + secret}, &corev1.Secret{})
				require.True(ct, apierrors.IsNotFound(err), "Secret %s%s still there", name, secret)
			}
		}
	}, 60*time.Second, 250*time.Millisecond)
	assertEvent(t, c, ns, "skip", corev1.EventTypeNormal, "FinalBackupSkipped")
}

func TestFromBackupRestoresBeforeInitAndAMissingBackupIsNeverReady(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()

	source := newDatabase(ns, "source", 1)
	require.NoError(t, c.Create(ctx, source))
	waitFor(t, c, source, "Ready", ready)
	b := completedBackup(t, c, ns, "source", "snapshot")

	copyDB := newDatabase(ns, "copy", 1)
	copyDB.Spec.FromBackup = "snapshot"
	require.NoError(t, c.Create(ctx, copyDB))
	restore := get(t, c, ns, "copy-restore", &batchv1.Job{})
	container := restore.Spec.Template.Spec.Containers[0]
	assert.Equal(t, b.Status.SHA256, testenv.EnvOf(container)["BACKUP_SHA256"])
	assert.Equal(t, b.Status.File, testenv.EnvOf(container)["BACKUP_FILE"])
	var claims []string
	for _, v := range restore.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims = append(claims, v.PersistentVolumeClaim.ClaimName)
		}
	}
	assert.Equal(t, []string{"source-backup"}, claims, "the source Database's backup volume")

	cur := waitFor(t, c, copyDB, "Ready", ready)
	assert.Equal(t, metav1.ConditionTrue, condition(cur, database.ConditionRestored).Status)
	// The restore held the backup (retention and deletion left it) and
	// let go once restored.
	waitForBackup(t, c, ns, "snapshot", "hold released", func(ct *assert.CollectT, b *dbv1.DatabaseBackup) {
		for key := range b.Annotations {
			require.False(ct, strings.HasPrefix(key, database.AnnotationPrefixHeldBy), "still held: %s", key)
		}
	})
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(restore), restore))
	initJob := get(t, c, ns, "copy-init", &batchv1.Job{})
	done := jobDone(restore)
	require.False(t, done.IsZero())
	assert.False(t, initJob.CreationTimestamp.Time.Before(done.Truncate(time.Second)), "init Job created %s, before the restore finished %s", initJob.CreationTimestamp, done)

	missing := newDatabase(ns, "hopeful", 1)
	missing.Spec.FromBackup = "no-such-backup"
	require.NoError(t, c.Create(ctx, missing))
	cur = waitFor(t, c, missing, "BackupNotFound", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "BackupNotFound", condition(d, database.ConditionRestored).Reason)
	})
	time.Sleep(2 * time.Second)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(missing), cur))
	assert.Equal(t, metav1.ConditionFalse, condition(cur, database.ConditionReady).Status)
	assert.Equal(t, "BackupNotFound", condition(cur, database.ConditionReady).Reason)
	assert.Equal(t, dbv1.PhaseDegraded, cur.Status.Phase)
	assert.Contains(t, condition(cur, database.ConditionRestored).Message, "DatabaseBackup no-such-backup (spec.fromBackup) does not exist")
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hopeful-init"}, &batchv1.Job{})
	assert.True(t, apierrors.IsNotFound(err), "no init Job: an empty database must not look ready")
	assertEvent(t, c, ns, "hopeful", corev1.EventTypeWarning, "BackupNotFound")

	// fromBackup cannot change after creation. A merge patch, not an
	// update: the operator may write the status meanwhile, and an update
	// from an older read would fail on that instead of on admission.
	err = c.Patch(ctx, cur, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"fromBackup":"snapshot"}}`)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fromBackup is set at creation only")
}

func listEvents(t *testing.T, c client.Client, ns, name string) []eventsv1.Event {
	t.Helper()
	var evs eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &evs, client.InNamespace(ns)))
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func jobDone(j *batchv1.Job) time.Time {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func TestLifecycleInputsAreRefusedWithReadableMessages(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(*dbv1.Database)
		msg    string
	}{
		{"schedule of four fields", func(d *dbv1.Database) { d.Spec.Backup = &dbv1.BackupSpec{Schedule: "0 3 * *"} }, "schedule must be five cron fields"},
		{"unknown descriptor", func(d *dbv1.Database) { d.Spec.Backup = &dbv1.BackupSpec{Schedule: "@often"} }, "or one of @hourly, @daily"},
		{"keepLast 0", func(d *dbv1.Database) {
			d.Spec.Backup = &dbv1.BackupSpec{Retention: &dbv1.Retention{KeepLast: ptr.To(int32(0))}}
		}, "retention.keepLast must be at least 1"},
		{"empty retention", func(d *dbv1.Database) { d.Spec.Backup = &dbv1.BackupSpec{Retention: &dbv1.Retention{}} }, "retention needs keepLast, maxAge or both"},
		{"bad time zone", func(d *dbv1.Database) { d.Spec.Backup = &dbv1.BackupSpec{TimeZone: ptr.To("not a zone")} }, "timeZone must be an IANA time zone name"},
		{"bad backup size", func(d *dbv1.Database) {
			d.Spec.Backup = &dbv1.BackupSpec{Storage: &dbv1.BackupStorage{Volume: &dbv1.BackupVolume{Size: "lots"}}}
		}, `backup.storage.volume.size must be a quantity such as 100Gi, not "lots"`},
		{"unknown deletion policy", func(d *dbv1.Database) { d.Spec.DeletionPolicy = "Shred" }, `Unsupported value: "Shred"`},
		{"negative standby lag", func(d *dbv1.Database) {
			d.Spec.Backup = &dbv1.BackupSpec{MaxStandbyLag: ptr.To(resource.MustParse("-1Mi"))}
		}, "backup.maxStandbyLag must be 0 or more (e.g. 16Mi)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDatabase(ns, "bad", 1)
			tc.change(db)
			err := c.Create(ctx, db)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	ok := newDatabase(ns, "fine", 1)
	ok.Spec.Backup = &dbv1.BackupSpec{Schedule: "@daily", TimeZone: ptr.To("Europe/Paris"), MaxStandbyLag: ptr.To(resource.MustParse("64Mi")),
		Retention: &dbv1.Retention{KeepLast: ptr.To(int32(7)), MaxAge: &metav1.Duration{Duration: 720 * time.Hour}}}
	require.NoError(t, c.Create(ctx, ok))
	assert.Equal(t, dbv1.DeletionSnapshot, ok.Spec.DeletionPolicy, "the default")

	b := newBackup(ns, "b", "fine")
	require.NoError(t, c.Create(ctx, b))
	b.Spec.Database = "other"
	err := c.Update(ctx, b)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "database is immutable")
}

func setImage(t *testing.T, c client.Client, db *dbv1.Database, image string, annotations map[string]string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(db), db))
		db.Spec.Image = image
		if annotations != nil {
			db.Annotations = annotations
		}
		return c.Update(context.Background(), db)
	}))
}

func serverImage(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	sts := get(t, c, ns, name, &appsv1.StatefulSet{})
	return sts.Spec.Template.Spec.Containers[0].Image
}

func TestImageChangesBackUpFirstAndDowngradesAreRefused(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()

	db := newDatabase(ns, "rolling", 2)
	db.Spec.Image = "postgres:17.6"
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)

	// Same major: a backup with the old image first, then the roll.
	setImage(t, c, db, "postgres:17.7", nil)
	var backups dbv1.DatabaseBackupList
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.List(ctx, &backups, client.InNamespace(ns)))
		require.Len(ct, backups.Items, 1)
	}, wait, 100*time.Millisecond, "the pre-upgrade backup")
	pre := backups.Items[0]
	assert.Equal(t, "pre-upgrade", pre.Labels[database.LabelBackupReason])
	job := backupJobOf(t, c, ns, "rolling", pre.Name)
	assert.Equal(t, "postgres:17.6", job.Spec.Template.Spec.Containers[0].Image, "the dump is taken with the image that runs")
	cur := waitFor(t, c, db, "Upgrading", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "BackingUp", condition(d, database.ConditionUpgrading).Reason)
	})
	assert.Equal(t, "postgres:17.6", serverImage(t, c, ns, "rolling"), "no roll before the backup completed")
	assert.Equal(t, "17.6", cur.Status.CurrentVersion)

	reportBackup(t, c, ns, "rolling", pre.Name, 10)
	cur = waitFor(t, c, db, "rolled to 17.7", func(ct *assert.CollectT, d *dbv1.Database) {
		ready(ct, d)
		require.Equal(ct, "postgres:17.7", d.Status.CurrentImage)
	})
	assert.Equal(t, "17.7", cur.Status.CurrentVersion)
	assert.Equal(t, "postgres:17.7", serverImage(t, c, ns, "rolling"))
	var done dbv1.DatabaseBackup
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(&pre), &done))
	assert.Equal(t, dbv1.BackupCompleted, done.Status.Phase)
	assert.True(t, done.Status.CompletionTime.Time.Before(time.Now()))

	// A major downgrade: refused, nothing changes.
	setImage(t, c, db, "postgres:16.4", nil)
	cur = waitFor(t, c, db, "UpgradeBlocked", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "Downgrade", condition(d, database.ConditionUpgradeBlocked).Reason)
	})
	assert.Contains(t, condition(cur, database.ConditionUpgradeBlocked).Message, "PostgreSQL 17.7 to 16.4 is a major-version downgrade")
	assertEvent(t, c, ns, "rolling", corev1.EventTypeWarning, "Downgrade")
	time.Sleep(time.Second)
	assert.Equal(t, "postgres:17.7", serverImage(t, c, ns, "rolling"))
	require.NoError(t, c.List(ctx, &backups, client.InNamespace(ns)))
	assert.Len(t, backups.Items, 1, "no backup for a refused change")

	// (A major upgrade: upgrade_test.go.)

	// An image without a version: only with the annotation, and after a backup.
	setImage(t, c, db, "registry.example/postgres-custom", nil)
	cur = waitFor(t, c, db, "VersionUnreadable", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "VersionUnreadable", condition(d, database.ConditionUpgradeBlocked).Reason)
	})
	assert.Contains(t, condition(cur, database.ConditionUpgradeBlocked).Message, "annotate the Database stable.imaginedata.co/allow-unknown-version=true")
	assert.Equal(t, "postgres:17.7", serverImage(t, c, ns, "rolling"))
	setImage(t, c, db, "registry.example/postgres-custom", map[string]string{database.AnnotationAllowUnknownVersion: "true"})
	var second string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.List(ctx, &backups, client.InNamespace(ns)))
		require.Len(ct, backups.Items, 2)
		for _, b := range backups.Items {
			if b.Name != pre.Name {
				second = b.Name
			}
		}
	}, wait, 100*time.Millisecond, "the second pre-upgrade backup")
	reportBackup(t, c, ns, "rolling", second, 20)
	waitFor(t, c, db, "rolled to the custom image", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "registry.example/postgres-custom", d.Status.CurrentImage)
	})
}
