package instance

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
)

// A server about to start as the primary asks the operator first: the
// scripts ConfigMap its pod mounts can be a minute
// behind status.currentPrimary, and an old primary whose pod is made again
// while a failover promotes another reads its own name there. Its
// entrypoint (bootstrap.sh, with DECKHAND_ROLE_DIR set to the socket
// directory both containers mount) writes a token to RoleAskedFile and
// waits; the agent reports the question (Status.AwaitingRole); the
// operator answers with POST /role, naming the primary; the agent writes
// "<token> <primary>" to RoleAnswerFile. The entrypoint starts the server
// as the primary only when the answer names its own pod.

// The files of the question and its answer, in the socket directory (the
// agent's RoleDir).
const (
	RoleAskedFile  = "deckhand-role-asked"
	RoleAnswerFile = "deckhand-role-answer"
)

// RoleDirEnv is the server container's variable naming the directory of
// those files; set, its entrypoint asks before it starts as the primary.
const RoleDirEnv = "DECKHAND_ROLE_DIR"

// RoleRequest is POST /role: the pod the operator names the primary.
type RoleRequest struct {
	Primary string `json:"primary"`
}

// errNotAsked: no server waits for its role.
var errNotAsked = errors.New("the server is not waiting for its role")

// roleQuestion is the token of the question the entrypoint waits on, ""
// when none is asked or it is answered already.
func (a *Agent) roleQuestion() string {
	b, err := os.ReadFile(filepath.Join(a.cfg.RoleDir, RoleAskedFile))
	if err != nil {
		return ""
	}
	token := string(bytes.TrimSpace(b))
	if token == "" {
		return ""
	}
	answer, err := os.ReadFile(filepath.Join(a.cfg.RoleDir, RoleAnswerFile))
	if err == nil && bytes.HasPrefix(answer, []byte(token+" ")) {
		return ""
	}
	return token
}

// answerRole writes the operator's answer to the question asked now,
// through a file renamed into place (the entrypoint never reads half).
func (a *Agent) answerRole(primary string) error {
	token := a.roleQuestion()
	if token == "" {
		return errNotAsked
	}
	path := filepath.Join(a.cfg.RoleDir, RoleAnswerFile)
	if err := os.WriteFile(path+".tmp", []byte(token+" "+primary+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// serveRole is POST /role: 200 once answered, 409 when no question is
// asked (the entrypoint gave up or was answered), 400 without a name.
func (a *Agent) serveRole(w http.ResponseWriter, r *http.Request) {
	var req RoleRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&req); err != nil || req.Primary == "" {
		writeJSON(w, http.StatusBadRequest, ActionResult{Error: "a JSON body naming the primary is required", Status: a.Status(r.Context())})
		return
	}
	a.actions.Lock()
	defer a.actions.Unlock()
	err := a.answerRole(req.Primary)
	switch {
	case errors.Is(err, errNotAsked):
		writeJSON(w, http.StatusConflict, ActionResult{Error: err.Error(), Status: a.Status(r.Context())})
		return
	case err != nil:
		a.cfg.Log.Error("answering the server's role failed", "pod", a.cfg.Pod, "error", err.Error())
		writeJSON(w, http.StatusInternalServerError, ActionResult{Error: "writing the answer: " + err.Error(), Status: a.Status(r.Context())})
		return
	}
	a.cfg.Log.Info("the server's role answered", "pod", a.cfg.Pod, "primary", req.Primary, "asPrimary", req.Primary == a.cfg.Pod)
	writeJSON(w, http.StatusOK, ActionResult{Done: "answered", Status: a.Status(r.Context())})
}
