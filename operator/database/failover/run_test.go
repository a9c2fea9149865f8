package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/failover"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// fakeChannel answers for pods by name (a unit test's fake; the host test
// in operator/database/postgres runs the real agents).
type fakeChannel struct {
	statuses    map[string]instance.Status
	unreachable map[string]bool
	// finalLSN is what a fence answers as the old primary's last record
	// (0: not stopped cleanly).
	finalLSN instance.LSN
	// killed: a fence answers that the old primary was hung and SIGKILLed
	// (instance.ActionResult.Killed).
	killed bool
	calls  []string
}

var errUnreachable = errors.New("dial tcp: i/o timeout")

func (f *fakeChannel) Status(_ context.Context, pod string) (instance.Status, error) {
	if f.unreachable[pod] {
		return instance.Status{}, errUnreachable
	}
	return f.statuses[pod], nil
}

func (f *fakeChannel) Fence(_ context.Context, pod string) (instance.ActionResult, error) {
	f.calls = append(f.calls, "fence "+pod)
	if f.unreachable[pod] {
		return instance.ActionResult{}, errUnreachable
	}
	return instance.ActionResult{Done: "fenced", CleanShutdown: f.finalLSN != 0, FinalLSN: f.finalLSN, Killed: f.killed}, nil
}

func (f *fakeChannel) Unfence(_ context.Context, pod string) (instance.ActionResult, error) {
	f.calls = append(f.calls, "unfence "+pod)
	if f.unreachable[pod] {
		return instance.ActionResult{}, errUnreachable
	}
	return instance.ActionResult{Done: "unfenced"}, nil
}

func (f *fakeChannel) Promote(_ context.Context, pod string, _ ...string) (instance.Status, error) {
	f.calls = append(f.calls, "promote "+pod)
	if f.unreachable[pod] {
		return instance.Status{}, errUnreachable
	}
	st := f.statuses[pod]
	if st.Role == instance.RolePrimary {
		return st, instance.ErrAlreadyPrimary
	}
	st.Role = instance.RolePrimary
	f.statuses[pod] = st
	return st, nil
}

func (f *fakeChannel) AnswerRole(_ context.Context, pod, primary string) error {
	f.calls = append(f.calls, "answer "+pod+" "+primary)
	if f.unreachable[pod] {
		return errUnreachable
	}
	return nil
}

func (f *fakeChannel) Detach(_ context.Context, pod string) (instance.ActionResult, error) {
	f.calls = append(f.calls, "detach "+pod)
	if f.unreachable[pod] {
		return instance.ActionResult{}, errUnreachable
	}
	return instance.ActionResult{Done: "detached"}, nil
}

func (f *fakeChannel) Attach(_ context.Context, pod string) (instance.ActionResult, error) {
	f.calls = append(f.calls, "attach "+pod)
	if f.unreachable[pod] {
		return instance.ActionResult{}, errUnreachable
	}
	return instance.ActionResult{Done: "attached"}, nil
}

// streamingAt is a standby that still streams from the primary.
func streamingAt(lsn instance.LSN) instance.Status {
	st := standbyAt(lsn)
	st.Streaming = true
	return st
}

func standbyAt(lsn instance.LSN) instance.Status {
	return instance.Status{ServerUp: true, Role: instance.RoleStandby, Timeline: 1, ReplayLSN: lsn, ReceiveLSN: lsn}
}

type saved struct {
	recs   []dbv1.FailoverRecord
	events []string
	fail   bool
}

func (s *saved) steps(ch failover.Channel) failover.Steps {
	return failover.Steps{
		Channel: ch, Host: func(pod string) string { return pod }, Pods: []string{"db-0", "db-1", "db-2"},
		Save: func(_ context.Context, rec *dbv1.FailoverRecord) error {
			if s.fail {
				return errors.New("conflict")
			}
			s.recs = append(s.recs, *rec.DeepCopy())
			return nil
		},
		Event: func(_ bool, reason, _ string) { s.events = append(s.events, reason) },
		Now:   time.Now,
	}
}

