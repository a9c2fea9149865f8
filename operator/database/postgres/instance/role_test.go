package instance_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// askRole runs the entrypoint's ask_role (scripts/lib.sh, the shell the
// server container runs) against the role directory dir and the fence
// marker path fence; the returned function waits for it and gives what it
// printed and its exit code.
func askRole(t *testing.T, dir, fence string) func() (string, int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `. ../scripts/lib.sh; ask_role "$1" "$2"`, "sh", dir, fence)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return func() (string, int) {
		err := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return out.String(), exit.ExitCode()
		}
		require.NoError(t, err)
		return strings.TrimSpace(out.String()), 0
	}
}

// A server about to start as the primary waits for the operator's word:
// the agent reports the question, and the answer reaches the entrypoint,
// naming its own pod (it starts) or another (it reads its role again).
// Nothing is answered when nothing is asked, and a fence ends the wait.
func TestTheEntrypointWaitsForTheOperatorToNameThePrimary(t *testing.T) {
	creds := issue(t)
	dir := t.TempDir()
	addr, _ := serveAgent(t, creds, dir)
	c := clientOf(operatorTLS(t, creds), addr)
	ctx := context.Background()
	host := hosts(pod0)[0]

	st, err := c.Status(ctx, host)
	require.NoError(t, err)
	assert.False(t, st.AwaitingRole)
	require.Error(t, c.AnswerRole(ctx, host, pod0), "no question asked: nothing answered")

	for _, primary := range []string{pod0, pod1} {
		done := askRole(t, dir, filepath.Join(t.TempDir(), "deckhand-fenced"))
		require.Eventually(t, func() bool {
			st, err := c.Status(ctx, host)
			return err == nil && st.AwaitingRole
		}, 30*time.Second, 50*time.Millisecond, "the agent reports the entrypoint's question")
		require.NoError(t, c.AnswerRole(ctx, host, primary))
		out, code := done()
		assert.Equal(t, 0, code)
		assert.Equal(t, primary, out, "the entrypoint reads the operator's answer")
		st, err := c.Status(ctx, host)
		require.NoError(t, err)
		assert.False(t, st.AwaitingRole, "answered: no question left")
	}

	fence := filepath.Join(t.TempDir(), "deckhand-fenced")
	done := askRole(t, dir, fence)
	require.Eventually(t, func() bool {
		st, err := c.Status(ctx, host)
		return err == nil && st.AwaitingRole
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, os.WriteFile(fence, []byte("fenced\n"), 0o600))
	_, code := done()
	assert.Equal(t, 2, code, "fenced while it waits: the wait ends without an answer")
	st, err = c.Status(ctx, host)
	require.NoError(t, err)
	assert.False(t, st.AwaitingRole, "the question is withdrawn")
}
