package database

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/failover"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// After a failover the old primary stays fenced: its agent's marker keeps
// its entrypoint from starting the server. The entrypoint reads its role
// (the scripts ConfigMap's primary key) only once the fence is gone, and
// the kubelet refreshes a mounted ConfigMap at its own pace: lifted
// before its pod sees the new name, the old primary would read its own
// name and serve as a second primary. So the operator lifts the fence
// only once the old primary's agent, which mounts the same ConfigMap
// volume as the server, reports that the pod names the new primary
// (instance.Status.NamedPrimary). The server then starts, pg_rewind
// undoes what it wrote after the histories diverged, and it streams from
// the new primary through the slot the promotion made for it. The last
// failover record says when the fence was lifted and when the old
// primary was first seen streaming (Events FenceLifted and Rejoined).

// rejoinOldPrimary takes the last completed failover's old primary
// through the lift and records its return; asked again every pass of the
// watch until it is back.
func (r *Reconciler) rejoinOldPrimary(ctx context.Context, db *Cluster, ch *instance.Client) error {
	rec := lastRejoinPending(db)
	if rec == nil {
		return nil
	}
	old := rec.From
	st, err := ch.Status(ctx, r.instanceHost(db, old))
	if err != nil {
		// Its pod may be gone or restarting: asked again next pass.
		return nil
	}
	if st.AwaitingRole {
		// Its pod was made again before it read the new primary's name:
		// told who is, it waits for its pod to name that one.
		return r.answerRole(ctx, db, ch, old, st)
	}
	if st.SelfFenced && rec.SelfFenced == nil {
		return r.recordSelfFence(ctx, db, rec, st)
	}
	switch {
	case st.Fenced:
		// Fenced by the failover, by its own agent, or by the stray
		// primary fence after an earlier lift: lifted whenever its pod
		// names the new primary, as often as it takes, until it is back.
		if st.NamedPrimary != rec.To {
			// Its pod still reads an older name: lifting now could start
			// it as a primary.
			return nil
		}
		if st.DataDirectoryError != "" {
			// Its disk failed: lifted now, its entrypoint would fail at
			// every restart and the kubelet's back-off would grow to
			// five minutes; fenced, its container waits and starts at
			// once when lifted.
			r.reportUnreadable(db, old, st.DataDirectoryError)
			return nil
		}
		if _, err := ch.Unfence(ctx, r.instanceHost(db, old)); err != nil {
			return fmt.Errorf("lifting the fence of %s: %w", old, err)
		}
		rec.FenceLifted = ptr.To(metav1.NewTime(r.now()))
		r.normal(db, "FenceLifted", "Failover", "%s", fmt.Sprintf("lifted the fence of the old primary %s: its pod names %s the primary, so it starts as its standby (rewound by pg_rewind)", old, rec.To))
		return r.saveRejoin(ctx, db, rec, "FenceLifted", fmt.Sprintf("%s is the primary; the old primary %s's fence is lifted: it is rejoining as a standby", rec.To, old))
	case streamsAsStandby(st):
		// Seen first as a standby already (never fenced: its node came
		// back and its server started as a standby before this pass), it
		// is recorded back now: the same pass may switch over to it
		// (spec.failover.switchoverTo), after which this record is no
		// longer the last.
		return r.recordRejoined(ctx, db, rec)
	case rec.FenceLifted == nil:
		// Not fenced (never reached by the fence, or lifted by a person):
		// nothing to lift; its entrypoint reads the new name at its start,
		// and its agent fences a server still running as a primary.
		rec.FenceLifted = ptr.To(metav1.NewTime(r.now()))
		return r.saveRejoin(ctx, db, rec, "FenceLifted", fmt.Sprintf("%s is the primary; the old primary %s is not fenced: it rejoins as a standby at its next start", rec.To, old))
	}
	return nil
}

// streamsAsStandby: st is a server up as a standby, streaming.
func streamsAsStandby(st instance.Status) bool {
	return st.ServerUp && st.Role == instance.RoleStandby && st.Streaming
}

