package database

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

func TestAnUpgradeLooksAgainAtItsDeadline(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	db := &Cluster{Spec: dbv1.DatabaseSpec{UpgradeTimeout: &metav1.Duration{Duration: 10 * time.Minute}}}
	at := func(step dbv1.UpgradeStep, now time.Time) time.Duration {
		db.Status.Upgrade = &dbv1.UpgradeStatus{Step: step, StepStartTime: &metav1.Time{Time: start}}
		return upgradeRecheck(db, now)
	}
	assert.Equal(t, 7*time.Minute, at(dbv1.UpgradeStartingNewVersion, start.Add(3*time.Minute)))
	assert.Equal(t, time.Second, at(dbv1.UpgradeStartingNewVersion, start.Add(time.Hour)), "past the deadline: at once")
	assert.Equal(t, 7*time.Minute, at(dbv1.UpgradeRunningJob, start.Add(3*time.Minute)))
	assert.Equal(t, time.Minute, at(dbv1.UpgradeRunningJob, start.Add(time.Hour)), "a long restore: now and then")
	assert.Zero(t, at(dbv1.UpgradeCompleted, start))
	assert.Zero(t, at(dbv1.UpgradeBackingUp, start), "a backup's end sends an event")
	db.Status.Upgrade = nil
	assert.Zero(t, upgradeRecheck(db, start))
}

func TestOldDataRemovalStaysOnAfterAnUpgradeOnly(t *testing.T) {
	db := &Cluster{Spec: dbv1.DatabaseSpec{Replicas: 3}}
	assert.Equal(t, serverPlan{Image: "i", Replicas: 3}, steadyPlan(db, "i"))
	for step, on := range map[dbv1.UpgradeStep]bool{
		dbv1.UpgradeRemovingOldData: true, dbv1.UpgradeCompleted: true,
		dbv1.UpgradeStartingNewVersion: false, dbv1.UpgradeFailed: false, dbv1.UpgradeBackingUp: false,
		// Kept until the user annotates remove-old-data=true.
		dbv1.UpgradeOldDataKept: false,
	} {
		db.Status.Upgrade = &dbv1.UpgradeStatus{Step: step}
		assert.Equal(t, on, steadyPlan(db, "i").RemoveOldData, "step %s", step)
	}
}

func TestEachAttemptHasItsOwnName(t *testing.T) {
	db := &Cluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Generation: 4}}
	first := attemptHash(db, "postgres:18.0")
	assert.Equal(t, first, attemptHash(db, "postgres:18.0"), "the same change: the same attempt")
	db.Generation = 6
	assert.NotEqual(t, first, attemptHash(db, "postgres:18.0"), "image back and forth: a new attempt")
	assert.NotEqual(t, attemptHash(db, "postgres:18.1"), attemptHash(db, "postgres:18.0"))
}

// The names of the backups already taken stay what they were when one
// function made both: an operator upgraded during a change finds the
// backup the previous one started.
func TestAttemptNamesAreTheOnesEarlierOperatorsGave(t *testing.T) {
	db := &Cluster{ObjectMeta: metav1.ObjectMeta{Name: "db", UID: "0c1d", Generation: 4}}
	old := func(format string, args ...any) string {
		sum := sha256.Sum256(fmt.Appendf(nil, format, args...))
		return hex.EncodeToString(sum[:4])
	}
	assert.Equal(t, old("%s\x00%s\x00%d", db.UID, "postgres:18.0", db.Generation), attemptHash(db, "postgres:18.0"))
	assert.Equal(t, "db-pre-upgrade-"+old("%s\x00%s\x00%s\x00%d", db.UID, "postgres:17.6", "postgres:17.7", db.Generation),
		preUpgradeBackupName(db, "postgres:17.6", "postgres:17.7"))
}
