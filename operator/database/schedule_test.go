package database

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

func TestSchedulesAreParsedLikeACronJobs(t *testing.T) {
	for _, ok := range []string{"0 3 * * *", "*/15 * * * 1-5", "@daily", "@hourly", "@weekly"} {
		_, _, err := parseSchedule(ok, "")
		assert.NoError(t, err, ok)
	}
	for _, bad := range []string{"0 3 * *", "61 * * * *", "@often", "* * * * * *"} {
		_, _, err := parseSchedule(bad, "")
		assert.Error(t, err, bad)
	}
	_, _, err := parseSchedule("@daily", "Mars/Olympus")
	assert.ErrorContains(t, err, `timeZone "Mars/Olympus" is not a known IANA time zone`)
}

func TestMissedSchedulesGiveOneBackupForTheMostRecentTime(t *testing.T) {
	s, loc, err := parseSchedule("*/5 * * * *", "")
	require.NoError(t, err)
	last := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

	_, ok := lastDue(s, loc, last, last.Add(4*time.Minute))
	assert.False(t, ok, "nothing due before the next time")

	due, ok := lastDue(s, loc, last, last.Add(3*time.Hour+7*time.Minute))
	require.True(t, ok)
	assert.Equal(t, last.Add(3*time.Hour+5*time.Minute), due, "the most recent missed time, once")

	// Years of downtime still end quickly, on the most recent time.
	due, ok = lastDue(s, loc, last.AddDate(-5, 0, 0), last)
	require.True(t, ok)
	assert.Equal(t, last, due)
}

func TestSchedulesFollowTheirTimeZone(t *testing.T) {
	s, loc, err := parseSchedule("0 3 * * *", "Europe/Paris")
	require.NoError(t, err)
	// 03:00 in Paris in winter is 02:00 UTC.
	due, ok := lastDue(s, loc, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	require.True(t, ok)
	assert.Equal(t, time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC), due.UTC())
}

func TestRetentionKeepsTheNewestAndWhatARestoreUses(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	b := func(name string, age time.Duration, completed bool) backupRecord {
		return backupRecord{Name: name, Finished: true, Completed: completed, Time: now.Add(-age)}
	}
	backups := []backupRecord{
		b("d1", 1*day, true), b("d2", 2*day, true), b("f3", 3*day, false), b("d4", 4*day, true),
		b("d5", 5*day, true), {Name: "running", Time: now.Add(-10 * day)},
	}
	assert.ElementsMatch(t, []string{"f3", "d4", "d5"}, toPrune(backups, 2, 0, now), "keep the last 2 completed")
	assert.ElementsMatch(t, []string{"d4", "d5"}, toPrune(backups, 0, 3*day+time.Hour, now), "max age 3 days")
	assert.ElementsMatch(t, []string{"f3", "d4", "d5"}, toPrune(backups, 2, 3*day+time.Hour, now), "both")
	assert.Empty(t, toPrune(backups, 10, 0, now))

	// Everything too old: the newest completed backup stays anyway.
	assert.ElementsMatch(t, []string{"d2", "f3", "d4", "d5"}, toPrune(backups, 0, time.Hour, now))

	backups[4].InUse = true
	assert.ElementsMatch(t, []string{"f3", "d4"}, toPrune(backups, 2, 0, now), "a backup a restore uses is kept")
}

// Completion times have a resolution of a second and the list comes from a
// cache in no set order: backups finishing in the same second are ordered
// by creation, so retention prunes the same one whatever the order.
func TestRetentionOrdersBackupsFinishedInTheSameSecondByCreation(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	finished := now.Add(-time.Minute)
	older := backupRecord{Name: "z-scheduled", Finished: true, Completed: true, Time: finished, Created: now.Add(-time.Hour)}
	newer := backupRecord{Name: "a-by-hand", Finished: true, Completed: true, Time: finished, Created: now.Add(-30 * time.Minute)}
	newest := backupRecord{Name: "m-by-hand", Finished: true, Completed: true, Time: now, Created: now}
	for _, order := range [][]backupRecord{{older, newer, newest}, {newer, older, newest}, {newest, newer, older}} {
		assert.Equal(t, []string{"z-scheduled"}, toPrune(order, 2, 0, now))
	}
}

