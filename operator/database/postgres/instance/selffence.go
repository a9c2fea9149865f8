package instance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The agent's own guard against a second primary. A failover whose fence
// does not reach the old primary (its agent cut off from the operator,
// not from its clients) leaves it running as a primary: it takes writes
// from every client that still reaches it, which the new primary never
// sees, until the operator reaches its agent again. The operator's word
// reaches the pod another way too: the scripts ConfigMap's key "primary",
// mounted in the pod, which the kubelet refreshes from the API server. So
// every second the agent reads it, and when it names another pod while
// its own server runs as an unfenced primary, the agent fences its own
// server, exactly as the operator's fence does (the marker, then a fast
// shutdown). The operator sees the marker (Status.SelfFenced), records
// it, and lifts the fence as for any old primary once the pod names the
// new one: the server starts as its standby and pg_rewind removes what it
// took alone.
//
// The one primary that runs while its pod names another is the standby
// the operator has just promoted: the key names it only once the
// failover is recorded, a pass later, and the kubelet refreshes the
// mounted copy later still. So a promotion through the agent notes, beside
// the data directory (PromotedMarker, durable, before pg_promote), the
// primary the pod named then; while the pod still names that pod, the
// promoted server is the newer primary and is left alone. Any other name
// (its own: the marker is done with; a third pod's: a later failover
// replaced it too) means it is not the primary the operator wants.

// PromotedMarker is the file beside the data directory in which a
// promotion through the agent notes the primary the pod named then.
const PromotedMarker = "deckhand-promoted"

// DefaultGuardInterval is how often the agent compares its server's role
// with the primary its pod names.
const DefaultGuardInterval = time.Second

// selfFenceReason begins the marker of a fence the agent made itself.
const selfFenceReason = "fenced by its own agent"

// GuardRole runs the guard, the isolation check (isolation.go) and the
// watch of the WAL receiver's connection (linkstall.go), until ctx ends. Without the scripts mounted (Config.ScriptsDir "") there is no
// name to obey: it does nothing.
func (a *Agent) GuardRole(ctx context.Context) {
	if a.cfg.ScriptsDir == "" {
		return
	}
	tick := time.NewTicker(a.cfg.GuardInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			a.KeepFencedServerStopped(ctx)
			a.CheckRole(ctx)
			a.CheckIsolation(ctx)
			a.watchReceiverLink()
		}
	}
}

// KeepFencedServerStopped stops a server that runs although its fence
// marker is in place: its entrypoint looked at the marker (and was told
// its role) just before a fence was written, and the fence, finding no
// postmaster yet, had nothing to stop. A fenced server never serves. It
// reports whether it stopped one.
func (a *Agent) KeepFencedServerStopped(ctx context.Context) bool {
	if !a.fenced() || !a.postmasterRunning() {
		return false
	}
	a.actions.Lock()
	defer a.actions.Unlock()
	if !a.fenced() || !a.postmasterRunning() {
		return false // lifted, or stopped, meanwhile
	}
	a.cfg.Log.Warn("the server runs although it is fenced (it started as the fence was written): stopping it", "pod", a.cfg.Pod)
	if clean, killed, err := a.stop(ctx); err != nil {
		a.cfg.Log.Error("stopping the fenced server failed", "pod", a.cfg.Pod, "error", err.Error())
	} else {
		a.cfg.Log.Info("stopped the fenced server", "pod", a.cfg.Pod, "cleanShutdown", clean, "killed", killed)
	}
	return true
}

// CheckRole is one look of the guard: it fences the server when it runs
// as an unfenced primary while the pod names another pod the primary (and
// not the one this server was promoted to replace). It returns the
// fence's result, or nil when it did nothing.
func (a *Agent) CheckRole(ctx context.Context) *ActionResult {
	named := a.namedPrimary()
	if named == "" {
		// Not mounted, or not written yet: no word to obey.
		return nil
	}
	a.actions.Lock()
	defer a.actions.Unlock()
	if named == a.cfg.Pod {
		a.forgetPromotion()
		return nil
	}
	replaced, promoted := a.promotedReplacing()
	if promoted && replaced == named || a.fenced() {
		return nil
	}
	st := a.Status(ctx)
	if !MustFenceItself(a.cfg.Pod, st, replaced, promoted) {
		return nil
	}
	why := fmt.Sprintf("%s: its pod names %s the primary, but this server ran as a primary", selfFenceReason, named)
	a.cfg.Log.Warn("fencing its own server: it runs as a primary, but the pod names another pod the primary (a failover the operator's fence did not reach)",
		"pod", a.cfg.Pod, "namedPrimary", named, "timeline", st.Timeline, "currentLSN", st.CurrentLSN.String())
	return a.fenceItself(ctx, why)
}

// fenceItself fences the server on the agent's own decision (why begins
// with selfFenceReason) and logs the outcome.
func (a *Agent) fenceItself(ctx context.Context, why string) *ActionResult {
	res := a.fence(ctx, why)
	if res.Error != "" {
		a.cfg.Log.Error("fencing its own server failed", "pod", a.cfg.Pod, "error", res.Error)
	} else {
		a.cfg.Log.Info("fenced its own server: it is stopped until the operator lifts the fence", "pod", a.cfg.Pod, "cleanShutdown", res.CleanShutdown, "killed", res.Killed, "finalLSN", res.FinalLSN.String())
	}
	return &res
}

// MustFenceItself is the guard's rule: pod's server (st) runs as an
// unfenced primary while its pod names another pod (st.NamedPrimary), and
// that pod is not the primary this server was promoted to replace
// (replaced, when promoted through the agent and not named since).
func MustFenceItself(pod string, st Status, replaced string, promoted bool) bool {
	switch {
	case st.NamedPrimary == "" || st.NamedPrimary == pod:
		return false // no word to obey, or it is the primary named
	case promoted && replaced == st.NamedPrimary:
		return false // the newer primary; the name has not reached the pod yet
	}
	return st.ServerUp && st.Role == RolePrimary && !st.Fenced
}

func (a *Agent) promotedPath() string {
	return filepath.Join(filepath.Dir(filepath.Clean(a.cfg.DataDir)), PromotedMarker)
}

// notePromotion records, before a promotion, the primary the pod names
// now. Without the scripts mounted the guard does not run: nothing to
// note.
func (a *Agent) notePromotion() error {
	named := a.namedPrimary()
	if named == "" || named == a.cfg.Pod {
		return nil
	}
	return a.writeFileDurably(a.promotedPath(), named+"\n")
}

// promotedReplacing is the primary the pod named when this server was
// promoted through the agent; false when it was not (or the pod has
// named it since).
func (a *Agent) promotedReplacing() (string, bool) {
	b, err := os.ReadFile(a.promotedPath())
	if err != nil {
		return "", false
	}
	return string(bytes.TrimSpace(b)), true
}

// forgetPromotion: the pod names this server the primary; the note has
// served.
func (a *Agent) forgetPromotion() {
	if err := os.Remove(a.promotedPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		a.cfg.Log.Warn("could not remove the promotion note", "pod", a.cfg.Pod, "error", err.Error())
	}
}