// An old primary whose agent is not reached is recorded as not fenced,
// and the most advanced standby is promoted all the same; what the new
// primary never replayed is counted.
func TestAnUnreachablePrimaryIsRecordedUnfencedAndTheBestStandbyPromoted(t *testing.T) {
	ch := &fakeChannel{
		statuses:    map[string]instance.Status{"db-1": standbyAt(0x3000), "db-2": standbyAt(0x2000)},
		unreachable: map[string]bool{"db-0": true},
	}
	s := &saved{}
	rec := failover.Start("db-0", 0x3800, time.Now())
	require.NoError(t, s.steps(ch).Run(context.Background(), rec, false))

	assert.Equal(t, []string{"fence db-0", "promote db-1"}, ch.calls)
	assert.Equal(t, dbv1.FailoverCompleted, rec.Phase)
	assert.Equal(t, "db-1", rec.To)
	assert.False(t, rec.Fenced)
	assert.Contains(t, rec.FenceMessage, "i/o timeout")
	require.NotNil(t, rec.BytesPossiblyLost)
	assert.Equal(t, int64(0x800), *rec.BytesPossiblyLost)
	assert.Equal(t, []string{"PrimaryGone", "FenceFailed", "Promoting", "FailedOver"}, s.events)
	phases := []dbv1.FailoverPhase{}
	for _, r := range s.recs {
		phases = append(phases, r.Phase)
	}
	assert.Equal(t, []dbv1.FailoverPhase{dbv1.FailoverFencing, dbv1.FailoverPromoting, dbv1.FailoverCompleted}, phases, "each step saved before the next")
}

// A failover resumed at Promoting promotes the standby its record names,
// or nothing: never another, even a better one that is reachable.
func TestAResumedPromotionNeverPromotesAnotherStandby(t *testing.T) {
	ch := &fakeChannel{
		statuses:    map[string]instance.Status{"db-1": standbyAt(0x2000), "db-2": standbyAt(0x9000)},
		unreachable: map[string]bool{"db-1": true},
	}
	s := &saved{}
	rec := &dbv1.FailoverRecord{Phase: dbv1.FailoverPromoting, From: "db-0", To: "db-1"}
	err := s.steps(ch).Run(context.Background(), rec, true)
	require.Error(t, err)
	assert.Equal(t, []string{"promote db-1"}, ch.calls)
	assert.Equal(t, dbv1.FailoverPromoting, rec.Phase)
	assert.Equal(t, "db-1", rec.To)
	assert.Equal(t, []string{"PromoteFailed"}, s.events)
}

// A failover whose first record cannot be saved does nothing at all.
func TestNothingIsDoneBeforeTheFailoverIsRecorded(t *testing.T) {
	ch := &fakeChannel{statuses: map[string]instance.Status{"db-1": standbyAt(0x2000)}}
	s := &saved{fail: true}
	err := s.steps(ch).Run(context.Background(), failover.Start("db-0", 0, time.Now()), false)
	require.ErrorContains(t, err, "conflict")
	assert.Empty(t, ch.calls, "nothing fenced or promoted")
}

// With synchronous replication the failover promotes only a standby that
// was synchronous when the primary was last seen (its record names them),
// even when an asynchronous one replayed further; with none of them
// healthy nothing is promoted.
func TestWithSynchronousStandbysOnlyOneOfThemIsPromoted(t *testing.T) {
	ch := &fakeChannel{statuses: map[string]instance.Status{"db-1": standbyAt(0x9000), "db-2": standbyAt(0x3000)}}
	s := &saved{}
	rec := failover.Start("db-0", 0x3000, time.Now())
	rec.SynchronousStandbys = []string{"db-2"}
	require.NoError(t, s.steps(ch).Run(context.Background(), rec, false))
	assert.Equal(t, "db-2", rec.To)
	assert.Equal(t, []string{"fence db-0", "promote db-2"}, ch.calls)

	ch = &fakeChannel{statuses: map[string]instance.Status{"db-1": standbyAt(0x9000)}, unreachable: map[string]bool{"db-2": true}}
	s = &saved{}
	rec = failover.Start("db-0", 0x3000, time.Now())
	rec.SynchronousStandbys = []string{"db-2"}
	require.ErrorIs(t, s.steps(ch).Run(context.Background(), rec, false), failover.ErrSynchronousQuorum)
	assert.Equal(t, []string{"fence db-0"}, ch.calls, "the asynchronous standby is never promoted")
}

