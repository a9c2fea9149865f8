package postgres_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// The operator and verify.sh together, on the host's PostgreSQL: each
// backup is verified by a Job the runner really runs (no injected
// result); what it found lands on the DatabaseBackup (status,
// condition, Events) and the Database; retention keeps the newest
// verified backup.
func TestTheOperatorVerifiesBackupsByRestoringThemWithARealPostgreSQL(t *testing.T) {
	t.Parallel()
	e := newEndToEnd(t)
	ctx := context.Background()

	e.database("db", dbv1.DeletionDelete, "")
	e.waitReady("db")
	e.sql("db", "CREATE TABLE notes (v text); INSERT INTO notes VALUES ('one'), ('two')")
	e.setVerify("db", func(v *dbv1.BackupSpec) {
		v.Verify = &dbv1.BackupVerify{UserCheck: "SELECT count(*) = 2 FROM notes"}
	})

	// Each backup is verified (mode EachBackup, the default).
	e.backup("good")
	good := e.waitVerified("good")
	v := good.Status.Verification
	require.Equal(t, dbv1.VerificationVerified, v.Outcome, "%+v", v)
	assert.Equal(t, []string{"checksum", "restore", "rowCounts", "userCheck"}, checkNamesOf(v))
	assert.EqualValues(t, 1, v.Tables)
	assert.EqualValues(t, 2, v.Rows)
	assert.EqualValues(t, 2, good.Status.Rows, "the backup's own counts")
	assert.NotNil(t, v.Duration)
	assert.True(t, meta.IsStatusConditionTrue(good.Status.Conditions, database.ConditionVerified))
	e.assertEvent("good", "Verified")
	e.assertNoVerifyJob("db")

	var db dbv1.Database
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "db"}, &db))
		require.NotNil(ct, db.Status.Backup)
		require.Equal(ct, "good", db.Status.Backup.LastVerifiedBackup)
		require.True(ct, meta.IsStatusConditionTrue(db.Status.Conditions, database.ConditionBackupVerified), "%+v", db.Status.Conditions)
	}, 2*time.Minute, 200*time.Millisecond)

	// A user check that no longer holds fails the next backup's
	// verification, named.
	e.sql("db", "INSERT INTO notes VALUES ('three')")
	e.backup("check-fails")
	failed := e.waitVerified("check-fails").Status.Verification
	require.Equal(t, dbv1.VerificationFailed, failed.Outcome, "%+v", failed)
	assert.Equal(t, "userCheck", failed.FailedCheck)
	assert.Contains(t, failed.Message, `returned "f", not true`)
	c := e.condition("check-fails", database.ConditionVerified)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, "UserCheckFailed", c.Reason)
	e.assertEvent("check-fails", "VerificationFailed")

	// A corrupted file, verified on demand (mode Off: only when asked).
	e.setVerify("db", func(v *dbv1.BackupSpec) {
		v.Verify = &dbv1.BackupVerify{Mode: dbv1.VerifyOff}
	})
	e.backup("corrupted")
	corrupted := e.waitCompleted("corrupted")
	assert.Nil(t, corrupted.Status.Verification, "mode Off verifies nothing by itself")
	e.runner.CorruptFile(corrupted.Status.ClaimName, corrupted.Status.File)
	patch := []byte(`{"metadata":{"annotations":{"` + database.AnnotationVerify + `":"now"}}}`)
	require.NoError(t, e.c.Patch(ctx, corrupted, client.RawPatch("application/merge-patch+json", patch)))
	bad := e.waitVerified("corrupted")
	require.Equal(t, dbv1.VerificationFailed, bad.Status.Verification.Outcome)
	assert.Equal(t, "checksum", bad.Status.Verification.FailedCheck)
	assert.Contains(t, bad.Status.Verification.Message, corrupted.Status.SHA256)
	assert.Equal(t, "ChecksumFailed", e.condition("corrupted", database.ConditionVerified).Reason)
	e.assertEvent("corrupted", "VerificationFailed")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var cur dbv1.DatabaseBackup
		require.NoError(ct, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "corrupted"}, &cur))
		require.NotContains(ct, cur.Annotations, database.AnnotationVerify, "the request is answered")
	}, 2*time.Minute, 200*time.Millisecond)
	e.assertNoVerifyJob("db")

	// Retention keeping one backup keeps the newest (corrupted) and the
	// newest verified one (good); the other goes.
	e.setVerify("db", func(v *dbv1.BackupSpec) {
		v.Retention = &dbv1.Retention{KeepLast: ptr.To(int32(1))}
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var list dbv1.DatabaseBackupList
		require.NoError(ct, e.c.List(ctx, &list, client.InNamespace(e.ns)))
		var names []string
		for _, b := range list.Items {
			names = append(names, b.Name)
		}
		require.ElementsMatch(ct, []string{"good", "corrupted"}, names)
	}, 2*time.Minute, 200*time.Millisecond)
	// The pass that deleted check-fails would have deleted good with it:
	// it is held, and not being deleted.
	var kept dbv1.DatabaseBackup
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "good"}, &kept))
	assert.Nil(t, kept.DeletionTimestamp, "retention deleted the newest verified backup")
	assert.Contains(t, kept.Annotations, database.AnnotationPrefixHeldBy+"verified."+string(db.UID))

	assert.Equal(t, 1.0, verificationCount(t, e.ns, "verified"))
	assert.Equal(t, 2.0, verificationCount(t, e.ns, "failed"))
}

