package mysqlcluster_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/mysqlcluster"
)

// instances waits until the namespace's MySQLBackupInstances match
// check, and returns them by name.
func instances(t *testing.T, c client.Client, ns, what string, check func(*assert.CollectT, map[string]grtlv1.MySQLBackupInstance)) map[string]grtlv1.MySQLBackupInstance {
	t.Helper()
	var out map[string]grtlv1.MySQLBackupInstance
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var list grtlv1.MySQLBackupInstanceList
		require.NoError(ct, c.List(context.Background(), &list, client.InNamespace(ns)))
		out = map[string]grtlv1.MySQLBackupInstance{}
		for _, b := range list.Items {
			out[b.Name] = b
		}
		check(ct, out)
	}, wait, 100*time.Millisecond, "MySQLBackupInstances: %s", what)
	return out
}

// poke makes the schedule reconcile now (its clock moved).
func poke(t *testing.T, c client.Client, sched *grtlv1.MySQLBackupSchedule, value string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(sched), sched); err != nil {
			return err
		}
		sched.Annotations = map[string]string{"poke": value}
		return c.Update(context.Background(), sched)
	}))
}

// readyClusterWithClock starts the controller with a clock the test moves
// (offset) and a ready one-replica cluster "app".
func readyClusterWithClock(t *testing.T) (client.Client, string, *atomic.Int64) {
	t.Helper()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	now, offset := scheduleClock(t)
	startOperator(t, ns, now)
	require.NoError(t, c.Create(context.Background(), newCluster(ns, "app", "app-root", 1)))
	waitFor(t, c, ns, "app", "Ready", ready)
	return c, ns, offset
}

// scheduleClock is the schedules' clock of a test: half past the hour the
// test starts in, run on from there and moved on by offset, so that the
// offsets the test sets decide which schedule times pass, not the hour it
// runs in. A schedule counts from its creation, in real time: within
// three minutes of the hour, the test first waits for the hour to pass,
// so that the schedules it makes next are made in the clock's hour.
func scheduleClock(t *testing.T) (now func() time.Time, offset *atomic.Int64) {
	t.Helper()
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 3*time.Minute {
		t.Logf("waiting %s for the hour to pass: schedules count from their creation, in real time", left.Round(time.Second))
		time.Sleep(left + time.Second)
	}
	return testenv.ClockFrom(time.Now().Truncate(time.Hour).Add(30 * time.Minute))
}

// waitGone waits until obj no longer exists.
func waitGone(t *testing.T, c client.Client, obj client.Object, timeout time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
		require.True(ct, apierrors.IsNotFound(err), "%T %s is still there: %v", obj, obj.GetName(), err)
	}, timeout, 100*time.Millisecond)
}

// A MySQLBackupInstance a restore needs is held (an annotation naming the
// cluster restoring from it): the schedule's retention never deletes it,
// and once the holder is gone the next retention pass does.
func TestRetentionNeverDeletesAnInstanceThatARestoreHolds(t *testing.T) {
	t.Parallel()
	c, ns, offset := readyClusterWithClock(t)
	ctx := context.Background()
	offset.Store(int64(time.Hour + 5*time.Minute))
	sched := &grtlv1.MySQLBackupSchedule{
		ObjectMeta: metav1.ObjectMeta{Name: "hourly", Namespace: ns},
		Spec:       grtlv1.MySQLBackupScheduleSpec{Cluster: "app", Time: "@hourly", Storage: "1Gi", Retention: &grtlv1.Retention{KeepLast: ptr.To(int32(1))}},
	}
	require.NoError(t, c.Create(ctx, sched))
	var first string
	instances(t, c, ns, "the first scheduled one", func(ct *assert.CollectT, all map[string]grtlv1.MySQLBackupInstance) {
		require.Len(ct, all, 1)
		for name := range all {
			first = name
		}
	})
	completeBackup(t, c, ns, "app", first, 100)

	// A cluster restores from it; its restore Job fails (no pod may start
	// meanwhile), so it is never restored and keeps needing the file.
	quota := testenv.PodQuota(t, c, ns, 2)
	copyOf := newCluster(ns, "copy", "copy-root", 1)
	copyOf.Spec.FromBackup = first
	copyOf.Spec.DeletionPolicy = grtlv1.DeletionDelete
	require.NoError(t, c.Create(ctx, copyOf))
	testenv.FailJob(t, c, get(t, c, ns, "copy-restore", &batchv1.Job{}))
	copyOf = waitFor(t, c, ns, "copy", "RestoreFailed", func(ct *assert.CollectT, mc *grtlv1.MySQLCluster) {
		require.Equal(ct, "RestoreFailed", condition(mc.Status.Conditions, database.ConditionRestored).Reason)
	})
	held := get(t, c, ns, first, &grtlv1.MySQLBackupInstance{})
	holdKey := mysqlcluster.Keys.HeldBy + "restore." + string(copyOf.UID)
	assert.Equal(t, "MySQLCluster copy restores from it (fromBackup)", held.Annotations[holdKey])
	require.NoError(t, c.Delete(ctx, quota))

	// The next time: retention (keepLast 1) would delete the first; it is
	// held, so it stays.
	offset.Store(int64(2*time.Hour + 5*time.Minute))
	poke(t, c, sched, "1")
	var second string
	instances(t, c, ns, "the second scheduled one", func(ct *assert.CollectT, all map[string]grtlv1.MySQLBackupInstance) {
		require.Len(ct, all, 2)
		for name := range all {
			if name != first {
				second = name
			}
		}
	})
	completeBackup(t, c, ns, "app", second, 200)
	// The schedule's pass that records the second as its newest applies
	// retention before it writes that status.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(sched), sched))
		require.Equal(ct, second, sched.Status.LastSuccessfulBackup)
	}, wait, 100*time.Millisecond, "the schedule records the second")
	b := get(t, c, ns, first, &grtlv1.MySQLBackupInstance{})
	assert.True(t, b.DeletionTimestamp.IsZero(), "retention deleted the held instance")

	// The holder goes: its hold counts no more, and retention deletes it.
	require.NoError(t, c.Delete(ctx, copyOf))
	waitGone(t, c, copyOf, wait)
	pokes := 0
	instances(t, c, ns, "retention deletes the first once nothing holds it", func(ct *assert.CollectT, all map[string]grtlv1.MySQLBackupInstance) {
		// Again until the schedule's cache has seen the copy go.
		pokes++
		poke(t, c, sched, strconv.Itoa(pokes))
		require.NotContains(ct, all, first)
		require.Contains(ct, all, second)
	})
}

