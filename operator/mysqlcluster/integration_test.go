package mysqlcluster_test

import (
	"context"
	"fmt"
	"path/filepath"
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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/mysqlcluster"
)

// wait bounds how long a test waits for the cluster to get somewhere. It is
// a ceiling, not an expectation: under make test's peak load a three-pod
// StatefulSet's ordered start has taken 15 s to reach its last claim, and a
// 30 s ceiling failed the seed sample's rollout once.
const wait = 60 * time.Second

// startOperator runs the MySQLCluster controller alone (the Database
// controller off) for one namespace, as a ServiceAccount with the chart's
// RBAC for it only. now, when set, is the schedules' clock.
func startOperator(t *testing.T, ns string, now func() time.Time) {
	t.Helper()
	startOperatorWith(t, ns, mysqlcluster.Options{Now: now})
}

// startOperatorWith is startOperator with options (WatchNamespaces is
// the namespace's).
func startOperatorWith(t *testing.T, ns string, o mysqlcluster.Options) {
	t.Helper()
	o.WatchNamespaces = []string{ns}
	testenv.StartController(t, testenv.ChartRBACConfig(t, ns, mysqlcluster.Name), func(m ctrl.Manager) error {
		return mysqlcluster.Setup(m, o)
	}, ns)
	testenv.ReleaseNamespaceOnCleanup(t, ns, &grtlv1.MySQLClusterList{}, &grtlv1.MySQLBackupInstanceList{})
}

// newCluster is a MySQLCluster for the kwok tests, its backups not
// verified (spec.backup.verify.mode Off): kwok ends every Job pod with no
// termination message, so a verification there could only end NoReport,
// a Warning and a Job of its own in the middle of a test about something
// else. Verification is proven where its Job really runs (e2e_verify_test.go,
// with the host's MariaDB).
func newCluster(ns, name, secret string, replicas int32) *grtlv1.MySQLCluster {
	return &grtlv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: grtlv1.MySQLClusterSpec{Secret: secret, Port: 3306, Replicas: replicas, Storage: "1Gi", Image: "mysql:8.4.8",
			Backup: &grtlv1.ClusterBackup{Verify: &dbv1.BackupVerify{Mode: dbv1.VerifyOff}}},
	}
}

func get[T client.Object](t *testing.T, c client.Client, ns, name string, obj T) T {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj))
	}, wait, 100*time.Millisecond, "%T %s/%s never appeared", obj, ns, name)
	return obj
}

func waitFor(t *testing.T, c client.Client, ns, name, what string, check func(*assert.CollectT, *grtlv1.MySQLCluster)) *grtlv1.MySQLCluster {
	t.Helper()
	var cur grtlv1.MySQLCluster
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cur))
		check(ct, &cur)
	}, wait, 100*time.Millisecond, "MySQLCluster %s: %s", name, what)
	return &cur
}

func waitForBackup(t *testing.T, c client.Client, ns, name, what string, check func(*assert.CollectT, *grtlv1.MySQLBackupInstance)) *grtlv1.MySQLBackupInstance {
	t.Helper()
	var cur grtlv1.MySQLBackupInstance
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cur))
		check(ct, &cur)
	}, wait, 100*time.Millisecond, "MySQLBackupInstance %s: %s", name, what)
	return &cur
}

func condition(conds []metav1.Condition, kind string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, kind); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func ready(ct *assert.CollectT, mc *grtlv1.MySQLCluster) {
	require.Equal(ct, grtlv1.PhaseReady, mc.Status.Phase, "conditions: %+v", mc.Status.Conditions)
	require.Equal(ct, metav1.ConditionTrue, condition(mc.Status.Conditions, database.ConditionReady).Status)
}

