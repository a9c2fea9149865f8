package versionchange_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/mysql"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	vc "github.com/deckhand-dev/deckhand/operator/database/versionchange"
)

const allowKey = "stable.imaginedata.co/allow-unknown-version"

// change is a Database that holds data, runs running and is asked for
// wanted, of a Kind that automates major upgrades.
func change(running, wanted string) vc.Input {
	return vc.Input{Running: running, Wanted: wanted, Initialized: true, MajorUpgrades: true, AllowUnknownVersionKey: allowKey}
}

func upgrade(step dbv1.UpgradeStep, to string) *dbv1.UpgradeStatus {
	return &dbv1.UpgradeStatus{Step: step, ToImage: to}
}

func TestEveryImageChangeHasOnePlan(t *testing.T) {
	with := func(in vc.Input, edit func(*vc.Input)) vc.Input { edit(&in); return in }
	for _, tc := range []struct {
		name string
		in   vc.Input
		eng  vc.Versions
		want vc.Plan
	}{
		{name: "nothing runs yet", in: change("", "postgres:17.6"),
			want: vc.Plan{Action: vc.Steady}},
		{name: "nothing changes", in: change("postgres:17.6", "postgres:17.6"),
			want: vc.Plan{Action: vc.Steady}},
		{name: "no data to protect yet: even a downgrade is free", in: with(change("postgres:17.6", "postgres:16.4"), func(i *vc.Input) { i.Initialized = false }),
			want: vc.Plan{Action: vc.Steady}},
		{name: "same major: backup then roll", in: change("postgres:17.6", "postgres:17.7"),
			want: vc.Plan{Action: vc.Roll, FromVersion: "17.6", ToVersion: "17.7"}},
		{name: "same MySQL series", in: change("mysql:8.4.7", "mysql:8.4.8"), eng: mysql.Engine{},
			want: vc.Plan{Action: vc.Roll, FromVersion: "8.4.7", ToVersion: "8.4.8"}},
		{name: "the server's reported version is trusted over the tag", in: with(change("postgres:17", "postgres:17.7"), func(i *vc.Input) { i.CurrentImage, i.CurrentVersion = "postgres:17", "17.6" }),
			want: vc.Plan{Action: vc.Roll, FromVersion: "17.6", ToVersion: "17.7"}},
		{name: "a report for another image is not", in: with(change("postgres:17.6", "postgres:17.7"), func(i *vc.Input) { i.CurrentImage, i.CurrentVersion = "postgres:16.4", "16.4" }),
			want: vc.Plan{Action: vc.Roll, FromVersion: "17.6", ToVersion: "17.7"}},
		{name: "new major: the major path", in: change("postgres:17.6", "postgres:18.1"),
			want: vc.Plan{Action: vc.Major, FromVersion: "17.6", ToVersion: "18.1"}},
		{name: "new MySQL series is a major upgrade", in: with(change("mysql:8.0.40", "mysql:8.4.8"), func(i *vc.Input) { i.MajorUpgrades = false }), eng: mysql.Engine{},
			want: vc.Plan{Action: vc.Refused, FromVersion: "8.0.40", ToVersion: "8.4.8", Reason: vc.ReasonMajorUpgradeNotAutomated,
				Message: "MySQL 8.0.40 to 8.4.8 is a major upgrade; upgrade Jobs are not automated yet: the servers keep mysql:8.0.40. Take a DatabaseBackup and restore it into a new Database with image mysql:8.4.8 (fromBackup)"}},
		{name: "the test seam sends a minor change down the major path", in: with(change("postgres:17.6", "postgres:17.7"), func(i *vc.Input) { i.MajorPathWithinMajor = true }),
			want: vc.Plan{Action: vc.Major, FromVersion: "17.6", ToVersion: "17.7"}},
		{name: "the seam does nothing for a Kind without the major path", in: with(change("postgres:17.6", "postgres:17.7"), func(i *vc.Input) { i.MajorPathWithinMajor, i.MajorUpgrades = true, false }),
			want: vc.Plan{Action: vc.Roll, FromVersion: "17.6", ToVersion: "17.7"}},
		{name: "major downgrade refused", in: change("postgres:17.7", "postgres:16.4"),
			want: vc.Plan{Action: vc.Refused, FromVersion: "17.7", ToVersion: "16.4", Reason: vc.ReasonDowngrade,
				Message: "PostgreSQL 17.7 to 16.4 is a major-version downgrade, which a data directory cannot take: refused, nothing changed; the servers keep postgres:17.7. Set spec.image back to postgres:17.7, or restore a backup into a new Database of the older version"}},
		{name: "a minor downgrade rolls, as a minor update does", in: change("postgres:17.7", "postgres:17.6"),
			want: vc.Plan{Action: vc.Roll, FromVersion: "17.7", ToVersion: "17.6"}},
		{name: "unreadable new version refused", in: change("postgres:17.7", "registry.example/postgres-custom"),
			want: vc.Plan{Action: vc.Refused, FromVersion: "17.7", Reason: vc.ReasonVersionUnreadable,
				Message: "image registry.example/postgres-custom has no readable version, so the operator cannot tell a minor update from a major upgrade or a downgrade; the servers keep postgres:17.7. Use an image tagged with its version, or annotate the Database " + allowKey + "=true to roll after a backup"}},
		{name: "unreadable running version names the running image", in: change("registry.example/postgres-custom", "postgres:17.7"),
			want: vc.Plan{Action: vc.Refused, ToVersion: "17.7", Reason: vc.ReasonVersionUnreadable,
				Message: "image registry.example/postgres-custom has no readable version, so the operator cannot tell a minor update from a major upgrade or a downgrade; the servers keep registry.example/postgres-custom. Use an image tagged with its version, or annotate the Database " + allowKey + "=true to roll after a backup"}},
		{name: "unreadable version allowed: backup then roll", in: with(change("postgres:17.7", "registry.example/postgres-custom"), func(i *vc.Input) { i.AllowUnknownVersion = true }),
			want: vc.Plan{Action: vc.Roll, FromVersion: "17.7"}},
		{name: "a tag that names no series of the engine", in: change("mysql:8.4.8", "mysql:8"), eng: mysql.Engine{},
			want: vc.Plan{Action: vc.Refused, FromVersion: "8.4.8", ToVersion: "8", Reason: vc.ReasonVersionUnreadable,
				Message: "versions 8.4.8 and 8 are not MySQL versions; the servers keep mysql:8.4.8"}},
		{name: "an upgrade under way carries on", in: with(change("postgres:17.6", "postgres:18.1"), func(i *vc.Input) { i.Upgrade = upgrade(dbv1.UpgradeRunningJob, "postgres:18.1") }),
			want: vc.Plan{Action: vc.Continue}},
		{name: "an upgrade past its backup carries on whatever spec.image says", in: with(change("postgres:17.6", "postgres:19.0"), func(i *vc.Input) { i.Upgrade = upgrade(dbv1.UpgradeScalingDown, "postgres:18.1") }),
			want: vc.Plan{Action: vc.Continue}},
		{name: "an upgrade that kept its old data waits for the annotation", in: with(change("postgres:18.1", "postgres:18.2"), func(i *vc.Input) { i.Upgrade = upgrade(dbv1.UpgradeOldDataKept, "postgres:18.1") }),
			want: vc.Plan{Action: vc.Continue}},
		{name: "an upgrade still backing up for this image carries on", in: with(change("postgres:17.6", "postgres:18.1"), func(i *vc.Input) { i.Upgrade = upgrade(dbv1.UpgradeBackingUp, "postgres:18.1") }),
			want: vc.Plan{Action: vc.Continue}},
		{name: "a new image cancels an upgrade still backing up, then is decided", in: with(change("postgres:17.6", "postgres:17.7"), func(i *vc.Input) { i.Upgrade = upgrade(dbv1.UpgradeBackingUp, "postgres:18.1") }),
			want: vc.Plan{Action: vc.Roll, CancelUpgrade: true, FromVersion: "17.6", ToVersion: "17.7"}},
		{name: "cancelled back to the running image", in: with(change("postgres:17.6", "postgres:17.6"), func(i *vc.Input) { i.Upgrade = upgrade(dbv1.UpgradeBackingUp, "postgres:18.1") }),
			want: vc.Plan{Action: vc.Steady, CancelUpgrade: true}},
		{name: "rolled back: no new attempt at the same image", in: with(change("postgres:17.6", "postgres:18.1"), func(i *vc.Input) { i.Upgrade = upgrade(dbv1.UpgradeFailed, "postgres:18.1") }),
			want: vc.Plan{Action: vc.RolledBack, FromVersion: "17.6", ToVersion: "18.1"}},
		{name: "rolled back, then another image: a new attempt", in: with(change("postgres:17.6", "postgres:18.2"), func(i *vc.Input) { i.Upgrade = upgrade(dbv1.UpgradeFailed, "postgres:18.1") }),
			want: vc.Plan{Action: vc.Major, FromVersion: "17.6", ToVersion: "18.2"}},
		{name: "rolled back, then spec.image back to what runs: the failure is cleared", in: with(change("postgres:17.6", "postgres:17.6"), func(i *vc.Input) { i.Upgrade = upgrade(dbv1.UpgradeFailed, "postgres:18.1") }),
			want: vc.Plan{Action: vc.Steady, ClearFailure: true}},
		{name: "a completed upgrade does not hold the next change", in: with(change("postgres:18.1", "postgres:18.2"), func(i *vc.Input) { i.Upgrade = upgrade(dbv1.UpgradeCompleted, "postgres:18.1") }),
			want: vc.Plan{Action: vc.Roll, FromVersion: "18.1", ToVersion: "18.2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := tc.eng
			if eng == nil {
				eng = postgres.Engine{}
			}
			assert.Equal(t, tc.want, vc.Decide(tc.in, eng))
		})
	}
}

