package database_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
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

// upgradeWatch polls a Database's objects while a major upgrade runs and
// checks, at every look, that no step came before the one it must follow:
// the pre-upgrade backup exists only after the fence Job completed (no
// write after the dump starts), the servers stop only after the
// pre-upgrade backup completed, the
// upgrade Job exists only while no server runs, the new image only after
// the Job completed; and that there is never more than one upgrade Job.
type upgradeWatch struct {
	mu         sync.Mutex
	seen       []string
	violations []string
	stop       chan struct{}
	done       chan struct{}
}

func (w *upgradeWatch) mark(what string) {
	for _, s := range w.seen {
		if s == what {
			return
		}
	}
	w.seen = append(w.seen, what)
}

func watchUpgrade(t *testing.T, c client.Client, ns, name, newImage string) *upgradeWatch {
	w := &upgradeWatch{stop: make(chan struct{}), done: make(chan struct{})}
	ctx := context.Background()
	look := func() {
		var backups dbv1.DatabaseBackupList
		var sts appsv1.StatefulSet
		var pods corev1.PodList
		var jobs, fences batchv1.JobList
		// Each check is "B is there, so A happened first"; the lists are
		// read one after the other, so each B is read before its A (the
		// StatefulSet, the upgrade Jobs, the backups, the fence Jobs): an A
		// that happened between the two reads is then still seen, never a
		// violation that did not happen.
		if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &sts) != nil ||
			c.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{database.LabelDatabase: name, database.LabelComponent: "upgrade"}) != nil ||
			c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{database.LabelDatabase: name, database.LabelComponent: "server"}) != nil ||
			c.List(ctx, &backups, client.InNamespace(ns), client.MatchingLabels{database.LabelBackupReason: "pre-upgrade"}) != nil ||
			c.List(ctx, &fences, client.InNamespace(ns), client.MatchingLabels{database.LabelDatabase: name, database.LabelComponent: "fence"}) != nil {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		fenced := false
		for _, j := range fences.Items {
			fenced = fenced || !jobDone(&j).IsZero()
		}
		if len(backups.Items) > 0 && !fenced {
			w.violations = append(w.violations, "the pre-upgrade backup exists before the fence Job completed")
		}
		if fenced {
			w.mark("writes fenced")
		}
		backupDone := false
		for _, b := range backups.Items {
			if b.Status.Phase == dbv1.BackupCompleted {
				backupDone = true
			}
		}
		stopped := ptr.Deref(sts.Spec.Replicas, 1) == 0
		newRunning := sts.Spec.Template.Spec.Containers[0].Image == newImage && !stopped
		jobComplete := false
		if len(jobs.Items) > 1 {
			w.violations = append(w.violations, fmt.Sprintf("%d upgrade Jobs at once", len(jobs.Items)))
		}
		for _, j := range jobs.Items {
			jobComplete = !jobDone(&j).IsZero()
			if !jobComplete && len(pods.Items) > 0 {
				w.violations = append(w.violations, fmt.Sprintf("upgrade Job %s runs while %d server pods exist", j.Name, len(pods.Items)))
			}
		}
		if stopped && !backupDone {
			w.violations = append(w.violations, "the StatefulSet stopped before the pre-upgrade backup completed")
		}
		if len(jobs.Items) > 0 && !backupDone {
			w.violations = append(w.violations, "the upgrade Job exists before the pre-upgrade backup completed")
		}
		if newRunning && !jobComplete {
			w.violations = append(w.violations, "the StatefulSet runs the new image before the upgrade Job completed")
		}
		if backupDone {
			w.mark("backup completed")
		}
		if stopped {
			w.mark("scaled down")
		}
		if stopped && len(pods.Items) == 0 {
			w.mark("no server")
		}
		if len(jobs.Items) > 0 {
			w.mark("upgrade Job")
		}
		if jobComplete {
			w.mark("upgrade Job completed")
		}
		if newRunning {
			w.mark("new image")
		}
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
				look()
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *upgradeWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// result stops the watch and returns what it saw, in order, and what was
// out of order.
func (w *upgradeWatch) result() ([]string, []string) {
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen, w.violations
}

func upgradesResult(t *testing.T, ns, db, result string) float64 {
	t.Helper()
	return testenv.CounterValue(t, "deckhand_database_major_upgrades_total", map[string]string{"namespace": ns, "database": db, "result": result})
}

// preUpgradeBackup waits for the newest pre-upgrade backup not in skip.
func preUpgradeBackup(t *testing.T, c client.Client, ns string, skip ...string) dbv1.DatabaseBackup {
	t.Helper()
	var found dbv1.DatabaseBackup
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var backups dbv1.DatabaseBackupList
		require.NoError(ct, c.List(context.Background(), &backups, client.InNamespace(ns), client.MatchingLabels{database.LabelBackupReason: "pre-upgrade"}))
		n := 0
		for _, b := range backups.Items {
			if !contains(skip, b.Name) {
				found, n = b, n+1
			}
		}
		require.Equal(ct, 1, n)
	}, wait, 100*time.Millisecond, "the pre-upgrade backup")
	return found
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// upgradeEndsAt waits for the upgrade's last step, want (Completed, or
// Failed: rolled back), and a Ready Database. The steps after the backup
// (the servers stopped, a Job, the servers started again, the old data
// removed) each wait on pods and Jobs, so each step gets the usual wait:
// on a busy machine the whole chain can take longer than one wait while
// every step still moves on. A step that does not move on within the wait
// fails, naming it; so does the other last step, at once.
func upgradeEndsAt(t *testing.T, c client.Client, db *dbv1.Database, want dbv1.UpgradeStep) *dbv1.Database {
	t.Helper()
	for step := dbv1.UpgradeStep(""); step != want; {
		from := step
		cur := waitFor(t, c, db, fmt.Sprintf("upgrade moved on from step %q", from), func(ct *assert.CollectT, d *dbv1.Database) {
			require.NotNil(ct, d.Status.Upgrade, "conditions: %+v", d.Status.Conditions)
			require.NotEqual(ct, from, d.Status.Upgrade.Step, "conditions: %+v", d.Status.Conditions)
		})
		step = cur.Status.Upgrade.Step
		ended := step == dbv1.UpgradeCompleted || step == dbv1.UpgradeFailed
		require.False(t, ended && step != want, "the upgrade ended at %s, not %s; conditions: %+v", step, want, cur.Status.Conditions)
	}
	return waitFor(t, c, db, fmt.Sprintf("Ready after the upgrade's step %s", want), ready)
}