// waitEvents waits until Events of the kind with every one of the reasons
// exist about the named object, and returns them (reason to note): the
// operator records Events after it writes status, so a test that just saw
// the status may not see the Event yet.
func waitEvents(t *testing.T, c client.Client, ns, name, kind string, reasons ...string) map[string]string {
	t.Helper()
	var out map[string]string
	assert.EventuallyWithT(t, func(ct *assert.CollectT) {
		out = events(ct, c, ns, name, kind)
		for _, r := range reasons {
			require.Contains(ct, out, r)
		}
	}, 30*time.Second, 200*time.Millisecond, "%s Events %v about %s", kind, reasons, name)
	return out
}

func events(t require.TestingT, c client.Client, ns, name, kind string) map[string]string {
	var evs eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &evs, client.InNamespace(ns)))
	out := map[string]string{}
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Type == kind {
			out[e.Reason] = e.Note
		}
	}
	return out
}

// reportJob writes the report a Job's script writes into the termination
// message of its pod (kwok writes none), once kwok has completed it.
func reportJob(t *testing.T, c client.Client, ns, job, message string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var pods corev1.PodList
		require.NoError(ct, c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"batch.kubernetes.io/job-name": job}))
		require.NotEmpty(ct, pods.Items)
		pod := &pods.Items[0]
		require.Equal(ct, corev1.PodSucceeded, pod.Status.Phase)
		require.NotEmpty(ct, pod.Status.ContainerStatuses)
		require.NotNil(ct, pod.Status.ContainerStatuses[0].State.Terminated)
		require.NoError(ct, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
				return err
			}
			pod.Status.ContainerStatuses[0].State.Terminated.Message = message
			return c.Status().Update(context.Background(), pod)
		}))
	}, wait, 200*time.Millisecond, "pod of Job %s", job)
}

// completeBackup reports the backup Job of cluster as backup.sh would for
// backup, and waits until the instance is Completed.
func completeBackup(t *testing.T, c client.Client, ns, cluster, backup string, size int64) *grtlv1.MySQLBackupInstance {
	t.Helper()
	var job batchv1.Job
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: cluster + "-backup"}, &job))
		owner := metav1.GetControllerOf(&job)
		require.NotNil(ct, owner)
		require.Equal(ct, "MySQLBackupInstance", owner.Kind)
		require.Equal(ct, backup, owner.Name)
	}, wait, 100*time.Millisecond, "backup Job of %s", backup)
	sum := fmt.Sprintf("%064x", size)
	var file string
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "BACKUP_FILE" {
			file = e.Value // it names the instance's UID
		}
	}
	reportJob(t, c, ns, cluster+"-backup", fmt.Sprintf(`{"serverVersion":"8.4.8","file":"%s","size":%d,"sha256":"%s"}`, file, size, sum))
	return waitForBackup(t, c, ns, backup, "Completed", func(ct *assert.CollectT, b *grtlv1.MySQLBackupInstance) {
		require.Equal(ct, grtlv1.BackupCompleted, b.Status.Phase, "conditions: %+v", b.Status.Conditions)
	})
}