// A pass made the scheduled backup of a time, but its status write (the
// time recorded as done) was lost to a conflict. The next pass, at the
// same time, sees that backup unfinished: it stands for this very time,
// so it is no missed one (before, it was counted, with a Warning).
func TestTheBackupOfThisTimeIsNotAMissedOne(t *testing.T) {
	created := time.Date(2026, 11, 25, 0, 30, 0, 0, time.UTC)
	now := time.Date(2026, 11, 25, 4, 5, 0, 0, time.UTC)
	db := DatabaseKind.Clusters.View(&dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: "ns", UID: "u1", CreationTimestamp: metav1.NewTime(created)},
		Spec:       dbv1.DatabaseSpec{Backup: &dbv1.BackupSpec{Schedule: "@hourly"}},
		Status: dbv1.DatabaseStatus{Backup: &dbv1.BackupStatus{
			LastScheduleTime: &metav1.Time{Time: now.Add(-time.Hour).Truncate(time.Hour)},
			MissedSchedules:  2,
		}},
	})
	made := DatabaseKind.Backups.View(&dbv1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{
		Name: scheduledBackupName(db, now.Truncate(time.Hour)), Namespace: "ns", CreationTimestamp: metav1.NewTime(now),
		Labels: map[string]string{LabelBackupReason: reasonScheduled},
	}})
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Kind: DatabaseKind, Recorder: rec, Now: func() time.Time { return now }}

	_, err := r.schedule(context.Background(), db, []*Backup{made})
	require.NoError(t, err)
	assert.Equal(t, int64(2), db.Status.Backup.MissedSchedules, "the time whose backup exists is not missed")
	assert.Equal(t, now.Truncate(time.Hour), db.Status.Backup.LastScheduleTime.Time, "and it is recorded as done")
	assert.Empty(t, rec.Events, "no BackupScheduleMissed")
}

// A pass that made a scheduled backup and lost its status write (or a
// pass that read the Database before that write) leaves status.backup
// lastScheduleTime before the backup's own time. When a later time comes
// while that backup has not finished, only the later time is missed: the
// backup's own time was made.
func TestATimeWhoseBackupWaitsIsNotCountedMissedWhenTheStatusLostIt(t *testing.T) {
	created := time.Date(2026, 11, 25, 1, 30, 0, 0, time.UTC)
	made := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 25, 4, 5, 0, 0, time.UTC)
	for name, last := range map[string]*metav1.Time{
		"no time recorded yet":   nil,
		"an older time recorded": {Time: time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC)},
	} {
		t.Run(name, func(t *testing.T) {
			db := DatabaseKind.Clusters.View(&dbv1.Database{
				ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: "ns", UID: "u1", CreationTimestamp: metav1.NewTime(created)},
				Spec:       dbv1.DatabaseSpec{Backup: &dbv1.BackupSpec{Schedule: "@hourly"}},
				Status:     dbv1.DatabaseStatus{Backup: &dbv1.BackupStatus{LastScheduleTime: last}},
			})
			waiting := DatabaseKind.Backups.View(&dbv1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{
				Name: scheduledBackupName(db, made), Namespace: "ns", CreationTimestamp: metav1.NewTime(made.Add(time.Minute)),
				Labels: map[string]string{LabelBackupReason: reasonScheduled},
			}})
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Kind: DatabaseKind, Recorder: rec, Now: func() time.Time { return now }}

			_, err := r.schedule(context.Background(), db, []*Backup{waiting})
			require.NoError(t, err)
			assert.Equal(t, int64(1), db.Status.Backup.MissedSchedules, "04:00 is missed; 03:00 has its backup")
			assert.Equal(t, now.Truncate(time.Hour), db.Status.Backup.LastScheduleTime.Time)
			require.Len(t, rec.Events, 1)
			assert.Contains(t, <-rec.Events, "(1 schedule times missed so far)")
		})
	}
}

func TestLastMadeReadsTheWaitingBackupsTimeFromItsName(t *testing.T) {
	last := time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC)
	at := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	assert.Equal(t, at, LastMade(last, "db", ScheduledName("db", at)), "a later waiting backup")
	assert.Equal(t, last, LastMade(last, "db", ScheduledName("db", last.Add(-time.Hour))), "an earlier one changes nothing")
	assert.Equal(t, last, LastMade(last, "db", ""), "none waiting")
	assert.Equal(t, last, LastMade(last, "db", ScheduledName("other", at)), "another schedule's name")
	assert.Equal(t, last, LastMade(last, "db", "db-by-hand"), "a name that carries no time")
}