// A switchover whose primary did not stop cleanly (its last position
// unknown) does not wait for ever with the primary fenced: it goes on as
// a failover, choosing the most advanced standby, and says so.
func TestASwitchoverWhosePrimaryDidNotStopCleanlyGoesOnAsAFailover(t *testing.T) {
	ch := &fakeChannel{statuses: map[string]instance.Status{"db-1": standbyAt(0x9000), "db-2": standbyAt(0x3000)}}
	s := &saved{}
	rec := failover.StartSwitchover("db-0", "db-2", time.Now())
	require.NoError(t, s.steps(ch).Run(context.Background(), rec, false))
	assert.Equal(t, dbv1.FailoverCompleted, rec.Phase)
	assert.Equal(t, "db-1", rec.To, "the most advanced standby, as a failover chooses")
	assert.Equal(t, dbv1.KindSwitchover, rec.Kind)
	assert.Contains(t, rec.Reason, "did not stop cleanly")
	assert.Contains(t, s.events, "SwitchoverFellBack")
}

// A switchover whose target never replays the old primary's last record
// does not keep writes stopped for ever: past its bound the old primary's
// fence is lifted, nothing is promoted, and the record says Aborted and
// why; a pass after that (an operator resuming the record) does nothing.
func TestASwitchoverWhoseTargetNeverCatchesUpIsAbortedAndTheOldPrimaryUnfenced(t *testing.T) {
	ch := &fakeChannel{statuses: map[string]instance.Status{"db-1": standbyAt(0x4000)}, finalLSN: 0x5000}
	s := &saved{}
	now := time.Now()
	steps := s.steps(ch)
	steps.Now = func() time.Time { return now }
	steps.SwitchoverTimeout = 30 * time.Second
	rec := failover.StartSwitchover("db-0", "db-1", now)

	require.ErrorIs(t, steps.Run(context.Background(), rec, false), failover.ErrCatchingUp)
	now = now.Add(29 * time.Second)
	require.ErrorIs(t, steps.Run(context.Background(), rec, true), failover.ErrCatchingUp, "within the bound it waits")
	assert.Equal(t, dbv1.FailoverFencing, rec.Phase)

	now = now.Add(2 * time.Second)
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Equal(t, dbv1.FailoverAborted, rec.Phase)
	assert.Equal(t, []string{"fence db-0", "unfence db-0"}, ch.calls, "fenced, then the fence lifted; nothing promoted")
	assert.Contains(t, rec.AbortReason, "db-1 had not replayed db-0's last record (0/5000) within 30s: it replayed to 0/4000")
	require.NotNil(t, rec.FenceLifted)
	require.NotNil(t, rec.Finished)
	assert.Equal(t, dbv1.FailoverAborted, s.recs[len(s.recs)-1].Phase, "the abort is saved")
	assert.Contains(t, s.events, "SwitchoverAborted")

	ch.statuses["db-1"] = standbyAt(0x6000) // caught up at last: too late
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Equal(t, []string{"fence db-0", "unfence db-0"}, ch.calls, "an aborted record is final")
}