// The seed's example, verbatim: it applies, runs, and says what is wrong
// with it (mysql:latest is not pinned; its fromBackup does not exist)
// instead of becoming an empty cluster that looks restored.
func TestSeedExampleIsAcceptedAndReportedTruthfully(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns, nil)

	example := filepath.Join(testenv.Root(t), "examples", "mysqlcluster.yaml")
	out, err := testenv.Kubectl(t, "-n", ns, "apply", "-f", example)
	require.NoError(t, err, out)
	assert.Contains(t, out, "mysqlcluster.cr.mysqloperator.grtl.github.com/my-cluster created")

	mc := waitFor(t, c, ns, "my-cluster", "waiting for its backup", func(ct *assert.CollectT, mc *grtlv1.MySQLCluster) {
		require.Equal(ct, "BackupNotFound", condition(mc.Status.Conditions, database.ConditionRestored).Reason)
		require.Equal(ct, "2/2", mc.Status.Ready, "kwok runs both servers")
		require.Equal(ct, "ImageNotPinned", condition(mc.Status.Conditions, database.ConditionVersionKnown).Reason)
	})
	restored := condition(mc.Status.Conditions, database.ConditionRestored)
	assert.Contains(t, restored.Message, "MySQLBackupInstance my-backup-2017-12-14-01-22 (spec.fromBackup) does not exist")
	assert.NotContains(t, restored.Message, "Database", "the messages speak of MySQLClusters")
	rdy := condition(mc.Status.Conditions, database.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, rdy.Status)
	assert.Contains(t, rdy.Message, "my-backup-2017-12-14-01-22")
	assert.Equal(t, grtlv1.PhaseDegraded, mc.Status.Phase)
	assert.Equal(t, metav1.ConditionFalse, condition(mc.Status.Conditions, database.ConditionVersionKnown).Status)
	assert.Contains(t, condition(mc.Status.Conditions, database.ConditionVersionKnown).Message, "mysql:latest is not pinned")
	assert.Empty(t, mc.Status.CurrentVersion)
	assert.Equal(t, "MySQL", mc.Status.Flavor)
	assert.Equal(t, "my-cluster-0", mc.Status.Primary)
	assert.Equal(t, mc.Generation, mc.Status.ObservedGeneration)

	waitEvents(t, c, ns, "my-cluster", corev1.EventTypeWarning, "BackupNotFound", "ImageNotPinned")

	// Nothing pretends to be restored: no restore Job, no init Job.
	for _, job := range []string{"my-cluster-restore", "my-cluster-init"} {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: job}, &batchv1.Job{})
		assert.True(t, apierrors.IsNotFound(err), "Job %s: %v", job, err)
	}

	sts := get(t, c, ns, "my-cluster", &appsv1.StatefulSet{})
	assert.Equal(t, int32(2), *sts.Spec.Replicas)
	assert.Equal(t, "mysql:latest", sts.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, "my-cluster", sts.Labels[mysqlcluster.Keys.Cluster])
	assert.NotContains(t, sts.Labels, database.LabelDatabase, "the Database controller's cache never sees it")
	assert.Equal(t, "1Gi", ptr.To(sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]).String())
	env := map[string]corev1.EnvVar{}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	assert.Equal(t, "my-secret", env["MYSQL_PWD"].ValueFrom.SecretKeyRef.Name, "root's password from the user's Secret")
	assert.Equal(t, "password", env["MYSQL_PWD"].ValueFrom.SecretKeyRef.Key)
	assert.Equal(t, "my-cluster-replication", env["REPLICATION_PASSWORD"].ValueFrom.SecretKeyRef.Name)

	// The user's Secret is used as it is: not taken over.
	secret := get(t, c, ns, "my-secret", &corev1.Secret{})
	assert.Empty(t, secret.OwnerReferences)
	repl := get(t, c, ns, "my-cluster-replication", &corev1.Secret{})
	assert.Len(t, repl.Data["password"], 26, "a generated password")

	for _, name := range []string{"-headless", "-rw", "-ro"} {
		svc := get(t, c, ns, "my-cluster"+name, &corev1.Service{})
		assert.Equal(t, int32(3306), svc.Spec.Ports[0].Port)
	}

	// kubectl get mysqlclusters answers the first question; kubectl get db
	// does not list it.
	out, err = testenv.Kubectl(t, "-n", ns, "get", "mc")
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	assert.Regexp(t, `^NAME\s+READY\s+STORAGE\s+PHASE\s+VERSION\s+AGE$`, lines[0])
	assert.Regexp(t, `^my-cluster\s+2/2\s+1Gi\s+Degraded\s+\S+$`, lines[1])
	out, err = testenv.Kubectl(t, "-n", ns, "get", "db")
	require.NoError(t, err, out)
	assert.Contains(t, out, "No resources found")
}

