package database

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// The scratch volume holds the restored cluster: 8 x the dump plus 1Gi,
// in whole MiB.
func TestScratchVolumeIsSizedFromTheDump(t *testing.T) {
	for _, tc := range []struct {
		dump int64
		want string
	}{
		{0, "1Gi"},
		{100 << 20, "1824Mi"},
		{1 << 30, "9Gi"},
		{12345, "1025Mi"},
	} {
		got := scratchSize(tc.dump)
		assert.Zero(t, got.Cmp(resource.MustParse(tc.want)), "dump %d: %s, want %s", tc.dump, got.String(), tc.want)
	}
}

// Which completed backups a mode verifies by itself, and when to look
// again.
func TestEachModeVerifiesTheBackupsItSays(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	r := &BackupReconciler{Kind: DatabaseKind, Now: func() time.Time { return now }}
	created := metav1.NewTime(now.Add(-30 * 24 * time.Hour))
	cluster := func(verify *dbv1.BackupVerify, newest string) *Cluster {
		return &Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: "db", CreationTimestamp: created},
			Kind:       DatabaseKind,
			Spec:       dbv1.DatabaseSpec{Backup: &dbv1.BackupSpec{Verify: verify}},
			Status:     dbv1.DatabaseStatus{Backup: &dbv1.BackupStatus{LastSuccessfulBackup: newest}},
		}
	}
	backup := func(name string, completed time.Time, v *dbv1.BackupVerification, annotations map[string]string) *Backup {
		return &Backup{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(completed.Add(-time.Minute)), Annotations: annotations},
			Status:     dbv1.DatabaseBackupStatus{Phase: dbv1.BackupCompleted, CompletionTime: ptr.To(metav1.NewTime(completed)), Verification: v},
		}
	}
	done := &dbv1.BackupVerification{RequestTime: ptr.To(metav1.NewTime(now.Add(-2 * time.Hour))), Outcome: dbv1.VerificationVerified}
	asked := map[string]string{AnnotationVerify: "now"}
	weekly := &dbv1.BackupVerify{Mode: dbv1.VerifyScheduled, Schedule: "0 4 * * 0"} // Sundays 04:00; 2026-11-22 was one

	for _, tc := range []struct {
		name    string
		db      *Cluster
		b       *Backup
		want    bool
		recheck time.Duration
	}{
		{"EachBackup (default): a backup not verified yet", cluster(nil, "b"), backup("b", now.Add(-time.Hour), nil, nil), true, 0},
		{"EachBackup: verified already", cluster(nil, "b"), backup("b", now.Add(-time.Hour), done, nil), false, 0},
		{"EachBackup: verified already, asked again", cluster(nil, "b"), backup("b", now.Add(-time.Hour), done, asked), true, 0},
		{"Off: not asked", cluster(&dbv1.BackupVerify{Mode: dbv1.VerifyOff}, "b"), backup("b", now.Add(-time.Hour), nil, nil), false, 0},
		{"Off: asked", cluster(&dbv1.BackupVerify{Mode: dbv1.VerifyOff}, "b"), backup("b", now.Add(-time.Hour), nil, asked), true, 0},
		{"a former Database's backup", cluster(nil, "old"), backup("old", created.Add(-time.Hour), nil, nil), false, 0},
		{"Scheduled: the newest, a time passed since it completed", cluster(weekly, "b"), backup("b", now.Add(-4*24*time.Hour+time.Hour), nil, nil), true, 0},
		{"Scheduled: not the newest", cluster(weekly, "other"), backup("b", now.Add(-4*24*time.Hour+time.Hour), nil, nil), false, 0},
		{"Scheduled: no time since it completed: at the next one", cluster(weekly, "b"), backup("b", now.Add(-time.Hour), nil, nil), false,
			time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC).Sub(now) + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, recheck := r.verifyRequested(tc.b, tc.db, verifySettingsOf(tc.db))
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.recheck, recheck)
		})
	}
}

