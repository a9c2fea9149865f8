package instance

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// The agent's guard for a primary cut off from everything that could
// tell it a failover happened. The role guard (selffence.go) obeys the
// name the pod mounts, which reaches the pod only through the kubelet and
// the API server: a node cut off from the API server as well as from the
// operator keeps the old name, and its server would take the writes of
// every client that still reaches it while the operator promotes a
// standby elsewhere.
//
// So a primary's agent also watches for isolation. It fences its own
// server when, all at once:
//   - the operator has not asked its status for longer than the bound the
//     operator gave with its last question (half the Database's
//     primaryGoneAfter: the operator promotes no sooner than
//     primaryGoneAfter after it lost the primary);
//   - the API server cannot be reached from the pod (a TCP connection to
//     its Service address fails);
//   - and a standby that streamed from it when the operator last asked
//     has not replied for PeerSilence (pg_stat_replication's reply_time
//     unchanged: standbys reply every second, the agent's pod template
//     sets wal_receiver_status_interval).
//
// A standby still replying has not been promoted (a promotion ends its
// WAL receiver), so while every one of them replies the primary keeps
// serving: an outage of the control plane alone (the API server down, the
// operator with it) fences nothing. Each condition is checked by the
// agent alone, with its own clock.

// DefaultPeerSilence is how long a standby may send no reply before the
// isolation check counts it lost (its replies come every second).
const DefaultPeerSilence = 3 * time.Second

// IsolationFenceWithin bounds how long after its standbys stop replying
// an isolated primary's agent has fenced its server: their last reply
// seen up to a guard tick late, DefaultPeerSilence, the next tick, the
// API server's dial, and the first seconds of a fast shutdown (its
// sessions end at its start). A failover that detached the standbys
// (detach.go) promotes no sooner.
const IsolationFenceWithin = DefaultGuardInterval + DefaultPeerSilence + DefaultGuardInterval + apiDialTimeout + 2*time.Second

// apiDialTimeout bounds the check that the API server can be reached.
const apiDialTimeout = time.Second

// isolationReason begins the marker of an isolation fence; a self-fence
// (Status.SelfFenced), like the role guard's.
const isolationReason = selfFenceReason + ": cut off from the operator and from the API server"

// IsolationAfterParam is GET /status's query parameter carrying the
// operator's bound (a Go duration): how long without its question before
// the agent checks for isolation. Absent or 0: the check is off.
const IsolationAfterParam = "isolationAfter"

// isolationWatch is what the agent remembers between the operator's
// questions and its own looks.
type isolationWatch struct {
	mu sync.Mutex
	// asked is when the operator last asked; after its bound then.
	asked time.Time
	after time.Duration
	// peers are the standbys that streamed when it last asked.
	peers []string
	// replies: each standby's last reply_time seen, and when the agent
	// saw it change.
	replies map[string]peerReply
	// told: the silence past the bound was logged (once until the next
	// question).
	told bool
}

type peerReply struct {
	at      string
	changed time.Time
}

// noteOperator records a status question of the operator: when, its
// bound (negative: not given, the last one stands), and the standbys
// streaming from this server then.
func (w *isolationWatch) noteOperator(now time.Time, after time.Duration, st Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked, w.told = now, false
	if after >= 0 {
		w.after = after
	}
	switch {
	case !st.ServerUp:
		// Not read (the question cancelled, the server slow): the last
		// standbys stand.
	case st.Role == RolePrimary:
		w.peers = siblings(st.Pod, st.StreamingStandbys)
	default:
		w.peers = nil
	}
}

// siblings are the names among senders that are other pods of the
// agent's own StatefulSet (pod's name with another ordinal): a standby's
// application_name is its pod's name. Other WAL senders are no peers: a
// clone's pg_basebackup streams WAL under its own name and ends with the
// clone, which, counted, fenced a primary whose operator was slow to ask
// while a standby was made (seen once under make test's load).
func siblings(pod string, senders []string) []string {
	i := strings.LastIndexByte(pod, '-')
	if i < 0 {
		return nil
	}
	prefix := pod[:i+1]
	var out []string
	for _, name := range senders {
		ordinal, ok := strings.CutPrefix(name, prefix)
		if ok && ordinal != "" && strings.Trim(ordinal, "0123456789") == "" && name != pod {
			out = append(out, name)
		}
	}
	return out
}

// noteReplies records the standbys' last replies (application name to
// reply_time) seen at now.
func (w *isolationWatch) noteReplies(now time.Time, seen map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.replies == nil {
		w.replies = map[string]peerReply{}
	}
	for name, at := range seen {
		if r, ok := w.replies[name]; !ok || r.at != at {
			w.replies[name] = peerReply{at: at, changed: now}
		}
	}
	for name := range w.replies {
		if _, ok := seen[name]; !ok {
			delete(w.replies, name)
		}
	}
}

