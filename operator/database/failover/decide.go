// Package failover holds the Database's failover: its decisions as pure
// functions of what the instance channel reports
// (operator/database/postgres/instance): is the primary gone, and which
// standby to promote (decide.go); and its steps, a failover's and a
// switchover's, each saved in the Database's status before it is taken
// (Steps: run.go, switchover.go), which act through a Channel and need no
// API server of their own. The reconciler observes, these decide, the
// channel acts; "what happens when the primary dies" is read here.
package failover

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// DefaultPrimaryGoneAfter is how long the primary may be unhealthy before
// it is failed over. A container that is killed once is restarted by the
// kubelet at once (no back-off the first time) and PostgreSQL's crash
// recovery replays only the WAL since the last checkpoint, a few seconds:
// 10 s lets such a primary come back without a failover in the common
// case, and leaves 20 s of a 30 s write-outage target for the rest (a
// status a second, the fence, pg_promote and the -rw Service's endpoints,
// a few seconds together). CloudNativePG's users see 40-80 s on node
// loss because they wait for the node to be declared lost; the agent's
// status says it within a second.
const DefaultPrimaryGoneAfter = 10 * time.Second

// DefaultMaxLag is how far (bytes of WAL) a standby may be behind the most
// advanced healthy standby and still be preferred for being connected to
// the primary: one WAL segment.
const DefaultMaxLag = 16 << 20

// Observation is what the operator knows of one instance now.
type Observation struct {
	Pod string
	// Status is the agent's answer; nil when the agent was not reached
	// within the client's bound (instance.StatusTimeout).
	Status *instance.Status
	// PodReady is the pod's Ready condition (a primary's readiness probe:
	// it takes connections).
	PodReady bool
}

// PrimaryHealthy: the primary serves: its pod is ready and its agent says
// its server is up, a primary, not fenced, and its WAL gets flushed
// (instance.Status.WALFlushStalled: a disk that takes no writes).
func PrimaryHealthy(o Observation) bool {
	st := o.Status
	return o.PodReady && st != nil && st.ServerUp && st.Role == instance.RolePrimary && !st.Fenced && !st.WALFlushStalled()
}

// PrimaryGone says whether the primary must be failed over at now: it is
// not healthy now, and has not been since lastHealthy, for longer than
// after (DefaultPrimaryGoneAfter when 0). lastHealthy is the last time the
// operator saw it healthy (zero: never, e.g. an operator that just
// started: the wait is counted from since instead, when it began
// watching, so a restart of the operator never fails over at once).
func PrimaryGone(primary Observation, lastHealthy, since, now time.Time, after time.Duration) bool {
	if PrimaryHealthy(primary) {
		return false
	}
	after = GoneAfter(primary, after)
	from := lastHealthy
	if from.IsZero() || from.Before(since) {
		from = since
	}
	return now.Sub(from) > after
}

// UnheardSince is when the primary's node stopped hearing its standbys,
// by their own account, or zero when they cannot say: every standby whose
// WAL receiver streams has sent replies the primary has not acknowledged
// for ReceiverStalledSeconds, the kernel retransmitting them
// (instance's linkstall.go), so the primary's node has acknowledged none
// of them since now minus the shortest of those stalls. A standby whose
// link is acknowledged, or none streaming, says nothing of the kind. An
// operator that starts watching a primary it cannot reach (a new leader,
// the old one lost with the primary's node) counts its bound from then,
// not from its own start: the standbys have timed that silence already.
func UnheardSince(standbys []Observation, now time.Time) time.Time {
	var shortest time.Duration
	for _, o := range standbys {
		if o.Status == nil || !o.Status.Streaming {
			continue
		}
		stalled := time.Duration(o.Status.ReceiverStalledSeconds * float64(time.Second))
		if stalled <= 0 {
			return time.Time{}
		}
		if shortest == 0 || stalled < shortest {
			shortest = stalled
		}
	}
	if shortest == 0 {
		return time.Time{}
	}
	return now.Add(-shortest)
}