// The backup before an image change is bound to the cluster's UID and to
// the change's attempt: going back and forth between two images takes a
// backup each time, and a cluster made again under the same name takes its
// own, never the former cluster's.
func TestEachImageChangeOfAMySQLClusterTakesABackupOfItsOwn(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns, nil)
	ctx := context.Background()

	create := func() *grtlv1.MySQLCluster {
		mc := newCluster(ns, "flip", "flip-root", 1)
		mc.Spec.DeletionPolicy = grtlv1.DeletionDelete
		require.NoError(t, c.Create(ctx, mc))
		return waitFor(t, c, ns, "flip", "Ready", ready)
	}
	mc := create()
	var taken []string
	change := func(image string) grtlv1.MySQLBackupInstance {
		t.Helper()
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(mc), mc); err != nil {
				return err
			}
			mc.Spec.Image = image
			return c.Update(ctx, mc)
		}))
		var pre grtlv1.MySQLBackupInstance
		instances(t, c, ns, "a new pre-upgrade backup for "+image, func(ct *assert.CollectT, all map[string]grtlv1.MySQLBackupInstance) {
			n := 0
			for name, b := range all {
				if b.Labels[mysqlcluster.Keys.BackupReason] == "pre-upgrade" && !slices.Contains(taken, name) {
					pre, n = b, n+1
				}
			}
			require.Equal(ct, 1, n)
		})
		taken = append(taken, pre.Name)
		cur := waitFor(t, c, ns, "flip", "backing up", func(ct *assert.CollectT, m *grtlv1.MySQLCluster) {
			require.Equal(ct, pre.Name, m.Status.PreUpgradeBackup)
		})
		assert.Equal(t, string(cur.UID), pre.Annotations[mysqlcluster.Keys.ClusterUID], "made for this cluster")
		sts := get(t, c, ns, "flip", &appsv1.StatefulSet{})
		assert.NotEqual(t, image, sts.Spec.Template.Spec.Containers[0].Image, "no roll before its own backup completed")
		completeBackup(t, c, ns, "flip", pre.Name, int64(100+len(taken)))
		waitFor(t, c, ns, "flip", "rolled to "+image, func(ct *assert.CollectT, m *grtlv1.MySQLCluster) {
			ready(ct, m)
			require.Equal(ct, image, m.Status.CurrentImage)
		})
		return pre
	}
	for _, image := range []string{"mysql:8.4.9", "mysql:8.4.8", "mysql:8.4.9"} {
		change(image)
	}

	// Deleted and made again: the same change takes a backup of the new
	// cluster, not any of the former one's.
	require.NoError(t, c.Delete(ctx, mc))
	waitGone(t, c, mc, wait)
	first := mc.UID
	mc = create()
	require.NotEqual(t, first, mc.UID)
	pre := change("mysql:8.4.9")
	assert.Equal(t, string(mc.UID), pre.Annotations[mysqlcluster.Keys.ClusterUID])
	assert.Len(t, taken, 4)
	for _, name := range taken {
		assert.True(t, strings.HasPrefix(name, "flip-pre-upgrade-"), name)
	}
}

