package database

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/failover"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/status"
)

// What happens when the primary dies (spec.failover.enabled): each pass
// asks the primary's agent for its status (within instance.StatusTimeout)
// and a pass a second keeps asking; while the primary is healthy it asks
// every other instance too (stray primaries, role questions, detached
// standbys, a switchover's target). A primary not healthy (its pod not
// ready, or its agent not reached, or its server down, not a primary, or
// fenced) for longer than spec.failover.primaryGoneAfter (longer for a
// server back as the primary, failover.GoneAfter), and not found healthy
// by a second, longer look (onlySlow), is failed over by failover.Steps:
// fenced through the channel (best effort), the standby chosen by
// failover.ChooseStandbyUnder (only one that holds every acknowledged
// synchronous commit), promoted. When the fence did not reach
// the old primary and its pod shows it running, the standby is named in
// the scripts ConfigMap and the role labels first, and the standbys still
// streaming are detached, so that the old primary fences itself before the
// promotion. The record in status.failovers is written (a locked status
// write) before each step, so a failover under way is resumed from it by
// the next pass, by this operator or the next: the standby it names is the
// only one ever promoted. Once it is promoted, status.currentPrimary names
// it, and the scripts ConfigMap's primary key and the role labels follow
// in the same pass (the read-write Service with them).

// ConditionFailover says whether automatic failover watches the primary,
// and each failover's step.
const ConditionFailover = "Failover"

// failoverRecheck is how often the primary's status is asked.
const failoverRecheck = time.Second

// archiveRecheck is how often an archiving primary that is not watched
// for failover (one replica, a rollout) is asked how its archive goes.
const archiveRecheck = 30 * time.Second

// maxFailoverRecords is how many failovers status.failovers keeps.
const maxFailoverRecords = 10

// primaryWatch is what this operator saw of each Database's primary: when
// it began watching it, when it last saw it healthy, and its last write
// position then. Nothing of it is needed to resume a failover (that is in
// the status); an operator that restarts waits a whole bound again before
// it declares the primary gone, unless the standbys say the primary's node
// stopped hearing them earlier (failover.UnheardSince).
type primaryWatch struct {
	mu sync.Mutex
	by map[types.UID]*watched
}

type watched struct {
	primary            string
	since, lastHealthy time.Time
	lastLSN            instance.LSN
	// unreadableReported is the old primary whose unreadable data
	// directory was reported (rejoin.go).
	unreadableReported string
	// slowReported: the primary's slowness (onlySlow) was reported since
	// it last answered in time.
	slowReported bool
}

func (w *primaryWatch) forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.by, uid)
}

func (w *primaryWatch) of(uid types.UID, primary string, now time.Time) *watched {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.by == nil {
		w.by = map[types.UID]*watched{}
	}
	s := w.by[uid]
	if s == nil || s.primary != primary {
		s = &watched{primary: primary, since: now}
		w.by[uid] = s
	}
	return s
}

// switchoverTimeout is the Database's bound on a switchover's handover
// (0: the default, failover.DefaultSwitchoverTimeout).
func switchoverTimeout(db *Cluster) time.Duration {
	if f := db.Spec.Failover; f != nil && f.SwitchoverTimeout != nil {
		return f.SwitchoverTimeout.Duration
	}
	return 0
}

// primaryGoneAfter is the Database's bound.
func primaryGoneAfter(db *Cluster) time.Duration {
	if f := db.Spec.Failover; f != nil && f.PrimaryGoneAfter != nil {
		return f.PrimaryGoneAfter.Duration
	}
	return failover.DefaultPrimaryGoneAfter
}

// failoverUnderway is the last record when it is not completed.
func failoverUnderway(db *Cluster) *dbv1.FailoverRecord {
	if n := len(db.Status.Failovers); n > 0 && !db.Status.Failovers[n-1].Phase.Finished() {
		return db.Status.Failovers[n-1].DeepCopy()
	}
	return nil
}

