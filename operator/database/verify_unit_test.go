package database

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
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