// An instance's file is deleted by a Job that runs as the cluster's
// spec.runAsUser, recorded on the instance (status.runAsUser), even once
// the cluster is gone.
func TestTheJobThatDeletesAnInstancesFileRunsAsTheClustersUser(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns, nil)
	ctx := context.Background()
	const uid = 27
	mc := newCluster(ns, "other", "other-root", 1)
	mc.Spec.RunAsUser = ptr.To(int64(uid))
	mc.Spec.DeletionPolicy = grtlv1.DeletionRetain
	require.NoError(t, c.Create(ctx, mc))
	waitFor(t, c, ns, "other", "Ready", ready)
	b := &grtlv1.MySQLBackupInstance{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: ns}, Spec: grtlv1.MySQLBackupInstanceSpec{Cluster: "other"}}
	require.NoError(t, c.Create(ctx, b))
	b = completeBackup(t, c, ns, "other", "one", 100)
	require.NotNil(t, b.Status.RunAsUser)
	assert.Equal(t, int64(uid), *b.Status.RunAsUser)

	require.NoError(t, c.Delete(ctx, mc))
	waitGone(t, c, mc, wait)
	job, quota := deleteInstanceHoldingItsJob(t, c, b)
	sc := job.Spec.Template.Spec.SecurityContext
	require.NotNil(t, sc)
	assert.Equal(t, []int64{uid, uid, uid}, []int64{ptr.Deref(sc.RunAsUser, 0), ptr.Deref(sc.RunAsGroup, 0), ptr.Deref(sc.FSGroup, 0)})
	require.NoError(t, c.Delete(ctx, quota))
	waitGone(t, c, b, 2*wait)
}

// The Job that deletes an instance's file runs where the cluster's pods
// may run: its spec.nodeSelector and spec.tolerations.
func TestTheJobThatDeletesAnInstancesFileRunsWhereTheClustersPodsRun(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns, nil)
	ctx := context.Background()
	toleration := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}
	mc := newCluster(ns, "placed", "placed-root", 1)
	mc.Spec.NodeSelector = map[string]grtlv1.NodeLabelValue{corev1.LabelHostname: "kwok-node-1"}
	mc.Spec.Tolerations = []corev1.Toleration{toleration}
	require.NoError(t, c.Create(ctx, mc))
	waitFor(t, c, ns, "placed", "Ready", ready)
	b := &grtlv1.MySQLBackupInstance{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: ns}, Spec: grtlv1.MySQLBackupInstanceSpec{Cluster: "placed"}}
	require.NoError(t, c.Create(ctx, b))
	b = completeBackup(t, c, ns, "placed", "one", 100)

	job, quota := deleteInstanceHoldingItsJob(t, c, b)
	spec := job.Spec.Template.Spec
	assert.Equal(t, map[string]string{corev1.LabelHostname: "kwok-node-1"}, spec.NodeSelector)
	assert.Equal(t, []corev1.Toleration{toleration}, spec.Tolerations)
	require.NoError(t, c.Delete(ctx, quota))
}

// deleteInstanceHoldingItsJob deletes the instance while no pod may start
// (a pod quota of 0, returned for the test to delete), so the Job that
// deletes its file stays to be read; it returns that Job.
func deleteInstanceHoldingItsJob(t *testing.T, c client.Client, b *grtlv1.MySQLBackupInstance) (batchv1.Job, *corev1.ResourceQuota) {
	t.Helper()
	ctx := context.Background()
	quota := testenv.PodQuota(t, c, b.Namespace, 0)
	require.NoError(t, c.Delete(ctx, b))
	var job batchv1.Job
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var jobs batchv1.JobList
		require.NoError(ct, c.List(ctx, &jobs, client.InNamespace(b.Namespace), client.MatchingLabels{mysqlcluster.Keys.Component: "backup-delete"}))
		require.Len(ct, jobs.Items, 1)
		job = jobs.Items[0]
	}, wait, 100*time.Millisecond, "the Job that deletes the file")
	return job, quota
}

// A Job that cannot delete an instance's file leaves the instance with a
// condition that names the finalizer to remove by hand: the MySQL API's
// own, not the Database API's.
func TestAFailedFileDeletionNamesTheInstancesOwnFinalizer(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns, nil)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, newCluster(ns, "gone", "gone-root", 1)))
	waitFor(t, c, ns, "gone", "Ready", ready)
	b := &grtlv1.MySQLBackupInstance{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: ns}, Spec: grtlv1.MySQLBackupInstanceSpec{Cluster: "gone"}}
	require.NoError(t, c.Create(ctx, b))
	b = completeBackup(t, c, ns, "gone", "one", 100)

	job, quota := deleteInstanceHoldingItsJob(t, c, b)
	testenv.FailJob(t, c, &job)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var cur grtlv1.MySQLBackupInstance
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(b), &cur))
		var msg string
		for _, cond := range cur.Status.Conditions {
			if cond.Type == "FileDeleted" && cond.Reason == "DeleteJobFailed" {
				msg = cond.Message
			}
		}
		assert.Contains(ct, msg, "remove the finalizer "+mysqlcluster.Keys.FinalizerBackupFile+" by hand")
		assert.NotContains(ct, msg, "stable.imaginedata.co")
	}, wait, 100*time.Millisecond)
	require.NoError(t, c.Delete(ctx, quota))
}
