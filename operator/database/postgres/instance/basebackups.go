package instance

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// POST /base-backups asks for a base backup now, named as the operator's
// DatabaseBackup object. The agent only leaves the request where the
// archiver sidecar looks for it (BaseBackupRequests, one empty file per
// request, named as the backup): the sidecar has Barman Cloud and the
// store's keys, the agent neither, and a backup takes minutes, longer
// than a request should wait. The sidecar of the primary takes it within
// about 5 s; the instance's status then lists the backup
// (BaseBackups.Backups), or its failure (BaseBackups.Failed). A request
// left on a server that stopped being the primary is dropped after an
// hour (archive/archiver.sh).

// BaseBackupRequests is the directory, beside the data directory, of the
// requests the archiver sidecar takes.
const BaseBackupRequests = "deckhand-base-backup-requests"

// BaseBackupRequest is POST /base-backups's body.
type BaseBackupRequest struct {
	// Name of the base backup to take; empty: take none, but look at the
	// archive now (apply the holds, list it: lookRequest).
	Name string `json:"name"`
}

// lookRequest is the request file that asks the sidecar to look at the
// archive now; its name is no backup's.
const lookRequest = ".look"

// BaseBackupTimeout bounds the client's request (the agent reads the
// server's role, then writes a file).
const BaseBackupTimeout = 5 * StatusTimeout

// objectName is a Kubernetes object's name (a DNS subdomain).
var objectName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// failedSuffix marks the sidecar's record of a failed request,
// <name>.failed beside the requests.
const failedSuffix = ".failed"

// checkBaseBackupName says why name cannot name a requested base backup.
// Beyond an object's name: the sidecar's record of a failure must not be
// taken for a request, and must fit a file name (255 bytes).
func checkBaseBackupName(name string) error {
	const most = 255 - len(failedSuffix)
	switch {
	case !objectName.MatchString(name) || len(name) > 253:
		return fmt.Errorf("%q is not a base backup's name: it must be a Kubernetes object's name (lower-case letters, digits, '-' and '.', beginning and ending with a letter or digit, at most 253 characters)", name)
	case len(name) > most:
		return fmt.Errorf("the base backup's name %q is too long: at most %d characters (the archiver records a failure as <name>%s, a file name)", name, most, failedSuffix)
	case strings.HasSuffix(name, failedSuffix):
		return fmt.Errorf("the base backup's name %q may not end in %q: the archiver records a failure under that name", name, failedSuffix)
	}
	return nil
}

// baseBackupRefusal is why the instance in st cannot take a request: 503
// when its server does not answer, 409 when it is not the primary (only
// the primary's sidecar takes base backups); 0 when it can.
func baseBackupRefusal(st Status) (int, string) {
	switch {
	case !st.ServerUp:
		return http.StatusServiceUnavailable, "the server is down: " + st.Error
	case st.Role != RolePrimary:
		return http.StatusConflict, "the instance is not the primary (its role: " + string(st.Role) + "): only the primary takes base backups"
	}
	return 0, ""
}

// serveBaseBackup leaves a request for the sidecar: 202 once the file is
// there (it was already, too), 400 for a name that cannot be a backup's,
// 409 on a standby, 503 when the server is down.
func (a *Agent) serveBaseBackup(w http.ResponseWriter, r *http.Request) {
	var req BaseBackupRequest
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&req)
	if err == nil && req.Name != "" {
		err = checkBaseBackupName(req.Name)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ActionResult{Error: err.Error(), Status: a.Status(r.Context())})
		return
	}
	st := a.Status(r.Context())
	if code, why := baseBackupRefusal(st); code != 0 {
		writeJSON(w, code, ActionResult{Error: why, Status: st})
		return
	}
	file := req.Name
	if file == "" {
		file = lookRequest
	}
	if err := a.requestBaseBackup(file); err != nil {
		a.cfg.Log.Error("requesting a base backup failed", "pod", a.cfg.Pod, "name", req.Name, "error", err.Error())
		writeJSON(w, http.StatusInternalServerError, ActionResult{Error: "leaving the request for the archiver: " + err.Error(), Status: st})
		return
	}
	a.cfg.Log.Info("base backup requested: the archiver takes it", "pod", a.cfg.Pod, "name", req.Name)
	writeJSON(w, http.StatusAccepted, ActionResult{Done: "requested", Status: st})
}

// requestBaseBackup leaves the request file for name (the directory
// 0700, the file 0600: the sidecar runs as the same user). One there
// already is the same request. The record of an earlier failure of the
// name goes: it must not pass for this request's.
func (a *Agent) requestBaseBackup(name string) error {
	dir := filepath.Join(filepath.Dir(filepath.Clean(a.cfg.DataDir)), BaseBackupRequests)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Remove(filepath.Join(dir, name+failedSuffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}
