package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/deckhand-dev/deckhand/e2e"
)

// databaseKind is one of the two APIs on the shared database code: its
// toggle, a cluster of one primary, a backup of it, and its phase names.
type databaseKind struct {
	toggle                    string
	cluster                   string // YAML, namespace-free; may hold several documents
	clusterKind, backupKind   string
	backupAPIVersion          string
	backupOf                  string // the backup's spec field naming the cluster
	running, waiting, success string
	serverVersion             string
}

var databaseKinds = map[string]databaseKind{
	"Database": {
		toggle: "controllers.database.enabled=true",
		cluster: `apiVersion: stable.imaginedata.co/v1
kind: Database
metadata: {name: shop}
spec: {name: shop, port: 5432, storage-size: 1Gi, replicas: 1, image: "postgres:17.6"}`,
		clusterKind: "Database", backupKind: "DatabaseBackup", backupAPIVersion: "stable.imaginedata.co/v1", backupOf: "database",
		running: "Running", waiting: "Pending", success: "Completed", serverVersion: "17.6",
	},
	"MySQLCluster": {
		toggle: "controllers.mysqlCluster.enabled=true",
		cluster: `apiVersion: cr.mysqloperator.grtl.github.com/v1
kind: MySQLCluster
metadata: {name: shop}
spec: {secret: shop-root, port: 3306, replicas: 1, storage: 1Gi, image: "mysql:8.4.8"}`,
		clusterKind: "MySQLCluster", backupKind: "MySQLBackupInstance", backupAPIVersion: "cr.mysqloperator.grtl.github.com/v1", backupOf: "cluster",
		running: "Started", waiting: "Scheduled", success: "Completed", serverVersion: "8.4.8",
	},
}

// The operator SIGKILLed while a backup runs, and started again: the new
// process takes up the backup's Job where it is (one Job, never a second
// one beside it), records the backup once, and a backup asked for in the
// meantime waits its turn. For both APIs on the shared database code.
func operatorKilledMidBackup(t *testing.T) {
	for name, k := range databaseKinds {
		t.Run(name, func(t *testing.T) { killMidBackup(t, k) })
	}
}

func killMidBackup(t *testing.T, k databaseKind) {
	c, ns, rendered := release(t, "leaderElection.enabled=false", "controllers.configMonitor.enabled=false", k.toggle)
	op := e2e.RunOperatorAsChart(t, rendered, ns)
	op.WaitReady(t)

	var cluster unstructured.Unstructured
	require.NoError(t, yaml.Unmarshal([]byte(k.cluster), &cluster.Object))
	cluster.SetNamespace(ns)
	require.NoError(t, c.Create(context.Background(), &cluster))
	waitPhase(t, c, &cluster, "Ready")

	first := createBackup(t, c, k, ns, "first")
	waitPhase(t, c, first, k.running)
	started := statusField(t, c, first, "startTime")
	job := backupJob(t, c, ns, cluster.GetName())

	op.Kill(t)
	// Asked for while no operator runs: it must wait for the first.
	second := createBackup(t, c, k, ns, "second")
	again := e2e.RunOperatorAsChart(t, rendered, ns)
	again.WaitReady(t)

	waitPhase(t, c, second, k.waiting)
	assert.Equal(t, job.UID, backupJob(t, c, ns, cluster.GetName()).UID, "the restarted operator replaced the running backup's Job")

	reportBackupDone(t, c, job, k.serverVersion, "first", 4096)
	waitPhase(t, c, first, k.success)
	assert.Equal(t, started, statusField(t, c, first, "startTime"), "the backup was started again")
	assert.Equal(t, "4096", statusField(t, c, first, "size"))
	waitPhase(t, c, second, k.running)
	assert.Empty(t, again.Failures())
	t.Logf("RESULT %s-backup-killed: operator SIGKILLed while %s %q ran (Job %s); the restarted operator kept that Job (same UID), recorded the backup once (%s, 4096 bytes), and held the backup asked for meanwhile %s until then",
		k.clusterKind, k.backupKind, "first", job.Name, k.success, k.waiting)
}

func createBackup(t *testing.T, c client.Client, k databaseKind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	b := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": k.backupAPIVersion, "kind": k.backupKind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{k.backupOf: "shop"},
	}}
	require.NoError(t, c.Create(context.Background(), b))
	return b
}

// statusField is status.<field> of obj, as a string ("" when absent).
func statusField(t require.TestingT, c client.Client, obj *unstructured.Unstructured, field string) string {
	cur := obj.DeepCopy()
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(obj), cur))
	v, _, _ := unstructured.NestedFieldNoCopy(cur.Object, "status", field)
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func waitPhase(t *testing.T, c client.Client, obj *unstructured.Unstructured, phase string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.Equal(ct, phase, statusField(ct, c, obj, "phase"))
	}, 2*time.Minute, 200*time.Millisecond, "%s %s never %s", obj.GetKind(), obj.GetName(), phase)
}

// backupJob is the cluster's backup Job: there is one name for it, so
// two cannot run at once.
func backupJob(t *testing.T, c client.Client, ns, cluster string) *batchv1.Job {
	t.Helper()
	var job batchv1.Job
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: cluster + "-backup"}, &job))
	}, time.Minute, 200*time.Millisecond)
	return &job
}

// reportBackupDone writes what the backup script writes into the
// termination message of the Job's succeeded pod (kwok writes none).
func reportBackupDone(t *testing.T, c client.Client, job *batchv1.Job, version, backup string, size int64) {
	t.Helper()
	// The file the Job was asked to write: it names the backup's UID, and
	// a report of another file fails the backup.
	var file string
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "BACKUP_FILE" {
			file = e.Value
		}
	}
	require.True(t, strings.HasPrefix(file, backup+"-"), "Job %s writes %q, not a file of %s", job.Name, file, backup)
	message := fmt.Sprintf(`{"serverVersion":%q,"file":%q,"size":%d,"sha256":"%064x"}`, version, file, size, size)
	pod := succeededPod(t, c, job)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status.ContainerStatuses[0].State.Terminated.Message = message
		return c.Status().Update(context.Background(), pod)
	}))
}

// succeededPod waits for the Job's pod to succeed (kwok runs it at once).
func succeededPod(t *testing.T, c client.Client, job *batchv1.Job) *corev1.Pod {
	t.Helper()
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
	return &pod
}
