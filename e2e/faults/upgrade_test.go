package faults

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/deckhand-dev/deckhand/e2e"
	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// The operator SIGKILLed at each step of a major upgrade that waits on
// the cluster (the backup, the scale-down, the upgrade Job, the new version
// starting), and started again each time: the new process takes the
// upgrade up where it is, never makes a second pre-upgrade backup or
// upgrade Job, and finishes it once, the new version running.
func operatorKilledMidUpgrade(t *testing.T) {
	c, ns, rendered := release(t, "leaderElection.enabled=false", "controllers.configMonitor.enabled=false", databaseKinds["Database"].toggle)
	op := e2e.RunOperatorAsChart(t, rendered, ns)
	op.WaitReady(t)
	ctx := context.Background()

	// One node: the upgrade Job mounts the primary's data volume and the
	// backup volume together, and the local cluster's volumes are node-local.
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
		Spec: dbv1.DatabaseSpec{Name: "shop", Port: 5432, StorageSize: "1Gi", Replicas: 1, Image: "postgres:17.6",
			PodTemplate: &dbv1.PodTemplate{NodeSelector: map[string]dbv1.LabelValue{corev1.LabelHostname: "kwok-node-1"}}},
	}
	require.NoError(t, c.Create(ctx, db))
	waitDatabase(t, c, db, "Ready", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, dbv1.PhaseReady, d.Status.Phase)
	})
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), db))
		db.Spec.Image = "postgres:18.0"
		return c.Update(ctx, db)
	}))

	// Killed while the backup runs: the same DatabaseBackup and Job. The
	// backup is asked for once the fence Job (which kwok completes) has
	// fenced the app's writes.
	waitDatabase(t, c, db, "backing up", upgradeAt(dbv1.UpgradeBackingUp))
	var backup []dbv1.DatabaseBackup
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		backup = preUpgradeBackups(t, c, ns)
		require.Len(ct, backup, 1)
	}, time.Minute, 200*time.Millisecond, "the pre-upgrade backup after the fence")
	job := backupJob(t, c, ns, db.Name)
	op = restartAfterKill(t, op, rendered, ns)
	assert.Equal(t, job.UID, backupJob(t, c, ns, db.Name).UID, "the restarted operator replaced the pre-upgrade backup's Job")
	assert.Len(t, preUpgradeBackups(t, c, ns), 1, "the restarted operator asked for a second pre-upgrade backup")

	// Killed while the server stops: the primary's pod is held in
	// Terminating by a finalizer of the test's, and no new pod may start
	// (the upgrade Job's and the new version's wait), so each step lasts
	// until the test moves it on.
	primary := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.Name + "-0"}}
	holdPod(t, c, primary)
	succeededPod(t, c, job)
	quota := testenv.PodQuota(t, c, ns, 0)
	reportBackupDone(t, c, job, "17.6", backup[0].Name, 4096)
	waitDatabase(t, c, db, "scaling down", upgradeAt(dbv1.UpgradeScalingDown))
	op = restartAfterKill(t, op, rendered, ns)
	waitDatabase(t, c, db, "still scaling down", upgradeAt(dbv1.UpgradeScalingDown))
	assert.Empty(t, upgradeJobs(t, c, ns), "an upgrade Job while the old server still runs")
	releasePod(t, c, primary)

	// Killed while the upgrade Job runs: the same Job.
	waitDatabase(t, c, db, "running the upgrade Job", upgradeAt(dbv1.UpgradeRunningJob))
	upgrade := upgradeJobs(t, c, ns)
	require.Len(t, upgrade, 1)
	op = restartAfterKill(t, op, rendered, ns)
	if again := upgradeJobs(t, c, ns); assert.Len(t, again, 1, "a second upgrade Job") {
		assert.Equal(t, upgrade[0].UID, again[0].UID, "the restarted operator replaced the upgrade Job")
	}

	// Killed while the new version starts: it keeps waiting for it.
	testenv.CompleteJob(t, c, &upgrade[0])
	waitDatabase(t, c, db, "starting 18.0", upgradeAt(dbv1.UpgradeStartingNewVersion))
	op = restartAfterKill(t, op, rendered, ns)
	waitDatabase(t, c, db, "still starting 18.0", upgradeAt(dbv1.UpgradeStartingNewVersion))
	require.NoError(t, c.Delete(ctx, quota))

	// 18.0 serves; the old data directory is kept until the user says so.
	waitDatabase(t, c, db, "upgraded, old data kept", func(ct *assert.CollectT, d *dbv1.Database) {
		upgradeAt(dbv1.UpgradeOldDataKept)(ct, d)
		require.Equal(ct, dbv1.PhaseReady, d.Status.Phase)
	})
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), db))
		metav1.SetMetaDataAnnotation(&db.ObjectMeta, database.AnnotationRemoveOldData, "true")
		return c.Update(ctx, db)
	}))
	cur := waitDatabase(t, c, db, "upgraded and Ready", func(ct *assert.CollectT, d *dbv1.Database) {
		upgradeAt(dbv1.UpgradeCompleted)(ct, d)
		require.Equal(ct, dbv1.PhaseReady, d.Status.Phase)
	})
	assert.Equal(t, "18.0", cur.Status.CurrentVersion)
	if jobs := upgradeJobs(t, c, ns); assert.Len(t, jobs, 1, "one upgrade Job") {
		assert.Equal(t, upgrade[0].UID, jobs[0].UID)
	}
	backups := preUpgradeBackups(t, c, ns)
	require.Len(t, backups, 1)
	assert.Equal(t, dbv1.BackupCompleted, backups[0].Status.Phase)
	assert.Empty(t, op.Failures())
	t.Logf("RESULT Database-upgrade-killed: operator SIGKILLed four times during the upgrade from 17.6 to 18.0 (while its backup ran, while the server stopped, while the upgrade Job ran, while 18.0 started); each restarted operator took the upgrade up at its step, with the same DatabaseBackup %s, backup Job and upgrade Job %s (same UIDs): 18.0 running, Ready",
		backup[0].Name, upgrade[0].Name)
}

