package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// Channel is what a failover asks of the instances (instance.Client).
type Channel interface {
	Status(ctx context.Context, host string) (instance.Status, error)
	Fence(ctx context.Context, host string) (instance.ActionResult, error)
	Promote(ctx context.Context, host string, slots ...string) (instance.Status, error)
	Unfence(ctx context.Context, host string) (instance.ActionResult, error)
	AnswerRole(ctx context.Context, host, primary string) error
	Detach(ctx context.Context, host string) (instance.ActionResult, error)
	Attach(ctx context.Context, host string) (instance.ActionResult, error)
}

// Steps carries out one Database's failover. Its record
// (dbv1.FailoverRecord, kept in the Database's status) is saved before
// each step is taken, so an operator that stops anywhere resumes from the
// record and never promotes a second standby: once the record names the
// standby (phase Promoting), only that one is ever promoted.
type Steps struct {
	Channel Channel
	// Host is the name a pod's agent is dialled by (its name under the
	// headless Service).
	Host func(pod string) string
	// Pods are every instance of the Database.
	Pods []string
	// Save writes the record into the Database's status (a write the API
	// server refuses when the status changed since it was read); nothing
	// is done after a Save that failed.
	Save func(ctx context.Context, rec *dbv1.FailoverRecord) error
	// Event announces a step (warning: it did not go as hoped).
	Event func(warning bool, reason, msg string)
	Now   func() time.Time
	// MaxLag is ChooseStandby's bound (0: DefaultMaxLag).
	MaxLag uint64
	// Slots are the replication slots the promoted instance to must hold
	// for the others (the old primary's among them); the agent makes
	// them before it promotes (instance.PromoteRequest). Nil: none.
	Slots func(to string) []string
	// Forced: a person asked to fail over even when too few synchronous
	// standbys answer (ErrSynchronousQuorum): the most advanced healthy
	// standby is promoted, and acknowledged commits only the others had
	// are lost.
	Forced bool
	// SwitchoverTimeout bounds a switchover's handover before its
	// promotion (0: DefaultSwitchoverTimeout): see abortSwitchover.
	SwitchoverTimeout time.Duration
	// ServerStopped says whether a pod's server can take no writes as
	// far as its pod shows (the pod gone, its server's container not
	// running), and what it shows. Asked of an old primary the fence did
	// not reach: one that may still run is named away first (NamedFirst).
	// Nil: never named first.
	ServerStopped func(pod string) (bool, string)
	// NameFirstWait is how long a promotion waits after the new primary
	// was named first (0: DefaultNameFirstWait); with standbys detached
	// at least instance.IsolationFenceWithin (waitAfterNaming).
	NameFirstWait time.Duration
}

// DefaultNameFirstWait is how long the promotion of a failover whose fence
// did not reach the old primary waits after the new primary is named, so
// that the old primary's agent reads the name and fences its server first
// (instance.Agent.GuardRole). The name reaches a pod when its kubelet
// refreshes the mounted ConfigMap, which the role labels' change makes it
// do at once: on the real node the old primary fenced itself within 2 s
// of the name (docs/performance.md). A kubelet that cannot reach the API
// server never delivers it: the wait bounds what that costs, and the
// standbys detached meanwhile make such an old primary fence itself
// (waitAfterNaming).
const DefaultNameFirstWait = 5 * time.Second

// ErrNamingFirst: the promotion waits while the old primary, which the
// fence did not reach, reads its pod's new name and fences itself.
var ErrNamingFirst = errors.New("the new primary is named first: the old primary, not reached by the fence, fences itself once its pod reads the name")

// Start is the record of a failover of from, the primary last seen
// writing at fromLSN (0: never seen).
func Start(from string, fromLSN instance.LSN, now time.Time) *dbv1.FailoverRecord {
	rec := &dbv1.FailoverRecord{Kind: dbv1.KindFailover, Started: metav1.NewTime(now), Phase: dbv1.FailoverFencing, From: from}
	if fromLSN != 0 {
		rec.FromLSN = fromLSN.String()
	}
	return rec
}

