package database

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/failover"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// Switchover on request (spec.failover.switchoverTo): the reconciler's
// side. The watch, finding the primary healthy, starts one when the spec
// names another instance and that instance is a healthy standby
// streaming from the primary; failover.Steps carries it out
// (failover/switchover.go) and the old primary comes back as a standby
// like a failed-over one (rejoin.go).

// switchoverTarget is the instance the spec wants as the primary, ""
// when none or when it is the primary already.
func switchoverTarget(db *Cluster) string {
	f := db.Spec.Failover
	if f == nil || f.SwitchoverTo == "" || f.SwitchoverTo == currentPrimary(db) {
		return ""
	}
	if ordinal, ok := podOrdinal(db, f.SwitchoverTo); !ok || int32(ordinal) >= replicasOf(db) {
		return "" // the schema refuses it; a scale-down may leave it
	}
	return f.SwitchoverTo
}

// maybeSwitchover starts the switchover the spec asks for, when its target
// is ready, or one away from a primary whose node is being drained
// (drain.go); primary is the healthy primary's observation, others the
// standbys'. It reports whether a switchover was asked for (the watch's
// condition is then the switchover's).
func (r *Reconciler) maybeSwitchover(ctx context.Context, db *Cluster, eng engine.Engine, ch *instance.Client, primary failover.Observation, pods map[string]*corev1.Pod, others []failover.Observation) (bool, error) {
	target, reason := switchoverTarget(db), ""
	if target == "" {
		to, why, waiting := r.drainTarget(ctx, primary, pods, others)
		switch {
		case waiting != "":
			r.setCondition(db, ConditionFailover, true, "DrainWaiting", fmt.Sprintf("the primary %s: %s; PodDisruptionBudget %s keeps it from being evicted until a standby takes over, and %s",
				primary.Pod, why, namesOf(db).PrimaryPDB, waiting))
			return true, nil
		case to == "":
			return false, nil
		}
		target, reason = to, fmt.Sprintf("the primary %s: %s", primary.Pod, why)
	} else if why := r.nodeDraining(ctx, pods[target]); why != "" {
		r.setCondition(db, ConditionFailover, true, "SwitchoverWaiting", fmt.Sprintf("switchover to %s asked for; waiting: %s", target, why))
		return true, nil
	}
	o := failover.Observation{Pod: target}
	if st, err := ch.Status(ctx, r.instanceHost(db, target)); err == nil {
		o.Status = &st
	}
	// This look at the target is the pass's latest: the last failover's
	// old primary may stream only since the standbys were read. Recorded
	// back now, before the switchover to it leaves that record behind for
	// good.
	if err := r.rejoinSeenIn(ctx, db, []failover.Observation{o}); err != nil {
		return true, err
	}
	if aborted := abortedSwitchoverTo(db, target); aborted != nil && !retrySwitchoverAsked(db) {
		r.setCondition(db, ConditionFailover, false, "SwitchoverAborted", fmt.Sprintf("the switchover from %s to %s was aborted at %s: %s; %s is the primary. To try again annotate the Database %s=now; to give it up clear spec.failover.switchoverTo", aborted.From, aborted.To, aborted.Finished.UTC().Format(time.RFC3339), aborted.AbortReason, currentPrimary(db), failover.AnnotationRetrySwitchover))
		return true, nil
	}
	if why := failover.ReadyForSwitchover(primary, o); why != "" {
		r.setCondition(db, ConditionFailover, true, "SwitchoverWaiting", fmt.Sprintf("switchover to %s asked for; waiting: %s", target, why))
		return true, nil
	}
	r.pausePoolers(ctx, db, target)
	rec := failover.StartSwitchover(currentPrimary(db), target, r.now())
	if reason != "" {
		rec.Reason = "switchover ahead of a drain: " + reason
		r.normal(db, "DrainSwitchover", "Switchover", "%s; switching over to %s before the drain evicts it", reason, target)
	}
	err := r.runFailover(ctx, db, eng, ch, rec, false)
	if retrySwitchoverAsked(db) && abortedSwitchoverTo(db, target) == nil {
		// The new attempt is recorded: the request is answered.
		return true, errors.Join(err, r.forgetAnnotation(ctx, db, failover.AnnotationRetrySwitchover))
	}
	return true, err
}