// A verification whose pod has not started within startTimeout (no node
// with room, no scratch volume) ends with outcome Error, reason
// NotStarted, instead of waiting forever; its Job goes once that is
// recorded. One whose pod runs is left alone however long it takes.
func TestAVerificationThatCannotStartIsReportedNotQueuedForever(t *testing.T) {
	const ns = "ns"
	now := time.Now()
	requested := metav1.NewTime(now.Add(-2 * time.Hour))
	backup := &dbv1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: ns, UID: "backup-uid", ResourceVersion: "1", Finalizers: []string{FinalizerBackupFile},
			CreationTimestamp: metav1.NewTime(now.Add(-3 * time.Hour))},
		Spec: dbv1.DatabaseBackupSpec{Database: "shop"},
		Status: dbv1.DatabaseBackupStatus{Phase: dbv1.BackupCompleted, File: "first-backup-uid.dump", ClaimName: "shop-backup",
			CompletionTime: ptr.To(metav1.NewTime(now.Add(-150 * time.Minute))), Engine: dbv1.EnginePostgreSQL,
			Verification: &dbv1.BackupVerification{RequestTime: &requested, StartTime: &requested}},
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "shop-verify", Namespace: ns, UID: "job-uid",
		OwnerReferences: []metav1.OwnerReference{backupOwner(DatabaseKind, &Backup{ObjectMeta: backup.ObjectMeta}, false)}}}
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns, UID: "db-uid", CreationTimestamp: metav1.NewTime(now.Add(-24 * time.Hour))}}
	pending := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-verify-x", Namespace: ns, Labels: map[string]string{"batch.kubernetes.io/job-name": job.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}

	runWith := func(t *testing.T, backup *dbv1.DatabaseBackup, job *batchv1.Job, podPhase corev1.PodPhase) (*dbv1.DatabaseBackup, client.Client) {
		scheme := runtime.NewScheme()
		require.NoError(t, clientgoscheme.AddToScheme(scheme))
		require.NoError(t, dbv1.AddToScheme(scheme))
		pod := pending.DeepCopy()
		pod.Status.Phase = podPhase
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(backup, job, db.DeepCopy(), pod).
			WithStatusSubresource(&dbv1.DatabaseBackup{}).Build()
		r := &BackupReconciler{Client: c, Owned: c, API: c, Recorder: events.NewFakeRecorder(100), Kind: DatabaseKind}
		_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "first"}})
		require.NoError(t, err)
		var got dbv1.DatabaseBackup
		require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(backup), &got))
		return &got, c
	}
	run := func(t *testing.T, podPhase corev1.PodPhase) (*dbv1.DatabaseBackup, client.Client) {
		return runWith(t, backup.DeepCopy(), job.DeepCopy(), podPhase)
	}

	t.Run("pending past startTimeout", func(t *testing.T) {
		got, c := run(t, corev1.PodPending)
		v := got.Status.Verification
		require.NotNil(t, v)
		assert.Equal(t, dbv1.VerificationError, v.Outcome)
		assert.Contains(t, v.Message, "did not start within 1h0m0s (startTimeout)")
		cond := meta.FindStatusCondition(got.Status.Conditions, ConditionVerified)
		require.NotNil(t, cond)
		assert.Equal(t, "NotStarted", cond.Reason)

		// The next pass, with the result recorded, deletes the Job.
		r := &BackupReconciler{Client: c, Owned: c, API: c, Recorder: events.NewFakeRecorder(100), Kind: DatabaseKind}
		_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "first"}})
		require.NoError(t, err)
		err = c.Get(context.Background(), client.ObjectKeyFromObject(job), &batchv1.Job{})
		assert.True(t, apierrors.IsNotFound(err), "the Job goes once its result is recorded: %v", err)
	})
	t.Run("its request never recorded", func(t *testing.T) {
		// An operator killed after creating the Job and before writing the
		// request to the status: the Job's own creation time stands in.
		b, j := backup.DeepCopy(), job.DeepCopy()
		b.Status.Verification = nil
		j.CreationTimestamp = requested
		got, _ := runWith(t, b, j, corev1.PodPending)
		require.NotNil(t, got.Status.Verification)
		assert.Equal(t, dbv1.VerificationError, got.Status.Verification.Outcome)
		assert.Contains(t, got.Status.Verification.Message, "did not start within 1h0m0s (startTimeout)")
	})
	t.Run("running however long", func(t *testing.T) {
		got, _ := run(t, corev1.PodRunning)
		assert.Empty(t, got.Status.Verification.Outcome, "a verification that runs is not cut short")
	})

	// The status records a finished verification, and the Job is a newer
	// one's whose request never reached the status (its write lost to a
	// conflict): that verification is recorded and goes on, its Job kept.
	// The finished one's own Job still goes.
	finished := func() *dbv1.DatabaseBackup {
		b := backup.DeepCopy()
		b.Status.Verification = &dbv1.BackupVerification{RequestTime: &requested, StartTime: &requested,
			CompletionTime: ptr.To(metav1.NewTime(requested.Add(time.Minute))), Outcome: dbv1.VerificationVerified}
		return b
	}
	t.Run("a newer verification's Job, its request lost", func(t *testing.T) {
		newer := metav1.NewTime(now.Add(-time.Minute).Truncate(time.Second))
		j := job.DeepCopy()
		metav1.SetMetaDataAnnotation(&j.ObjectMeta, AnnotationVerifyRequest, newer.UTC().Format(time.RFC3339))
		got, c := runWith(t, finished(), j, corev1.PodRunning)
		v := got.Status.Verification
		require.NotNil(t, v)
		assert.Empty(t, v.Outcome, "the newer verification runs")
		assert.True(t, v.RequestTime.Equal(&newer), "its request time, from the Job: %s", v.RequestTime)
		assert.Equal(t, "Running", meta.FindStatusCondition(got.Status.Conditions, ConditionVerified).Reason)
		assert.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(job), &batchv1.Job{}), "its Job is kept")
	})
	t.Run("the finished verification's own Job", func(t *testing.T) {
		j := job.DeepCopy()
		metav1.SetMetaDataAnnotation(&j.ObjectMeta, AnnotationVerifyRequest, requested.UTC().Format(time.RFC3339))
		got, c := runWith(t, finished(), j, corev1.PodSucceeded)
		assert.Equal(t, dbv1.VerificationVerified, got.Status.Verification.Outcome)
		err := c.Get(context.Background(), client.ObjectKeyFromObject(job), &batchv1.Job{})
		assert.True(t, apierrors.IsNotFound(err), "deleted: %v", err)
	})
}

