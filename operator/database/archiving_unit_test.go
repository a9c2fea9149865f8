package database

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

func TestWALArchivingConditionFollowsTheLastAttempt(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	for _, tc := range []struct {
		name   string
		a      instance.ArchiverStatus
		ok     bool
		reason string
		says   string
	}{
		{"nothing tried yet", instance.ArchiverStatus{}, true, "Archiving", "primary db-0 archives its WAL"},
		{"archived", instance.ArchiverStatus{ArchivedCount: 3, LastArchivedWAL: "000000010000000000000003", LastArchivedTime: &t1}, true, "Archiving", ""},
		{"failed, then archived", instance.ArchiverStatus{ArchivedCount: 3, FailedCount: 2, LastArchivedTime: &t1, LastFailedTime: &t0}, true, "Archiving", ""},
		{"archived, then failed", instance.ArchiverStatus{ArchivedCount: 3, FailedCount: 2, LastArchivedWAL: "000000010000000000000003", LastArchivedTime: &t0,
			LastFailedWAL: "000000010000000000000004", LastFailedTime: &t1, PendingSegments: 5, PendingBytes: 5 << 24}, false, "ArchiveFailing",
			"primary db-0 cannot archive WAL file 000000010000000000000004 (last archived: 000000010000000000000003): PostgreSQL keeps it and the files after it in pg_wal until archiving succeeds; 5 segments (80 MiB) wait there now, and the data volume is 60% full"},
		{"never archived", instance.ArchiverStatus{FailedCount: 1, LastFailedWAL: "000000010000000000000001", LastFailedTime: &t0}, false, "ArchiveFailing",
			"(nothing archived since the server started)"},
	} {
		ok, reason, msg := archivingState("db-0", tc.a, &instance.VolumeUsage{TotalBytes: 1000 << 20, FreeBytes: 400 << 20})
		assert.Equal(t, tc.ok, ok, tc.name)
		assert.Equal(t, tc.reason, reason, tc.name)
		assert.Contains(t, msg, tc.says, tc.name)
	}
}

func TestRetentionPolicyBecomesBarmansRecoveryWindow(t *testing.T) {
	for policy, want := range map[string]string{
		"":    "",
		"30d": "RECOVERY WINDOW OF 30 DAYS",
		"4w":  "RECOVERY WINDOW OF 4 WEEKS",
		"6m":  "RECOVERY WINDOW OF 6 MONTHS",
	} {
		assert.Equal(t, want, barmanRetention(policy), policy)
	}
}