func TestAnUpgradeIsInProgressUntilItEnds(t *testing.T) {
	assert.False(t, vc.InProgress(nil))
	for step, running := range map[dbv1.UpgradeStep]bool{
		dbv1.UpgradeBackingUp: true, dbv1.UpgradeScalingDown: true, dbv1.UpgradeRunningJob: true,
		dbv1.UpgradeStartingNewVersion: true, dbv1.UpgradeOldDataKept: true, dbv1.UpgradeRemovingOldData: true,
		dbv1.UpgradeRollingBack: true, dbv1.UpgradeRestoringOldData: true,
		dbv1.UpgradeCompleted: false, dbv1.UpgradeFailed: false,
	} {
		assert.Equal(t, running, vc.InProgress(&dbv1.UpgradeStatus{Step: step}), "step %s", step)
	}
}

func TestEachChangeWaitsForItsOwnBackup(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    vc.Backup
		want vc.Gate
	}{
		{"none yet", vc.Backup{}, vc.TakeBackup},
		{"pending", vc.Backup{Found: true}, vc.WaitForBackup},
		{"running", vc.Backup{Found: true, Phase: dbv1.BackupRunning}, vc.WaitForBackup},
		{"completed", vc.Backup{Found: true, Phase: dbv1.BackupCompleted}, vc.BackupDone},
		{"failed", vc.Backup{Found: true, Phase: dbv1.BackupFailed}, vc.BackupFailed},
		{"another Database's, even completed", vc.Backup{Found: true, NotOurs: "was not made for this Database", Phase: dbv1.BackupCompleted}, vc.BackupNotBound},
		{"another change's, failed", vc.Backup{Found: true, NotOurs: "was taken for another image change", Phase: dbv1.BackupFailed}, vc.BackupNotBound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := vc.GateOn(tc.b)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.want == vc.BackupFailed || tc.want == vc.BackupNotBound, got.Refuses())
		})
	}
}

func TestVersionsCompareNumberByNumber(t *testing.T) {
	assert.Equal(t, -1, vc.CompareVersions("9", "10"))
	assert.Equal(t, 1, vc.CompareVersions("18", "17"))
	assert.Equal(t, 0, vc.CompareVersions("17", "17"))
	assert.Equal(t, 1, vc.CompareVersions("8.4", "8"))
	assert.Equal(t, 1, vc.CompareVersions("10", "9.6"), "numbers, not strings")
	assert.Equal(t, -1, vc.CompareVersions("8.0", "8.4"))
	assert.Equal(t, 0, vc.CompareVersions("8.4", "8.4.0"), "a missing part is 0")
	assert.Equal(t, 1, vc.CompareVersions("11.4", "10.11"))
}
