package pooler

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

func TestAPauseLastsUntilItsSwitchoverHasEndedAndTheServiceFollows(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	pause := &dbv1.PoolerPause{Since: metav1.NewTime(t0), Reason: "switchover"}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	record := func(started time.Duration, phase dbv1.FailoverPhase, finished time.Duration) *dbv1.Database {
		rec := dbv1.FailoverRecord{Kind: dbv1.KindSwitchover, Started: metav1.NewTime(at(started)), Phase: phase}
		if finished > 0 {
			f := metav1.NewTime(at(finished))
			rec.Finished = &f
		}
		return &dbv1.Database{Status: dbv1.DatabaseStatus{Failovers: []dbv1.FailoverRecord{rec}}}
	}
	serving := func() bool { return true }
	notYet := func() bool { return false }
	noRecord := &dbv1.Database{}

	for _, tc := range []struct {
		name   string
		db     *dbv1.Database
		serves func() bool
		now    time.Duration
		paused bool
	}{
		{"the switchover not recorded yet", noRecord, serving, 2 * time.Second, true},
		{"no switchover followed the pause", noRecord, serving, unusedPause, false},
		{"an older switchover is not this pause's", record(-time.Minute, dbv1.FailoverCompleted, -50*time.Second), serving, 2 * time.Second, true},
		{"under way", record(100*time.Millisecond, dbv1.FailoverFencing, 0), serving, time.Minute, true},
		{"completed, the Service still at the old primary", record(0, dbv1.FailoverCompleted, 3*time.Second), notYet, 4 * time.Second, true},
		{"completed, the Service at the new primary", record(0, dbv1.FailoverCompleted, 3*time.Second), serving, 4 * time.Second, false},
		{"completed long ago, the Service never followed", record(0, dbv1.FailoverCompleted, 3*time.Second), notYet, 3*time.Second + unusedPause, false},
		{"aborted", record(0, dbv1.FailoverAborted, 5*time.Second), notYet, 6 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			again := stillPaused(pause, tc.db, tc.serves, at(tc.now))
			assert.Equal(t, tc.paused, again > 0, "look again in %s", again)
		})
	}
}

func TestARepeatedPauseOrResumeIsWhatWasWanted(t *testing.T) {
	assert.True(t, alreadyDone("PAUSE", errors.New("ERROR: already suspended/paused (SQLSTATE 08P01)")))
	assert.True(t, alreadyDone("RESUME", errors.New("ERROR: pooler is not paused/suspended (SQLSTATE 08P01)")))
	assert.False(t, alreadyDone("RESUME", errors.New("dial tcp 198.18.1.9:5432: connect: connection refused")))
	assert.False(t, alreadyDone("PAUSE", nil))
}

func TestOnlyADatabaseChangeAPoolerDependsOnWakesIt(t *testing.T) {
	base := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	for name, tc := range map[string]struct {
		change func(*dbv1.Database)
		wakes  bool
	}{
		"the archive window moved": {func(d *dbv1.Database) { d.Status.RecoverableUntil = &metav1.Time{Time: time.Now()} }, false},
		"a new spec":               {func(d *dbv1.Database) { d.Generation = 2 }, true},
		"initialized": {func(d *dbv1.Database) {
			d.Status.Conditions = []metav1.Condition{{Type: "Initialized", Status: metav1.ConditionTrue}}
		}, true},
		"a new primary":     {func(d *dbv1.Database) { d.Status.CurrentPrimary = "db-1" }, true},
		"a switchover ends": {func(d *dbv1.Database) { d.Status.Failovers = []dbv1.FailoverRecord{{Kind: dbv1.KindSwitchover}} }, true},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		assert.Equal(t, tc.wakes, databaseChangeMatters(base, cur), name)
	}
}