// pausePoolers pauses the Database's poolers before the switchover stops
// the primary, so their clients wait instead of failing; the Pooler
// controller resumes them once it has ended (pooler/pause.go). A pooler
// that cannot be paused in time does not hold the switchover back.
func (r *Reconciler) pausePoolers(ctx context.Context, db *Cluster, target string) {
	if r.Poolers == nil {
		return
	}
	why := fmt.Sprintf("switchover of Database %s from %s to %s", db.Name, currentPrimary(db), target)
	if err := r.Poolers.PauseFor(ctx, db.Namespace, db.Name, why); err != nil {
		ctrl.LoggerFrom(ctx).Info("pausing the poolers before a switchover", "error", err.Error())
	}
}

// abortedSwitchoverTo is the last failover record when it is an aborted
// switchover to target: it is not tried again on its own (each attempt
// stops writes for up to switchoverTimeout).
func abortedSwitchoverTo(db *Cluster, target string) *dbv1.FailoverRecord {
	n := len(db.Status.Failovers)
	if n == 0 {
		return nil
	}
	rec := &db.Status.Failovers[n-1]
	if rec.Kind != dbv1.KindSwitchover || rec.Phase != dbv1.FailoverAborted || rec.To != target || rec.Finished == nil {
		return nil
	}
	return rec
}

// retrySwitchoverAsked: the Database carries the retry annotation.
func retrySwitchoverAsked(db *Cluster) bool {
	_, ok := db.Annotations[failover.AnnotationRetrySwitchover]
	return ok
}

// forgetAnnotation removes a one-shot request (the retry and force
// annotations) once it is answered: a merge patch of the metadata only.
func (r *Reconciler) forgetAnnotation(ctx context.Context, db *Cluster, key string) error {
	obj := db.Object
	if _, ok := obj.GetAnnotations()[key]; !ok {
		return nil
	}
	before := obj.DeepCopyObject().(client.Object)
	annotations := maps.Clone(obj.GetAnnotations())
	delete(annotations, key)
	obj.SetAnnotations(annotations)
	if err := r.Client.Patch(ctx, obj, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("removing the annotation %s: %w", key, err)
	}
	return nil
}

// catchingUp: a switchover waits for its target to replay the old
// primary's last record; not an error (no back-off): asked again in a
// second.
func (r *Reconciler) catchingUp(db *Cluster, rec *dbv1.FailoverRecord, err error) bool {
	if !errors.Is(err, failover.ErrCatchingUp) {
		return false
	}
	r.setCondition(db, ConditionFailover, false, "SwitchoverCatchingUp", fmt.Sprintf("switching over from %s to %s: %v", rec.From, rec.To, err))
	return true
}

// failoverCondition is the Failover condition's reason and message for a
// record saved at its phase.
func failoverCondition(rec *dbv1.FailoverRecord) (status bool, reason, msg string) {
	switchover := rec.Kind == dbv1.KindSwitchover
	switch {
	case rec.Phase == dbv1.FailoverAborted:
		return false, "SwitchoverAborted", fmt.Sprintf("the switchover from %s to %s was aborted: %s; %s is the primary. To try again annotate the Database %s=now; to give it up clear spec.failover.switchoverTo", rec.From, rec.To, rec.AbortReason, rec.From, failover.AnnotationRetrySwitchover)
	case rec.Phase == dbv1.FailoverCompleted && switchover:
		return true, "SwitchedOver", fmt.Sprintf("%s is the primary in place of %s (switchover)", rec.To, rec.From)
	case rec.Phase == dbv1.FailoverCompleted:
		return true, "FailedOver", fmt.Sprintf("%s is the primary in place of %s (%s)", rec.To, rec.From, rec.Reason)
	case rec.Phase == dbv1.FailoverPromoting:
		return false, "Promoting", fmt.Sprintf("promoting %s in place of %s; %s", rec.To, rec.From, rec.FenceMessage)
	case switchover:
		return false, "SwitchingOver", fmt.Sprintf("switching over from %s to %s: fencing %s", rec.From, rec.To, rec.From)
	default:
		return false, "Fencing", fmt.Sprintf("primary %s is gone: fencing it and choosing a standby", rec.From)
	}
}

// failoverPending sets the failover_pending gauge: the primary is gone
// and not replaced (a record under way, or blocked).
func (r *Reconciler) failoverPending(db *Cluster, pending bool) {
	v := 0.0
	if pending {
		v = 1
	}
	r.Kind.metrics.failoverPending.WithLabelValues(db.Namespace, db.Name).Set(v)
}

// countFailover counts a completed record.
func (r *Reconciler) countFailover(db *Cluster, rec *dbv1.FailoverRecord) {
	kind := rec.Kind
	if kind == "" {
		kind = dbv1.KindFailover
	}
	r.Kind.metrics.failovers.WithLabelValues(db.Namespace, db.Name, string(kind)).Inc()
}
