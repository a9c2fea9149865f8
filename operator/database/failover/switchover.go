package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// A switchover is a failover asked for, with the old primary healthy: it
// hands over without losing a committed row. Its record is a
// FailoverRecord of kind switchover, named target from the start, and it
// goes through the same phases, saved before each step:
//
//  1. Fencing: the old primary is fenced through its agent: a fast
//     shutdown, which ends every session (rolling back what is not
//     committed), takes no new connection, writes a shutdown checkpoint
//     and waits until the connected standbys have received all WAL up to
//     it. Its agent answers with that checkpoint's location (the last
//     record it wrote), saved as fromLSN. A fence that fails leaves the
//     record at Fencing and is tried again: nothing is promoted while the
//     old primary may still take writes. A shutdown that was not clean
//     leaves its last position unknown: the switchover goes on as a
//     failover (fallBackToFailover), which promotes the most advanced
//     standby.
//  2. The target replays up to fromLSN (asked every pass: ErrCatchingUp
//     until then); then the record says Promoting, and
//  3. it is promoted as a failover's standby is (its slots first).
//
// Promoting only at or past the old primary's last record is what makes
// the handover lose nothing: every commit the old primary acknowledged
// is in WAL before its shutdown checkpoint.
//
// Writes are stopped from the fence on, so the handover is bounded
// (Steps.SwitchoverTimeout, from the record's start): a switchover still
// at Fencing past it (the old primary could not be fenced, or the target
// has not replayed its last record: its WAL receiver lost between the
// check and the fence) is aborted: the old primary's fence is lifted, so
// its entrypoint starts it again as the primary (the ConfigMap still
// names it), and the record becomes Aborted with why. Nothing was
// promoted, so nothing is undone. A switchover at Promoting is not
// aborted: pg_promote may have run on the target, and lifting the old
// primary's fence then could make two primaries; it is retried as a
// failover's promotion is.

// DefaultSwitchoverTimeout is spec.failover.switchoverTimeout's default:
// a clean handover takes a few seconds, and past the 30 s write outage
// the project aims at, the old primary back serves writes sooner than
// waiting on.
const DefaultSwitchoverTimeout = 30 * time.Second

// ErrCatchingUp: the switchover's target has not replayed the old
// primary's last record yet; ask again.
var ErrCatchingUp = errors.New("the target has not replayed the old primary's last record yet")

// StartSwitchover is the record of a switchover from the primary to the
// standby target.
func StartSwitchover(from, target string, now time.Time) *dbv1.FailoverRecord {
	return &dbv1.FailoverRecord{
		Kind: dbv1.KindSwitchover, Started: metav1.NewTime(now), Phase: dbv1.FailoverFencing,
		From: from, To: target, Reason: "switchover asked for (spec.failover.switchoverTo)",
	}
}

// ReadyForSwitchover says why target cannot take over from primary now
// ("": it can): the primary must be healthy and the target a healthy
// standby streaming from it (so the primary's shutdown sends it its last
// WAL).
func ReadyForSwitchover(primary, target Observation) string {
	switch {
	case !PrimaryHealthy(primary):
		return fmt.Sprintf("the primary %s is not healthy", primary.Pod)
	case !StandbyHealthy(target):
		return fmt.Sprintf("%s is not a healthy standby (its agent not reached, its server down, or fenced)", target.Pod)
	case !target.Status.Streaming:
		return fmt.Sprintf("%s does not stream from the primary", target.Pod)
	}
	return ""
}

// fenceForSwitchover fences the old primary, records its last position,
// and moves to Promoting once the target has replayed it.
func (s Steps) fenceForSwitchover(ctx context.Context, rec *dbv1.FailoverRecord) error {
	if rec.FromLSN == "" {
		if s.switchoverOverdue(rec) {
			return s.abortSwitchover(ctx, rec, fmt.Sprintf("%s could not be fenced within %s", rec.From, s.switchoverTimeout()))
		}
		res, err := s.Channel.Fence(ctx, s.Host(rec.From))
		switch {
		case err != nil:
			s.Event(true, "FenceFailed", fmt.Sprintf("switchover: fencing %s failed (tried again; nothing is promoted meanwhile): %v", rec.From, err))
			return fmt.Errorf("fencing %s: %w", rec.From, err)
		case res.FinalLSN == 0:
			return s.fallBackToFailover(ctx, rec)
		}
		rec.Fenced, rec.FromLSN = true, res.FinalLSN.String()
		rec.FenceMessage = fmt.Sprintf("fenced: stopped cleanly, its last record at %s; it stays stopped until the operator lifts the fence", res.FinalLSN)
		if err := s.Save(ctx, rec); err != nil {
			return fmt.Errorf("recording the fence of %s: %w", rec.From, err)
		}
		s.Event(false, "Fenced", fmt.Sprintf("switchover: %s %s", rec.From, rec.FenceMessage))
	}
	final, err := instance.ParseLSN(rec.FromLSN)
	if err != nil {
		return fmt.Errorf("the switchover record's fromLSN %q: %w", rec.FromLSN, err)
	}
	st, err := s.Channel.Status(ctx, s.Host(rec.To))
	caughtUp := err == nil && st.ServerUp && st.ReplayLSN >= final
	switch {
	case !caughtUp && s.switchoverOverdue(rec):
		return s.abortSwitchover(ctx, rec, fmt.Sprintf("%s had not replayed %s's last record (%s) within %s: %s", rec.To, rec.From, final, s.switchoverTimeout(), describeReplay(st, err)))
	case err != nil:
		return fmt.Errorf("asking %s how far it replayed: %w", rec.To, err)
	case !caughtUp:
		return fmt.Errorf("%s replayed to %s, the old primary's last record is at %s (aborted after %s): %w", rec.To, st.ReplayLSN, final, s.switchoverTimeout(), ErrCatchingUp)
	}
	rec.Phase, rec.ToLSN, rec.BytesPossiblyLost = dbv1.FailoverPromoting, st.ReplayLSN.String(), ptr.To(int64(0))
	if err := s.Save(ctx, rec); err != nil {
		return fmt.Errorf("recording the choice of %s: %w", rec.To, err)
	}
	s.Event(false, "Promoting", fmt.Sprintf("switchover: %s replayed to %s, past %s's last record (%s): promoting it", rec.To, st.ReplayLSN, rec.From, final))
	return nil
}