// GoneAfter is how long primary may stay unhealthy before it is failed
// over, given the bound after (DefaultPrimaryGoneAfter when 0): longer for
// a server that is up as the primary and only its pod not ready.
func GoneAfter(primary Observation, after time.Duration) time.Duration {
	if after == 0 {
		after = DefaultPrimaryGoneAfter
	}
	switch {
	case AwaitingItsName(primary):
		return max(2*after, NameWait)
	case ServerBackAsPrimary(primary):
		return 2 * after
	}
	return after
}

// NameWait is how long the primary may wait for its pod to name it (see
// AwaitingItsName) before it is failed over anyway (its node's kubelet
// may never refresh, cut off from the API server).
const NameWait = 3 * time.Minute

// AwaitingItsName: the primary is up, a primary, not fenced, its pod not
// ready, and its pod still names another pod the primary. That is a
// standby just promoted whose mounted scripts ConfigMap the kubelet has
// not refreshed yet, and which was promoted otherwise than through its
// agent (a standby promoted through its agent is ready at once: its
// promotion note names the pod its pod still names). Its readiness probe
// passes only once the pod names it. The refresh is quick when all is
// well, but after an API-server outage the kubelet's watch backs off as
// kube-proxy's does (65 to 140 s measured for kube-proxy), and any other
// standby promoted in its place would wait for the same refresh: a second
// failover gains nothing and costs another fence and outage: without this
// wait, on the node, with the API server stopped during a failover, a
// promoted standby was failed over to the other 20 s after its promotion,
// both at one WAL position.
func AwaitingItsName(o Observation) bool {
	return ServerBackAsPrimary(o) && o.Status.NamedPrimary != "" && o.Status.NamedPrimary != o.Pod
}

// ServerBackAsPrimary: the primary's agent says its server is up, an
// unfenced primary, but its pod is not ready (yet): a container the
// kubelet restarted, whose crash recovery is done, waiting for its next
// readiness probe, or the StatefulSet's new pod after a deletion. It
// gets twice the bound before it is failed over: fenced the moment it is
// back, it may have acknowledged writes its standbys, which reconnect
// only every wal_retrieve_retry_interval (5 s), have not received, and
// the failover would lose them. On the real node every deletion of the
// primary's pod was failed over (5 of 5 in BenchmarkFailover, the new
// pod's server fenced while it ran); with twice the bound, none was. A
// server that stays up and never ready is still failed over.
func ServerBackAsPrimary(o Observation) bool {
	st := o.Status
	return !o.PodReady && st != nil && st.ServerUp && st.Role == instance.RolePrimary && !st.Fenced && !st.WALFlushStalled()
}

// StandbyHealthy: the standby can be promoted: its agent answered, its
// server is up and replaying WAL (in recovery), it is not fenced, and it
// knows how far it has replayed. Streaming is not required: when the
// primary is gone no standby streams.
func StandbyHealthy(o Observation) bool {
	st := o.Status
	return st != nil && st.ServerUp && st.Role == instance.RoleStandby && !st.Fenced && st.ReplayLSN != 0
}

// Choice is the standby to promote, and why.
type Choice struct {
	Pod       string
	ReplayLSN instance.LSN
	// Behind is how far (bytes) it is behind the most advanced healthy
	// standby (0 when it is that one).
	Behind uint64
	// AlreadyPrimary: it is a primary already (promoted earlier, e.g. by
	// an operator that stopped before it recorded so): record it, promote
	// nothing.
	AlreadyPrimary bool
	Reason         string
}

var (
	// ErrNoHealthyStandby: nothing may be promoted.
	ErrNoHealthyStandby = errors.New("no healthy standby to promote")
	// ErrSeveralPrimaries: more than one instance besides the current
	// primary says it is a primary; nothing is promoted until a person
	// (or the fence) settles it.
	ErrSeveralPrimaries = errors.New("more than one instance besides the current primary is a primary")
)

