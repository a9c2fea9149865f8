package database

import (
	"context"
	"fmt"
	"strings"

	"github.com/deckhand-dev/deckhand/operator/database/failover"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// attachTimeout bounds each attach from the failover watch's pass (the
// agent answered its status just before; the attach is a reload).
const attachTimeout = 5 * instance.StatusTimeout

// attachDetachedStandbys makes every other instance whose agent says it is
// detached (failover.Steps.detachStreamingStandbys) stream again, once the primary
// is healthy: one the promotion's own attach did not reach, and one an
// operator that stopped between the detach and its record left
// unlisted. others are the other instances' statuses of this pass. The
// last, finished, record's detachedStandbys keeps only those still
// detached or not reached; a pod scaled away leaves it.
func (r *Reconciler) attachDetachedStandbys(ctx context.Context, db *Cluster, ch *instance.Client, others []failover.Observation) error {
	var attached []string
	unsettled := map[string]bool{}
	for _, o := range others {
		switch {
		case o.Status == nil:
			unsettled[o.Pod] = true // not reached: still detached, perhaps
		case o.Status.Detached:
			actx, cancel := context.WithTimeout(ctx, attachTimeout)
			_, err := ch.Attach(actx, r.instanceHost(db, o.Pod))
			cancel()
			if err != nil {
				unsettled[o.Pod] = true
				continue
			}
			attached = append(attached, o.Pod)
		}
	}
	if len(attached) > 0 {
		r.normal(db, "StandbysAttached", "Failover", "%s", fmt.Sprintf("standbys a failover detached stream again: %s", strings.Join(attached, ", ")))
	}
	n := len(db.Status.Failovers)
	if n == 0 || !db.Status.Failovers[n-1].Phase.Finished() || len(db.Status.Failovers[n-1].DetachedStandbys) == 0 {
		return nil
	}
	rec := db.Status.Failovers[n-1].DeepCopy()
	var left []string
	for _, pod := range rec.DetachedStandbys {
		if unsettled[pod] {
			left = append(left, pod)
		}
	}
	if len(left) == len(rec.DetachedStandbys) {
		return nil
	}
	rec.DetachedStandbys = left
	db.Status.Failovers[n-1] = *rec
	return r.saveStatus(ctx, db)
}