// recordRejoined records the last failover's old primary back as a
// standby now (and its fence lifted, if that was never seen).
func (r *Reconciler) recordRejoined(ctx context.Context, db *Cluster, rec *dbv1.FailoverRecord) error {
	if rec.FenceLifted == nil {
		rec.FenceLifted = ptr.To(metav1.NewTime(r.now()))
	}
	rec.Rejoined = ptr.To(metav1.NewTime(r.now()))
	r.normal(db, "Rejoined", "Failover", "%s", fmt.Sprintf("the old primary %s streams as a standby of %s", rec.From, rec.To))
	return r.saveRejoin(ctx, db, rec, "Rejoined", fmt.Sprintf("%s is the primary; the old primary %s rejoined as its standby", rec.To, rec.From))
}

// rejoinSeenIn records the last failover's old primary back when others,
// the standbys' statuses read later in the pass than rejoinOldPrimary's
// look, show it streaming. rejoinOldPrimary may have caught it still
// starting (a clone just finished), and a switchover to it in the same
// pass (spec.failover.switchoverTo) would then leave the record without
// its return for good.
func (r *Reconciler) rejoinSeenIn(ctx context.Context, db *Cluster, others []failover.Observation) error {
	rec := lastRejoinPending(db)
	if rec == nil {
		return nil
	}
	for _, o := range others {
		if o.Pod == rec.From && o.Status != nil && streamsAsStandby(*o.Status) {
			return r.recordRejoined(ctx, db, rec)
		}
	}
	return nil
}

// reportUnreadable says, once per operator and old primary, that its
// fence stays until its data directory can be read.
func (r *Reconciler) reportUnreadable(db *Cluster, pod, why string) {
	w := r.failovers.of(db.UID, currentPrimary(db), r.now())
	r.failovers.mu.Lock()
	defer r.failovers.mu.Unlock()
	if w.unreadableReported == pod {
		return
	}
	w.unreadableReported = pod
	r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "OldPrimaryUnreadable", "Failover", "the old primary %s stays fenced while its data directory cannot be read (%s): lifted once it can, it rejoins as a standby", pod, why)
}

// recordSelfFence records that the old primary's agent fenced its own
// server (it ran as a primary while its pod named the new one: the
// failover's fence had not reached it). Its fence is lifted like any
// other, in a later pass.
func (r *Reconciler) recordSelfFence(ctx context.Context, db *Cluster, rec *dbv1.FailoverRecord, st instance.Status) error {
	rec.SelfFenced = ptr.To(metav1.NewTime(r.now()))
	msg := fmt.Sprintf("the old primary %s, which the failover's fence did not reach, was fenced by its own agent once its pod named %s the primary: it had run as a primary beside %s, and the writes it took alone are never served (it rejoins through pg_rewind)", rec.From, st.NamedPrimary, rec.To)
	r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "OldPrimaryFencedItself", "Failover", "%s", msg)
	return r.saveRejoin(ctx, db, rec, "OldPrimaryFencedItself", msg)
}

// lastRejoinPending is the last failover record when it is completed, its
// new primary is still the current one, and its old primary has not
// been seen back as a standby.
func lastRejoinPending(db *Cluster) *dbv1.FailoverRecord {
	n := len(db.Status.Failovers)
	if n == 0 {
		return nil
	}
	rec := db.Status.Failovers[n-1]
	if rec.Phase != dbv1.FailoverCompleted || rec.Rejoined != nil || rec.To != currentPrimary(db) || rec.From == rec.To {
		return nil
	}
	if _, ok := podOrdinal(db, rec.From); !ok {
		return nil
	}
	if ordinal, _ := podOrdinal(db, rec.From); int32(ordinal) >= replicasOf(db) {
		// Scaled away: nothing comes back.
		return nil
	}
	return rec.DeepCopy()
}

// saveRejoin writes rec over the last record and the condition, in a
// locked status write.
func (r *Reconciler) saveRejoin(ctx context.Context, db *Cluster, rec *dbv1.FailoverRecord, reason, msg string) error {
	db.Status.Failovers[len(db.Status.Failovers)-1] = *rec
	r.setCondition(db, ConditionFailover, true, reason, msg)
	return r.saveStatus(ctx, db)
}