// Run takes rec (Start's, not yet saved, or one read back from the status)
// through its remaining steps: fence the old primary (best effort), choose
// the standby, promote it. It returns nil once rec is final (Completed,
// or Aborted: a switchover given up, see abortSwitchover); an error
// leaves rec at the step that failed, saved, for the next pass to resume.
func (s Steps) Run(ctx context.Context, rec *dbv1.FailoverRecord, saved bool) error {
	if !saved {
		if err := s.Save(ctx, rec); err != nil {
			return fmt.Errorf("recording the failover of %s: %w", rec.From, err)
		}
		if rec.Kind == dbv1.KindSwitchover {
			s.Event(false, "Switchover", fmt.Sprintf("switching over from %s to %s", rec.From, rec.To))
		} else {
			s.Event(true, "PrimaryGone", fmt.Sprintf("primary %s is gone: failing over", rec.From))
		}
	}
	for !rec.Phase.Finished() {
		var err error
		switch rec.Phase {
		case dbv1.FailoverFencing:
			if rec.Kind == dbv1.KindSwitchover {
				err = s.fenceForSwitchover(ctx, rec)
			} else {
				err = s.fenceAndChoose(ctx, rec)
			}
		case dbv1.FailoverPromoting:
			err = s.promote(ctx, rec)
		default:
			err = fmt.Errorf("failover record in an unknown phase %q", rec.Phase)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fenceAndChoose fences the old primary, then chooses among the standbys
// as they are after the fence (a clean shutdown sends them its last WAL),
// and saves the choice before anything is promoted.
func (s Steps) fenceAndChoose(ctx context.Context, rec *dbv1.FailoverRecord) error {
	s.fence(ctx, rec)
	mayRun := s.mayStillRun(rec)
	if mayRun {
		s.detachStandbys(ctx, rec)
	}
	var obs []Observation
	for _, pod := range s.Pods {
		if pod == rec.From {
			continue
		}
		o := Observation{Pod: pod}
		if st, err := s.Channel.Status(ctx, s.Host(pod)); err == nil {
			o.Status = &st
		}
		obs = append(obs, o)
	}
	sync := SynchronousOf(rec)
	if s.Forced {
		sync = Synchronous{}
	}
	choice, err := ChooseStandbyUnder(rec.From, obs, sync, s.MaxLag)
	if s.Forced && err == nil && SynchronousOf(rec).On() {
		choice.Reason = "forced (" + AnnotationForceFailover + "), acknowledged commits only unreachable synchronous standbys had may be lost: " + choice.Reason
	}
	if err != nil {
		reason := "FailoverBlocked"
		if errors.Is(err, ErrSynchronousQuorum) {
			reason = "FailoverRefused"
		}
		s.Event(true, reason, fmt.Sprintf("cannot fail over %s: %v", rec.From, err))
		if saveErr := s.Save(ctx, rec); saveErr != nil {
			return errors.Join(err, saveErr)
		}
		return err
	}
	rec.To, rec.Reason, rec.Phase = choice.Pod, choice.Reason, dbv1.FailoverPromoting
	if mayRun {
		rec.NamedFirst = ptr.To(metav1.NewTime(s.Now()))
	}
	if choice.ReplayLSN != 0 {
		rec.ToLSN = choice.ReplayLSN.String()
	}
	if from, err := instance.ParseLSN(rec.FromLSN); err == nil && choice.ReplayLSN != 0 {
		rec.BytesPossiblyLost = ptr.To(int64(choice.ReplayLSN.Behind(from)))
	}
	if err := s.Save(ctx, rec); err != nil {
		return fmt.Errorf("recording the choice of %s: %w", rec.To, err)
	}
	if rec.NamedFirst != nil {
		s.Event(true, "NamingNewPrimaryFirst", fmt.Sprintf("the fence did not reach %s and its pod shows its server running: %s is named the primary first, so %s's agent fences its server once its pod reads the name or once its standbys stop replying (detached: %v); %s is promoted within %s (%s)", rec.From, rec.To, rec.From, rec.DetachedStandbys, rec.To, s.waitAfterNaming(rec), rec.Reason))
		return nil
	}
	s.Event(false, "Promoting", fmt.Sprintf("promoting %s in place of %s: %s", rec.To, rec.From, rec.Reason))
	return nil
}

// mayStillRun: the fence did not reach the old primary and its pod shows
// its server may still run. A server that takes writes beside the new
// primary's is what naming the new primary first (its agent reads the
// name) and detaching the standbys (its agent's isolation check sees
// them stop replying) stop before the promotion.
func (s Steps) mayStillRun(rec *dbv1.FailoverRecord) bool {
	if rec.Fenced || s.ServerStopped == nil {
		return false
	}
	if stopped, shows := s.ServerStopped(rec.From); stopped {
		rec.FenceMessage += "; its pod shows its server stopped (" + shows + ")"
		return false
	}
	return true
}

// detachStandbys tells every standby to stop streaming (instance's
// detach.go) and records those that did. A standby not reached is not
// chosen either (its status is not read); one that refused is said in a
// Warning Event: the old primary's isolation check needs only one of its
// standbys to stop replying.
func (s Steps) detachStandbys(ctx context.Context, rec *dbv1.FailoverRecord) {
	var failed []string
	for _, pod := range s.Pods {
		if pod == rec.From || slices.Contains(rec.DetachedStandbys, pod) {
			continue
		}
		if _, err := s.Channel.Detach(ctx, s.Host(pod)); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", pod, err))
			continue
		}
		rec.DetachedStandbys = append(rec.DetachedStandbys, pod)
	}
	if len(failed) > 0 {
		s.Event(true, "DetachFailed", fmt.Sprintf("standbys that still stream from %s, which the fence did not reach: %s", rec.From, strings.Join(failed, "; ")))
	}
}

// attachStandbys makes the detached standbys other than the new primary
// stream again (their primary_conninfo names the read-write Service,
// which routes to it); rec keeps those not reached, for the operator's
// next pass.
func (s Steps) attachStandbys(ctx context.Context, rec *dbv1.FailoverRecord) {
	var left []string
	for _, pod := range rec.DetachedStandbys {
		if pod == rec.To {
			continue
		}
		if _, err := s.Channel.Attach(ctx, s.Host(pod)); err != nil {
			left = append(left, pod)
		}
	}
	rec.DetachedStandbys = left
}

// waitAfterNaming is how long the promotion of a record named first
// waits: NameFirstWait, and with standbys detached at least what the old
// primary's isolation check needs (instance.IsolationFenceWithin).
func (s Steps) waitAfterNaming(rec *dbv1.FailoverRecord) time.Duration {
	wait := DefaultNameFirstWait
	if s.NameFirstWait > 0 {
		wait = s.NameFirstWait
	}
	if len(rec.DetachedStandbys) > 0 {
		wait = max(wait, instance.IsolationFenceWithin)
	}
	return wait
}

// awaitName returns ErrNamingFirst while a record named first waits for
// its old primary: until waitAfterNaming has passed since it was named,
// or the old primary's pod shows its server stopped.
func (s Steps) awaitName(rec *dbv1.FailoverRecord) error {
	if rec.NamedFirst == nil {
		return nil
	}
	left := rec.NamedFirst.Add(s.waitAfterNaming(rec)).Sub(s.Now())
	if left <= 0 {
		return nil
	}
	if s.ServerStopped != nil {
		if stopped, _ := s.ServerStopped(rec.From); stopped {
			return nil
		}
	}
	return fmt.Errorf("%w (%s left to wait)", ErrNamingFirst, left.Round(100*time.Millisecond))
}

// fence stops the old primary through its agent. It is best effort: an
// agent not reached (its node gone, its pod deleted) is recorded; the
// primary key of the ConfigMap names another pod once the failover is
// done, so that server's readiness fails and the Services leave it, and
// its next start comes up as a standby.
func (s Steps) fence(ctx context.Context, rec *dbv1.FailoverRecord) {
	res, err := s.Channel.Fence(ctx, s.Host(rec.From))
	if err != nil {
		rec.Fenced = false
		rec.FenceMessage = "not fenced: " + err.Error() + "; the Services leave it once its role is taken away (its readiness fails), and it restarts as a standby"
		s.Event(true, "FenceFailed", fmt.Sprintf("%s: %s", rec.From, rec.FenceMessage))
		return
	}
	rec.Fenced = true
	rec.FenceMessage = fmt.Sprintf("fenced: server stopped (it was running: %t, clean shutdown: %t); it stays stopped until the operator lifts the fence", res.WasRunning, res.CleanShutdown)
	s.Event(false, "Fenced", fmt.Sprintf("%s %s", rec.From, rec.FenceMessage))
}

// promote promotes the recorded standby, and only it. One that is a
// primary already (promoted by an operator that stopped before it
// recorded so) is done.
func (s Steps) promote(ctx context.Context, rec *dbv1.FailoverRecord) error {
	if err := s.awaitName(rec); err != nil {
		return err
	}
	var slots []string
	if s.Slots != nil {
		slots = s.Slots(rec.To)
	}
	_, err := s.Channel.Promote(ctx, s.Host(rec.To), slots...)
	if err != nil && !errors.Is(err, instance.ErrAlreadyPrimary) && s.startsAsThePrimary(ctx, rec) {
		return fmt.Errorf("promoting %s: its server restarted while its pod named it the primary, and waited for the operator's word to start as one; told to, which promotes it", rec.To)
	}
	if err != nil && !errors.Is(err, instance.ErrAlreadyPrimary) {
		s.Event(true, "PromoteFailed", fmt.Sprintf("promoting %s failed (tried again; no other standby is promoted): %v", rec.To, err))
		return fmt.Errorf("promoting %s: %w", rec.To, err)
	}
	rec.Phase, rec.Finished = dbv1.FailoverCompleted, ptr.To(metav1.NewTime(s.Now()))
	s.attachStandbys(ctx, rec)
	if err := s.Save(ctx, rec); err != nil {
		return fmt.Errorf("recording the promotion of %s: %w", rec.To, err)
	}
	lost := "unknown (the old primary's last position was never seen)"
	if rec.BytesPossiblyLost != nil {
		lost = fmt.Sprintf("%d bytes of WAL", *rec.BytesPossiblyLost)
	}
	if rec.Kind == dbv1.KindSwitchover {
		s.Event(false, "SwitchedOver", fmt.Sprintf("%s is the primary in place of %s; nothing lost (it replayed past %s's last record)", rec.To, rec.From, rec.From))
		return nil
	}
	s.Event(false, "FailedOver", fmt.Sprintf("%s is the primary in place of %s; possibly lost: %s", rec.To, rec.From, lost))
	return nil
}

// startsAsThePrimary answers the standby to be promoted when its server,
// restarted while its pod named it the primary (named first), waits for
// the operator's word before it starts as one (instance/role.go): a
// server that waits cannot be promoted, and only the operator can end
// its wait. Starting as the primary promotes it, which the record asks.
func (s Steps) startsAsThePrimary(ctx context.Context, rec *dbv1.FailoverRecord) bool {
	st, err := s.Channel.Status(ctx, s.Host(rec.To))
	if err != nil || !st.AwaitingRole {
		return false
	}
	return s.Channel.AnswerRole(ctx, s.Host(rec.To), rec.To) == nil
}

// SynchronousOf is the synchronous replication a failover record says
// the old primary used.
// A record made before synchronousQuorum was recorded is read as ANY 1,
// the weakest guarantee (every named standby must answer).
func SynchronousOf(rec *dbv1.FailoverRecord) Synchronous {
	k := int(rec.SynchronousQuorum)
	if k == 0 && len(rec.SynchronousStandbys) > 0 {
		k = 1
	}
	return Synchronous{Standbys: rec.SynchronousStandbys, Quorum: k}
}

// AnnotationForceFailover on a Database lets the next failover promote a
// standby although too few synchronous standbys answer to be sure it has
// every acknowledged commit (ErrSynchronousQuorum); the operator removes
// it once that failover is recorded.
const AnnotationForceFailover = "stable.imaginedata.co/force-failover"
