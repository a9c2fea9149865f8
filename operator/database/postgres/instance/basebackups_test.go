package instance

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// POST /base-backups without a server (none listens on the socket): a
// name that cannot be a backup's is refused before anything else, a good
// one while the server is down too, and so is a look at the archive (no
// name); the refusal by role; the request file
// as the sidecar expects it, and again without an error. The host test
// TestABaseBackupIsTakenOnRequestListedAndDeleted takes one on a real
// primary through the agent binary.
func TestTheBaseBackupRequestIsCheckedAndLeftForTheArchiver(t *testing.T) {
	pgdata := filepath.Join(t.TempDir(), "pgdata")
	a, err := New(Config{Pod: "db-0", SocketDir: t.TempDir(), Port: 5432, DataDir: pgdata})
	require.NoError(t, err)
	defer a.Close()
	post := func(body string) (int, ActionResult) {
		w := httptest.NewRecorder()
		a.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/base-backups", strings.NewReader(body)))
		var res ActionResult
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &res), w.Body.String())
		return w.Code, res
	}
	for _, name := range []string{"Upper", "-dash", "dot.", "under_score", "a/b", "../x", strings.Repeat("a", 254), strings.Repeat("a", 249), "daily.failed"} {
		code, res := post(`{"name":"` + name + `"}`)
		assert.Equal(t, http.StatusBadRequest, code, name)
		assert.Contains(t, res.Error, "name", name)
	}
	code, res := post(`{"name":`)
	assert.Equal(t, http.StatusBadRequest, code, "not JSON")
	assert.NotEmpty(t, res.Error)
	for _, body := range []string{`{"name":"nightly-1"}`, `{"name":""}`} {
		code, res = post(body)
		assert.Equal(t, http.StatusServiceUnavailable, code, "the server is down: %s (no name asks for a look at the archive)", body)
		assert.Contains(t, res.Error, "the server is down")
	}

	for _, c := range []struct {
		st   Status
		code int
	}{
		{Status{ServerUp: true, Role: RolePrimary}, 0},
		{Status{ServerUp: true, Role: RoleStandby}, http.StatusConflict},
		{Status{Role: RoleUnknown, Error: "connection refused"}, http.StatusServiceUnavailable},
	} {
		code, why := baseBackupRefusal(c.st)
		assert.Equal(t, c.code, code, "%+v", c.st)
		assert.Equal(t, c.code == 0, why == "", why)
	}
	_, why := baseBackupRefusal(Status{ServerUp: true, Role: RoleStandby})
	assert.Equal(t, "the instance is not the primary (its role: standby): only the primary takes base backups", why)

	for _, name := range []string{"nightly-1", "a", "v1.2", strings.Repeat("a", 248)} {
		require.NoError(t, checkBaseBackupName(name), name)
	}
	require.NoError(t, a.requestBaseBackup("nightly-1"))
	dir := filepath.Join(filepath.Dir(pgdata), BaseBackupRequests)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nightly-1.failed"), []byte("an earlier attempt failed"), 0o600))
	require.NoError(t, a.requestBaseBackup("nightly-1"), "asked again")
	_, err = os.Stat(filepath.Join(dir, "nightly-1.failed"))
	assert.ErrorIs(t, err, os.ErrNotExist, "an earlier failure's record goes with a new request")
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.ModeDir|0o700, st.Mode())
	st, err = os.Stat(filepath.Join(dir, "nightly-1"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode())
	assert.Zero(t, st.Size())
}