// restartAfterKill SIGKILLs the operator, which must have logged no
// failure until then, and starts a new one, which it gives a moment to act
// on what it finds.
func restartAfterKill(t *testing.T, op *e2e.HostOperator, rendered *e2e.Rendered, ns string) *e2e.HostOperator {
	t.Helper()
	assert.Empty(t, op.Failures(), "before the kill")
	op.Kill(t)
	again := e2e.RunOperatorAsChart(t, rendered, ns)
	again.WaitReady(t)
	time.Sleep(2 * time.Second)
	return again
}

const testFinalizer = "test.deckhand.dev/hold"

// holdPod keeps the pod, once deleted, in Terminating until releasePod.
func holdPod(t *testing.T, c client.Client, pod *corev1.Pod) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		controllerutil.AddFinalizer(pod, testFinalizer)
		return c.Update(context.Background(), pod)
	}))
}

func releasePod(t *testing.T, c client.Client, pod *corev1.Pod) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return client.IgnoreNotFound(err)
		}
		controllerutil.RemoveFinalizer(pod, testFinalizer)
		return c.Update(context.Background(), pod)
	}))
}

func upgradeJobs(t *testing.T, c client.Client, ns string) []batchv1.Job {
	t.Helper()
	var jobs batchv1.JobList
	require.NoError(t, c.List(context.Background(), &jobs, client.InNamespace(ns), client.MatchingLabels{database.LabelComponent: "upgrade"}))
	return jobs.Items
}

func waitDatabase(t *testing.T, c client.Client, db *dbv1.Database, what string, check func(*assert.CollectT, *dbv1.Database)) *dbv1.Database {
	t.Helper()
	cur := &dbv1.Database{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(db), cur))
		check(ct, cur)
	}, 2*time.Minute, 200*time.Millisecond, "Database %s never %s", db.Name, what)
	return cur
}

func upgradeAt(step dbv1.UpgradeStep) func(*assert.CollectT, *dbv1.Database) {
	return func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotNil(ct, d.Status.Upgrade, "conditions: %+v", d.Status.Conditions)
		require.Equal(ct, step, d.Status.Upgrade.Step, "conditions: %+v", d.Status.Conditions)
	}
}

// preUpgradeBackups are the DatabaseBackups the operator made for an upgrade.
func preUpgradeBackups(t *testing.T, c client.Client, ns string) []dbv1.DatabaseBackup {
	t.Helper()
	var list dbv1.DatabaseBackupList
	require.NoError(t, c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{database.LabelBackupReason: "pre-upgrade"}))
	return list.Items
}