// Isolation is one look of the check, for IsolatedFrom.
type Isolation struct {
	// Silence is how long since the operator asked; After its bound.
	Silence, After time.Duration
	// Peers streamed when it last asked; Replied are those whose reply
	// changed within PeerSilence.
	Peers, Replied []string
}

// lostPeers are the peers that no longer reply.
func (i Isolation) lostPeers() []string {
	var lost []string
	for _, p := range i.Peers {
		if !slices.Contains(i.Replied, p) {
			lost = append(lost, p)
		}
	}
	return lost
}

// MayBeIsolated is the check's rule before the API server is tried: the
// operator's bound is known and passed, and a peer stopped replying.
func MayBeIsolated(i Isolation) bool {
	return i.After > 0 && i.Silence > i.After && len(i.lostPeers()) > 0
}

// tellOnce is true the first time it is asked since the operator's last
// question.
func (w *isolationWatch) tellOnce() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	told := w.told
	w.told = true
	return !told
}

// look is the check's state at now.
func (w *isolationWatch) look(now time.Time, peerSilence time.Duration) Isolation {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := Isolation{After: w.after, Peers: slices.Clone(w.peers)}
	if w.asked.IsZero() {
		i.After = 0 // never asked: no bound yet
		return i
	}
	i.Silence = now.Sub(w.asked)
	for name, r := range w.replies {
		if now.Sub(r.changed) < peerSilence {
			i.Replied = append(i.Replied, name)
		}
	}
	slices.Sort(i.Replied)
	return i
}

// CheckIsolation is one look of the isolation check; it returns the
// fence's result, or nil when it did nothing. Without the API server's
// address (Config.APIServer) it is off.
func (a *Agent) CheckIsolation(ctx context.Context) *ActionResult {
	if a.cfg.APIServer == "" || a.fenced() {
		return nil
	}
	seen, err := standbyReplies(ctx, a)
	if err != nil {
		return nil // not a primary that answers: nothing to guard
	}
	now := a.cfg.Now()
	a.isolation.noteReplies(now, seen)
	i := a.isolation.look(now, a.cfg.PeerSilence)
	if i.After > 0 && i.Silence > i.After && a.isolation.tellOnce() {
		a.cfg.Log.Warn("no question from the operator past its bound: fencing the server if the API server cannot be reached and a standby stops replying",
			"pod", a.cfg.Pod, "silence", i.Silence.Round(time.Second).String(), "bound", i.After.String(), "standbys", i.Peers, "replying", i.Replied)
	}
	if !MayBeIsolated(i) || a.apiServerReachable(ctx) {
		return nil
	}
	a.actions.Lock()
	defer a.actions.Unlock()
	st := a.Status(ctx)
	if !st.ServerUp || st.Role != RolePrimary || st.Fenced {
		return nil
	}
	why := fmt.Sprintf("%s: no question from the operator for %s (its bound %s), %s unreachable, and standby %s sent no reply for %s: a failover may promote it",
		isolationReason, i.Silence.Round(time.Second), i.After, a.cfg.APIServer, strings.Join(i.lostPeers(), ", "), a.cfg.PeerSilence)
	a.cfg.Log.Warn("fencing its own server: cut off from the operator and the API server, and a standby stopped replying (a failover elsewhere may promote it)",
		"pod", a.cfg.Pod, "silence", i.Silence.String(), "lostStandbys", i.lostPeers(), "apiServer", a.cfg.APIServer, "currentLSN", st.CurrentLSN.String())
	return a.fenceItself(ctx, why)
}

// standbyReplies are the streaming standbys' last reply times, by
// application name (none on a standby); an error when the server does not
// answer.
func standbyReplies(ctx context.Context, a *Agent) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatusTimeout)
	defer cancel()
	rows, err := a.db.QueryContext(ctx, `SELECT application_name, coalesce(reply_time::text, '')
 FROM pg_catalog.pg_stat_replication WHERE state = 'streaming' AND NOT pg_catalog.pg_is_in_recovery()`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	seen := map[string]string{}
	for rows.Next() {
		var name, at string
		if err := rows.Scan(&name, &at); err != nil {
			return nil, err
		}
		seen[name] = at
	}
	return seen, rows.Err()
}

// apiServerReachable: a TCP connection to the API server's address opens
// within apiDialTimeout.
func (a *Agent) apiServerReachable(ctx context.Context) bool {
	conn, err := (&net.Dialer{Timeout: apiDialTimeout}).DialContext(ctx, "tcp", a.cfg.APIServer)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}