// fallBackToFailover: the old primary is stopped but not cleanly, so its
// last position is unknown; the switchover goes on as a failover would
// (the old primary is fenced, stopped: it is gone).
func (s Steps) fallBackToFailover(ctx context.Context, rec *dbv1.FailoverRecord) error {
	target := rec.To
	rec.To = ""
	s.Event(true, "SwitchoverFellBack", fmt.Sprintf("switchover: %s did not stop cleanly (its last position is unknown): going on as a failover, the most advanced standby is promoted rather than %s", rec.From, target))
	if err := s.fenceAndChoose(ctx, rec); err != nil {
		return err
	}
	rec.Reason = fmt.Sprintf("switchover to %s, but %s did not stop cleanly: as a failover, %s", target, rec.From, rec.Reason)
	return s.Save(ctx, rec)
}

func (s Steps) switchoverTimeout() time.Duration {
	if s.SwitchoverTimeout > 0 {
		return s.SwitchoverTimeout
	}
	return DefaultSwitchoverTimeout
}

// switchoverOverdue: the switchover began longer ago than its bound.
func (s Steps) switchoverOverdue(rec *dbv1.FailoverRecord) bool {
	return s.Now().Sub(rec.Started.Time) > s.switchoverTimeout()
}

// describeReplay says how far the target got, as its agent answered.
func describeReplay(st instance.Status, err error) string {
	switch {
	case err != nil:
		return "its agent was not reached: " + err.Error()
	case !st.ServerUp:
		return "its server is down: " + st.Error
	default:
		return fmt.Sprintf("it replayed to %s", st.ReplayLSN)
	}
}

// abortSwitchover gives a switchover up before anything was promoted: the
// old primary's fence is lifted first (so an operator that stops before
// recording the abort aborts again, the bound still passed), then the
// record says Aborted. A fence that cannot be lifted (the old primary's
// agent not reached) is said in the record; the failover watch then finds
// the primary unhealthy and fails it over past primaryGoneAfter, so the
// Database is never left without a primary for good.
func (s Steps) abortSwitchover(ctx context.Context, rec *dbv1.FailoverRecord, why string) error {
	now := metav1.NewTime(s.Now())
	if _, err := s.Channel.Unfence(ctx, s.Host(rec.From)); err != nil {
		rec.FenceMessage = fmt.Sprintf("the fence could not be lifted: %v; if %s stays unhealthy it is failed over", err, rec.From)
		s.Event(true, "UnfenceFailed", fmt.Sprintf("switchover aborted: lifting the fence of %s failed: %v", rec.From, err))
	} else {
		rec.FenceLifted = &now
		rec.FenceMessage = fmt.Sprintf("the fence was lifted when the switchover was aborted: %s starts again as the primary", rec.From)
	}
	rec.Phase, rec.Finished, rec.AbortReason = dbv1.FailoverAborted, &now, why
	if err := s.Save(ctx, rec); err != nil {
		return fmt.Errorf("recording the abort of the switchover to %s: %w", rec.To, err)
	}
	s.Event(true, "SwitchoverAborted", fmt.Sprintf("switchover from %s to %s aborted: %s; %s stays the primary. Not tried again until the Database is annotated %s (spec.failover.switchoverTo still names %s; clear it to give the switchover up)", rec.From, rec.To, why, rec.From, AnnotationRetrySwitchover, rec.To))
	return nil
}

// AnnotationRetrySwitchover on a Database asks for one more attempt at
// the switchover spec.failover.switchoverTo names after one was aborted;
// the operator removes it once the new attempt is recorded.
const AnnotationRetrySwitchover = "stable.imaginedata.co/retry-switchover"