// The seed's example without fromBackup: a working cluster, and a root
// Secret made when the named one does not exist.
func TestFreshClusterReachesReadyAndGetsItsSecret(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns, nil)

	example := filepath.Join(testenv.Root(t), "examples", "mysqlcluster-fresh.yaml")
	out, err := testenv.Kubectl(t, "-n", ns, "apply", "-f", example)
	require.NoError(t, err, out)
	mc := waitFor(t, c, ns, "my-cluster", "Ready", func(ct *assert.CollectT, mc *grtlv1.MySQLCluster) {
		ready(ct, mc)
		require.Equal(ct, "2/2", mc.Status.Ready)
	})
	assert.Equal(t, metav1.ConditionTrue, condition(mc.Status.Conditions, database.ConditionInitialized).Status)
	assert.Equal(t, "ImageNotPinned", condition(mc.Status.Conditions, database.ConditionVersionKnown).Reason)

	// The server's own report reaches currentVersion; the image stays
	// unpinned.
	reportJob(t, c, ns, "my-cluster-init", `{"serverVersion":"9.1.0"}`)
	mc = waitFor(t, c, ns, "my-cluster", "version from the server", func(ct *assert.CollectT, mc *grtlv1.MySQLCluster) {
		require.Equal(ct, "9.1.0", mc.Status.CurrentVersion)
	})
	assert.Equal(t, metav1.ConditionFalse, condition(mc.Status.Conditions, database.ConditionVersionKnown).Status)
	assert.Contains(t, condition(mc.Status.Conditions, database.ConditionVersionKnown).Message, "the server reported 9.1.0")

	// The servers run as the default user, 999, since the spec names none.
	sts := get(t, c, ns, "my-cluster", &appsv1.StatefulSet{})
	assert.Equal(t, int64(999), *sts.Spec.Template.Spec.SecurityContext.RunAsUser)

	// A cluster naming a Secret that does not exist gets one; its servers
	// and Jobs run as the user its spec names.
	gen := newCluster(ns, "generated", "generated-root", 1)
	gen.Spec.RunAsUser = ptr.To(int64(1001))
	require.NoError(t, c.Create(context.Background(), gen))
	sts = get(t, c, ns, "generated", &appsv1.StatefulSet{})
	assert.Equal(t, int64(1001), *sts.Spec.Template.Spec.SecurityContext.RunAsUser)
	assert.Equal(t, int64(1001), *sts.Spec.Template.Spec.SecurityContext.FSGroup)
	gen = waitFor(t, c, ns, "generated", "Ready", ready)
	assert.Equal(t, "8.4.8", gen.Status.CurrentVersion, "from the pinned tag")
	assert.Equal(t, "FromImageTag", condition(gen.Status.Conditions, database.ConditionVersionKnown).Reason)
	secret := get(t, c, ns, "generated-root", &corev1.Secret{})
	assert.Len(t, secret.Data["password"], 26)
	assert.True(t, metav1.IsControlledBy(secret, gen), "it goes with the cluster's deletionPolicy")
	waitEvents(t, c, ns, "generated", corev1.EventTypeNormal, "Created")
}

// One operator with both controllers: each sees its own objects only, and
// a name clash is refused, not taken over.
func TestTheTwoControllersNeverSeeEachOthersObjects(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	testenv.StartController(t, testenv.ChartRBACConfig(t, ns, mysqlcluster.Name, database.Name), func(m ctrl.Manager) error {
		if err := database.Setup(m, database.Options{WatchNamespaces: []string{ns}, InstanceDial: testenv.NoPodDial}); err != nil {
			return err
		}
		return mysqlcluster.Setup(m, mysqlcluster.Options{WatchNamespaces: []string{ns}})
	}, ns)
	testenv.ReleaseNamespaceOnCleanup(t, ns, &grtlv1.MySQLClusterList{}, &grtlv1.MySQLBackupInstanceList{})
	t.Cleanup(func() { // Databases too
		_ = c.DeleteAllOf(context.Background(), &dbv1.Database{}, client.InNamespace(ns))
	})

	require.NoError(t, c.Create(context.Background(), newCluster(ns, "shop", "shop-root", 1)))
	waitFor(t, c, ns, "shop", "Ready", ready)
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
		Spec:       dbv1.DatabaseSpec{Name: "shop", Port: 5432, StorageSize: "1Gi", Replicas: 1, DeletionPolicy: dbv1.DeletionDelete},
	}
	require.NoError(t, c.Create(context.Background(), db))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(db), db))
		require.Equal(ct, dbv1.PhaseDegraded, db.Status.Phase)
		require.Contains(ct, meta.FindStatusCondition(db.Status.Conditions, database.ConditionReady).Message, "exists and is not owned by this Database")
	}, wait, 100*time.Millisecond, "the Database refuses the MySQLCluster's objects")

	sts := get(t, c, ns, "shop", &appsv1.StatefulSet{})
	assert.Equal(t, "MySQLCluster", metav1.GetControllerOf(sts).Kind)
	assert.Equal(t, "mysql:8.4.8", sts.Spec.Template.Spec.Containers[0].Image, "left as the MySQLCluster made it")
	mc := waitFor(t, c, ns, "shop", "still Ready", ready)
	assert.Equal(t, "1/1", mc.Status.Ready)

	out, err := testenv.Kubectl(t, "-n", ns, "get", "db", "-o", "name")
	require.NoError(t, err, out)
	assert.Equal(t, "database.stable.imaginedata.co/shop", strings.TrimSpace(out), "only the Database")
}