// upgradeCompleted is upgradeEndsAt Completed.
func upgradeCompleted(t *testing.T, c client.Client, db *dbv1.Database) *dbv1.Database {
	t.Helper()
	return upgradeEndsAt(t, c, db, dbv1.UpgradeCompleted)
}

func upgradeStep(step dbv1.UpgradeStep) func(*assert.CollectT, *dbv1.Database) {
	return func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotNil(ct, d.Status.Upgrade, "conditions: %+v", d.Status.Conditions)
		require.Equal(ct, step, d.Status.Upgrade.Step, "conditions: %+v", d.Status.Conditions)
	}
}

// onOneNode pins a Database's pods and Jobs to one node: the local
// cluster's volumes are node-local, and the upgrade Job mounts the
// primary's data volume and the backup volume together.
func onOneNode(db *dbv1.Database) *dbv1.Database {
	db.Spec.PodTemplate = &dbv1.PodTemplate{NodeSelector: map[string]dbv1.LabelValue{corev1.LabelHostname: "kwok-node-1"}}
	return db
}

// upgradeTest starts an upgrade test beside the others: CRDs, a namespace,
// the controller for it, and the namespace's objects logged if it fails.
func upgradeTest(t *testing.T) (client.Client, string) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	dumpOnFailure(t, c, ns)
	return c, ns
}

// dumpOnFailure logs the Database's Jobs, StatefulSet and pods when the
// test failed, before its namespace goes.
func dumpOnFailure(t *testing.T, c client.Client, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		var jobs batchv1.JobList
		var pods corev1.PodList
		var sets appsv1.StatefulSetList
		_ = c.List(ctx, &jobs, client.InNamespace(ns))
		_ = c.List(ctx, &pods, client.InNamespace(ns))
		_ = c.List(ctx, &sets, client.InNamespace(ns))
		for _, j := range jobs.Items {
			t.Logf("Job %s labels %v status %+v", j.Name, j.Labels, j.Status)
		}
		for _, p := range pods.Items {
			t.Logf("pod %s phase %s deleting %v conditions %+v", p.Name, p.Status.Phase, p.DeletionTimestamp != nil, p.Status.Conditions)
		}
		for _, s := range sets.Items {
			t.Logf("StatefulSet %s replicas %d generation %d status %+v", s.Name, *s.Spec.Replicas, s.Generation, s.Status)
		}
	})
}

func claimUID(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	return string(get(t, c, ns, name, &corev1.PersistentVolumeClaim{}).UID)
}

// eventsOnce: each reason was announced by one Event, never repeated (a
// repeated Event would show as a series).
func eventsOnce(t *testing.T, c client.Client, ns, name string, reasons ...string) {
	t.Helper()
	count := map[string]int{}
	for _, e := range listEvents(t, c, ns, name) {
		n := 1
		if e.Series != nil {
			n = int(e.Series.Count)
		}
		count[e.Reason] += n
	}
	for _, r := range reasons {
		assert.Equal(t, 1, count[r], "Events with reason %s", r)
	}
}