func checkNamesOf(v *dbv1.BackupVerification) []string {
	var out []string
	for _, c := range v.Checks {
		out = append(out, c.Name)
	}
	return out
}

// setVerify changes the Database's spec.backup.
func (e *endToEnd) setVerify(name string, change func(*dbv1.BackupSpec)) {
	e.t.Helper()
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		var db dbv1.Database
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &db))
		if db.Spec.Backup == nil {
			db.Spec.Backup = &dbv1.BackupSpec{}
		}
		change(db.Spec.Backup)
		require.NoError(ct, e.c.Update(context.Background(), &db))
	}, time.Minute, 100*time.Millisecond)
}

func (e *endToEnd) backup(name string) {
	e.t.Helper()
	require.NoError(e.t, e.c.Create(context.Background(), &dbv1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec:       dbv1.DatabaseBackupSpec{Database: "db"},
	}))
}

// waitVerified waits for a verification's outcome on the backup.
func (e *endToEnd) waitVerified(name string) *dbv1.DatabaseBackup {
	e.t.Helper()
	var cur dbv1.DatabaseBackup
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &cur))
		require.NotNil(ct, cur.Status.Verification, "status: %+v", cur.Status)
		require.NotEmpty(ct, cur.Status.Verification.Outcome, "verification: %+v, conditions: %+v", cur.Status.Verification, cur.Status.Conditions)
	}, 3*time.Minute, 200*time.Millisecond, "DatabaseBackup %s never verified", name)
	return &cur
}

func (e *endToEnd) condition(backup, kind string) metav1.Condition {
	e.t.Helper()
	var cur dbv1.DatabaseBackup
	require.NoError(e.t, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: backup}, &cur))
	c := meta.FindStatusCondition(cur.Status.Conditions, kind)
	require.NotNil(e.t, c, "%s has no %s condition: %+v", backup, kind, cur.Status.Conditions)
	return *c
}

func (e *endToEnd) assertEvent(name, reason string) {
	e.t.Helper()
	assert.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		var evs eventsv1.EventList
		require.NoError(ct, e.c.List(context.Background(), &evs, client.InNamespace(e.ns)))
		var reasons []string
		for _, ev := range evs.Items {
			if ev.Regarding.Name == name {
				reasons = append(reasons, ev.Reason)
			}
		}
		require.Contains(ct, reasons, reason)
	}, time.Minute, 200*time.Millisecond, "Event %s about %s", reason, name)
}

// assertNoVerifyJob: the verification Job is deleted once its result is
// recorded.
func (e *endToEnd) assertNoVerifyJob(db string) {
	e.t.Helper()
	assert.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		var job batchv1.Job
		err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: db + "-verify"}, &job)
		require.True(ct, err != nil && strings.Contains(err.Error(), "not found"), "Job %s-verify still exists", db)
	}, time.Minute, 200*time.Millisecond)
}

