package postgres_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// wal-restore.sh fetches through a resident Barman Cloud process
// (wal-resident.sh restore), as a recovering pod's sidecar and the
// verification Job's do: the bytes barman-cloud-wal-restore fetches, and
// no barman-cloud-wal-restore of their own. A file the archive lacks is
// "not in the archive" (exit 1, what ends a recovery), a name that is not
// a WAL file's stops the recovery (126). With the resident process gone,
// wal-restore.sh runs barman-cloud-wal-restore itself.
func TestWALRestoreFetchesThroughTheResidentProcess(t *testing.T) {
	t.Parallel()
	a := startArchiving(t)
	h := a.h
	seg := a.switchAndWait(a.source.Port, time.Minute)

	dir := a.resident("restore", a.server)
	pid := residentPID(t, dir, 0)
	bin, runsAlone := countRuns(t, h.u, "barman-cloud-wal-restore")
	env := a.storeEnv(a.server)
	env["PATH"] = bin + ":" + env["PATH"]
	env["WAL_RESTORE_RESIDENT"] = dir
	into := h.u.TempDir(t)
	restore := func(name string) (string, error) {
		return a.script(env, postgres.WALRestoreScript, name, filepath.Join(into, name))
	}
	exitCode := func(err error) int {
		var exit interface{ ExitCode() int }
		require.ErrorAs(t, err, &exit)
		return exit.ExitCode()
	}

	out, err := restore(seg)
	require.NoError(t, err, out)
	bare := filepath.Join(into, "bare")
	cli := h.u.Command(a.storeEnv(a.server), []string{"sh", "-c", `. "$0"; store_setup; barman-cloud-wal-restore $store_endpoint "$store_url" "$STORE_SERVER" "$1" "$2"`,
		filepath.Join(a.scripts, "store.sh"), seg, bare})
	b, err := cli.CombinedOutput()
	require.NoError(t, err, string(b))
	got, err := os.ReadFile(filepath.Join(into, seg))
	require.NoError(t, err)
	want, err := os.ReadFile(bare)
	require.NoError(t, err)
	assert.Equal(t, 16<<20, len(got), "a whole segment")
	assert.True(t, bytes.Equal(want, got), "the bytes barman-cloud-wal-restore fetches")

	out, err = restore("0000000100000000000000FF")
	assert.Equal(t, 1, exitCode(err), "a segment the archive lacks: %s", out)
	assert.NoFileExists(t, filepath.Join(into, "0000000100000000000000FF"))
	out, err = restore("00000009.history")
	assert.Equal(t, 1, exitCode(err), "a history file the archive lacks: %s", out)
	out, err = restore("not-a-wal-file")
	assert.Equal(t, 126, exitCode(err), out)
	assert.Contains(t, out, "not-a-wal-file is an invalid name for a WAL file")
	assert.Zero(t, runsAlone(), "barman-cloud-wal-restore ran while the resident process served")

	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.NoError(t, os.Remove(filepath.Join(into, seg)))
	out, err = restore(seg)
	require.NoError(t, err, out)
	assert.Equal(t, 1, runsAlone(), "with the resident process gone, wal-restore.sh ran barman-cloud-wal-restore itself")
	got, err = os.ReadFile(filepath.Join(into, seg))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got))
}

// residentPID waits until a resident Barman Cloud process (wal-resident.sh)
// other than old serves dir, and returns its pid.
func residentPID(t testing.TB, dir string, old int) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err == nil {
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err == nil && pid != old && syscall.Kill(pid, 0) == nil
	}, 30*time.Second, 50*time.Millisecond, "no resident process serves %s (other than %d)", dir, old)
	return pid
}

// countRuns writes a wrapper of /usr/bin's command that counts its runs
// into a directory of u's, for the front of a PATH; runs is the count so
// far.
func countRuns(t testing.TB, u *pgtest.User, command string) (dir string, runs func() int) {
	dir = u.TempDir(t)
	calls := filepath.Join(dir, "calls")
	wrapper := "#!/bin/sh\necho run >>" + calls + "\nexec /usr/bin/" + command + " \"$@\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, command), []byte(wrapper), 0o755))
	return dir, func() int {
		b, _ := os.ReadFile(calls)
		return bytes.Count(b, []byte("run\n"))
	}
}