// fromBackup: the restore Job runs once the backup has completed and the
// primary is ready, before the init Job; the cluster is Ready only after.
func TestFromBackupRestoresBeforeInit(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns, nil)
	ctx := context.Background()

	require.NoError(t, c.Create(ctx, newCluster(ns, "src", "src-root", 2)))
	waitFor(t, c, ns, "src", "Ready", ready)

	// Waiting for a backup that exists but has not completed.
	dst := newCluster(ns, "dst", "dst-root", 1)
	dst.Spec.FromBackup = "nightly"
	require.NoError(t, c.Create(ctx, dst))
	waitFor(t, c, ns, "dst", "waiting for its backup", func(ct *assert.CollectT, mc *grtlv1.MySQLCluster) {
		require.Equal(ct, "BackupNotFound", condition(mc.Status.Conditions, database.ConditionRestored).Reason)
	})

	b := &grtlv1.MySQLBackupInstance{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns}, Spec: grtlv1.MySQLBackupInstanceSpec{Cluster: "src"}}
	require.NoError(t, c.Create(ctx, b))
	b = waitForBackup(t, c, ns, "nightly", "Started", func(ct *assert.CollectT, b *grtlv1.MySQLBackupInstance) {
		require.Equal(ct, grtlv1.BackupStarted, b.Status.Phase)
	})
	assert.Equal(t, "src-0", b.Status.Source, "the primary: MySQL's backup reads no replica (its lag is not measured)")
	assert.Equal(t, "mysql:8.4.8", b.Status.Image, "the cluster's own image")
	b = completeBackup(t, c, ns, "src", "nightly", 4096)
	assert.Equal(t, int64(4096), b.Status.Size)
	assert.Equal(t, fmt.Sprintf("%064x", 4096), b.Status.SHA256)
	assert.Equal(t, "8.4.8", b.Status.Version)
	assert.Equal(t, "src-backup", b.Status.ClaimName)
	assert.Equal(t, "nightly-"+string(b.UID)+".dump", b.Status.File, "the file names the instance's UID")
	claim := get(t, c, ns, "src-backup", &corev1.PersistentVolumeClaim{})
	assert.Empty(t, claim.OwnerReferences, "the backup volume outlives the cluster")

	mc := waitFor(t, c, ns, "dst", "restored and Ready", ready)
	assert.Equal(t, metav1.ConditionTrue, condition(mc.Status.Conditions, database.ConditionRestored).Status)
	restore := get(t, c, ns, "dst-restore", &batchv1.Job{})
	initJob := get(t, c, ns, "dst-init", &batchv1.Job{})
	assert.False(t, initJob.CreationTimestamp.Before(&restore.CreationTimestamp), "init after restore")
	require.NotNil(t, restore.Status.CompletionTime)
	assert.False(t, initJob.CreationTimestamp.Time.Before(restore.Status.CompletionTime.Time), "init only once the restore completed")
	envs := map[string]string{}
	for _, e := range restore.Spec.Template.Spec.Containers[0].Env {
		envs[e.Name] = e.Value
	}
	assert.Equal(t, b.Status.File, envs["BACKUP_FILE"])
	assert.Equal(t, b.Status.SHA256, envs["BACKUP_SHA256"])
}