// watchPrimary is a pass of the failover watch. It returns when to look
// again.
func (r *Reconciler) watchPrimary(ctx context.Context, db *Cluster, eng engine.Engine, l *live) (time.Duration, error) {
	if !failoverOn(db) || r.OperatorImage == "" {
		reportArchivingUnwatched(db)
		return 0, nil
	}
	ch, err := r.ensureInstanceSecrets(ctx, db)
	if err != nil {
		return 0, err
	}
	if rec := failoverUnderway(db); rec != nil {
		// Whatever comes out of it (a new primary, or the old one back
		// after an aborted switchover) gets a whole bound to serve.
		r.failovers.forget(db.UID)
		return failoverRecheck, r.runFailover(ctx, db, eng, ch, rec, true)
	}
	// The old primary's return (rejoin.go) never holds up the watch of
	// the new one: an old primary that never comes back must not keep
	// the next failover from happening.
	if err := r.rejoinOldPrimary(ctx, db, ch); err != nil {
		return failoverRecheck, err
	}
	// Asked whether watched or not: a primary's server waits for the
	// answer at every start (role.go), a rollout's restart among them.
	primary := currentPrimary(db)
	st, statusErr := ch.PrimaryStatus(ctx, r.instanceHost(db, primary), isolationAfter(db))
	if statusErr == nil {
		r.observeArchiving(db, st)
		ask := func(name string) error { return ch.RequestBaseBackup(ctx, r.instanceHost(db, primary), name) }
		if err := r.syncBaseBackups(ctx, db, st, ask); err != nil {
			// The watch goes on: the objects follow at the next look.
			logf.FromContext(ctx).Error(err, "keeping the base backup objects in line with the archive")
		}
		if lifted, err := r.liftFenceOfTheCurrentPrimary(ctx, db, ch, primary, st); lifted || err != nil {
			// Its restart gets a whole bound before it counts as gone.
			r.failovers.forget(db.UID)
			return failoverRecheck, err
		}
		if err := r.answerRole(ctx, db, ch, primary, st); err != nil {
			return failoverRecheck, err
		}
	}
	pods, err := r.serverPods(ctx, db)
	if err != nil {
		return 0, err
	}
	if why := notWatchedNow(db, l, r.evictedFromLostNodes(ctx, pods)); why != "" {
		// A primary restarted on purpose is not gone: the watch starts
		// again, a whole bound, once this is over.
		r.failovers.forget(db.UID)
		r.setCondition(db, ConditionFailover, false, "NotWatching", why)
		if statusErr != nil || !st.ServerUp {
			// Its server may wait for its role: its agent's start sends
			// no event the operator watches.
			return failoverRecheck, nil
		}
		// What ends it (a rollout, an upgrade, the replicas) changes an
		// object the operator watches: no need to ask every second. An
		// archiving primary is asked again now and then: how its archive
		// goes (WALArchiving, the base backups) sends no event.
		if objectStoreOf(db) != nil {
			return archiveRecheck, nil
		}
		return 0, nil
	}
	now := r.now()
	w := r.failovers.of(db.UID, primary, now)
	o := failover.Observation{Pod: primary}
	if p := pods[primary]; p != nil {
		o.PodReady = p.DeletionTimestamp.IsZero() && podReady(p)
	}
	if statusErr == nil {
		o.Status = &st
	}
	if failover.PrimaryHealthy(o) {
		w.lastHealthy, w.lastLSN, w.slowReported = now, st.CurrentLSN, false
		r.failoverPending(db, false)
		if err := r.dropStaleForce(ctx, db); err != nil {
			return failoverRecheck, err
		}
		others := r.standbyObservations(ctx, db, ch, primary)
		if err := r.rejoinSeenIn(ctx, db, others); err != nil {
			return failoverRecheck, err
		}
		r.fenceStrayPrimaries(ctx, db, ch, primary, others)
		if err := r.attachDetachedStandbys(ctx, db, ch, others); err != nil {
			return failoverRecheck, err
		}
		if err := r.ensureSynchronous(ctx, db, ch, st); err != nil {
			return failoverRecheck, err
		}
		if asked, err := r.maybeSwitchover(ctx, db, eng, ch, o, pods, others); asked || err != nil {
			return failoverRecheck, err
		}
		r.setCondition(db, ConditionFailover, true, "PrimaryHealthy", fmt.Sprintf("watching primary %s (healthy; failed over when unhealthy for more than %s)", primary, primaryGoneAfter(db)))
		return failoverRecheck, nil
	}
	if w.lastHealthy.IsZero() && statusErr != nil {
		// Never seen healthy (this operator has just started or become
		// the leader, its predecessor perhaps lost with the primary's
		// node) and not reached: the wait counts from when the standbys
		// last heard the primary, if that is earlier than when this
		// operator began watching, so it is not waited a second time.
		if at := failover.UnheardSince(r.standbyObservations(ctx, db, ch, primary), now); !at.IsZero() && at.Before(w.since) {
			w.since = at
		}
	}
	if !failover.PrimaryGone(o, w.lastHealthy, w.since, now, primaryGoneAfter(db)) {
		bound := failover.GoneAfter(o, primaryGoneAfter(db))
		r.setCondition(db, ConditionFailover, true, "PrimaryUnhealthy", fmt.Sprintf("primary %s is not healthy (%s); failed over if it stays so for %s", primary, whyUnhealthy(o, statusErr), bound))
		return failoverRecheck, nil
	}
	if r.onlySlow(ctx, db, ch, o, statusErr, w) {
		return failoverRecheck, nil
	}
	// Nothing is fenced unless a standby could take its place now: a
	// primary with no healthy standby is left to come back by itself, and
	// with synchronous replication one whose promotion could lose an
	// acknowledged commit is refused unless a person forces it.
	sync := synchronousOf(db)
	if forceFailoverAsked(db) {
		sync = failover.Synchronous{}
	}
	if _, err := failover.ChooseStandbyUnder(primary, r.standbyObservations(ctx, db, ch, primary), sync, 0); err != nil {
		r.reportNoFailover(db, fmt.Sprintf("primary %s is gone (%s) but it is not failed over: %v", primary, whyUnhealthy(o, statusErr), err), err, true)
		return failoverRecheck, nil
	}
	rec := failover.Start(primary, w.lastLSN, now)
	if s := db.Status.Synchronous; s != nil && s.Primary == primary {
		rec.SynchronousStandbys, rec.SynchronousQuorum = s.Standbys, s.Quorum
	}
	return failoverRecheck, r.runFailover(ctx, db, eng, ch, rec, false)
}

