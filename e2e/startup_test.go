package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator"
)

// startupError runs the operator binary with bad input and returns its
// stderr and exit code; it must fail before touching any cluster.
func startupError(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(operatorBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the operator started despite bad input:\n%s", out)
	return string(out), exit.ExitCode()
}

func TestUnknownControllerFailsAtStartListingKnownOnes(t *testing.T) {
	out, code := startupError(t, nil, "--controllers=*,-nope", "--kubeconfig=/nonexistent")
	assert.Equal(t, 2, code)
	assert.Contains(t, out, `unknown controller "nope"`)
	assert.Contains(t, out, strings.Join(operator.Names(), ", "))
}

func TestMalformedConfigFileFailsNamingFileAndField(t *testing.T) {
	file := filepath.Join(t.TempDir(), "deckhand.yaml")
	require.NoError(t, os.WriteFile(file, []byte("leader-elect: sometimes\n"), 0o600))
	out, code := startupError(t, []string{"DECKHAND_CONFIG=" + file})
	assert.Equal(t, 2, code)
	assert.Contains(t, out, file)
	assert.Contains(t, out, "leader-elect")
}