func TestMajorUpgradeBacksUpStopsRunsTheJobThenStartsTheNewVersion(t *testing.T) {
	c, ns := upgradeTest(t)
	ctx := context.Background()

	db := onOneNode(newDatabase(ns, "major", 2))
	db.Spec.Image = "postgres:17.6"
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)
	primaryClaim, standbyClaim := claimUID(t, c, ns, "data-major-0"), claimUID(t, c, ns, "data-major-1")

	watch := watchUpgrade(t, c, ns, "major", "postgres:18.0")
	setImage(t, c, db, "postgres:18.0", nil)
	pre := preUpgradeBackup(t, c, ns)
	job := backupJobOf(t, c, ns, "major", pre.Name)
	assert.Equal(t, "postgres:17.6", job.Spec.Template.Spec.Containers[0].Image, "the dump is taken with the image that runs")
	cur := waitFor(t, c, db, "Upgrading BackingUp", upgradeStep(dbv1.UpgradeBackingUp))
	assert.Equal(t, "BackingUp", condition(cur, database.ConditionUpgrading).Reason)
	assert.Contains(t, condition(cur, database.ConditionUpgrading).Message, pre.Name)
	assert.Equal(t, "17.6", cur.Status.Upgrade.FromVersion)
	assert.Equal(t, "18.0", cur.Status.Upgrade.ToVersion)
	time.Sleep(time.Second)
	sts := get(t, c, ns, "major", &appsv1.StatefulSet{})
	assert.Equal(t, int32(2), *sts.Spec.Replicas, "the servers run until the backup completed")

	fence := jobNamed(t, c, ns, "major-fence")
	assert.Equal(t, "postgres:17.6", fence.Spec.Template.Spec.Containers[0].Image, "the fence runs with the image that runs")
	assert.Equal(t, "false", testenv.EnvOf(fence.Spec.Template.Spec.Containers[0])["LIFT"])
	assert.Equal(t, db.Spec.Name, testenv.EnvOf(fence.Spec.Template.Spec.Containers[0])["APP_USER"])
	cur = waitFor(t, c, db, "WritesFenced", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "WritesFenced", condition(d, "WritesFenced").Reason)
	})
	assert.Contains(t, condition(cur, "WritesFenced").Message, "cannot log in")
	assert.Contains(t, condition(cur, database.ConditionUpgrading).Message, "writes fenced")
	assertEvent(t, c, ns, "major", corev1.EventTypeNormal, "WritesFenced")

	reportBackup(t, c, ns, "major", pre.Name, 4242)
	var upgradeJob batchv1.Job
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "major-upgrade"}, &upgradeJob))
	}, wait, 100*time.Millisecond, "the upgrade Job")
	container := upgradeJob.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "postgres:18.0", container.Image, "the upgrade runs the new version")
	env := testenv.EnvOf(container)
	assert.Equal(t, "17.6", env["FROM_VERSION"])
	assert.Equal(t, "18.0", env["TO_VERSION"])
	assert.Equal(t, pre.Name+"-"+string(pre.UID)+".dump", env["BACKUP_FILE"])
	assert.Empty(t, env["ROLLBACK"])
	claims := map[string]bool{}
	for _, v := range upgradeJob.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.PersistentVolumeClaim.ClaimName] = true
		}
	}
	assert.Equal(t, map[string]bool{"data-major-0": true, "major-backup": true}, claims, "the primary's volume and the backup volume")
	assert.True(t, metav1.IsControlledBy(&upgradeJob, cur), "owned by the Database")

	// kwok completes the Job; the servers come back on the new version,
	// the fence is gone with the old directory, which is kept.
	cur = waitFor(t, c, db, "upgraded, old data kept", func(ct *assert.CollectT, d *dbv1.Database) {
		upgradeStep(dbv1.UpgradeStep("OldDataKept"))(ct, d)
		ready(ct, d)
	})
	assert.Equal(t, "18.0", cur.Status.CurrentVersion)
	assert.Nil(t, conditionOf(cur, "WritesFenced"), "the upgraded data's app role logs in")
	assert.Contains(t, condition(cur, database.ConditionUpgrading).Message, "stable.imaginedata.co/remove-old-data=true")
	time.Sleep(2 * time.Second)
	sts = get(t, c, ns, "major", &appsv1.StatefulSet{})
	assert.NotContains(t, testenv.EnvOf(sts.Spec.Template.Spec.Containers[0]), "REMOVE_OLD_DATA", "the old directory is kept until the user says so")
	cur = get(t, c, ns, "major", &dbv1.Database{})
	assert.Equal(t, dbv1.UpgradeStep("OldDataKept"), cur.Status.Upgrade.Step)

	// The user's signal: the servers restart once more to remove it.
	annotate(t, c, db, "stable.imaginedata.co/remove-old-data", "true")
	cur = upgradeCompleted(t, c, db)
	assert.Equal(t, "18.0", cur.Status.CurrentVersion)
	assert.Equal(t, "postgres:18.0", cur.Status.CurrentImage)
	assert.Nil(t, conditionOf(cur, database.ConditionUpgrading), "no longer upgrading")
	sts = get(t, c, ns, "major", &appsv1.StatefulSet{})
	assert.Equal(t, int32(2), *sts.Spec.Replicas)
	assert.Equal(t, "postgres:18.0", sts.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, "true", testenv.EnvOf(sts.Spec.Template.Spec.Containers[0])["REMOVE_OLD_DATA"], "the old directory goes only now")
	assert.Equal(t, primaryClaim, claimUID(t, c, ns, "data-major-0"), "the primary's volume is the one upgraded")
	assert.Equal(t, standbyClaim, claimUID(t, c, ns, "data-major-1"), "the standby's volume is kept: it re-clones into it")

	seen, violations := watch.result()
	assert.Empty(t, violations)
	assert.Equal(t, []string{"writes fenced", "backup completed", "scaled down", "no server", "upgrade Job", "upgrade Job completed", "new image"}, seen)
	eventsOnce(t, c, ns, "major", "BackingUp", "WritesFenced", "ScalingDown", "RunningUpgradeJob", "StartingNewVersion", "Upgraded", "FenceLifted", "RemovingOldData", "OldDataRemoved")
	assert.Equal(t, 1.0, upgradesResult(t, ns, "major", "succeeded"))

	// More reconciles do nothing again: one Job, the same one.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), db))
		if db.Annotations == nil {
			db.Annotations = map[string]string{}
		}
		db.Annotations["touch"] = "1"
		return c.Update(ctx, db)
	}))
	time.Sleep(2 * time.Second)
	var jobs batchv1.JobList
	require.NoError(t, c.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{database.LabelComponent: "upgrade"}))
	require.Len(t, jobs.Items, 1)
	assert.Equal(t, upgradeJob.UID, jobs.Items[0].UID)
	eventsOnce(t, c, ns, "major", "RunningUpgradeJob", "OldDataRemoved")

	// A downgrade stays refused, nothing changed.
	setImage(t, c, db, "postgres:17.6", nil)
	cur = waitFor(t, c, db, "UpgradeBlocked", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "Downgrade", condition(d, database.ConditionUpgradeBlocked).Reason)
	})
	assert.Contains(t, condition(cur, database.ConditionUpgradeBlocked).Message, "PostgreSQL 18.0 to 17.6 is a major-version downgrade")
	time.Sleep(time.Second)
	sts = get(t, c, ns, "major", &appsv1.StatefulSet{})
	assert.Equal(t, "postgres:18.0", sts.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, int32(2), *sts.Spec.Replicas)
	var backups dbv1.DatabaseBackupList
	require.NoError(t, c.List(ctx, &backups, client.InNamespace(ns)))
	assert.Len(t, backups.Items, 1, "no backup for a refused change")
}