// A schedule makes MySQLBackupInstances: one for any number of missed
// times, one Job at a time per cluster, and retention deletes the old.
func TestScheduleMakesInstancesOneAtATimeWithRetention(t *testing.T) {
	t.Parallel()
	c, ns, offset := readyClusterWithClock(t)
	ctx := context.Background()

	// Three hours missed: one backup.
	offset.Store(int64(3*time.Hour + 5*time.Minute))
	sched := &grtlv1.MySQLBackupSchedule{
		ObjectMeta: metav1.ObjectMeta{Name: "hourly", Namespace: ns},
		Spec:       grtlv1.MySQLBackupScheduleSpec{Cluster: "app", Time: "@hourly", Storage: "3Gi", Retention: &grtlv1.Retention{KeepLast: ptr.To(int32(1))}},
	}
	require.NoError(t, c.Create(ctx, sched))
	var first grtlv1.MySQLBackupInstance
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var list grtlv1.MySQLBackupInstanceList
		require.NoError(ct, c.List(ctx, &list, client.InNamespace(ns)))
		require.Len(ct, list.Items, 1)
		first = list.Items[0]
	}, wait, 100*time.Millisecond, "one catch-up backup")
	assert.Equal(t, "hourly", first.Spec.Schedule)
	assert.Equal(t, "app", first.Spec.Cluster)
	assert.Regexp(t, `^hourly-\d{8}-\d{2}00$`, first.Name)

	// A backup made by hand waits while the scheduled one runs.
	manual := &grtlv1.MySQLBackupInstance{ObjectMeta: metav1.ObjectMeta{Name: "by-hand", Namespace: ns}, Spec: grtlv1.MySQLBackupInstanceSpec{Cluster: "app"}}
	waitForBackup(t, c, ns, first.Name, "Started", func(ct *assert.CollectT, b *grtlv1.MySQLBackupInstance) {
		require.Equal(ct, grtlv1.BackupStarted, b.Status.Phase)
	})
	require.NoError(t, c.Create(ctx, manual))
	waitForBackup(t, c, ns, "by-hand", "waiting its turn", func(ct *assert.CollectT, b *grtlv1.MySQLBackupInstance) {
		require.Equal(ct, grtlv1.BackupScheduled, b.Status.Phase)
		require.Equal(ct, "WaitingForAnotherBackup", condition(b.Status.Conditions, "Completed").Reason)
	})
	completeBackup(t, c, ns, "app", first.Name, 100)
	claim := get(t, c, ns, "app-backup", &corev1.PersistentVolumeClaim{})
	assert.Equal(t, "3Gi", ptr.To(claim.Spec.Resources.Requests[corev1.ResourceStorage]).String(), "the schedule's storage")
	completeBackup(t, c, ns, "app", "by-hand", 200)

	// Two hours later: the next one, and retention (keepLast 1) deletes the
	// first; the one made by hand is not the schedule's to delete.
	offset.Store(int64(5*time.Hour + 5*time.Minute))
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(sched), sched); err != nil {
			return err
		}
		sched.Annotations = map[string]string{"poke": "1"}
		return c.Update(ctx, sched)
	}))
	var second string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var list grtlv1.MySQLBackupInstanceList
		require.NoError(ct, c.List(ctx, &list, client.InNamespace(ns)))
		require.Len(ct, list.Items, 3)
		for _, b := range list.Items {
			if b.Name != first.Name && b.Spec.Schedule == "hourly" {
				second = b.Name
			}
		}
		require.NotEmpty(ct, second)
	}, wait, 100*time.Millisecond, "the next scheduled backup")
	completeBackup(t, c, ns, "app", second, 300)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: first.Name}, &grtlv1.MySQLBackupInstance{})
		require.True(ct, apierrors.IsNotFound(err), "%v", err)
	}, wait, 200*time.Millisecond, "retention deletes the first (its file first)")
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "by-hand"}, &grtlv1.MySQLBackupInstance{}))

	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(sched), sched))
	assert.Equal(t, second, sched.Status.LastSuccessfulBackup)
	assert.Equal(t, metav1.ConditionTrue, condition(sched.Status.Conditions, mysqlcluster.ConditionLastBackupSucceeded).Status)
	assert.Equal(t, metav1.ConditionTrue, condition(sched.Status.Conditions, mysqlcluster.ConditionBackupScheduled).Status)
	require.NotNil(t, sched.Status.NextScheduleTime)
	waitEvents(t, c, ns, "app", corev1.EventTypeNormal, "BackupPruned")

	out, err := testenv.Kubectl(t, "-n", ns, "get", "mbi")
	require.NoError(t, err, out)
	assert.Regexp(t, `(?m)^NAME\s+CLUSTER\s+SCHEDULE\s+PHASE\s+SIZE\s+COMPLETED\s+AGE$`, out)
	assert.Regexp(t, `(?m)^`+second+`\s+app\s+hourly\s+Completed\s+300\s`, out)
}

