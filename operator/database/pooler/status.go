package pooler

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// report fills the status in from what runs, sets Ready and records the
// certificate's Events; it returns when to look again.
func (r *Reconciler) report(ctx context.Context, p *dbv1.Pooler, t Target, pl *plan) time.Duration {
	for _, e := range pl.tlsEvents {
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, string(e), "Certificate",
			"the pooler's certificate (Secret %s) for clients: %s, valid until %s", namesOf(p).TLS, e, pl.tlsNext.UTC().Format(time.RFC3339))
	}
	next := time.Until(pl.tlsNext)
	var d appsv1.Deployment
	if err := r.Owned.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: namesOf(p).Deployment}, &d); err == nil {
		p.Status.Instances = d.Status.Replicas
		p.Status.ReadyInstances = d.Status.ReadyReplicas
	}
	for _, s := range pl.secrets {
		if s.Name == namesOf(p).Connection {
			p.Status.Secret = s.Name
		}
	}
	switch {
	case !t.Initialized:
		r.setReady(p, false, dbv1.PoolerReasonDatabaseNotYet,
			fmt.Sprintf("waiting for Database %s to be initialized: the setup Job creates the pooler's role in its app database then", p.Spec.Database))
		return min(next, 10*time.Second)
	case p.Status.Secret == "":
		r.setReady(p, false, dbv1.PoolerReasonDatabaseNotYet,
			fmt.Sprintf("waiting for the app Secret %s of Database %s", t.AppSecret, p.Spec.Database))
		return min(next, 10*time.Second)
	}
	done, failed, err := r.setupJobState(ctx, pl.setupJob)
	switch {
	case err != nil:
		r.setReady(p, false, dbv1.PoolerReasonSetup, "reading the setup Job: "+err.Error())
		return min(next, 10*time.Second)
	case failed:
		r.setReady(p, false, dbv1.PoolerReasonSetupFailed,
			fmt.Sprintf("the setup Job %s failed to create role %s and its lookup function in database %s: its pod's log says why (kubectl logs -n %s job/%s)",
				pl.setupJob.Name, Role(p), t.AppDatabase, p.Namespace, pl.setupJob.Name))
		return next
	case !done:
		r.setReady(p, false, dbv1.PoolerReasonSetup,
			fmt.Sprintf("the setup Job %s creates role %s and its lookup function in database %s", pl.setupJob.Name, Role(p), t.AppDatabase))
		return min(next, 10*time.Second)
	case p.Status.ReadyInstances == 0:
		r.setReady(p, false, dbv1.PoolerReasonPodsNotReady,
			fmt.Sprintf("no PgBouncer pod of Deployment %s is ready yet (%d of %d exist)", namesOf(p).Deployment, p.Status.Instances, instancesOf(p)))
		return next
	}
	r.setReady(p, true, dbv1.PoolerReasonReady,
		fmt.Sprintf("%d of %d PgBouncer pods ready in front of %s (%s mode); connect with Secret %s",
			p.Status.ReadyInstances, instancesOf(p), t.Host, poolModeOf(p), p.Status.Secret))
	return next
}

func poolModeOf(p *dbv1.Pooler) dbv1.PoolMode {
	if p.Spec.PgBouncer.PoolMode == "" {
		return dbv1.PoolModeSession
	}
	return p.Spec.PgBouncer.PoolMode
}