// verificationCount reads deckhand_database_backup_verification_total of
// the namespace's Database db from the operator's registry.
func verificationCount(t *testing.T, ns, result string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "deckhand_database_backup_verification_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelsOf(m)["namespace"] == ns && labelsOf(m)["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// Mode Scheduled, through the operator with the host's PostgreSQL: each
// schedule time verifies the newest completed backup once (an older one
// never), and schedule times that pass while a verification runs start
// none, then or after it. The test controls time with the operator's
// clock (database.Options.Now: the real clock plus an offset the test
// moves), which the schedules and the backup reconciler read; it starts
// at noon UTC of a day to come, 16 hours before the schedule's 04:00, so
// real time passing during the test never reaches a schedule time. A
// verification "runs" while its pod cannot start (a pod quota of 0; the
// startTimeout is longer than the days the clock jumps).
func TestScheduledVerificationVerifiesTheNewestBackupOncePerScheduleTime(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	noon := time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
	offset.Store(int64(time.Until(noon)))
	e := newEndToEnd(t, database.Options{Now: now})
	ctx := context.Background()
	// jump moves the clock to the next 04:00 UTC and a minute, and makes
	// the operator look at the backups (nothing else would wake it: it
	// asked to be woken at the schedule time, in real time).
	jump := func(names ...string) time.Time {
		due := now().UTC().Truncate(24 * time.Hour).Add(28 * time.Hour)
		offset.Store(int64(time.Until(due.Add(time.Minute))))
		for _, name := range names {
			e.poke(name)
		}
		return due
	}

	e.database("db", dbv1.DeletionDelete, "")
	e.waitReady("db")
	e.sql("db", "CREATE TABLE notes (v text); INSERT INTO notes VALUES ('one')")
	e.setVerify("db", func(v *dbv1.BackupSpec) {
		v.Verify = &dbv1.BackupVerify{Mode: dbv1.VerifyScheduled, Schedule: "0 4 * * *", StartTimeout: &metav1.Duration{Duration: 240 * time.Hour}}
	})
	e.backup("older")
	e.waitCompleted("older")
	e.backup("newest")
	assert.Nil(t, e.waitCompleted("newest").Status.Verification, "no schedule time has come")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var db dbv1.Database
		require.NoError(ct, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "db"}, &db))
		require.NotNil(ct, db.Status.Backup)
		require.Equal(ct, "newest", db.Status.Backup.LastSuccessfulBackup)
	}, 2*time.Minute, 200*time.Millisecond, "the Database's newest backup")

	// The first schedule time: the newest backup's verification starts,
	// and runs (its pod cannot start yet).
	quota := testenv.PodQuota(t, e.c, e.ns, 0)
	first := jump("older", "newest")
	running := e.waitVerification("newest", "started", func(ct *assert.CollectT, v *dbv1.BackupVerification) {
		require.NotNil(ct, v.StartTime)
		require.Empty(ct, v.Outcome)
	})
	assert.False(t, running.RequestTime.Time.Before(first), "requested at the schedule time: %s", running.RequestTime)

	// A second schedule time passes while it runs; then it ends.
	jump("older", "newest")
	require.NoError(t, e.c.Delete(ctx, quota))
	done := e.waitVerified("newest").Status.Verification
	require.Equal(t, dbv1.VerificationVerified, done.Outcome, "%+v", done)
	assert.Equal(t, running.RequestTime, done.RequestTime, "the same verification")
	e.assertNoVerifyJob("db")

	// The third schedule time verifies it again: the second, missed
	// while one ran, did not start one of its own.
	third := jump("older", "newest")
	again := e.waitVerification("newest", "verified again", func(ct *assert.CollectT, v *dbv1.BackupVerification) {
		require.False(ct, v.RequestTime.Time.Before(third), "requested at %s, before the third schedule time", v.RequestTime)
		require.NotEmpty(ct, v.Outcome)
	})
	assert.Equal(t, dbv1.VerificationVerified, again.Outcome, "%+v", again)
	assert.Equal(t, 2.0, verificationCount(t, e.ns, "verified"), "one verification per schedule time that found none running")

	var older dbv1.DatabaseBackup
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "older"}, &older))
	assert.Nil(t, older.Status.Verification, "only the newest backup is verified on schedule")
}

// poke changes an annotation of the backup, so the operator reconciles it.
func (e *endToEnd) poke(name string) {
	e.t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"test.deckhand.dev/poke":"` + time.Now().Format(time.RFC3339Nano) + `"}}}`)
	require.NoError(e.t, e.c.Patch(context.Background(), &dbv1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}},
		client.RawPatch("application/merge-patch+json", patch)))
}

// waitVerification waits until the backup's status.verification passes
// check.
func (e *endToEnd) waitVerification(name, what string, check func(*assert.CollectT, *dbv1.BackupVerification)) *dbv1.BackupVerification {
	e.t.Helper()
	var cur dbv1.DatabaseBackup
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &cur))
		require.NotNil(ct, cur.Status.Verification, "status: %+v", cur.Status)
		check(ct, cur.Status.Verification)
	}, 3*time.Minute, 200*time.Millisecond, "DatabaseBackup %s: verification %s", name, what)
	return cur.Status.Verification
}