// A switchover whose old primary cannot be fenced stops trying past its
// bound: the fence is lifted in case it took effect unseen, and with the
// old primary's agent unreachable that is said in the record (the
// failover watch takes it from there).
func TestASwitchoverWhoseFenceKeepsFailingIsAbortedPastItsBound(t *testing.T) {
	ch := &fakeChannel{statuses: map[string]instance.Status{"db-1": standbyAt(0x4000)}, unreachable: map[string]bool{"db-0": true}}
	s := &saved{}
	now := time.Now()
	steps := s.steps(ch)
	steps.Now = func() time.Time { return now }
	rec := failover.StartSwitchover("db-0", "db-1", now)
	require.Error(t, steps.Run(context.Background(), rec, false))
	now = now.Add(failover.DefaultSwitchoverTimeout + time.Second)
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Equal(t, dbv1.FailoverAborted, rec.Phase)
	assert.Equal(t, []string{"fence db-0", "unfence db-0"}, ch.calls)
	assert.Contains(t, rec.AbortReason, "db-0 could not be fenced within 30s")
	assert.Nil(t, rec.FenceLifted)
	assert.Contains(t, rec.FenceMessage, "the fence could not be lifted")
	assert.Contains(t, s.events, "UnfenceFailed")
}

// ANY 1 of two synchronous standbys, one of them unreachable: an
// acknowledged commit may be on that one alone, so the failover is
// refused (Event FailoverRefused, the record kept at Fencing to be tried
// again) rather than promote the other; forced, the reachable one is
// promoted and the record says what that risks.
func TestAFailoverThatCouldLoseASynchronousCommitIsRefusedUnlessForced(t *testing.T) {
	ch := &fakeChannel{statuses: map[string]instance.Status{"db-1": standbyAt(0x9000)}, unreachable: map[string]bool{"db-2": true}}
	s := &saved{}
	rec := failover.Start("db-0", 0x9000, time.Now())
	rec.SynchronousStandbys, rec.SynchronousQuorum = []string{"db-1", "db-2"}, 1
	err := s.steps(ch).Run(context.Background(), rec, false)
	require.ErrorIs(t, err, failover.ErrSynchronousQuorum)
	assert.ErrorContains(t, err, "2 of them must answer as healthy standbys, 1 do [db-1]")
	assert.Equal(t, []string{"fence db-0"}, ch.calls, "nothing promoted")
	assert.Equal(t, dbv1.FailoverFencing, rec.Phase)
	assert.Contains(t, s.events, "FailoverRefused")

	steps := s.steps(ch)
	steps.Forced = true
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Equal(t, "db-1", rec.To)
	assert.Equal(t, dbv1.FailoverCompleted, rec.Phase)
	assert.Contains(t, rec.Reason, "forced")
	assert.Contains(t, rec.Reason, "may be lost")
}

// cutOffPrimary is a channel on which db-0's agent is not reached and the
// other pods answer with statuses.
func cutOffPrimary(statuses map[string]instance.Status) *fakeChannel {
	return &fakeChannel{statuses: statuses, unreachable: map[string]bool{"db-0": true}}
}

// namedFirstSteps are s's steps on ch with the clock *now and a
// ServerStopped answering from stopped (nil: every server runs).
func (s *saved) namedFirstSteps(ch failover.Channel, now *time.Time, stopped map[string]bool) failover.Steps {
	steps := s.steps(ch)
	steps.Now = func() time.Time { return *now }
	steps.ServerStopped = serverShows(stopped)
	return steps
}

// serverShows is a ServerStopped that answers from a map: true, the pod
// shows its server stopped.
func serverShows(stopped map[string]bool) func(string) (bool, string) {
	return func(pod string) (bool, string) {
		if stopped[pod] {
			return true, pod + "'s container is not running"
		}
		return false, pod + "'s container runs"
	}
}

