package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"
)

// POST /synchronous sets the primary's synchronous_standby_names (ALTER
// SYSTEM, then a configuration reload: no restart) to the value the
// operator computed from the standbys streaming now (see the operator's
// syncrep.go). The value goes into a statement as a literal, so the agent
// accepts only what the operator writes: "" or ANY n ("pod", ...).

// SynchronousRequest is POST /synchronous's body.
type SynchronousRequest struct {
	Value string `json:"value"`
}

var synchronousValue = regexp.MustCompile(`^(|ANY [1-9][0-9]? \("[a-z0-9][-a-z0-9]{0,62}"(, "[a-z0-9][-a-z0-9]{0,62}")*\))$`)

func (a *Agent) serveSynchronous(w http.ResponseWriter, r *http.Request) {
	var req SynchronousRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err == nil && !synchronousValue.MatchString(req.Value) {
		err = fmt.Errorf("%q is not a synchronous_standby_names the operator writes (\"\" or ANY n (\"pod\", ...))", req.Value)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ActionResult{Error: err.Error(), Status: a.Status(r.Context())})
		return
	}
	a.actions.Lock()
	defer a.actions.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	// Checked above: no single quote or backslash can be in the value.
	if _, err := a.db.ExecContext(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+req.Value+"'"); err != nil {
		writeJSON(w, http.StatusInternalServerError, ActionResult{Error: describe(ctx, err), Status: a.Status(r.Context())})
		return
	}
	if _, err := a.db.ExecContext(ctx, "SELECT pg_catalog.pg_reload_conf()"); err != nil {
		writeJSON(w, http.StatusInternalServerError, ActionResult{Error: describe(ctx, err), Status: a.Status(r.Context())})
		return
	}
	a.cfg.Log.Info("synchronous_standby_names set", "pod", a.cfg.Pod, "value", req.Value)
	writeJSON(w, http.StatusOK, ActionResult{Done: "synchronous", Status: a.Status(r.Context())})
}

// SetSynchronous sets synchronous_standby_names on the server at host.
func (c *Client) SetSynchronous(ctx context.Context, host, value string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err := c.actionWith(ctx, http.MethodPost, host, "/synchronous", SynchronousRequest{Value: value})
	return err
}
