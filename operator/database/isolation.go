package database

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// The primary's agent fences its own server when it finds itself cut off
// from the operator and from the API server while a standby stopped
// replying (instance/isolation.go): a failover elsewhere may be promoting
// that standby. The operator gives the agent its bound with every question
// of the primary, and lifts such a fence when it finds no failover
// happened.

// isolationAfter is the bound the primary's agent gets: half of
// primaryGoneAfter, so that its isolation check fences the server before
// the operator, which waits primaryGoneAfter, can promote another.
func isolationAfter(db *Cluster) time.Duration {
	return primaryGoneAfter(db) / 2
}

// liftFenceOfTheCurrentPrimary lifts the fence of the current primary
// whose own agent fenced it (st: its status) while its pod still names it
// the primary and no failover is under way: it was cut off for a while,
// and nothing replaced it (a promotion is always recorded first, and the
// operator reaching it again sees none). Its server starts again once
// the fence is gone, on the operator's word (role.go). True when it
// lifted the fence.
func (r *Reconciler) liftFenceOfTheCurrentPrimary(ctx context.Context, db *Cluster, ch *instance.Client, primary string, st instance.Status) (bool, error) {
	if !st.Fenced || !st.SelfFenced || st.NamedPrimary != primary || failoverUnderway(db) != nil {
		return false, nil
	}
	if _, err := ch.Unfence(ctx, r.instanceHost(db, primary)); err != nil {
		return false, fmt.Errorf("lifting the fence of the primary %s, fenced by its own agent: %w", primary, err)
	}
	r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "PrimaryFenceLifted", "Failover", "%s",
		fmt.Sprintf("the primary %s had been fenced by its own agent (its isolation check or its role guard: its agent's log says which); no failover replaced it and its pod names it the primary, so its fence is lifted and it starts again as the primary", primary))
	return true, nil
}