// ChooseStandby decides which standby replaces current, the primary that
// is gone:
//
//   - an instance other than current that is already a primary, up and not
//     fenced, is chosen as it is (no second promotion); two are an error;
//   - otherwise among the healthy standbys (StandbyHealthy) on the newest
//     timeline any of them is on, those within maxLag bytes of the most
//     advanced replayed position are eligible: a standby behind by more is
//     never promoted while a better one exists;
//   - of the eligible, one streaming from the primary is preferred (the
//     primary is up but not ready, or this is a switchover), then the most
//     advanced replay position, then the most advanced received position,
//     then the pod's name (the same answer every time).
//
// maxLag 0 is DefaultMaxLag.
func ChooseStandby(current string, instances []Observation, maxLag uint64) (Choice, error) {
	if c, found, err := alreadyPromoted(current, instances); found {
		return c, err
	}
	if maxLag == 0 {
		maxLag = DefaultMaxLag
	}
	healthy := healthyStandbysOnNewestTimeline(current, instances)
	if len(healthy) == 0 {
		return Choice{}, ErrNoHealthyStandby
	}
	var best instance.LSN
	for _, o := range healthy {
		best = max(best, o.Status.ReplayLSN)
	}
	var eligible []Observation
	for _, o := range healthy {
		if o.Status.ReplayLSN.Behind(best) <= maxLag {
			eligible = append(eligible, o)
		}
	}
	sort.SliceStable(eligible, func(i, j int) bool {
		return better(eligible[i].Status, eligible[j].Status, eligible[i].Pod, eligible[j].Pod)
	})
	chosen := eligible[0]
	st := chosen.Status
	reason := fmt.Sprintf("the most advanced healthy standby (replayed to %s)", st.ReplayLSN)
	if st.ReplayLSN != best {
		reason = fmt.Sprintf("streaming from the primary, replayed to %s, %d bytes behind the most advanced (within %d)", st.ReplayLSN, st.ReplayLSN.Behind(best), maxLag)
	}
	return Choice{Pod: chosen.Pod, ReplayLSN: st.ReplayLSN, Behind: st.ReplayLSN.Behind(best), Reason: reason}, nil
}

// better orders candidates: streaming first, then replay, receive, name.
func better(a, b *instance.Status, podA, podB string) bool {
	if a.Streaming != b.Streaming {
		return a.Streaming
	}
	if a.ReplayLSN != b.ReplayLSN {
		return a.ReplayLSN > b.ReplayLSN
	}
	if a.ReceiveLSN != b.ReceiveLSN {
		return a.ReceiveLSN > b.ReceiveLSN
	}
	return podA < podB
}

// alreadyPromoted finds an instance other than current that is a primary.
func alreadyPromoted(current string, instances []Observation) (Choice, bool, error) {
	var primaries []Observation
	for _, o := range instances {
		st := o.Status
		if o.Pod != current && st != nil && st.ServerUp && st.Role == instance.RolePrimary && !st.Fenced {
			primaries = append(primaries, o)
		}
	}
	switch len(primaries) {
	case 0:
		return Choice{}, false, nil
	case 1:
		o := primaries[0]
		return Choice{Pod: o.Pod, AlreadyPrimary: true, Reason: fmt.Sprintf("already a primary, on timeline %d", o.Status.Timeline)}, true, nil
	default:
		return Choice{}, true, ErrSeveralPrimaries
	}
}

// healthyStandbysOnNewestTimeline: WAL positions compare only on one
// timeline, and a standby left on an older one has missed a promotion.
func healthyStandbysOnNewestTimeline(current string, instances []Observation) []Observation {
	var healthy []Observation
	var newest int64
	for _, o := range instances {
		if o.Pod != current && StandbyHealthy(o) {
			healthy = append(healthy, o)
			newest = max(newest, o.Status.Timeline)
		}
	}
	out := healthy[:0]
	for _, o := range healthy {
		if o.Status.Timeline == newest {
			out = append(out, o)
		}
	}
	return out
}