// annotate sets one annotation on the Database, as a user would.
func annotate(t *testing.T, c client.Client, db *dbv1.Database, key, value string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &dbv1.Database{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(db), cur); err != nil {
			return err
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[key] = value
		return c.Update(context.Background(), cur)
	}))
}

func conditionOf(d *dbv1.Database, kind string) *metav1.Condition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == kind {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

func jobNamed(t *testing.T, c client.Client, ns, name string) *batchv1.Job {
	t.Helper()
	return get(t, c, ns, name, &batchv1.Job{})
}

func TestAFailedMajorUpgradeJobGoesBackToTheOldImageAndCanBeTriedAgain(t *testing.T) {
	c, ns := upgradeTest(t)
	ctx := context.Background()

	db := onOneNode(newDatabase(ns, "fails", 1))
	// The old data directory goes as soon as the new version is ready.
	db.Annotations = map[string]string{database.AnnotationRemoveOldData: "true"}
	db.Spec.Image = "postgres:17.6"
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)
	primaryClaim := claimUID(t, c, ns, "data-fails-0")

	setImage(t, c, db, "postgres:18.0", nil)
	first := preUpgradeBackup(t, c, ns)
	backupJobOf(t, c, ns, "fails", first.Name)
	// The servers stop after the backup; no new pod may start until the
	// test says so, so the upgrade Job's pod never runs.
	quota := testenv.PodQuota(t, c, ns, 0)
	reportBackup(t, c, ns, "fails", first.Name, 100)
	job := jobNamed(t, c, ns, "fails-upgrade")
	waitFor(t, c, db, "RunningUpgradeJob", upgradeStep(dbv1.UpgradeRunningJob))
	testenv.FailJob(t, c, job)

	// Back to the old image: the StatefulSet waits at zero while the
	// rollback Job (old image) puts the old directory back.
	rollback := jobNamed(t, c, ns, "fails-rollback")
	assert.Equal(t, "postgres:17.6", rollback.Spec.Template.Spec.Containers[0].Image, "the rollback runs the old version")
	assert.Equal(t, "true", testenv.EnvOf(rollback.Spec.Template.Spec.Containers[0])["ROLLBACK"])
	cur := waitFor(t, c, db, "RestoringOldData", upgradeStep(dbv1.UpgradeRestoringOldData))
	assert.Equal(t, "RestoringOldData", condition(cur, database.ConditionUpgrading).Reason)
	sts := get(t, c, ns, "fails", &appsv1.StatefulSet{})
	assert.Equal(t, int32(0), *sts.Spec.Replicas, "no server while the rollback Job works")
	require.NoError(t, c.Delete(ctx, quota))

	cur = upgradeEndsAt(t, c, db, dbv1.UpgradeFailed)
	failed := condition(cur, database.ConditionUpgradeFailed)
	assert.Equal(t, metav1.ConditionTrue, failed.Status)
	assert.Equal(t, "UpgradeJobFailed", failed.Reason)
	assert.Contains(t, failed.Message, "set spec.image back to postgres:17.6")
	assert.Contains(t, failed.Message, "nothing of it lost")
	assert.Equal(t, "17.6", cur.Status.CurrentVersion)
	assert.Nil(t, conditionOf(cur, database.ConditionUpgrading))
	assert.Equal(t, "postgres:17.6", serverImage(t, c, ns, "fails"))
	assertEvent(t, c, ns, "fails", corev1.EventTypeWarning, "UpgradeFailed")
	assert.Equal(t, primaryClaim, claimUID(t, c, ns, "data-fails-0"))
	assert.Equal(t, 1.0, upgradesResult(t, ns, "fails", "rolled_back"))

	// The old directory, fenced before its dump, serves again: the unfence
	// Job (old image) lets the app role log in.
	unfence := jobNamed(t, c, ns, "fails-unfence")
	assert.Equal(t, "postgres:17.6", unfence.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, "true", testenv.EnvOf(unfence.Spec.Template.Spec.Containers[0])["LIFT"])
	assert.True(t, unfence.CreationTimestamp.After(jobNamed(t, c, ns, "fails-fence").CreationTimestamp.Time) ||
		unfence.CreationTimestamp.Equal(&jobNamed(t, c, ns, "fails-fence").CreationTimestamp))
	waitFor(t, c, db, "fence lifted", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Nil(ct, conditionOf(d, "WritesFenced"))
	})
	assertEvent(t, c, ns, "fails", corev1.EventTypeNormal, "FenceLifted")

	// It stays so: no new attempt on its own.
	time.Sleep(2 * time.Second)
	var backups dbv1.DatabaseBackupList
	require.NoError(t, c.List(ctx, &backups, client.InNamespace(ns)))
	assert.Len(t, backups.Items, 1)
	assert.Equal(t, "postgres:17.6", serverImage(t, c, ns, "fails"))

	// The way out: spec.image back clears it; the new image again is a new
	// attempt with a backup of its own, and this time the Job succeeds.
	setImage(t, c, db, "postgres:17.6", nil)
	waitFor(t, c, db, "UpgradeFailed cleared", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Nil(ct, conditionOf(d, database.ConditionUpgradeFailed))
		require.Nil(ct, d.Status.Upgrade)
	})
	setImage(t, c, db, "postgres:18.0", nil)
	second := preUpgradeBackup(t, c, ns, first.Name)
	reportBackup(t, c, ns, "fails", second.Name, 200)
	cur = upgradeCompleted(t, c, db)
	assert.Equal(t, "18.0", cur.Status.CurrentVersion)
	job = jobNamed(t, c, ns, "fails-upgrade")
	assert.Equal(t, second.Name+"-"+string(second.UID)+".dump", testenv.EnvOf(job.Spec.Template.Spec.Containers[0])["BACKUP_FILE"], "the new attempt restores its own backup")
	assert.Equal(t, cur.Status.Upgrade.Attempt, job.Labels[database.LabelUpgradeAttempt])
}

