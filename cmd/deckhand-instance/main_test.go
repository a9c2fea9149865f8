package main

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// The agent refuses to serve without knowing its pod and data directory
// (a sidecar whose environment lacks them would otherwise watch ".").
func TestServeNeedsItsPodAndDataDirectory(t *testing.T) {
	bin := pgtest.AgentBinary(t)
	for name, env := range map[string][]string{
		"no POD_NAME": {"PGDATA=/var/lib/postgresql/data/pgdata"},
		"no PGDATA":   {"POD_NAME=db-0"},
	} {
		cmd := exec.Command(bin, "serve", "--tls-dir", t.TempDir())
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.Error(t, err, name)
		assert.Contains(t, string(out), "--pod and --pgdata (or POD_NAME and PGDATA) are required", name)
	}
	out, err := exec.Command(bin, "nonsense").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), `unknown command "nonsense"`)
}