// An old primary the fence did not reach while its pod shows its server
// running may still take writes: the standby chosen is named first (the
// record's namedFirst, saved before anything is promoted), so its agent
// reads the name and fences its server. Past the name-first wait, its pod
// still showing it running (a node cut off from the API server never
// reads the name), the standbys still streaming are detached, the new
// primary last (its agent's isolation check sees them stop replying), and
// the promotion waits instance.IsolationFenceWithin more. The other
// standby streams again after the promotion.
func TestAnOldPrimaryNotFencedButRunningHasTheNewPrimaryNamedBeforeThePromotion(t *testing.T) {
	ch := cutOffPrimary(map[string]instance.Status{"db-1": streamingAt(0x3000), "db-2": streamingAt(0x2000)})
	s := &saved{}
	now := time.Now()
	steps := s.namedFirstSteps(ch, &now, nil)
	rec := failover.Start("db-0", 0x3000, now)

	err := steps.Run(context.Background(), rec, false)
	require.ErrorIs(t, err, failover.ErrNamingFirst)
	assert.Contains(t, err.Error(), failover.DefaultNameFirstWait.String()+" left")
	assert.Equal(t, []string{"fence db-0"}, ch.calls, "nothing detached or promoted yet")
	assert.Equal(t, dbv1.FailoverPromoting, rec.Phase)
	assert.Equal(t, "db-1", rec.To)
	require.NotNil(t, rec.NamedFirst)
	last := s.recs[len(s.recs)-1]
	require.NotNil(t, last.NamedFirst, "saved before the pass ends: the ConfigMap names db-1 from this record")
	assert.Equal(t, "db-1", last.To)
	assert.Equal(t, []string{"PrimaryGone", "FenceFailed", "NamingNewPrimaryFirst"}, s.events)

	// A pass within the wait (an operator resuming the record, too)
	// promotes nothing.
	now = now.Add(failover.DefaultNameFirstWait - time.Second)
	require.ErrorIs(t, steps.Run(context.Background(), rec, true), failover.ErrNamingFirst)
	assert.Equal(t, []string{"fence db-0"}, ch.calls)

	// The wait is over, the pod still shows the server running.
	now = now.Add(time.Second)
	err = steps.Run(context.Background(), rec, true)
	require.ErrorIs(t, err, failover.ErrNamingFirst)
	assert.Contains(t, err.Error(), instance.IsolationFenceWithin.String()+" left")
	assert.Equal(t, []string{"fence db-0", "detach db-2", "detach db-1"}, ch.calls, "the new primary detached last")
	assert.Equal(t, []string{"db-2", "db-1"}, s.recs[len(s.recs)-1].DetachedStandbys, "saved")
	assert.NotNil(t, s.recs[len(s.recs)-1].StandbysDetached)
	assert.Contains(t, s.events, "StandbysDetached")

	now = now.Add(instance.IsolationFenceWithin - time.Second)
	require.ErrorIs(t, steps.Run(context.Background(), rec, true), failover.ErrNamingFirst)
	now = now.Add(time.Second)
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Equal(t, []string{"promote db-1", "attach db-2"}, ch.calls[3:])
	assert.Equal(t, dbv1.FailoverCompleted, rec.Phase)
	assert.Empty(t, rec.DetachedStandbys, "every standby streams again")
}

// An old primary whose node lost its power (or its network): its
// standbys' connections to it have held unacknowledged replies for
// instance.IsolationFenceWithin or more when the name-first wait ends, so
// it has heard none of them for that long; they are detached as ever,
// and the standby is promoted in the same pass, without the wait owed to
// a primary that might still hear them. One standby whose connection
// stalled less long, or that reports nothing of it, keeps the wait.
func TestAnOldPrimaryDeafToEveryStandbyIsPromotedAwayFromWithoutTheDetachWait(t *testing.T) {
	deaf := func(lsn instance.LSN, stalled time.Duration) instance.Status {
		st := streamingAt(lsn)
		st.ReceiverStalledSeconds = stalled.Seconds()
		return st
	}
	long := instance.IsolationFenceWithin + 10*time.Second
	ch := cutOffPrimary(map[string]instance.Status{"db-1": deaf(0x3000, long), "db-2": deaf(0x2000, long)})
	s := &saved{}
	now := time.Now()
	steps := s.namedFirstSteps(ch, &now, nil)
	rec := failover.Start("db-0", 0x3000, now)
	require.ErrorIs(t, steps.Run(context.Background(), rec, false), failover.ErrNamingFirst, "the name-first wait is kept")
	now = now.Add(failover.DefaultNameFirstWait)
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Equal(t, []string{"fence db-0", "detach db-2", "detach db-1", "promote db-1", "attach db-2"}, ch.calls)
	assert.Equal(t, dbv1.FailoverCompleted, rec.Phase)
	assert.Contains(t, s.events, "StandbysDetached")

	for name, db2 := range map[string]instance.Status{
		"stalled less long": deaf(0x2000, instance.IsolationFenceWithin-time.Second),
		"not reported":      streamingAt(0x2000),
	} {
		ch := cutOffPrimary(map[string]instance.Status{"db-1": deaf(0x3000, long), "db-2": db2})
		steps := (&saved{}).namedFirstSteps(ch, &now, nil)
		rec := failover.Start("db-0", 0x3000, now)
		require.ErrorIs(t, steps.Run(context.Background(), rec, false), failover.ErrNamingFirst, name)
		now = now.Add(failover.DefaultNameFirstWait)
		err := steps.Run(context.Background(), rec, true)
		require.ErrorIs(t, err, failover.ErrNamingFirst, name)
		assert.Contains(t, err.Error(), "standbys detached", name)
	}
}