// onlySlow takes a second look, within instance.ConfirmTimeout, at a
// primary about to be failed over because its agent was not reached or
// its server did not answer within instance.StatusTimeout: on a node
// whose cores are all busy a server that serves can answer that slowly
// for longer than the bound, and failing it over would cost its clients
// an outage for nothing (the standbys, on the same busy node or not, are
// no faster). A primary that answers healthy now is slow, not gone: it is
// seen healthy (PrimarySlow, a Warning Event once). One that answers up
// as the primary with its pod not ready gets the longer bound
// (failover.GoneAfter). A hung server still does not answer, and an
// unreachable agent is not reached: those cost the failover the second
// look's bound at most.
func (r *Reconciler) onlySlow(ctx context.Context, db *Cluster, ch *instance.Client, o failover.Observation, statusErr error, w *watched) bool {
	if statusErr == nil && o.Status.ServerUp {
		return false
	}
	st, err := ch.ConfirmPrimaryStatus(ctx, r.instanceHost(db, o.Pod), isolationAfter(db))
	if err != nil {
		logf.FromContext(ctx).Info("the primary's agent was not reached at the second look either", "primary", o.Pod, "error", err.Error())
		return false
	}
	now := r.now()
	confirmed := o
	confirmed.Status = &st
	if failover.PrimaryHealthy(confirmed) {
		w.lastHealthy, w.lastLSN = now, st.CurrentLSN
		msg := fmt.Sprintf("primary %s answered only within %s (not within %s for more than %s): it is slow, not gone, and is not failed over; its node may be short of CPU", o.Pod, instance.ConfirmTimeout, instance.StatusTimeout, primaryGoneAfter(db))
		if !w.slowReported {
			w.slowReported = true
			r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "PrimarySlow", "Reconcile", "%s", msg)
		}
		r.setCondition(db, ConditionFailover, true, "PrimarySlow", msg)
		return true
	}
	return !failover.PrimaryGone(confirmed, w.lastHealthy, w.since, now, primaryGoneAfter(db))
}

// reportNoFailover says why a gone primary is not failed over:
// FailoverRefused when it could lose a synchronous commit (and how to
// force it), else FailoverBlocked; a Warning Event when announce and the
// condition did not say so already.
func (r *Reconciler) reportNoFailover(db *Cluster, msg string, err error, announce bool) {
	reason := "FailoverBlocked"
	if errors.Is(err, failover.ErrSynchronousQuorum) {
		reason = "FailoverRefused"
		msg += fmt.Sprintf(". To fail over anyway, losing the commits only those standbys had, annotate the Database %s=now", failover.AnnotationForceFailover)
	}
	if announce {
		r.warn(db, ConditionFailover, reason, msg)
	}
	r.failoverPending(db, true)
	r.setCondition(db, ConditionFailover, false, reason, msg)
}