// While the schedule's instance has not finished, times pass without new
// instances: they are counted in status.missedSchedules and reported.
func TestScheduleMakesNoInstanceWhileItsLastHasNotFinished(t *testing.T) {
	t.Parallel()
	c, ns, offset := readyClusterWithClock(t)
	ctx := context.Background()
	offset.Store(int64(time.Hour + 5*time.Minute))
	sched := &grtlv1.MySQLBackupSchedule{
		ObjectMeta: metav1.ObjectMeta{Name: "hourly", Namespace: ns},
		Spec:       grtlv1.MySQLBackupScheduleSpec{Cluster: "app", Time: "@hourly"},
	}
	require.NoError(t, c.Create(ctx, sched))
	instances := func(ct require.TestingT) []grtlv1.MySQLBackupInstance {
		var list grtlv1.MySQLBackupInstanceList
		require.NoError(ct, c.List(ctx, &list, client.InNamespace(ns)))
		return list.Items
	}
	var first grtlv1.MySQLBackupInstance
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		items := instances(ct)
		require.Len(ct, items, 1)
		first = items[0]
	}, wait, 100*time.Millisecond, "the first instance")
	waitForBackup(t, c, ns, first.Name, "Started", func(ct *assert.CollectT, b *grtlv1.MySQLBackupInstance) {
		require.Equal(ct, grtlv1.BackupStarted, b.Status.Phase)
	})

	for i, hours := range []time.Duration{2, 3} {
		offset.Store(int64(hours*time.Hour + 5*time.Minute))
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(sched), sched); err != nil {
				return err
			}
			sched.Annotations = map[string]string{"poke": fmt.Sprint(hours)}
			return c.Update(ctx, sched)
		}))
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(sched), sched))
			require.Equal(ct, int64(i+1), sched.Status.MissedSchedules)
		}, wait, 100*time.Millisecond, "a missed time counted")
	}
	assert.Len(t, instances(t), 1, "no instance queued behind the one that has not finished")
	assert.Contains(t, condition(sched.Status.Conditions, mysqlcluster.ConditionBackupScheduled).Message, "MySQLBackupInstance "+first.Name+" has not finished yet")
	waitEvents(t, c, ns, "hourly", corev1.EventTypeWarning, "BackupScheduleMissed")
}

