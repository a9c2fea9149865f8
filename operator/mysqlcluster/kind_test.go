package mysqlcluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

func TestAMySQLClusterIsACoreClusterWithTheMySQLEngine(t *testing.T) {
	mc := &grtlv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "my-cluster", Namespace: "ns"},
		Spec: grtlv1.MySQLClusterSpec{Secret: "my-secret", FromBackup: "b", Port: 3306, Replicas: 2, Storage: "1Gi",
			Image: "mariadb:11.4", DeletionPolicy: grtlv1.DeletionRetain},
	}
	c := Kind.Clusters.View(mc)
	assert.Equal(t, EngineMySQL, c.Spec.Engine)
	assert.Equal(t, "1Gi", c.Spec.StorageSize)
	assert.Equal(t, dbv1.DeletionRetain, c.Spec.DeletionPolicy)
	assert.Empty(t, c.Spec.Name, "no app database: root only, as grtl's")
	assert.Equal(t, database.ClusterSecrets{Superuser: "my-secret", SuperuserNamedByUser: true, Replication: "my-cluster-replication"}, c.Secrets)

	c.Status.Phase = dbv1.PhaseDegraded
	c.Status.Conditions = []metav1.Condition{{Type: "Restored", Status: metav1.ConditionFalse, Reason: "BackupNotFound",
		Message: "DatabaseBackup b (spec.fromBackup) does not exist; storage-size is 1Gi; the Database waits"}}
	Kind.Clusters.SetStatus(mc, c)
	assert.Equal(t, grtlv1.PhaseDegraded, mc.Status.Phase)
	assert.Equal(t, "MariaDB", mc.Status.Flavor)
	assert.Equal(t, "MySQLBackupInstance b (spec.fromBackup) does not exist; storage is 1Gi; the MySQLCluster waits", mc.Status.Conditions[0].Message)
	assert.Equal(t, "DatabaseBackup b (spec.fromBackup) does not exist; storage-size is 1Gi; the Database waits", c.Status.Conditions[0].Message,
		"the core's own copy is left as it was")
}

// A MySQLCluster's scheduling fields are a Database's podTemplate ones,
// which the core applies to the servers and to every Job.
func TestAMySQLClustersNodeSelectorAndTolerationsPlaceItsPods(t *testing.T) {
	toleration := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}
	mc := &grtlv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "my-cluster", Namespace: "ns"},
		Spec: grtlv1.MySQLClusterSpec{Secret: "my-secret", Storage: "1Gi", RunAsUser: ptr.To(int64(1001)),
			NodeSelector: map[string]grtlv1.NodeLabelValue{"disktype": "ssd"}, Tolerations: []corev1.Toleration{toleration}},
	}
	c := Kind.Clusters.View(mc)
	assert.Equal(t, &dbv1.PodTemplate{
		NodeSelector: map[string]dbv1.LabelValue{"disktype": "ssd"}, Tolerations: []corev1.Toleration{toleration}, RunAsUser: ptr.To(int64(1001)),
	}, c.Spec.PodTemplate)
}

func TestGrtlsBackupPhasesMapOntoTheCoresBothWays(t *testing.T) {
	for grtl, core := range map[grtlv1.BackupPhase]dbv1.BackupPhase{
		grtlv1.BackupScheduled: dbv1.BackupPending, grtlv1.BackupStarted: dbv1.BackupRunning,
		grtlv1.BackupCompleted: dbv1.BackupCompleted, grtlv1.BackupFailed: dbv1.BackupFailed,
	} {
		b := &grtlv1.MySQLBackupInstance{Spec: grtlv1.MySQLBackupInstanceSpec{Cluster: "c", Schedule: "s"}, Status: grtlv1.MySQLBackupInstanceStatus{Phase: grtl, Size: 7}}
		v := Kind.Backups.View(b)
		assert.Equal(t, core, v.Status.Phase)
		assert.Equal(t, "c", v.Cluster)
		assert.Equal(t, "s", v.Schedule)
		b.Status = grtlv1.MySQLBackupInstanceStatus{}
		Kind.Backups.SetStatus(b, v)
		assert.Equal(t, grtl, b.Status.Phase)
		assert.Equal(t, int64(7), b.Status.Size)
	}
}

func TestItsKeysAreNotTheDatabases(t *testing.T) {
	assert.Equal(t, "cr.mysqloperator.grtl.github.com/cluster", Keys.Cluster)
	assert.NotEqual(t, database.DatabaseKind.Keys.Cluster, Keys.Cluster)
	assert.NotEqual(t, database.DatabaseKind.Keys.FinalizerDeletionPolicy, Keys.FinalizerDeletionPolicy)
}
