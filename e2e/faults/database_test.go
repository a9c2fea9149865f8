package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/e2e"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// The operator SIGKILLed while a backup runs, and started again: the new
// process takes up the backup's Job where it is (one Job, never a second
// one beside it), records the backup once, and a backup asked for in the
// meantime waits its turn.
func TestOperatorKilledMidBackupTheBackupCompletesOnceAndNeverRunsTwice(t *testing.T) {
	c, ns, rendered := release(t, "leaderElection.enabled=false",
		"controllers.configMonitor.enabled=false", "controllers.database.enabled=true")
	op := e2e.RunOperatorAsChart(t, rendered, ns)
	op.WaitReady(t)
	ctx := context.Background()

	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
		Spec:       dbv1.DatabaseSpec{Name: "shop", Port: 5432, StorageSize: "1Gi", Replicas: 1, Image: "postgres:17.6"},
	}
	require.NoError(t, c.Create(ctx, db))
	waitDatabasePhase(t, c, db, dbv1.PhaseReady)

	require.NoError(t, c.Create(ctx, backupOf(ns, "first", "shop")))
	first := waitBackupPhase(t, c, ns, "first", dbv1.BackupRunning)
	job := backupJob(t, c, ns, "shop")

	op.Kill(t)
	// Asked for while no operator runs: it must wait for the first.
	require.NoError(t, c.Create(ctx, backupOf(ns, "second", "shop")))
	again := e2e.RunOperatorAsChart(t, rendered, ns)
	again.WaitReady(t)

	second := waitBackupPhase(t, c, ns, "second", dbv1.BackupPending)
	assert.Contains(t, second.Status.Conditions[0].Message, "one backup at a time")
	assert.Equal(t, job.UID, backupJob(t, c, ns, "shop").UID, "the restarted operator replaced the running backup's Job")

	reportBackupDone(t, c, job, "first", 4096)
	done := waitBackupPhase(t, c, ns, "first", dbv1.BackupCompleted)
	assert.Equal(t, first.Status.StartTime, done.Status.StartTime, "the backup was started again")
	assert.Equal(t, int64(4096), done.Status.Size)
	waitBackupPhase(t, c, ns, "second", dbv1.BackupRunning)
	assert.Empty(t, again.Failures())
	t.Logf("RESULT database-backup-killed: operator SIGKILLed while backup %q ran (Job %s); the restarted operator kept that Job (same UID), recorded the backup once (Completed, %d bytes), and held the backup asked for meanwhile Pending until then",
		"first", job.Name, done.Status.Size)
}

func backupOf(ns, name, database string) *dbv1.DatabaseBackup {
	return &dbv1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: dbv1.DatabaseBackupSpec{Database: database}}
}

func waitDatabasePhase(t *testing.T, c client.Client, db *dbv1.Database, phase dbv1.Phase) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var cur dbv1.Database
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(db), &cur))
		require.Equal(ct, phase, cur.Status.Phase, "conditions: %+v", cur.Status.Conditions)
	}, 2*time.Minute, 200*time.Millisecond)
}

func waitBackupPhase(t *testing.T, c client.Client, ns, name string, phase dbv1.BackupPhase) *dbv1.DatabaseBackup {
	t.Helper()
	var cur dbv1.DatabaseBackup
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cur))
		require.Equal(ct, phase, cur.Status.Phase, "conditions: %+v", cur.Status.Conditions)
	}, time.Minute, 200*time.Millisecond, "DatabaseBackup %s never %s", name, phase)
	return &cur
}

// backupJob is the Database's backup Job: there is one name for it, so
// two cannot run at once.
func backupJob(t *testing.T, c client.Client, ns, database string) *batchv1.Job {
	t.Helper()
	var job batchv1.Job
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: database + "-backup"}, &job))
	}, time.Minute, 200*time.Millisecond)
	return &job
}

// reportBackupDone writes what backup.sh writes into the termination
// message of the Job's succeeded pod (kwok writes none).
func reportBackupDone(t *testing.T, c client.Client, job *batchv1.Job, backup string, size int64) {
	t.Helper()
	message := fmt.Sprintf(`{"serverVersion":"17.6","file":"%s.dump","size":%d,"sha256":"%064x"}`, backup, size, size)
	var pod corev1.Pod
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var pods corev1.PodList
		require.NoError(ct, c.List(context.Background(), &pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}))
		found := false
		for _, p := range pods.Items {
			if metav1.IsControlledBy(&p, job) && p.Status.Phase == corev1.PodSucceeded && len(p.Status.ContainerStatuses) == 1 {
				pod, found = p, true
			}
		}
		require.True(ct, found, "no succeeded pod of Job %s", job.Name)
	}, time.Minute, 200*time.Millisecond)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(&pod), &pod); err != nil {
			return err
		}
		pod.Status.ContainerStatuses[0].State.Terminated.Message = message
		return c.Status().Update(context.Background(), &pod)
	}))
}