func TestAMajorUpgradeWhosePrimaryIsNeverReadyIsRolledBack(t *testing.T) {
	c, ns := upgradeTest(t)
	ctx := context.Background()

	db := onOneNode(newDatabase(ns, "slow", 1))
	db.Spec.Image = "postgres:17.6"
	db.Spec.UpgradeTimeout = &metav1.Duration{Duration: 3 * time.Second}
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)

	setImage(t, c, db, "postgres:18.0", nil)
	pre := preUpgradeBackup(t, c, ns)
	backupJobOf(t, c, ns, "slow", pre.Name)
	quota := testenv.PodQuota(t, c, ns, 0)
	reportBackup(t, c, ns, "slow", pre.Name, 100)
	// The Job succeeds, but no server pod can start: the new primary is
	// never ready.
	testenv.CompleteJob(t, c, jobNamed(t, c, ns, "slow-upgrade"))
	waitFor(t, c, db, "StartingNewVersion", upgradeStep(dbv1.UpgradeStartingNewVersion))
	cur := waitFor(t, c, db, "RestoringOldData", upgradeStep(dbv1.UpgradeRestoringOldData))
	assert.Equal(t, "NewPrimaryNotReady", cur.Status.Upgrade.FailureReason)
	assert.Equal(t, "17.6", cur.Status.CurrentVersion, "the new primary never was ready")
	require.NoError(t, c.Delete(ctx, quota))
	cur = upgradeEndsAt(t, c, db, dbv1.UpgradeFailed)
	failed := condition(cur, database.ConditionUpgradeFailed)
	assert.Equal(t, "NewPrimaryNotReady", failed.Reason)
	assert.Equal(t, "17.6", cur.Status.CurrentVersion, "currentVersion moves only with a ready primary")
	assert.Equal(t, "postgres:17.6", serverImage(t, c, ns, "slow"))
	var events []string
	for _, e := range listEvents(t, c, ns, "slow") {
		if e.Reason == "RollingBack" {
			events = append(events, e.Note)
		}
	}
	require.Len(t, events, 1)
	assert.Contains(t, events[0], "was not ready on postgres:18.0 within 3s (upgradeTimeout)")
}

// bindClaimOn makes a PersistentVolumeClaim and has it bound on node (the
// local cluster's volumes are node-local, bound where the first pod using
// them is scheduled).
func bindClaimOn(t *testing.T, c client.Client, pvc *corev1.PersistentVolumeClaim, node string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, pvc))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bind-" + pvc.Name, Namespace: pvc.Namespace},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(1000)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "bind", Image: "busybox", Command: []string{"true"},
				VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/v"}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name},
			}}},
		},
	}
	require.NoError(t, c.Create(ctx, pod))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc))
		require.Equal(ct, corev1.ClaimBound, pvc.Status.Phase)
	}, wait, 100*time.Millisecond, "PersistentVolumeClaim %s bound", pvc.Name)
	require.NoError(t, c.Delete(ctx, pod))
}