// What the primary's archiver found in the archive becomes the Database's
// status: the recoverable window's start (the oldest base backup's end),
// the newest and the count; an Event for each new base backup and a
// Warning for a failure, each once; RecoverableUntil follows the last
// archived segment at most every 30 s, while the archive keeps up.
func TestTheArchivesBaseBackupsAndWindowReachTheStatus(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Recorder: rec, Kind: DatabaseKind}
	db := DatabaseKind.Clusters.View(&dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "ns"},
		Spec:       dbv1.DatabaseSpec{Backup: &dbv1.BackupSpec{Storage: &dbv1.BackupStorage{ObjectStore: &dbv1.ObjectStore{Bucket: "b"}}}},
	})
	t0 := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	first := &instance.BaseBackup{Name: "base-20261128T030000Z", ID: "20261128T030000", BeginTime: t0, EndTime: t0.Add(time.Minute), BeginLSN: "0/2000028", EndLSN: "0/2000100", Timeline: 1}
	status := func(archived time.Time, found *instance.BaseBackups) instance.Status {
		return instance.Status{Pod: "shop-0", ServerUp: true, Role: instance.RolePrimary,
			Archiver: &instance.ArchiverStatus{ArchivedCount: 1, LastArchivedTime: &archived}, BaseBackups: found}
	}
	drain := func() []string {
		var got []string
		for len(rec.Events) > 0 {
			got = append(got, <-rec.Events)
		}
		return got
	}

	r.observeArchiving(db, status(t0.Add(2*time.Minute), &instance.BaseBackups{CheckedAt: t0.Add(2 * time.Minute), Count: 1, Oldest: first, Newest: first}))
	require.NotNil(t, db.Status.RecoverableFrom)
	assert.Equal(t, t0.Add(time.Minute), db.Status.RecoverableFrom.Time.UTC())
	assert.Equal(t, t0.Add(2*time.Minute), db.Status.RecoverableUntil.Time.UTC())
	assert.Equal(t, int32(1), db.Status.BaseBackups.Count)
	assert.Equal(t, "base-20261128T030000Z", db.Status.BaseBackups.Newest.Name)
	got := drain()
	require.Len(t, got, 1)
	assert.Contains(t, got[0], "Normal BaseBackupTaken base backup base-20261128T030000Z (20261128T030000) ended at 2026-11-28T03:01:00Z, WAL 0/2000028 to 0/2000100: the archive holds 1")

	// The same again, a segment 10 s later: no Event, the window's end
	// unchanged; 40 s later it moves.
	r.observeArchiving(db, status(t0.Add(2*time.Minute+10*time.Second), &instance.BaseBackups{CheckedAt: t0.Add(3 * time.Minute), Count: 1, Oldest: first, Newest: first}))
	assert.Empty(t, drain())
	assert.Equal(t, t0.Add(2*time.Minute), db.Status.RecoverableUntil.Time.UTC())
	r.observeArchiving(db, status(t0.Add(2*time.Minute+40*time.Second), &instance.BaseBackups{CheckedAt: t0.Add(3 * time.Minute), Count: 1, Oldest: first, Newest: first}))
	assert.Equal(t, t0.Add(2*time.Minute+40*time.Second), db.Status.RecoverableUntil.Time.UTC())

	// Behind a burst of writes (segments waiting), a segment archived
	// now was switched long ago: the window's end stays where the archive
	// last caught up, and moves once it does again.
	behind := status(t0.Add(5*time.Minute), nil)
	behind.Archiver.PendingSegments = 12
	r.observeArchiving(db, behind)
	assert.Equal(t, t0.Add(2*time.Minute+40*time.Second), db.Status.RecoverableUntil.Time.UTC(), "with 12 segments waiting")
	caughtUp := status(t0.Add(6*time.Minute), nil)
	caughtUp.Archiver.PendingSegments = 1
	r.observeArchiving(db, caughtUp)
	assert.Equal(t, t0.Add(6*time.Minute), db.Status.RecoverableUntil.Time.UTC(), "with the one being archived waiting")

	// The held backups as the archiver found them; the newest verified
	// one carried over from look to look.
	db.Status.BaseBackups.LastVerified = &dbv1.BaseBackupRef{Name: first.Name, ID: first.ID}
	held := &instance.BaseBackups{CheckedAt: t0.Add(4 * time.Minute), Count: 1, Oldest: first, Newest: first,
		Held: []instance.HeldBaseBackup{{ID: first.ID, Name: first.Name, Reason: "the newest verified base backup"}}}
	r.observeArchiving(db, status(t0.Add(4*time.Minute), held))
	assert.Equal(t, []dbv1.HeldBaseBackup{{BaseBackupRef: dbv1.BaseBackupRef{Name: first.Name, ID: first.ID}, Reason: "the newest verified base backup"}}, db.Status.BaseBackups.Held)
	assert.Equal(t, &dbv1.BaseBackupRef{Name: first.Name, ID: first.ID}, db.Status.BaseBackups.LastVerified)

	// A failed base backup: one Warning, however often it is reported.
	failed := &instance.BaseBackups{CheckedAt: t0.Add(time.Hour), Count: 1, Oldest: first, Newest: first, Error: "base backup base-20261128T040000Z failed: the store refused the keys"}
	r.observeArchiving(db, status(t0.Add(time.Hour), failed))
	r.observeArchiving(db, status(t0.Add(time.Hour), failed))
	got = drain()
	require.Len(t, got, 1)
	assert.Contains(t, got[0], "Warning BaseBackupFailed base backup base-20261128T040000Z failed: the store refused the keys")
	assert.Equal(t, failed.Error, db.Status.BaseBackups.LastError)

	// Archiving turned off: the window goes.
	db.Spec.Backup.Storage = nil
	r.observeArchiving(db, status(t0.Add(2*time.Hour), nil))
	assert.Nil(t, db.Status.RecoverableFrom)
	assert.Nil(t, db.Status.RecoverableUntil)
	assert.Nil(t, db.Status.BaseBackups)
}
