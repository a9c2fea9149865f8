package database

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// attachRetry bounds each attach tried again from the failover watch's
// pass, which runs every second; attachEvery spaces the tries, so a
// standby whose node is gone holds up no more than one pass in five.
const (
	attachRetry = 2 * instance.StatusTimeout
	attachEvery = 10 * time.Second
)

// attachDetachedStandbys makes the standbys that the last, completed,
// failover detached (failover.Steps.detachStandbys) and could not attach
// after the promotion stream again. Those reached leave the record; the
// others are tried again at the next pass. A pod scaled away is dropped:
// nothing of it comes back.
func (r *Reconciler) attachDetachedStandbys(ctx context.Context, db *Cluster, ch *instance.Client, w *watched) error {
	n := len(db.Status.Failovers)
	if n == 0 || !db.Status.Failovers[n-1].Phase.Finished() || len(db.Status.Failovers[n-1].DetachedStandbys) == 0 {
		return nil
	}
	now := r.now()
	if now.Sub(w.attachTried) < attachEvery {
		return nil
	}
	w.attachTried = now
	rec := db.Status.Failovers[n-1].DeepCopy()
	var left, attached []string
	for _, pod := range rec.DetachedStandbys {
		if ordinal, ok := podOrdinal(db, pod); !ok || int32(ordinal) >= replicasOf(db) {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, attachRetry)
		_, err := ch.Attach(actx, r.instanceHost(db, pod))
		cancel()
		if err != nil {
			left = append(left, pod)
			continue
		}
		attached = append(attached, pod)
	}
	if len(left) == len(rec.DetachedStandbys) {
		return nil
	}
	rec.DetachedStandbys = left
	db.Status.Failovers[n-1] = *rec
	if err := r.saveStatus(ctx, db); err != nil {
		return err
	}
	if len(attached) > 0 {
		r.normal(db, "StandbysAttached", "Failover", "%s", fmt.Sprintf("standbys detached during the failover of %s stream again: %s", rec.From, strings.Join(attached, ", ")))
	}
	return nil
}