func TestAnUpgradeJobThatCannotBeScheduledIsRolledBackWithoutTheBackupVolume(t *testing.T) {
	c, ns := upgradeTest(t)
	ctx := context.Background()

	// The primary's volume on kwok-node-2, the backup volume on
	// kwok-node-1: no pod can mount both.
	db := newDatabase(ns, "apart", 1)
	db.Spec.Image = "postgres:17.6"
	db.Spec.UpgradeTimeout = &metav1.Duration{Duration: 3 * time.Second}
	db.Spec.PodTemplate = &dbv1.PodTemplate{NodeSelector: map[string]dbv1.LabelValue{corev1.LabelHostname: "kwok-node-2"}}
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)
	bindClaimOn(t, c, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "apart-backup", Namespace: ns, Labels: map[string]string{
			database.LabelDatabase: "apart", database.LabelComponent: "backup",
		}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, "kwok-node-1")
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(db), db))
		db.Spec.PodTemplate = nil
		return c.Update(ctx, db)
	}))
	waitFor(t, c, db, "Ready without the node selector", func(ct *assert.CollectT, d *dbv1.Database) {
		ready(ct, d)
		require.Equal(ct, d.Generation, d.Status.ObservedGeneration)
	})

	setImage(t, c, db, "postgres:18.0", nil)
	pre := preUpgradeBackup(t, c, ns)
	reportBackup(t, c, ns, "apart", pre.Name, 100)
	cur := upgradeEndsAt(t, c, db, dbv1.UpgradeFailed)
	failed := condition(cur, database.ConditionUpgradeFailed)
	assert.Equal(t, "UpgradeJobUnschedulable", failed.Reason)
	assert.Equal(t, "17.6", cur.Status.CurrentVersion)
	assert.Equal(t, "postgres:17.6", serverImage(t, c, ns, "apart"))
	var notes []string
	for _, e := range listEvents(t, c, ns, "apart") {
		if e.Reason == "RollingBack" {
			notes = append(notes, e.Note)
		}
	}
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "did not start within 3s (upgradeTimeout)")
	assert.Contains(t, notes[0], "data-apart-0 and the backup volume apart-backup must be on one node")

	// The upgrade Job went before the rollback Job came, and the rollback
	// mounts the data volume only, so it could run.
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "apart-upgrade"}, &batchv1.Job{})
	assert.True(t, apierrors.IsNotFound(err), "the unschedulable upgrade Job is deleted: %v", err)
	rollback := jobNamed(t, c, ns, "apart-rollback")
	var claims []string
	for _, v := range rollback.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims = append(claims, v.PersistentVolumeClaim.ClaimName)
		}
	}
	assert.Equal(t, []string{"data-apart-0"}, claims)
	assert.True(t, jobDone(rollback).After(time.Time{}), "the rollback Job completed")
}

// A Database deleted and made again under the same name starts its
// generations at 1 again: its upgrade must take a backup of its own, not
// restore the first Database's (whose data it would put in place of its
// own).
func TestAnUpgradeNeverUsesTheBackupOfAFormerDatabaseOfTheSameName(t *testing.T) {
	c, ns := upgradeTest(t)
	ctx := context.Background()

	create := func() *dbv1.Database {
		db := onOneNode(newDatabase(ns, "reborn", 1))
		// The old data directory goes as soon as the new version is ready.
		db.Annotations = map[string]string{database.AnnotationRemoveOldData: "true"}
		db.Spec.Image = "postgres:17.6"
		db.Spec.DeletionPolicy = dbv1.DeletionDelete
		require.NoError(t, c.Create(ctx, db))
		waitFor(t, c, db, "Ready", ready)
		return db
	}
	db := create()
	setImage(t, c, db, "postgres:18.0", nil)
	first := preUpgradeBackup(t, c, ns)
	assert.Equal(t, string(db.UID), first.Annotations[database.AnnotationDatabaseUID])
	reportBackup(t, c, ns, "reborn", first.Name, 100)
	upgradeCompleted(t, c, db)
	require.NoError(t, c.Delete(ctx, db))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{})
		require.True(ct, apierrors.IsNotFound(err), "the first Database is still there")
	}, wait, 100*time.Millisecond)

	db = create()
	setImage(t, c, db, "postgres:18.0", nil)
	second := preUpgradeBackup(t, c, ns, first.Name)
	assert.Equal(t, string(db.UID), second.Annotations[database.AnnotationDatabaseUID])
	cur := waitFor(t, c, db, "Upgrading BackingUp", upgradeStep(dbv1.UpgradeBackingUp))
	assert.Equal(t, second.Name, cur.Status.Upgrade.Backup)
	time.Sleep(time.Second)
	sts := get(t, c, ns, "reborn", &appsv1.StatefulSet{})
	assert.Equal(t, int32(1), *sts.Spec.Replicas, "the servers run until this Database's own backup completed")
	reportBackup(t, c, ns, "reborn", second.Name, 200)
	upgradeCompleted(t, c, db)
	job := jobNamed(t, c, ns, "reborn-upgrade")
	second = *get(t, c, ns, second.Name, &dbv1.DatabaseBackup{})
	assert.Equal(t, second.Status.File, testenv.EnvOf(job.Spec.Template.Spec.Containers[0])["BACKUP_FILE"], "its own backup is restored")
}