// A hung old primary (its server frozen: the pod shows its container
// running) that the fence SIGKILLed is fenced: every process of it dies
// before it answers a client again, so there is nothing to name first or
// detach, and the standby is promoted in the same pass.
func TestAHungPrimaryTheFenceKilledIsPromotedAwayFromAtOnce(t *testing.T) {
	ch := &fakeChannel{statuses: map[string]instance.Status{"db-1": streamingAt(0x3000), "db-2": streamingAt(0x2000)}, killed: true}
	s := &saved{}
	now := time.Now()
	steps := s.namedFirstSteps(ch, &now, nil)
	rec := failover.Start("db-0", 0x3000, now)

	require.NoError(t, steps.Run(context.Background(), rec, false))
	assert.Equal(t, []string{"fence db-0", "promote db-1"}, ch.calls, "nothing detached, nothing waited for")
	assert.Equal(t, dbv1.FailoverCompleted, rec.Phase)
	assert.True(t, rec.Fenced)
	assert.Nil(t, rec.NamedFirst)
	assert.Contains(t, rec.FenceMessage, "SIGKILL")
	assert.Equal(t, []string{"PrimaryGone", "Fenced", "Promoting", "FailedOver"}, s.events)
}

// An old primary its role guard fenced within the wait (its pod shows the
// server stopped) is promoted away from without a detach: its fast
// shutdown sent its last WAL to the standbys, which a detach would have
// cut short. Past the wait, standbys that no longer stream (the old
// primary gone) are not detached either, and nothing more is waited for.
func TestNoStandbyIsDetachedWhenTheOldPrimaryStoppedOrNothingStreams(t *testing.T) {
	ch := cutOffPrimary(map[string]instance.Status{"db-1": streamingAt(0x3000)})
	s := &saved{}
	now := time.Now()
	stopped := map[string]bool{}
	steps := s.namedFirstSteps(ch, &now, stopped)
	rec := failover.Start("db-0", 0x3000, now)
	require.ErrorIs(t, steps.Run(context.Background(), rec, false), failover.ErrNamingFirst)
	stopped["db-0"] = true
	now = now.Add(2 * time.Second)
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Equal(t, []string{"fence db-0", "promote db-1"}, ch.calls)
	assert.Nil(t, rec.StandbysDetached)

	ch = cutOffPrimary(map[string]instance.Status{"db-1": standbyAt(0x3000), "db-2": standbyAt(0x2000)})
	steps = (&saved{}).namedFirstSteps(ch, &now, nil)
	rec = failover.Start("db-0", 0x3000, now)
	require.ErrorIs(t, steps.Run(context.Background(), rec, false), failover.ErrNamingFirst)
	now = now.Add(failover.DefaultNameFirstWait)
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Equal(t, []string{"fence db-0", "promote db-1"}, ch.calls, "no standby streamed: none detached")
	assert.NotNil(t, rec.StandbysDetached, "looked once")
}