// The Database's BackupVerified condition: True while its newest verified
// backup is within maxAge (and the operator looks again when it will not
// be), False with a Warning Event once it is older, or when none is
// verified and the oldest completed backup is that old.
func TestBackupVerifiedTurnsFalseWhenTheNewestVerifiedBackupIsTooOld(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	recorder := events.NewFakeRecorder(10)
	r := &Reconciler{Kind: DatabaseKind, Recorder: recorder, Now: func() time.Time { return now }}
	db := &Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "ns", CreationTimestamp: metav1.NewTime(now.Add(-30 * 24 * time.Hour))},
		Object:     &dbv1.Database{},
		Kind:       DatabaseKind,
		Spec:       dbv1.DatabaseSpec{Backup: &dbv1.BackupSpec{Verify: &dbv1.BackupVerify{MaxAge: &metav1.Duration{Duration: 48 * time.Hour}}}},
	}
	completed := func(name string, age time.Duration, outcome dbv1.VerificationOutcome) *Backup {
		b := &Backup{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age - time.Minute))},
			Status:     dbv1.DatabaseBackupStatus{Phase: dbv1.BackupCompleted, CompletionTime: ptr.To(metav1.NewTime(now.Add(-age)))},
		}
		if outcome != "" {
			b.Status.Verification = &dbv1.BackupVerification{Outcome: outcome}
		}
		return b
	}

	recheck := r.observeVerifications(db, []*Backup{completed("old", 40*time.Hour, dbv1.VerificationVerified), completed("new", time.Hour, dbv1.VerificationFailed)})
	c := meta.FindStatusCondition(db.Status.Conditions, ConditionBackupVerified)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, "old", db.Status.Backup.LastVerifiedBackup, "a failed verification does not count")
	assert.Equal(t, 8*time.Hour+time.Second, recheck, "looked at again when it passes maxAge")

	now = now.Add(9 * time.Hour)
	r.observeVerifications(db, []*Backup{completed("old", 49*time.Hour, dbv1.VerificationVerified)})
	c = meta.FindStatusCondition(db.Status.Conditions, ConditionBackupVerified)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, "VerifiedBackupTooOld", c.Reason)
	assert.Contains(t, c.Message, "is older than backup.verify.maxAge (48h0m0s)")
	require.Len(t, recorder.Events, 1)
	assert.Contains(t, <-recorder.Events, "Warning VerifiedBackupTooOld")
	r.observeVerifications(db, []*Backup{completed("old", 49*time.Hour, dbv1.VerificationVerified)})
	assert.Empty(t, recorder.Events, "a lasting problem is announced once")

	fresh := &Cluster{ObjectMeta: db.ObjectMeta, Object: &dbv1.Database{}, Kind: DatabaseKind, Spec: db.Spec}
	r.observeVerifications(fresh, []*Backup{completed("never", 50*time.Hour, "")})
	c = meta.FindStatusCondition(fresh.Status.Conditions, ConditionBackupVerified)
	require.NotNil(t, c)
	assert.Equal(t, "NoVerifiedBackup", c.Reason)
}

