package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.RemoveAgentBinary()
	os.Exit(code)
}

// supervised is the server container's entrypoint as AddAgent makes it,
// with script as the entrypoint, PGDATA under dir, and the supervisor's
// pause short.
func supervised(t *testing.T, u *pgtest.User, dir, script string, env map[string]string) *exec.Cmd {
	t.Helper()
	all := map[string]string{"PATH": "/usr/bin:/bin", "PGDATA": filepath.Join(dir, "pgdata"), "DIR": dir, instance.RoleDirEnv: dir}
	for k, v := range env {
		all[k] = v
	}
	return u.Command(all, []string{pgtest.AgentBinary(t), "supervise", "--restart-pause", "50ms", "--", "sh", "-c", script})
}

func runs(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "runs"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

// An entrypoint that ends while its server is fenced (the marker beside
// PGDATA), or was fenced during the run, is started again, as often as
// that happens, and the container lives on; once it ends unfenced, the
// container ends with its code.
func TestTheSupervisorStartsTheEntrypointAgainOnlyWhileTheServerIsFenced(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, instance.FenceMarker)
	require.NoError(t, os.WriteFile(marker, []byte("fenced by the deckhand operator\n"), 0o644))
	// The third run finds itself unfenced (the fence lifted) and fails.
	script := `echo "run ${` + instance.FencedRestartEnv + `:-first}" >>"$DIR/runs"; [ "$(wc -l <"$DIR/runs")" -lt 3 ] || rm -f "$DIR/` + instance.FenceMarker + `"; exit 7`
	var log bytes.Buffer
	cmd := supervised(t, nil, dir, script, nil)
	cmd.Stderr = &log
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, log.String())
	assert.Equal(t, 7, exit.ExitCode(), "the entrypoint's own code, once it ended unfenced")
	assert.Equal(t, 3, runs(t, dir), "started again after each fenced end")
	b, err := os.ReadFile(filepath.Join(dir, "runs"))
	require.NoError(t, err)
	assert.Equal(t, "run first\nrun 1\nrun 1\n", string(b), "a run started again after a fence is told so")
	assert.Equal(t, 2, strings.Count(log.String(), "after the server was fenced"), log.String())

	// A fence lifted before the server's end (a hung server's processes
	// die only once they run again, after the failover): the agent's
	// record of the server it fenced says the end is the fence's all the
	// same. A record of another process does not.
	require.NoError(t, os.Remove(filepath.Join(dir, "runs")))
	record := filepath.Join(dir, instance.FencedServerRecord)
	require.NoError(t, os.WriteFile(record, []byte("1\n"), 0o644))
	script = `echo run >>"$DIR/runs"
if [ "$(wc -l <"$DIR/runs")" -eq 1 ]; then
	[ ! -e "$DIR/` + instance.FencedServerRecord + `" ] || exit 3
	echo $$ >"$DIR/` + instance.FencedServerRecord + `"; kill -KILL $$
fi
echo 1 >"$DIR/` + instance.FencedServerRecord + `"
exit 5`
	err = supervised(t, nil, dir, script, nil).Run()
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 5, exit.ExitCode(), "the second run's own end; another process's record is not its")
	assert.Equal(t, 2, runs(t, dir), "started again after the agent recorded its server fenced (an earlier record was removed before it ran)")

	// Unfenced, a crash ends the container at once, with the code a shell
	// gives a process a signal ended.
	require.NoError(t, os.Remove(filepath.Join(dir, "runs")))
	err = supervised(t, nil, dir, `echo run >>"$DIR/runs"; kill -KILL $$`, nil).Run()
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 128+int(syscall.SIGKILL), exit.ExitCode())
	assert.Equal(t, 1, runs(t, dir))
}

// The kubelet's SIGTERM reaches the entrypoint and ends the container,
// fenced or not; a reload signal reaches it and ends nothing.
func TestTheSupervisorPassesSignalsOnAndStopsWhenTheContainerIs(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, instance.FenceMarker), nil, 0o644))
	script := `echo run >>"$DIR/runs"
trap 'echo hup >>"$DIR/signals"' HUP
trap 'echo term >>"$DIR/signals"; exit 0' TERM
echo $$ >"$DIR/pid"
while :; do sleep 0.1; done`
	cmd := supervised(t, nil, dir, script, nil)
	require.NoError(t, cmd.Start())
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "pid")); return err == nil }, 10*time.Second, 20*time.Millisecond)
	signals := func() string { b, _ := os.ReadFile(filepath.Join(dir, "signals")); return string(b) }

	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return signals() == "hup\n" }, 10*time.Second, 20*time.Millisecond, "SIGHUP reaches the entrypoint")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-waited:
		require.NoError(t, err, "the entrypoint's exit 0")
	case <-time.After(10 * time.Second):
		t.Fatal("the supervisor did not end after SIGTERM")
	}
	assert.Equal(t, "hup\nterm\n", signals())
	assert.Equal(t, 1, runs(t, dir), "not started again after SIGTERM, although fenced")
}

// The supervisor's environment holds the Secrets' passwords for as long
// as the container runs; the agent's container runs as the same user in
// the same process namespace and must not read them. The entrypoint's
// own process can be read (it was so before; bootstrap.sh unsets them
// before the server starts), which shows the reading itself works.
func TestTheSupervisorsEnvironmentCannotBeReadByItsOwnUser(t *testing.T) {
	u := pgtest.Unprivileged(t)
	dir := u.TempDir(t)
	cmd := supervised(t, u, dir, `echo $$ >"$DIR/pid"; exec sleep 60`, map[string]string{"PGPASSWORD": "the-superusers-secret"})
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	var child int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && child > 0
	}, 10*time.Second, 20*time.Millisecond)
	// setpriv (pgtest.User.Command) has exec'd the supervisor by then: it
	// started the child.
	read := func(pid int) (string, error) {
		out, err := u.Command(map[string]string{"PATH": "/usr/bin:/bin"}, []string{"cat", "/proc/" + strconv.Itoa(pid) + "/environ"}).CombinedOutput()
		return string(out), err
	}
	out, err := read(child)
	require.NoError(t, err, out)
	assert.Contains(t, out, "PGPASSWORD=the-superusers-secret", "the same user reads a dumpable process's environment")
	out, err = read(cmd.Process.Pid)
	assert.Error(t, err, "the supervisor's environment: %s", out)
	assert.NotContains(t, out, "the-superusers-secret")
	assert.Contains(t, out, "Permission denied")
}