// synchronousOf is the synchronous replication the current primary was
// last seen using, as the status records it (it outlives the operator).
func synchronousOf(db *Cluster) failover.Synchronous {
	s := db.Status.Synchronous
	if s == nil || s.Primary != currentPrimary(db) {
		return failover.Synchronous{}
	}
	return failover.Synchronous{Standbys: s.Standbys, Quorum: int(s.Quorum)}
}

// dropStaleForce removes a force annotation found while the primary is
// healthy: it was asked for an outage that is over, and left in place it
// would force, perhaps weeks later, a failover nobody asked to force.
func (r *Reconciler) dropStaleForce(ctx context.Context, db *Cluster) error {
	if !forceFailoverAsked(db) {
		return nil
	}
	if err := r.forgetAnnotation(ctx, db, failover.AnnotationForceFailover); err != nil {
		return err
	}
	r.normal(db, "ForceFailoverDropped", "Failover", "%s", fmt.Sprintf("removed the annotation %s: the primary %s is healthy, nothing to force", failover.AnnotationForceFailover, currentPrimary(db)))
	return nil
}

// forceFailoverAsked: the Database carries the force annotation.
func forceFailoverAsked(db *Cluster) bool {
	_, ok := db.Annotations[failover.AnnotationForceFailover]
	return ok
}

// notWatchedNow says why the primary is not watched now ("": it is): the
// pods do not all run the agent yet (the rollout that adds it), a rollout
// is restarting pods, a major upgrade stops the servers, a new Database's
// primary recovers from an archive, or there is no standby. evicted pods
// are being deleted from nodes that do not answer (evictedFromLostNodes):
// the StatefulSet no longer counts them updated, yet nothing rolls.
func notWatchedNow(db *Cluster, l *live, evicted int32) string {
	sts := &l.statefulSet
	replicas := replicasOf(db)
	switch {
	case replicas < 2:
		return "one replica: there is no standby to fail over to"
	case !l.has("StatefulSet", namesOf(db).StatefulSet) || !hasAgent(sts):
		return "the pods do not run the instance agent yet"
	case sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdatedReplicas+evicted != replicas || sts.Status.CurrentRevision != sts.Status.UpdateRevision:
		return "a rollout is restarting the pods: the primary is watched again once it is done"
	case upgradeRunning(db.Status.Upgrade):
		return "a major upgrade is under way"
	case recoveryOf(db) != nil && !restored(db):
		// Its server replays the archive, out of reach, for as long as
		// that takes, and no standby has data to promote.
		return "the primary recovers from an archive (condition Restored): it is watched once it serves"
	}
	return ""
}

// hasAgent: the StatefulSet's pods run the agent.
func hasAgent(sts *appsv1.StatefulSet) bool {
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == instance.AgentContainer {
			return true
		}
	}
	return false
}

// standbyObservations are the other instances' statuses now.
func (r *Reconciler) standbyObservations(ctx context.Context, db *Cluster, ch *instance.Client, primary string) []failover.Observation {
	var out []failover.Observation
	for _, inst := range instanceHosts(db) {
		if inst.Pod == primary {
			continue
		}
		o := failover.Observation{Pod: inst.Pod}
		if st, err := ch.Status(ctx, inst.Hosts[0]); err == nil {
			o.Status = &st
		}
		out = append(out, o)
	}
	return out
}

