package instance

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// POST /detach and DELETE /detach: a standby stops streaming, and streams
// again.
//
// A failover whose fence did not reach the old primary names the new one
// first; when that wait is over and the old primary's pod still shows its
// server running, it detaches the standbys still streaming from it (the
// operator's failover.Steps). An old primary cut off from the operator
// and from the API server but not from its standbys then sees them stop
// replying and fences itself (isolation.go) before the promotion: without
// the detach they would keep replying until one of them is promoted, and
// for a few seconds two primaries would take writes. With synchronous
// replication the old primary can commit nothing more once they are
// detached, and their positions stop moving, so the choice is checked on
// positions that hold.
//
// Detaching sets primary_conninfo to "" (ALTER SYSTEM, a configuration
// reload: the WAL receiver ends, no restart) after saving the setting
// beside the data directory (DetachedMarker, mode 0600: it holds the
// replication password, as postgresql.auto.conf does). Attaching sets it
// back and removes the file; the operator attaches the standbys the
// failover detached once it completed (their primary_conninfo names the
// read-write Service, which routes to the new primary by then). A restart
// in between writes primary_conninfo again (bootstrap.sh): attaching then
// only removes the file.

// DetachedMarker is the file, beside the data directory, that holds a
// detached standby's primary_conninfo until it is attached again.
const DetachedMarker = "deckhand-detached"

// DetachTimeout bounds the client's detach and attach (the agent's own
// bound is 10 s).
const DetachTimeout = 12 * time.Second

// receiverStopWait bounds how long a detach waits for the WAL receiver
// to end.
const receiverStopWait = 3 * time.Second

func (a *Agent) detachedPath() string {
	return filepath.Join(filepath.Dir(filepath.Clean(a.cfg.DataDir)), DetachedMarker)
}

// detached: the standby was detached and not attached since.
func (a *Agent) detached() bool {
	_, err := os.Stat(a.detachedPath())
	return err == nil
}

// serveDetach detaches a standby: 200 once its WAL receiver ended, 409 on
// a primary (nothing to detach), 503 when the server is down.
func (a *Agent) serveDetach(w http.ResponseWriter, r *http.Request) {
	a.actions.Lock()
	defer a.actions.Unlock()
	if code, res, ok := a.standbyOnly(r.Context()); !ok {
		writeJSON(w, code, res)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := a.detach(ctx); err != nil {
		a.cfg.Log.Error("detach failed", "pod", a.cfg.Pod, "error", err.Error())
		writeJSON(w, http.StatusInternalServerError, ActionResult{Error: describe(ctx, err), Status: a.Status(r.Context())})
		return
	}
	st := a.Status(r.Context())
	a.cfg.Log.Info("detached: the standby no longer streams", "pod", a.cfg.Pod, "receiveLSN", st.ReceiveLSN.String(), "replayLSN", st.ReplayLSN.String())
	writeJSON(w, http.StatusOK, ActionResult{Done: "detached", Status: st})
}

// standbyOnly answers a request that only a standby's running server can
// take: ok, or the code and result to send.
func (a *Agent) standbyOnly(ctx context.Context) (int, ActionResult, bool) {
	st := a.Status(ctx)
	switch {
	case !st.ServerUp:
		return http.StatusServiceUnavailable, ActionResult{Error: "the server is down: " + st.Error, Status: st}, false
	case st.Role != RoleStandby:
		return http.StatusConflict, ActionResult{Error: "the instance is a primary: it streams from nobody", Status: st}, false
	}
	return 0, ActionResult{}, true
}

// detach saves primary_conninfo (unless a detach saved it already: the
// setting is "" then), clears it, and waits for the WAL receiver to end.
func (a *Agent) detach(ctx context.Context) error {
	var conninfo string
	if err := a.db.QueryRowContext(ctx, "SELECT pg_catalog.current_setting('primary_conninfo')").Scan(&conninfo); err != nil {
		return err
	}
	if conninfo != "" {
		if err := a.writeFileDurably(a.detachedPath(), conninfo); err != nil {
			return errors.New("saving primary_conninfo beside the data directory: " + err.Error())
		}
	}
	if err := a.setPrimaryConninfo(ctx, ""); err != nil {
		return err
	}
	return a.waitReceiverEnded(ctx)
}

// setPrimaryConninfo sets primary_conninfo and reloads the configuration.
// The server quotes the value (format's %L): it holds a password.
func (a *Agent) setPrimaryConninfo(ctx context.Context, conninfo string) error {
	var stmt string
	if err := a.db.QueryRowContext(ctx, "SELECT pg_catalog.format('ALTER SYSTEM SET primary_conninfo = %L', $1::text)", conninfo).Scan(&stmt); err != nil {
		return err
	}
	if _, err := a.db.ExecContext(ctx, stmt); err != nil {
		return errors.New("ALTER SYSTEM SET primary_conninfo: " + err.Error())
	}
	_, err := a.db.ExecContext(ctx, "SELECT pg_catalog.pg_reload_conf()")
	return err
}

// waitReceiverEnded waits until no WAL receiver runs (the startup process
// ends it at the reload), within receiverStopWait.
func (a *Agent) waitReceiverEnded(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, receiverStopWait)
	defer cancel()
	for {
		var running bool
		err := a.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_wal_receiver)").Scan(&running)
		switch {
		case err == nil && !running:
			return nil
		case ctx.Err() != nil:
			return errors.New("the WAL receiver still runs after primary_conninfo was cleared")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serveAttach attaches a detached standby again: its saved
// primary_conninfo is set back (unless a restart wrote it meanwhile) and
// the file removed. A standby not detached is left as it is.
func (a *Agent) serveAttach(w http.ResponseWriter, r *http.Request) {
	a.actions.Lock()
	defer a.actions.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := a.attach(ctx); err != nil {
		a.cfg.Log.Error("attach failed", "pod", a.cfg.Pod, "error", err.Error())
		writeJSON(w, http.StatusInternalServerError, ActionResult{Error: describe(ctx, err), Status: a.Status(r.Context())})
		return
	}
	writeJSON(w, http.StatusOK, ActionResult{Done: "attached", Status: a.Status(r.Context())})
}

func (a *Agent) attach(ctx context.Context) error {
	saved, err := os.ReadFile(a.detachedPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var standby bool
	var conninfo string
	if err := a.db.QueryRowContext(ctx, "SELECT pg_catalog.pg_is_in_recovery(), pg_catalog.current_setting('primary_conninfo')").Scan(&standby, &conninfo); err != nil {
		return err
	}
	if standby && conninfo == "" {
		if err := a.setPrimaryConninfo(ctx, string(saved)); err != nil {
			return err
		}
		a.cfg.Log.Info("attached: the standby streams again", "pod", a.cfg.Pod, "primaryHost", ConninfoHost(string(saved)))
	}
	// A primary (the standby promoted since) or a standby whose restart
	// wrote its primary_conninfo again: only the file is left to remove.
	return a.forgetDetach()
}

// forgetDetach removes the saved primary_conninfo.
func (a *Agent) forgetDetach() error {
	if err := os.Remove(a.detachedPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Detach stops the standby at host streaming (see the agent).
func (c *Client) Detach(ctx context.Context, host string) (ActionResult, error) {
	return c.action(ctx, DetachTimeout, http.MethodPost, host, "/detach")
}

// Attach makes the standby at host, detached, stream again; on one not
// detached it changes nothing.
func (c *Client) Attach(ctx context.Context, host string) (ActionResult, error) {
	return c.action(ctx, DetachTimeout, http.MethodDelete, host, "/detach")
}
