package database

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// Every Job that mounts a ReadWriteOnce backup claim (backup,
// verification, restore, upgrade and its rollback) runs on the node of
// any other pod mounting it: a second node could never mount it, and the
// Job would wait there until its deadline.
func TestEveryJobMountingTheBackupClaimJoinsItsOtherUsersNode(t *testing.T) {
	eng := DatabaseKind.Engines[dbv1.EnginePostgreSQL]
	db := &Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "db-uid"},
		Kind:       DatabaseKind,
		Spec:       dbv1.DatabaseSpec{Name: "app", Port: 5432, StorageSize: "1Gi", Replicas: 1, Image: "postgres:15.4", Engine: dbv1.EnginePostgreSQL},
		Status: dbv1.DatabaseStatus{Upgrade: &dbv1.UpgradeStatus{
			Attempt: "a1", FromImage: "postgres:15.4", FromVersion: "15.4", ToImage: "postgres:16.1", ToVersion: "16.1",
		}},
	}
	b := &Backup{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "b-uid"},
		Cluster:    "db",
		Status:     dbv1.DatabaseBackupStatus{Phase: dbv1.BackupCompleted, ClaimName: "other-backup", File: "b.dump", SHA256: "00"},
	}
	verifier := eng.(engine.Verifier)
	jobs := map[string]*batchv1.Job{
		"backup":   backupJob(db, eng, b, "postgres:15.4", engine.Backup{File: "b.dump", Host: "db-rw", ClaimName: "other-backup"}),
		"verify":   verifyJob(db, verifier, b, verifySettingsOf(db)),
		"restore":  restoreJob(db, eng, b),
		"upgrade":  upgradeJob(db, eng, b, false),
		"rollback": upgradeJob(db, eng, b, true),
	}
	key := backupClaimLabel(DatabaseKind)
	for name, job := range jobs {
		tpl := job.Spec.Template
		require.Equal(t, "other-backup", backupClaimOf(job), "%s: mounts the backup claim", name)
		assert.Equal(t, "other-backup", tpl.Labels[key], "%s: says which backup claim it mounts", name)
		require.NotNil(t, tpl.Spec.Affinity, name)
		require.NotNil(t, tpl.Spec.Affinity.PodAffinity, name)
		assert.Contains(t, tpl.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: "other-backup"}},
			TopologyKey:   corev1.LabelHostname,
		}, "%s: joins the claim's other users", name)
	}
}