// fenceStrayPrimaries fences every other instance whose server runs as
// an unfenced primary beside the healthy one. A failover whose fence did
// not reach the old primary (its agent cut off from the operator, not
// from its clients) leaves it taking writes on its open connections and
// at its pod's address; on the real node, without this fence, it still
// did 2 minutes after its agent was reachable again. Once its agent
// answers it is fenced, and it
// rejoins as a standby when the fence is lifted (pg_rewind removes what
// it took alone). others are the other instances' statuses of this pass.
func (r *Reconciler) fenceStrayPrimaries(ctx context.Context, db *Cluster, ch *instance.Client, primary string, others []failover.Observation) {
	for _, o := range others { // every other instance
		if o.Status != nil && o.Status.AwaitingRole {
			_ = r.answerRole(ctx, db, ch, o.Pod, *o.Status)
			continue
		}
		if st := o.Status; st == nil || !st.ServerUp || st.Role != instance.RolePrimary || st.Fenced {
			continue
		}
		if _, err := ch.Fence(ctx, r.instanceHost(db, o.Pod)); err != nil {
			r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "StrayPrimaryFenceFailed", "Failover", "%s runs as a primary beside %s and could not be fenced: %v", o.Pod, primary, err)
			continue
		}
		r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "StrayPrimaryFenced", "Failover", "%s ran as a primary beside %s: fenced (what it took alone is never served)", o.Pod, primary)
	}
}

// whyUnhealthy says what the operator sees of an unhealthy primary.
func whyUnhealthy(o failover.Observation, statusErr error) string {
	switch {
	case statusErr != nil:
		return "its agent was not reached: " + statusErr.Error()
	case !o.Status.ServerUp:
		return "its server is down: " + o.Status.Error
	case o.Status.Fenced:
		return "it is fenced"
	case o.Status.Role != instance.RolePrimary:
		return "its server is not a primary (" + string(o.Status.Role) + ")"
	case o.Status.WALFlushStalled():
		return fmt.Sprintf("its WAL has waited to be flushed since %s, the flush position not moving: its storage takes no writes, so no commit can be acknowledged", o.Status.WALFlushStalledSince.UTC().Format(time.RFC3339))
	default:
		return "its pod is not ready"
	}
}

// runFailover takes rec through failover.Steps, each record saved into
// the status; once completed the ConfigMap's primary key and the role
// labels name the new primary.
func (r *Reconciler) runFailover(ctx context.Context, db *Cluster, eng engine.Engine, ch *instance.Client, rec *dbv1.FailoverRecord, saved bool) error {
	var pods []string
	for _, inst := range instanceHosts(db) {
		pods = append(pods, inst.Pod)
	}
	steps := failover.Steps{
		Channel: ch,
		Host:    func(pod string) string { return r.instanceHost(db, pod) },
		Pods:    pods,
		Save:    func(ctx context.Context, rec *dbv1.FailoverRecord) error { return r.saveFailover(ctx, db, rec) },
		Event: func(warning bool, reason, msg string) {
			if reason == "FailoverRefused" || reason == "FailoverBlocked" {
				// Said again each pass while it lasts: announced once.
				r.warn(db, ConditionFailover, reason, msg)
				return
			}
			if warning {
				r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, reason, "Failover", "%s", msg)
				return
			}
			r.normal(db, reason, "Failover", "%s", msg)
		},
		Now:               r.now,
		Slots:             func(to string) []string { return slotsForNewPrimary(db, to) },
		SwitchoverTimeout: switchoverTimeout(db),
		Forced:            forceFailoverAsked(db),
		ServerStopped:     r.serverStopped(ctx, db),
	}
	namedBefore := rec.NamedFirst != nil
	if err := steps.Run(ctx, rec, saved); err != nil {
		if r.catchingUp(db, rec, err) {
			return nil
		}
		if errors.Is(err, failover.ErrNamingFirst) {
			r.setCondition(db, ConditionFailover, false, "NamingNewPrimaryFirst", fmt.Sprintf("promoting %s in place of %s once %s fenced itself: %v", rec.To, rec.From, rec.From, err))
			if namedBefore {
				// Named in an earlier pass: this pass's converge wrote
				// the ConfigMap and the labels (namedPrimary).
				return nil
			}
			return r.publishNamedPrimary(ctx, db, eng)
		}
		if errors.Is(err, failover.ErrSynchronousQuorum) {
			// failover.Steps announced it.
			r.reportNoFailover(db, fmt.Sprintf("the failover of %s is refused: %v", rec.From, err), err, false)
			return nil // asked again next pass (the record stays at Fencing)
		}
		return err
	}
	if steps.Forced && rec.Phase == dbv1.FailoverCompleted {
		if err := r.forgetAnnotation(ctx, db, failover.AnnotationForceFailover); err != nil {
			return err
		}
	}
	if rec.Phase == dbv1.FailoverAborted {
		logf.FromContext(ctx).Info("switchover aborted", "from", rec.From, "to", rec.To, "why", rec.AbortReason)
		return nil
	}
	logf.FromContext(ctx).Info("failed over", "from", rec.From, "to", rec.To)
	return r.publishNamedPrimary(ctx, db, eng)
}

