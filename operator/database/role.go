package database

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// A server about to start as the primary (its pod's mounted scripts
// ConfigMap names its pod) waits for the operator's word, asked through
// its agent (instance/role.go): the mount can be a minute behind
// status.currentPrimary, and an old primary whose pod is made again while
// a failover promotes another reads its own name there. The watch answers
// every instance it asks that waits: the primary each pass, the old
// primary of the last failover and the other instances while the primary
// is healthy.

// roleAnswer is the primary a waiting server is told: none while a
// failover is under way (its steps decide who is primary; the server
// waits), else status.currentPrimary.
func roleAnswer(db *Cluster) (primary string, ok bool) {
	if failoverUnderway(db) != nil {
		return "", false
	}
	return currentPrimary(db), true
}

// answerRole answers pod's server when its status says it waits.
func (r *Reconciler) answerRole(ctx context.Context, db *Cluster, ch *instance.Client, pod string, st instance.Status) error {
	if !st.AwaitingRole {
		return nil
	}
	// From the API server, not the cache: a pass that read the Database
	// before a failover was recorded must not confirm the old primary.
	fresh, err := r.Kind.getCluster(ctx, r.API, client.ObjectKeyFromObject(db.Object))
	if err != nil {
		return err
	}
	primary, ok := roleAnswer(fresh)
	if !ok {
		return nil
	}
	if err := ch.AnswerRole(ctx, r.instanceHost(db, pod), primary); err != nil {
		// Its entrypoint stopped waiting (a restart) or asks anew: the
		// next pass asks again.
		logf.FromContext(ctx).Info("a server's question about its role was not answered", "pod", pod, "error", err.Error())
		return nil
	}
	if primary == pod {
		r.normal(db, "PrimaryConfirmed", "Failover", "%s's server starts as the primary: confirmed", pod)
		// Started on the operator's word: its start gets a whole bound
		// before it counts as gone (a pod made again after a deletion
		// asks some seconds after it was last healthy).
		r.failovers.forget(db.UID)
		return nil
	}
	r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "NotThePrimary", "Failover",
		"%s's server was about to start as the primary (its pod still reads its own name): told %s is the primary; it starts once its pod names %s", pod, primary, primary)
	return nil
}