// Deleting a cluster (deletionPolicy Snapshot, the default) takes a final
// backup first; the StatefulSet and volumes go after it completed, the
// backups and the user's Secret stay.
func TestDeletionTakesAFinalBackupFirst(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns, nil)
	ctx := context.Background()

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "users-root", Namespace: ns}, StringData: map[string]string{"password": "s3cret"}}
	require.NoError(t, c.Create(ctx, secret))
	mc := newCluster(ns, "gone", "users-root", 2)
	require.NoError(t, c.Create(ctx, mc))
	mc = waitFor(t, c, ns, "gone", "Ready", ready)
	require.NoError(t, c.Delete(ctx, mc))

	var final string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var list grtlv1.MySQLBackupInstanceList
		require.NoError(ct, c.List(ctx, &list, client.InNamespace(ns)))
		require.Len(ct, list.Items, 1)
		final = list.Items[0].Name
	}, wait, 100*time.Millisecond, "the final backup")
	assert.True(t, strings.HasPrefix(final, "gone-final-"), final)
	// Until it completes, the servers and their data stay.
	time.Sleep(2 * time.Second)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone"}, &appsv1.StatefulSet{}))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data-gone-0"}, &corev1.PersistentVolumeClaim{}))
	cur := waitFor(t, c, ns, "gone", "Deleting", func(ct *assert.CollectT, mc *grtlv1.MySQLCluster) {
		require.Equal(ct, grtlv1.PhaseDeleting, mc.Status.Phase)
	})
	assert.Contains(t, cur.Finalizers, mysqlcluster.Keys.FinalizerDeletionPolicy)

	completeBackup(t, c, ns, "gone", final, 1234)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone"}, &grtlv1.MySQLCluster{})
		require.True(ct, apierrors.IsNotFound(err), "%v", err)
		for _, pvc := range []string{"data-gone-0", "data-gone-1"} {
			var claim corev1.PersistentVolumeClaim
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: pvc}, &claim)
			require.True(ct, apierrors.IsNotFound(err) || !claim.DeletionTimestamp.IsZero(), "%s: %v", pvc, err)
		}
	}, wait, 200*time.Millisecond, "the cluster and its volumes go once the final backup completed")
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: final}, &grtlv1.MySQLBackupInstance{}), "the final backup stays")
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone-backup"}, &corev1.PersistentVolumeClaim{}), "and its volume")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(secret), secret))
	assert.Empty(t, secret.OwnerReferences, "the user's Secret is never touched")
}

// Bad inputs are refused at admission with messages a person understands.
func TestBadInputsAreRefusedWithReadableMessages(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	for name, tc := range map[string]struct {
		obj  client.Object
		want string
	}{
		"no replicas": {func() client.Object { m := newCluster(ns, "a", "s", 1); m.Spec.Replicas = -1; return m }(), "replicas must be at least 1 (the primary)"},
		"bad storage": {func() client.Object { m := newCluster(ns, "b", "s", 1); m.Spec.Storage = "lots"; return m }(), `storage must be a quantity such as 1Gi or 500M, not "lots"`},
		"bad time": {&grtlv1.MySQLBackupSchedule{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns},
			Spec: grtlv1.MySQLBackupScheduleSpec{Cluster: "a", Time: "every night"}}, `time must be five cron fields`},
		"node label value with a space": {func() client.Object {
			m := newCluster(ns, "f", "s", 1)
			m.Spec.NodeSelector = map[string]grtlv1.NodeLabelValue{"disktype": "fast ssd"}
			return m
		}(), `nodeSelector: "fast ssd" is not a label value`},
		"node label key with a space": {func() client.Object {
			m := newCluster(ns, "g", "s", 1)
			m.Spec.NodeSelector = map[string]grtlv1.NodeLabelValue{"disk type": "ssd"}
			return m
		}(), "nodeSelector: each key must be a label key"},
		"root user": {func() client.Object { m := newCluster(ns, "e", "s", 1); m.Spec.RunAsUser = ptr.To(int64(0)); return m }(), "runAsUser must be more than 0"},
		"empty retention": {&grtlv1.MySQLBackupSchedule{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: ns},
			Spec: grtlv1.MySQLBackupScheduleSpec{Cluster: "a", Time: "@daily", Retention: &grtlv1.Retention{}}}, "retention needs keepLast, maxAge or both"},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.Create(ctx, tc.obj)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
