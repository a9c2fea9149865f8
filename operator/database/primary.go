package database

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Who is primary. The operator names the primary (status.currentPrimary, a
// pod name) and every place that needs it asks currentPrimary; no other
// code assumes an ordinal. The name reaches:
//   - the pods, as the role label (labelRoles), which the read-write
//     Service selects; the app Secret's host is that Service, so it never
//     changes;
//   - the servers, as the scripts ConfigMap's ScriptsPrimaryKey: the
//     bootstrap script takes its role from it (only the named pod may
//     initialise or run as a primary; any other comes up as its standby)
//     and the readiness probe fails while the server's role disagrees.
//
// It is set to ordinal 0 when the cluster is created, and only a
// completed failover or switchover changes it (saveFailover, failover.go);
// nothing else needs to change with it. The pods may hear a failover's new
// primary before the status names it (namedPrimary): the one thing the
// name does ahead of the status.

// currentPrimary is the pod the operator names the primary. A cluster
// whose status names none (made before the field existed, or a Kind whose
// status does not keep it: the MySQLCluster) has its primary at ordinal
// 0, where it always was.
func currentPrimary(db *Cluster) string {
	if db.Status.CurrentPrimary != "" {
		return db.Status.CurrentPrimary
	}
	return podName(db, 0)
}

// namedPrimary is the pod the role labels and the scripts ConfigMap name
// the primary: the current primary, except while a failover whose fence
// did not reach the old primary waits to promote the standby it chose
// (the record's namedFirst): that standby is named first, so the old
// primary's agent reads the name and fences its server before the
// promotion (failover.Steps.ServerStopped).
func namedPrimary(db *Cluster) string {
	if rec := failoverUnderway(db); rec != nil && rec.NamedFirst != nil && rec.To != "" {
		return rec.To
	}
	return currentPrimary(db)
}

// recordCurrentPrimary names ordinal 0 the primary of a cluster whose
// status names none yet (a new one).
func recordCurrentPrimary(db *Cluster) {
	if db.Status.CurrentPrimary == "" {
		db.Status.CurrentPrimary = podName(db, 0)
	}
}

// primaryClaim is the data volume of the current primary (what a major
// upgrade converts).
func primaryClaim(db *Cluster) string {
	ordinal, ok := podOrdinal(db, currentPrimary(db))
	if !ok {
		ordinal = 0
	}
	return claimName(db, int32(ordinal))
}

// primaryPod is the current primary's pod, nil when it does not exist.
func primaryPod(db *Cluster, pods map[string]*corev1.Pod) *corev1.Pod {
	return pods[currentPrimary(db)]
}

// primaryServes: the current primary's pod exists, is not being deleted
// and is ready (its probe: the server answers, out of recovery, and is the
// one the ConfigMap names).
func primaryServes(db *Cluster, pods map[string]*corev1.Pod) bool {
	p := primaryPod(db, pods)
	return p != nil && p.DeletionTimestamp.IsZero() && podReady(p)
}

// standbyHealth is what the operator knows of one standby, from what it
// observes: the pod and its readiness (probe.sh ready passes only while
// the standby's WAL receiver streams from the named primary and its role
// agrees with the ConfigMap).
type standbyHealth struct {
	Pod     string
	Ordinal int64
	// Started: the server started (the startup probe passed, so a first
	// clone is done).
	Started bool
	// Healthy: ready and not being deleted: it streams from the primary.
	Healthy bool
	// LagBytes is how far its replay is behind the primary; nil: not
	// known. Nothing sets it: standbyHealth is read from the pods alone. A
	// backup Job measures a standby's lag for itself, and the failover
	// reads replay positions from the instance agents (failover.go), not
	// from here.
	LagBytes *int64
	// Why says, when not healthy, what the operator sees.
	Why string
}

// standbyHealthOf says how one server pod fares as a standby of the
// current primary.
func standbyHealthOf(db *Cluster, p *corev1.Pod) standbyHealth {
	h := standbyHealth{Pod: p.Name}
	h.Ordinal, _ = podOrdinal(db, p.Name)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil && ptr.Deref(cs.Started, false) {
			h.Started = true
		}
	}
	switch {
	case !p.DeletionTimestamp.IsZero():
		h.Why = "being deleted"
	case podReady(p):
		h.Healthy = true
	case !h.Started:
		h.Why = "not started (cloning or starting)"
	default:
		h.Why = "started but not ready: not streaming from the primary " + currentPrimary(db)
	}
	return h
}

// standbysOf are the server pods other than the current primary, by
// ordinal.
func standbysOf(db *Cluster, pods map[string]*corev1.Pod) []standbyHealth {
	primary := currentPrimary(db)
	var out []standbyHealth
	for name, p := range pods {
		if name == primary {
			continue
		}
		if _, ok := podOrdinal(db, name); !ok {
			continue
		}
		out = append(out, standbyHealthOf(db, p))
	}
	slices.SortFunc(out, func(a, b standbyHealth) int { return int(a.Ordinal - b.Ordinal) })
	return out
}

// roleOf is the role label a server pod gets.
func roleOf(db *Cluster, pod string) string {
	if pod == namedPrimary(db) {
		return rolePrimary
	}
	return roleStandby
}

// namesJoined lists the standbys' pod names.
func namesJoined(standbys []standbyHealth) string {
	names := make([]string, len(standbys))
	for i, s := range standbys {
		names[i] = s.Pod
	}
	return strings.Join(names, ", ")
}