// An operator that stopped after it detached the standbys and before it
// recorded so is followed by one that finds them not streaming but
// detached: they are listed, and the promotion still waits for the old
// primary's isolation check.
func TestStandbysFoundDetachedAreListedAndWaitedFor(t *testing.T) {
	detached := standbyAt(0x3000)
	detached.Detached = true
	ch := cutOffPrimary(map[string]instance.Status{"db-1": detached, "db-2": standbyAt(0x2000)})
	s := &saved{}
	now := time.Now()
	steps := s.namedFirstSteps(ch, &now, nil)
	rec := failover.Start("db-0", 0x3000, now)
	require.ErrorIs(t, steps.Run(context.Background(), rec, false), failover.ErrNamingFirst)
	now = now.Add(failover.DefaultNameFirstWait)
	err := steps.Run(context.Background(), rec, true)
	require.ErrorIs(t, err, failover.ErrNamingFirst)
	assert.Contains(t, err.Error(), "standbys detached")
	assert.Equal(t, []string{"db-1"}, rec.DetachedStandbys)
}

// A standby that cannot be detached is said in a Warning Event (the old
// primary's isolation check needs one silent standby); one detached but
// not reached after the promotion stays in the record, for the operator
// to attach later.
func TestStandbysNotDetachedOrNotAttachedAreSaid(t *testing.T) {
	ch := cutOffPrimary(map[string]instance.Status{"db-1": streamingAt(0x3000), "db-2": streamingAt(0x3000)})
	s := &saved{}
	now := time.Now()
	steps := s.namedFirstSteps(detachRefusedFor{ch, "db-2"}, &now, nil)
	rec := failover.Start("db-0", 0x3000, now)
	require.ErrorIs(t, steps.Run(context.Background(), rec, false), failover.ErrNamingFirst)
	now = now.Add(failover.DefaultNameFirstWait)
	require.ErrorIs(t, steps.Run(context.Background(), rec, true), failover.ErrNamingFirst)
	assert.Contains(t, s.events, "DetachFailed")
	assert.Equal(t, []string{"db-1"}, rec.DetachedStandbys)

	rec.DetachedStandbys = []string{"db-1", "db-2"} // db-2 was detached, then lost
	ch.unreachable["db-2"] = true
	now = now.Add(instance.IsolationFenceWithin)
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Equal(t, []string{"db-2"}, rec.DetachedStandbys)
}

// With synchronous replication the choice is made again once the
// standbys are detached: one that flushed further than the named one may
// hold an acknowledged commit it lacks, so it is named instead.
func TestUnderSynchronousReplicationTheChoiceIsMadeAgainOnTheDetachedPositions(t *testing.T) {
	ch := cutOffPrimary(map[string]instance.Status{"db-1": streamingAt(0x3000), "db-2": streamingAt(0x2000)})
	s := &saved{}
	now := time.Now()
	steps := s.namedFirstSteps(ch, &now, nil)
	rec := failover.Start("db-0", 0x3000, now)
	rec.SynchronousStandbys, rec.SynchronousQuorum = []string{"db-1", "db-2"}, 1
	require.ErrorIs(t, steps.Run(context.Background(), rec, false), failover.ErrNamingFirst)
	require.Equal(t, "db-1", rec.To)

	ch.statuses["db-2"] = streamingAt(0x4000) // it confirmed a commit db-1 has not received
	now = now.Add(failover.DefaultNameFirstWait)
	require.ErrorIs(t, steps.Run(context.Background(), rec, true), failover.ErrNamingFirst)
	assert.Equal(t, "db-2", rec.To)
	assert.Equal(t, now, rec.NamedFirst.Time, "named anew")
	now = now.Add(instance.IsolationFenceWithin)
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Contains(t, ch.calls, "promote db-2")
	assert.NotContains(t, ch.calls, "promote db-1")
}

// detachRefusedFor is a channel whose detaches of one pod fail.
type detachRefusedFor struct {
	*fakeChannel
	pod string
}

