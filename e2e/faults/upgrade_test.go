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

	"github.com/deckhand-dev/deckhand/e2e"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// The operator SIGKILLed while a major upgrade takes its backup, and
// started again: the new process takes the upgrade up where it is (the
// same pre-upgrade DatabaseBackup and Job, never a second of either), then
// finishes it once: one upgrade Job, the new version running.
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
	waitDatabase(t, c, db, "backing up", upgradeAt(dbv1.UpgradeBackingUp))
	backup := preUpgradeBackups(t, c, ns)
	require.Len(t, backup, 1)
	job := backupJob(t, c, ns, db.Name)

	op.Kill(t)
	again := e2e.RunOperatorAsChart(t, rendered, ns)
	again.WaitReady(t)
	// The new process has read everything by now; give it a moment to act.
	time.Sleep(2 * time.Second)
	assert.Equal(t, job.UID, backupJob(t, c, ns, db.Name).UID, "the restarted operator replaced the pre-upgrade backup's Job")
	assert.Len(t, preUpgradeBackups(t, c, ns), 1, "the restarted operator asked for a second pre-upgrade backup")

	reportBackupDone(t, c, job, "17.6", backup[0].Name, 4096)
	cur := waitDatabase(t, c, db, "upgraded and Ready", func(ct *assert.CollectT, d *dbv1.Database) {
		upgradeAt(dbv1.UpgradeCompleted)(ct, d)
		require.Equal(ct, dbv1.PhaseReady, d.Status.Phase)
	})
	assert.Equal(t, "18.0", cur.Status.CurrentVersion)
	var jobs batchv1.JobList
	require.NoError(t, c.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{database.LabelComponent: "upgrade"}))
	assert.Len(t, jobs.Items, 1, "one upgrade Job")
	backups := preUpgradeBackups(t, c, ns)
	require.Len(t, backups, 1)
	assert.Equal(t, dbv1.BackupCompleted, backups[0].Status.Phase)
	assert.Empty(t, again.Failures())
	t.Logf("RESULT Database-upgrade-killed: operator SIGKILLed while the upgrade from 17.6 to 18.0 took its backup (DatabaseBackup %s, Job %s); the restarted operator kept that backup and Job (same UID), then finished the upgrade with one upgrade Job: 18.0 running, Ready",
		backup[0].Name, job.Name)
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
