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
//     record it wrote), saved as fromLSN. A fence that fails, or a
//     shutdown that was not clean, leaves the record at Fencing and is
//     tried again: nothing is promoted while the old primary may still
//     take writes or its last position is unknown.
//  2. The target replays up to fromLSN (asked every pass: ErrCatchingUp
//     until then); then the record says Promoting, and
//  3. it is promoted as a failover's standby is (its slots first).
//
// Promoting only at or past the old primary's last record is what makes
// the handover lose nothing: every commit the old primary acknowledged
// is in WAL before its shutdown checkpoint.

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
	if err != nil {
		return fmt.Errorf("asking %s how far it replayed: %w", rec.To, err)
	}
	if !st.ServerUp || st.ReplayLSN < final {
		return fmt.Errorf("%s replayed to %s, the old primary's last record is at %s: %w", rec.To, st.ReplayLSN, final, ErrCatchingUp)
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