// A verification never requests more CPU than the database's own pods:
// under contention the kernel divides a node's CPU by request, and the
// servers' probes time out when a verification outranks them (a BestEffort
// primary left -rw on the real node in CI). Resources the user gives are
// used as given.
func TestAVerificationNeverOutranksTheServersForCPU(t *testing.T) {
	eng := DatabaseKind.Engines[dbv1.EnginePostgreSQL]
	verifier := eng.(engine.Verifier)
	b := &Backup{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "b-uid"},
		Cluster:    "db",
		Status:     dbv1.DatabaseBackupStatus{Phase: dbv1.BackupCompleted, ClaimName: "db-backup", File: "b.dump", SHA256: "00"},
	}
	cpu := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
	}
	given := &corev1.ResourceRequirements{Requests: cpu("2")}
	for _, tc := range []struct {
		name       string
		servers    *corev1.ResourceRequirements
		failover   bool
		verify     *corev1.ResourceRequirements
		wantCPU    string // the verification pod's CPU request
		bestEffort bool
	}{
		{"servers with the default resources (50m): 50m", nil, false, nil, "50m", false},
		{"servers with `resources: {}`: BestEffort like them", &corev1.ResourceRequirements{}, false, nil, "0", true},
		{"servers with `resources: {}` but the agent's 10m: no CPU request", &corev1.ResourceRequirements{}, true, nil, "0", false},
		{"servers with memory only: no CPU request", &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}, false, nil, "0", false},
		{"servers requesting 50m: 50m", &corev1.ResourceRequirements{Requests: cpu("50m")}, false, nil, "50m", false},
		{"servers limited to 2 CPU (the request too): 100m", &corev1.ResourceRequirements{Limits: cpu("2")}, false, nil, "100m", false},
		{"servers requesting 4 CPU: 100m", &corev1.ResourceRequirements{Requests: cpu("4")}, true, nil, "100m", false},
		{"verify.resources as given", nil, false, given, "2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &Cluster{
				ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "db-uid"},
				Kind:       DatabaseKind,
				Spec: dbv1.DatabaseSpec{Name: "app", Port: 5432, StorageSize: "1Gi", Replicas: 2, Image: "postgres:15.4", Engine: dbv1.EnginePostgreSQL,
					Resources: tc.servers, Failover: &dbv1.FailoverSpec{Enabled: ptr.To(tc.failover)},
					Backup: &dbv1.BackupSpec{Verify: &dbv1.BackupVerify{Resources: tc.verify}}},
			}
			servers := statefulSet(db, eng, nil)
			if tc.failover {
				require.NoError(t, withAgent(db, servers, "operator:1"))
			}
			verification := verifyJob(db, verifier, b, verifySettingsOf(db)).Spec.Template.Spec

			got := podCPURequest(verification)
			assert.Zero(t, got.Cmp(resource.MustParse(tc.wantCPU)), "the verification requests %s CPU, want %s", got.String(), tc.wantCPU)
			assert.Equal(t, tc.bestEffort, bestEffort(verification), "the verification is BestEffort")
			if tc.verify == nil {
				serverCPU := podCPURequest(servers.Spec.Template.Spec)
				assert.LessOrEqual(t, got.Cmp(serverCPU), 0, "the verification requests %s CPU, more than a server pod's %s", got.String(), serverCPU.String())
				assert.Equal(t, bestEffort(servers.Spec.Template.Spec), bestEffort(verification), "the verification is BestEffort exactly when the servers are")
			}
		})
	}
}

// podCPURequest is what the kubelet gives a pod's CPU share from: each
// container's CPU request, or its limit when only that is set.
func podCPURequest(spec corev1.PodSpec) resource.Quantity {
	var sum resource.Quantity
	for _, c := range spec.Containers {
		q, ok := c.Resources.Requests[corev1.ResourceCPU]
		if !ok {
			q = c.Resources.Limits[corev1.ResourceCPU]
		}
		sum.Add(q)
	}
	return sum
}

// bestEffort: no container requests or limits anything.
func bestEffort(spec corev1.PodSpec) bool {
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if len(c.Resources.Requests) > 0 || len(c.Resources.Limits) > 0 {
			return false
		}
	}
	return true
}
