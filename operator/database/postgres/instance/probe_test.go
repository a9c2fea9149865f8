package instance

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
)

// A readiness check that hangs (a server that does not answer, a psql
// that waits on it) is ended at its bound with everything it started,
// and the kubelet gets a failure that says so, in time.
func TestAReadinessCheckThatHangsIsKilledWithItsChildrenAtItsBound(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	log := &syncbuf.Buffer{}
	p := &Readiness{
		Command: []string{"sh", "-c", `sleep 60 & echo $! >"$PID_FILE"; wait`},
		Env:     []string{"PID_FILE=" + pidFile},
		Timeout: 500 * time.Millisecond,
		Log:     slog.New(slog.NewTextHandler(log, nil)),
	}
	start := time.Now()
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ReadyPath, nil))
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, log.String(), "did not end within 500ms")

	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	assert.Eventually(t, func() bool {
		return errors.Is(syscall.Kill(child, 0), syscall.ESRCH)
	}, 5*time.Second, 50*time.Millisecond, "the check's child %d outlived it", child)
}

// The kubelet gets 200 for a check that passes and 503 with the check's
// words for one that fails; the log says a failure once, and the return.
func TestReadinessAnswersWhatTheCheckSaysAndLogsOnlyChanges(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "down")
	log := &syncbuf.Buffer{}
	p := &Readiness{
		Command: []string{"sh", "-c", `if [ -e "$FLAG" ]; then echo "the server is down" >&2; exit 1; fi`},
		Env:     []string{"FLAG=" + flag},
		Timeout: 5 * time.Second,
		Log:     slog.New(slog.NewTextHandler(log, nil)),
	}
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ReadyPath, nil))
		return rec
	}
	assert.Equal(t, http.StatusOK, get().Code)
	require.NoError(t, os.WriteFile(flag, nil, 0o600))
	for range 3 {
		rec := get()
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Equal(t, "the server is down\n", rec.Body.String())
	}
	assert.Equal(t, 1, strings.Count(log.String(), "the server is down"), log.String())
	require.NoError(t, os.Remove(flag))
	assert.Equal(t, http.StatusOK, get().Code)
	assert.Equal(t, 1, strings.Count(log.String(), "ready again"), log.String())
}