// Going back and forth between two images of one major version takes a
// backup each time: 17.6 → 17.7 → 17.6 → 17.7 does not roll the last
// change on the first change's backup.
func TestEachImageChangeTakesItsOwnBackup(t *testing.T) {
	c, ns := upgradeTest(t)
	ctx := context.Background()

	db := newDatabase(ns, "flip", 1)
	db.Spec.Image = "postgres:17.6"
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)

	var taken []string
	for i, image := range []string{"postgres:17.7", "postgres:17.6", "postgres:17.7"} {
		setImage(t, c, db, image, nil)
		pre := preUpgradeBackup(t, c, ns, taken...)
		taken = append(taken, pre.Name)
		cur := waitFor(t, c, db, "BackingUp", func(ct *assert.CollectT, d *dbv1.Database) {
			require.Equal(ct, "BackingUp", condition(d, database.ConditionUpgrading).Reason)
		})
		assert.Equal(t, pre.Name, cur.Status.Backup.PreUpgradeBackup, "change %d", i)
		assert.NotEqual(t, image, serverImage(t, c, ns, "flip"), "change %d: no roll before its own backup completed", i)
		reportBackup(t, c, ns, "flip", pre.Name, int64(10+i))
		waitFor(t, c, db, "rolled to "+image, func(ct *assert.CollectT, d *dbv1.Database) {
			ready(ct, d)
			require.Equal(ct, image, d.Status.CurrentImage)
		})
	}
	assert.Len(t, taken, 3)
}

