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
	// was named first (0: DefaultNameFirstWait), before standbys still
	// streaming are detached (detachStreamingStandbys).
	NameFirstWait time.Duration
}

// DefaultNameFirstWait is how long the promotion of a failover whose fence
// did not reach the old primary waits after the new primary is named, so
// that the old primary's agent reads the name and fences its server first
// (instance.Agent.GuardRole). The name reaches a pod when its kubelet
// refreshes the mounted ConfigMap, which the role labels' change makes it
// do at once: on the real node the old primary fenced itself within 2 s
// of the name (docs/performance.md), but 5.4 s after it on a node loaded
// by make test, where a 5 s wait detached its standby a second before its
// fence and it acknowledged two writes alone. A kubelet
// that cannot reach the API server never delivers it: the wait bounds
// what that costs, and the standbys detached after it make such an old
// primary fence itself (detachStreamingStandbys).
const DefaultNameFirstWait = 8 * time.Second

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
	choice, err := s.choose(ctx, rec)
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
	rec.Phase = dbv1.FailoverPromoting
	recordChoice(rec, choice)
	if mayRun {
		rec.NamedFirst = ptr.To(metav1.NewTime(s.Now()))
	}
	if err := s.Save(ctx, rec); err != nil {
		return fmt.Errorf("recording the choice of %s: %w", rec.To, err)
	}
	if rec.NamedFirst != nil {
		s.Event(true, "NamingNewPrimaryFirst", fmt.Sprintf("the fence did not reach %s and its pod shows its server running: %s is named the primary first, so %s's agent fences its server once its pod reads the name; %s is promoted within %s, or %s more if its pod still shows it running then and standbys still stream (%s)", rec.From, rec.To, rec.From, rec.To, s.nameFirstWait(), instance.IsolationFenceWithin, rec.Reason))
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

// choose reads the other instances' statuses and chooses the standby
// to promote (ChooseStandbyUnder; forced: any).
func (s Steps) choose(ctx context.Context, rec *dbv1.FailoverRecord) (Choice, error) {
	sync := SynchronousOf(rec)
	if s.Forced {
		sync = Synchronous{}
	}
	return ChooseStandbyUnder(rec.From, s.observeOthers(ctx, rec.From), sync, s.MaxLag)
}

// observeOthers are the statuses of every instance but from (nil: its
// agent not reached).
func (s Steps) observeOthers(ctx context.Context, from string) []Observation {
	var obs []Observation
	for _, pod := range s.Pods {
		if pod == from {
			continue
		}
		o := Observation{Pod: pod}
		if st, err := s.Channel.Status(ctx, s.Host(pod)); err == nil {
			o.Status = &st
		}
		obs = append(obs, o)
	}
	return obs
}

// detachStreamingStandbys runs once the name-first wait is over and the
// old primary's pod still shows its server running: its role guard has
// not fenced it, as when its node cannot reach the API server (the name
// never arrives). Every standby still streaming is told to stop
// (instance's detach.go), the new primary last, so that such an old
// primary's isolation check sees them stop replying and fences its
// server before the promotion. Not earlier: an old primary its role
// guard fences in the wait sends its last WAL to the standbys still
// streaming, and a standby detached before that would lack the writes
// it acknowledged meanwhile. With synchronous replication the choice is
// made again on the detached positions (one that flushed further may
// hold an acknowledged commit the named one lacks), and named anew if it
// changed. A standby that refused is said in a Warning Event: the
// isolation check needs only one to stop replying. It returns whether the
// old primary has long been deaf to every one of them (deafTo).
func (s Steps) detachStreamingStandbys(ctx context.Context, rec *dbv1.FailoverRecord) (deaf bool) {
	rec.StandbysDetached = ptr.To(metav1.NewTime(s.Now()))
	var order []string
	var streaming []Observation
	toStreams := false
	for _, o := range s.observeOthers(ctx, rec.From) {
		switch {
		// A standby detached already was detached by an operator that
		// stopped before it recorded so: it is listed, and waited for.
		case o.Status == nil || !o.Status.Streaming && !o.Status.Detached:
			continue
		case o.Pod == rec.To:
			toStreams = true
		default:
			order = append(order, o.Pod)
		}
		streaming = append(streaming, o)
	}
	if toStreams {
		order = append(order, rec.To)
	}
	for _, pod := range order {
		s.detach(ctx, rec, pod)
	}
	return deafTo(streaming, s.Now())
}

// deafTo: each standby's WAL receiver (one at least) has sent replies
// over a connection its primary has not acknowledged for
// instance.IsolationFenceWithin or more (linkstall.go): the old primary
// has heard none of them for that long, as when its node lost its power
// or its network. What detaching them would make it see, it has seen:
// if it runs and cannot reach the API server, its isolation check has
// fenced it; if it reaches the API server, it has read the name in the
// name-first wait. No more waiting is owed to it. A standby already
// detached (by an operator that stopped before it recorded so) says
// nothing of its link now.
func deafTo(standbys []Observation, now time.Time) bool {
	for _, o := range standbys {
		if o.Status == nil || o.Status.Detached {
			return false
		}
	}
	at := UnheardSince(standbys, now)
	return !at.IsZero() && now.Sub(at) >= instance.IsolationFenceWithin
}

// detach detaches pod and records it, or says why it could not.
func (s Steps) detach(ctx context.Context, rec *dbv1.FailoverRecord, pod string) {
	if slices.Contains(rec.DetachedStandbys, pod) {
		return
	}
	if _, err := s.Channel.Detach(ctx, s.Host(pod)); err != nil {
		s.Event(true, "DetachFailed", fmt.Sprintf("%s still streams from %s, which the fence did not reach: %v", pod, rec.From, err))
		return
	}
	rec.DetachedStandbys = append(rec.DetachedStandbys, pod)
}

// chooseAgainUnderSync makes the choice again on the detached standbys'
// positions when synchronous replication was on, and names the new one
// if it changed.
func (s Steps) chooseAgainUnderSync(ctx context.Context, rec *dbv1.FailoverRecord) {
	if !SynchronousOf(rec).On() || len(rec.DetachedStandbys) == 0 {
		return
	}
	choice, err := s.choose(ctx, rec)
	if err != nil || choice.Pod == rec.To || choice.AlreadyPrimary {
		return
	}
	s.Event(true, "NamingNewPrimaryFirst", fmt.Sprintf("%s flushed further than %s once the standbys were detached: %s is named the primary instead (%s)", choice.Pod, rec.To, choice.Pod, choice.Reason))
	recordChoice(rec, choice)
	rec.NamedFirst = ptr.To(metav1.NewTime(s.Now()))
}

// recordChoice writes the standby chosen into rec: who, why, its replayed
// position, and what the old primary had written beyond it.
func recordChoice(rec *dbv1.FailoverRecord, choice Choice) {
	rec.To, rec.Reason = choice.Pod, choice.Reason
	if choice.ReplayLSN == 0 {
		return
	}
	rec.ToLSN = choice.ReplayLSN.String()
	if from, err := instance.ParseLSN(rec.FromLSN); err == nil {
		rec.BytesPossiblyLost = ptr.To(int64(choice.ReplayLSN.Behind(from)))
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

func (s Steps) nameFirstWait() time.Duration {
	if s.NameFirstWait > 0 {
		return s.NameFirstWait
	}
	return DefaultNameFirstWait
}

// awaitName returns ErrNamingFirst while a record named first waits for
// its old primary, unless its pod shows its server stopped: NameFirstWait
// after the name (its role guard reads it); then, with standbys still
// streaming from it, detaches them and waits instance.IsolationFenceWithin
// more (its isolation check sees them stop replying).
func (s Steps) awaitName(ctx context.Context, rec *dbv1.FailoverRecord) error {
	if rec.NamedFirst == nil || s.oldServerStopped(rec) {
		return nil
	}
	if rec.StandbysDetached == nil {
		if left := rec.NamedFirst.Add(s.nameFirstWait()).Sub(s.Now()); left > 0 {
			return fmt.Errorf("%w (%s left to wait)", ErrNamingFirst, left.Round(100*time.Millisecond))
		}
		deaf := s.detachStreamingStandbys(ctx, rec)
		s.chooseAgainUnderSync(ctx, rec)
		if err := s.Save(ctx, rec); err != nil {
			return fmt.Errorf("recording the standbys detached: %w", err)
		}
		if deaf {
			// Only in this pass: a later one (this promotion failed, the
			// operator restarted) waits, as it cannot know.
			s.Event(true, "StandbysDetached", fmt.Sprintf("%s's pod still shows its server running after the name-first wait, but it has acknowledged nothing its standbys sent for %s or more (its node lost, or cut off): it cannot hear them, so its agent, if it runs cut off from the API server, has fenced it; standbys %s detached, %s promoted now", rec.From, instance.IsolationFenceWithin, strings.Join(rec.DetachedStandbys, ", "), rec.To))
			return nil
		}
		if len(rec.DetachedStandbys) > 0 {
			s.Event(true, "StandbysDetached", fmt.Sprintf("%s's pod still shows its server running after the name-first wait: standbys %s no longer stream from it, so its agent, if cut off from the API server too, fences it; %s is promoted within %s", rec.From, strings.Join(rec.DetachedStandbys, ", "), rec.To, instance.IsolationFenceWithin))
		}
	}
	if len(rec.DetachedStandbys) == 0 {
		return nil
	}
	if left := rec.StandbysDetached.Add(instance.IsolationFenceWithin).Sub(s.Now()); left > 0 {
		return fmt.Errorf("%w (standbys detached: %s left to wait)", ErrNamingFirst, left.Round(100*time.Millisecond))
	}
	return nil
}

// oldServerStopped: the old primary's pod shows its server stopped.
func (s Steps) oldServerStopped(rec *dbv1.FailoverRecord) bool {
	if s.ServerStopped == nil {
		return false
	}
	stopped, _ := s.ServerStopped(rec.From)
	return stopped
}

// fence stops the old primary through its agent. It is best effort: an
// agent not reached (its node gone, its pod deleted) is recorded; the
// primary key of the ConfigMap names another pod once the failover has
// named its standby (first, when that server may still run) or completed,
// so that server's readiness fails and the Services leave it, its agent's
// guard fences it, and its next start comes up as a standby.
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
	if res.Killed {
		rec.FenceMessage = "fenced: the server ended no immediate shutdown (hung: frozen, or stuck on its storage), so every process of it was sent SIGKILL: each dies before it answers a client again; it stays stopped until the operator lifts the fence"
	}
	if res.MarkerPending {
		rec.FenceMessage += "; its fence marker is still being written (its disk takes no writes): it lands when the disk takes writes again, and a server started before that starts as a standby of the primary its pod names"
	}
	s.Event(false, "Fenced", fmt.Sprintf("%s %s", rec.From, rec.FenceMessage))
}

// promote promotes the recorded standby, and only it. One that is a
// primary already (promoted by an operator that stopped before it
// recorded so) is done.
func (s Steps) promote(ctx context.Context, rec *dbv1.FailoverRecord) error {
	if err := s.awaitName(ctx, rec); err != nil {
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
// it once that failover has completed, or when it finds the primary
// healthy (a force asked for an outage that is over).
const AnnotationForceFailover = "stable.imaginedata.co/force-failover"