// ErrSynchronousQuorum: with synchronous replication, too few of the
// synchronous standbys answer to be sure the one promoted has every
// acknowledged commit; nothing is promoted unless the failover is forced.
var ErrSynchronousQuorum = errors.New("too few synchronous standbys answer to be sure of every acknowledged commit")

// Synchronous is the synchronous replication the old primary was last
// seen using: synchronous_standby_names = 'ANY Quorum (Standbys...)'.
// None (no standbys, or a quorum of 0): asynchronous.
type Synchronous struct {
	Standbys []string
	Quorum   int
}

// On: commits waited for standbys.
func (s Synchronous) On() bool { return len(s.Standbys) > 0 && s.Quorum > 0 }

// Needed is how many of the synchronous standbys must answer before one
// may be promoted, n - k + 1 for ANY k of n. An acknowledged commit was
// flushed by at least k of the n; the ones that do not answer may be
// exactly k of those, unless fewer than k do not answer, that is unless
// at least n - k + 1 answer. Then at least one that answers flushed the
// commit, and since WAL is one sequence, the answering standby that
// flushed the furthest has every acknowledged commit (Candidates). With
// k = n (every standby confirms) one is enough; with ANY 1 of 3, all
// three. Patroni's quorum mode keeps the same invariant: any set of
// standbys that can acknowledge a commit overlaps any set that can elect
// the new primary (patroni.quorum).
func (s Synchronous) Needed() int {
	if !s.On() {
		return 0
	}
	return len(s.Standbys) - min(s.Quorum, len(s.Standbys)) + 1
}

// flushed is how far a standby has WAL on disk: what it received
// (pg_last_wal_receive_lsn, flushed by its WAL receiver; what a
// synchronous commit waits for), or what it replayed when it has not
// received since its start. Promotion replays all of it first.
func flushed(st *instance.Status) instance.LSN {
	return max(st.ReceiveLSN, st.ReplayLSN)
}

// Candidates are the standbys that may be promoted under s, of
// instances (the old primary's excluded): all of them when s is off;
// else, when at least Needed of the synchronous standbys are healthy,
// those of them that flushed the furthest (each has every acknowledged
// commit); else ErrSynchronousQuorum, saying which answer.
func (s Synchronous) Candidates(instances []Observation) ([]Observation, error) {
	if !s.On() {
		return instances, nil
	}
	var healthy []Observation
	var furthest instance.LSN
	for _, o := range instances {
		if slices.Contains(s.Standbys, o.Pod) && StandbyHealthy(o) {
			healthy = append(healthy, o)
			furthest = max(furthest, flushed(o.Status))
		}
	}
	if len(healthy) < s.Needed() {
		var answering []string
		for _, o := range healthy {
			answering = append(answering, o.Pod)
		}
		return nil, fmt.Errorf("%w: with ANY %d of %v an acknowledged commit may be only on the %d that do not answer; %d of them must answer as healthy standbys, %d do %v", ErrSynchronousQuorum, s.Quorum, s.Standbys, len(s.Standbys)-len(healthy), s.Needed(), len(healthy), answering)
	}
	var out []Observation
	for _, o := range healthy {
		if flushed(o.Status) == furthest {
			out = append(out, o)
		}
	}
	return out, nil
}

// ChooseStandbyUnder is ChooseStandby among the candidates sync allows
// (Synchronous.Candidates): an instance that is a primary already is
// still found among all of them (never a second promotion).
func ChooseStandbyUnder(current string, instances []Observation, sync Synchronous, maxLag uint64) (Choice, error) {
	if c, found, err := alreadyPromoted(current, instances); found {
		return c, err
	}
	candidates, err := sync.Candidates(instances)
	if err != nil {
		return Choice{}, err
	}
	return ChooseStandby(current, candidates, maxLag)
}