// The upgrade holds its backup from its completion to the upgrade's end:
// deleting it waits; if it goes anyway (its finalizer removed by hand),
// the upgrade does not run without it but rolls back, saying why.
func TestAnUpgradeHoldsItsBackupAndRollsBackWhenItIsGoneAnyway(t *testing.T) {
	c, ns := upgradeTest(t)
	ctx := context.Background()

	db := onOneNode(newDatabase(ns, "held", 1))
	db.Spec.Image = "postgres:17.6"
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)
	// The primary's pod stays (Terminating) when the servers stop, until
	// the test lets it go: the upgrade waits at ScalingDown meanwhile.
	pod := get(t, c, ns, "held-0", &corev1.Pod{})
	require.NoError(t, c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["test.deckhand/hold"]}}`))))

	setImage(t, c, db, "postgres:18.0", nil)
	pre := preUpgradeBackup(t, c, ns)
	reportBackup(t, c, ns, "held", pre.Name, 100)
	cur := waitFor(t, c, db, "ScalingDown", upgradeStep(dbv1.UpgradeScalingDown))
	held := get(t, c, ns, pre.Name, &dbv1.DatabaseBackup{})
	assert.Contains(t, held.Annotations, database.AnnotationPrefixHeldBy+"upgrade."+string(cur.UID))

	// Deleting it waits while it is held: no Job deletes its file.
	require.NoError(t, c.Delete(ctx, held))
	waitForBackup(t, c, ns, pre.Name, "deletion held", func(ct *assert.CollectT, b *dbv1.DatabaseBackup) {
		c := findCond(b.Status.Conditions, "FileDeleted")
		require.NotNil(ct, c)
		require.Equal(ct, "InUse", c.Reason)
		require.Contains(ct, c.Message, "Database held restores it in its upgrade")
	})
	var jobs batchv1.JobList
	require.NoError(t, c.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{database.LabelComponent: "backup-delete"}))
	assert.Empty(t, jobs.Items, "the held file is not deleted")

	// Gone anyway: its finalizer removed by hand.
	require.NoError(t, c.Patch(ctx, held, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))
	require.NoError(t, c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))
	cur = upgradeEndsAt(t, c, db, dbv1.UpgradeFailed)
	failed := condition(cur, database.ConditionUpgradeFailed)
	assert.Equal(t, "PreUpgradeBackupGone", failed.Reason)
	assert.Equal(t, "postgres:17.6", serverImage(t, c, ns, "held"))
	var notes []string
	for _, e := range listEvents(t, c, ns, "held") {
		if e.Reason == "RollingBack" {
			notes = append(notes, e.Note)
		}
	}
	require.Len(t, notes, 1)
	assert.Contains(t, notes[0], "the pre-upgrade DatabaseBackup "+pre.Name+" is gone")
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "held-upgrade"}, &batchv1.Job{})
	assert.True(t, apierrors.IsNotFound(err), "no upgrade Job without its backup: %v", err)
}

func findCond(conds []metav1.Condition, kind string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == kind {
			return &conds[i]
		}
	}
	return nil
}

// The test-only seam (Options.MajorPathWithinMajor) sends a change within
// one major version through every step of the major path, so the path
// can run where only one major version is installed.
func TestTheTestSeamRunsTheMajorPathWithinOneMajor(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperatorWith(t, ns, database.Options{MajorPathWithinMajor: true})
	dumpOnFailure(t, c, ns)
	ctx := context.Background()

	db := onOneNode(newDatabase(ns, "seam", 1))
	// The old data directory goes as soon as the new version is ready.
	db.Annotations = map[string]string{database.AnnotationRemoveOldData: "true"}
	db.Spec.Image = "postgres:15.14"
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)
	setImage(t, c, db, "postgres:15.14-bookworm", nil)
	pre := preUpgradeBackup(t, c, ns)
	cur := waitFor(t, c, db, "major path: BackingUp", upgradeStep(dbv1.UpgradeBackingUp))
	assert.Equal(t, "15.14", cur.Status.Upgrade.FromVersion)
	assert.Equal(t, "15.14", cur.Status.Upgrade.ToVersion)
	reportBackup(t, c, ns, "seam", pre.Name, 100)
	cur = upgradeCompleted(t, c, db)
	job := jobNamed(t, c, ns, "seam-upgrade")
	env := testenv.EnvOf(job.Spec.Template.Spec.Containers[0])
	assert.Equal(t, "15.14", env["FROM_VERSION"])
	assert.Equal(t, "15.14", env["TO_VERSION"])
	assert.Equal(t, "postgres:15.14-bookworm", cur.Status.CurrentImage)
	eventsOnce(t, c, ns, "seam", "BackingUp", "WritesFenced", "ScalingDown", "RunningUpgradeJob", "StartingNewVersion", "Upgraded", "FenceLifted", "RemovingOldData", "OldDataRemoved")
}

// A fence Job that fails fails the upgrade before anything else: no
// backup, the servers never stop, and the unfence Job lets the app role
// in again. A later attempt fences anew, and cancelling it (spec.image
// back while the backup runs) lifts that fence with a new unfence Job.
func TestAFailedFenceStopsTheUpgradeAndACancelLiftsTheFence(t *testing.T) {
	c, ns := upgradeTest(t)
	ctx := context.Background()

	db := onOneNode(newDatabase(ns, "fenced", 1))
	db.Spec.Image = "postgres:17.6"
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)

	// No new pod may start: the fence Job's pod never runs.
	quota := testenv.PodQuota(t, c, ns, 0)
	setImage(t, c, db, "postgres:18.0", nil)
	fence := jobNamed(t, c, ns, "fenced-fence")
	cur := waitFor(t, c, db, "Fencing", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "Fencing", condition(d, "WritesFenced").Reason)
	})
	assert.Contains(t, condition(cur, database.ConditionUpgrading).Message, "fences writes")
	testenv.FailJob(t, c, fence)
	cur = waitFor(t, c, db, "UpgradeFailed", upgradeStep(dbv1.UpgradeFailed))
	failed := condition(cur, database.ConditionUpgradeFailed)
	assert.Equal(t, "FenceJobFailed", failed.Reason)
	assert.Contains(t, failed.Message, "nothing was touched")
	var backups dbv1.DatabaseBackupList
	require.NoError(t, c.List(ctx, &backups, client.InNamespace(ns)))
	assert.Empty(t, backups.Items, "no backup without the fence")
	sts := get(t, c, ns, "fenced", &appsv1.StatefulSet{})
	assert.Equal(t, int32(1), *sts.Spec.Replicas, "the servers never stopped")
	assert.Equal(t, "postgres:17.6", sts.Spec.Template.Spec.Containers[0].Image)

	require.NoError(t, c.Delete(ctx, quota))
	firstLift := jobNamed(t, c, ns, "fenced-unfence")
	assert.Equal(t, "true", testenv.EnvOf(firstLift.Spec.Template.Spec.Containers[0])["LIFT"])
	waitFor(t, c, db, "fence lifted", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Nil(ct, conditionOf(d, "WritesFenced"))
	})

	// A new attempt fences again, then is cancelled while its backup runs.
	setImage(t, c, db, "postgres:17.6", nil)
	waitFor(t, c, db, "UpgradeFailed cleared", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Nil(ct, d.Status.Upgrade)
	})
	setImage(t, c, db, "postgres:18.0", nil)
	pre := preUpgradeBackup(t, c, ns)
	cur = waitFor(t, c, db, "WritesFenced", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "WritesFenced", condition(d, "WritesFenced").Reason)
	})
	assert.Equal(t, pre.Name, cur.Status.Upgrade.Backup)
	setImage(t, c, db, "postgres:17.6", nil)
	waitFor(t, c, db, "cancelled and lifted", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Nil(ct, d.Status.Upgrade)
		require.Nil(ct, conditionOf(d, "WritesFenced"))
	})
	secondLift := jobNamed(t, c, ns, "fenced-unfence")
	assert.NotEqual(t, firstLift.UID, secondLift.UID, "the second fence was lifted by a Job of its own")
	eventsOnce(t, c, ns, "fenced", "UpgradeCancelled")
	count := 0
	for _, e := range listEvents(t, c, ns, "fenced") {
		if e.Reason == "FenceLifted" {
			count++
		}
	}
	assert.Equal(t, 2, count, "each fence lifted once")
	assert.Equal(t, "postgres:17.6", serverImage(t, c, ns, "fenced"))
}