// publishNamedPrimary writes the named primary (namedPrimary) into the
// scripts ConfigMap, then the role labels: the labels' change makes each
// pod's kubelet refresh its copy of the ConfigMap at once, so the key must
// be written first.
func (r *Reconciler) publishNamedPrimary(ctx context.Context, db *Cluster, eng engine.Engine) error {
	// The TLS and holds keys as they are: a failover changes the primary
	// only.
	var cur corev1.ConfigMap
	if err := r.Owned.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: namesOf(db).Scripts}, &cur); err != nil {
		return fmt.Errorf("reading ConfigMap %s: %w", namesOf(db).Scripts, err)
	}
	cm := scriptsConfigMap(db, eng, cur.Data[engine.ScriptsTLSKey], cur.Data[postgres.BaseBackupHoldsKey])
	if _, err := r.apply(ctx, cm, nil, false); err != nil {
		return fmt.Errorf("naming %s the primary in ConfigMap %s: %w", namedPrimary(db), namesOf(db).Scripts, err)
	}
	serverPods, err := r.serverPods(ctx, db)
	if err != nil {
		return err
	}
	return r.labelRoles(ctx, db, serverPods)
}

// serverStopped says whether a pod's server can take no writes as far as
// the pod shows: no pod, or its server container not running. It is the
// kubelet's word: a kubelet cut off from the API server reports nothing
// new, so a container shown running is taken as running.
func (r *Reconciler) serverStopped(ctx context.Context, db *Cluster) func(pod string) (bool, string) {
	return func(pod string) (bool, string) {
		pods, err := r.serverPods(ctx, db)
		if err != nil {
			return false, "its pod not known: " + err.Error()
		}
		p := pods[pod]
		if p == nil {
			return true, "no pod " + pod
		}
		server := p.Spec.Containers[0].Name
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != server {
				continue
			}
			if cs.State.Running == nil {
				return true, fmt.Sprintf("pod %s's container %s is not running", pod, server)
			}
			return false, fmt.Sprintf("pod %s's container %s runs", pod, server)
		}
		return true, fmt.Sprintf("pod %s's container %s never started", pod, server)
	}
}

// saveFailover writes rec as the last of status.failovers (a new one
// appended), the currentPrimary when it is completed, and the condition,
// in a status write refused when the status changed since it was read.
func (r *Reconciler) saveFailover(ctx context.Context, db *Cluster, rec *dbv1.FailoverRecord) error {
	list := db.Status.Failovers
	if n := len(list); n > 0 && !list[n-1].Phase.Finished() && list[n-1].Started.Equal(&rec.Started) && list[n-1].From == rec.From {
		list[n-1] = *rec.DeepCopy()
	} else {
		list = append(list, *rec.DeepCopy())
	}
	if len(list) > maxFailoverRecords {
		list = list[len(list)-maxFailoverRecords:]
	}
	db.Status.Failovers = list
	if rec.Phase == dbv1.FailoverCompleted {
		db.Status.CurrentPrimary = rec.To
	}
	ok, reason, msg := failoverCondition(rec)
	r.setCondition(db, ConditionFailover, ok, reason, msg)
	if err := r.saveStatus(ctx, db); err != nil {
		return err
	}
	r.failoverPending(db, !rec.Phase.Finished())
	if rec.Phase == dbv1.FailoverCompleted {
		r.countFailover(db, rec)
	}
	return nil
}

// saveStatus writes the status now, in the middle of a pass (a failover
// must record each step before the next): a locked write, so a pass that
// read an old status cannot overwrite a newer record.
func (r *Reconciler) saveStatus(ctx context.Context, db *Cluster) error {
	obj := db.Object
	before := obj.DeepCopyObject().(client.Object)
	r.Kind.Clusters.SetStatus(obj, db)
	return status.PatchLocked(ctx, r.Client, before, obj)
}

// instanceHost is the name the pod's agent is dialled by.
func (r *Reconciler) instanceHost(db *Cluster, pod string) string {
	return instance.PodHosts(pod, namesOf(db).Headless, db.Namespace)[0]
}