func (d detachRefusedFor) Detach(ctx context.Context, pod string) (instance.ActionResult, error) {
	if pod == d.pod {
		return instance.ActionResult{}, errors.New("500: ALTER SYSTEM failed")
	}
	return d.fakeChannel.Detach(ctx, pod)
}

// The wait ends early once the old primary's pod shows its server
// stopped; and an old primary whose pod shows it stopped when the standby
// is chosen is not waited for at all (nothing there takes writes).
func TestAnOldPrimaryWhosePodShowsItsServerStoppedIsNotWaitedFor(t *testing.T) {
	ch := cutOffPrimary(map[string]instance.Status{"db-1": standbyAt(0x3000)})
	s := &saved{}
	stopped := map[string]bool{}
	steps := s.steps(ch)
	steps.ServerStopped = serverShows(stopped)
	rec := failover.Start("db-0", 0x3000, time.Now())
	require.ErrorIs(t, steps.Run(context.Background(), rec, false), failover.ErrNamingFirst)
	stopped["db-0"] = true
	require.NoError(t, steps.Run(context.Background(), rec, true))
	assert.Equal(t, dbv1.FailoverCompleted, rec.Phase)
	assert.NotNil(t, rec.NamedFirst)

	ch = cutOffPrimary(map[string]instance.Status{"db-1": standbyAt(0x3000)})
	s = &saved{}
	steps = s.steps(ch)
	steps.ServerStopped = serverShows(map[string]bool{"db-0": true})
	rec = failover.Start("db-0", 0x3000, time.Now())
	require.NoError(t, steps.Run(context.Background(), rec, false))
	assert.Nil(t, rec.NamedFirst)
	assert.Contains(t, rec.FenceMessage, "its pod shows its server stopped (db-0's container is not running)")
	assert.Equal(t, []string{"fence db-0", "promote db-1"}, ch.calls)
	assert.Equal(t, []string{"PrimaryGone", "FenceFailed", "Promoting", "FailedOver"}, s.events)

	// A fence that reached the old primary needs no name first.
	ch = &fakeChannel{statuses: map[string]instance.Status{"db-1": standbyAt(0x3000)}}
	s = &saved{}
	steps = s.steps(ch)
	steps.ServerStopped = serverShows(nil)
	rec = failover.Start("db-0", 0x3000, time.Now())
	require.NoError(t, steps.Run(context.Background(), rec, false))
	assert.Nil(t, rec.NamedFirst)
	assert.Equal(t, []string{"fence db-0", "promote db-1"}, ch.calls)
}

// The standby named first whose server restarted before its promotion
// waits for the operator's word to start as the primary, and cannot be
// promoted while it waits: it is told to start as the primary, which
// promotes it.
func TestAStandbyNamedFirstThatRestartedIsToldToStartAsThePrimary(t *testing.T) {
	ch := cutOffPrimary(map[string]instance.Status{"db-1": {AwaitingRole: true}})
	s := &saved{}
	rec := &dbv1.FailoverRecord{Phase: dbv1.FailoverPromoting, From: "db-0", To: "db-1"}
	ch.statuses["db-1"] = instance.Status{AwaitingRole: true, Role: instance.RoleStandby}
	steps := s.steps(promoteRefused{ch})
	err := steps.Run(context.Background(), rec, true)
	require.ErrorContains(t, err, "told to, which promotes it")
	assert.Equal(t, []string{"promote db-1", "answer db-1 db-1"}, ch.calls)
	assert.Equal(t, dbv1.FailoverPromoting, rec.Phase, "completed once its start promoted it")
}

// promoteRefused is a channel whose promotions fail as an agent's does
// while its server is down.
type promoteRefused struct{ *fakeChannel }

func (p promoteRefused) Promote(_ context.Context, pod string, _ ...string) (instance.Status, error) {
	p.calls = append(p.calls, "promote "+pod)
	return instance.Status{}, errors.New("503 Service Unavailable: the server is down")
}
