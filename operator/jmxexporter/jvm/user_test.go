package jvm

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

// sharedDir is a directory every user may use (t.TempDir's parents are
// root's alone).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "deckhand-jvm-shared-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o777))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

var (
	helperOnce sync.Once
	helperDir  string
	helperPath string
	helperErr  error
)

// buildHelper builds cmd/deckhand-jmx-attach, as the image does, once per
// test process, in a directory every user may read (removed by TestMain).
func buildHelper(t *testing.T) string {
	t.Helper()
	helperOnce.Do(func() {
		if helperDir, helperErr = os.MkdirTemp("", "deckhand-jvm-helper-"); helperErr != nil {
			return
		}
		if helperErr = os.Chmod(helperDir, 0o755); helperErr != nil {
			return
		}
		helperPath = filepath.Join(helperDir, "deckhand-jmx-attach")
		cmd := exec.Command("go", "build", "-trimpath", "-o", helperPath, "github.com/deckhand-dev/deckhand/cmd/deckhand-jmx-attach")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			helperErr = fmt.Errorf("%w: %s", err, b)
		}
	})
	require.NoError(t, helperErr)
	return helperPath
}

// runHelperAs runs the helper's attach as user (nil: root) and parses its
// JSON line.
func runHelperAs(t *testing.T, helper string, user *syscall.Credential, o AttachOptions) Result {
	t.Helper()
	cmd := exec.Command(helper, "attach", "-agent", o.Agent, "-config", o.Config, "-port", strconv.Itoa(o.Port),
		"-path", o.Path, "-match", o.Match, "-state-dir", o.StateDir)
	if user != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: user}
	}
	out, _ := cmd.Output()
	return helperResult(t, out)
}

// helperResult parses the helper's JSON line (its last line).
func helperResult(t *testing.T, out []byte) Result {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r Result
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &r), "helper output: %s", out)
	return r
}

// sharedOptions are attach options in a directory laid out as the
// operator's copy leaves it (copy_test.go in the controller's package
// runs that copy for real): root's, mode 0755, files 0644, so every user
// may read them and only root change them.
func sharedOptions(t *testing.T, match string) AttachOptions {
	t.Helper()
	o := options(t, match, heapRule)
	dir := sharedDir(t)
	require.NoError(t, os.Chmod(dir, 0o755))
	for _, f := range []*string{&o.Agent, &o.Config} {
		b, err := os.ReadFile(*f)
		require.NoError(t, err)
		*f = filepath.Join(dir, filepath.Base(*f))
		require.NoError(t, os.WriteFile(*f, b, 0o644))
	}
	o.StateDir = filepath.Join(dir, "state")
	return o
}

// A JVM of one user and an exec (the helper) of another: HotSpot would
// refuse the attach, so the helper says who is who, loads nothing and
// leaves the JVM running.
func TestAttachAsAnotherUserIsReportedClearly(t *testing.T) {
	helper := buildHelper(t)
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), nil, marker) // root's JVM
	o := sharedOptions(t, marker)

	r := runHelperAs(t, helper, jvmtest.Nobody(t), o)
	assert.Equal(t, Failed, r.Result, r.Message)
	assert.Equal(t, ReasonDifferentUser, r.Reason, r.Message)
	assert.False(t, r.Retry, "retrying cannot help: the users stay different")
	assert.Contains(t, r.Message, "runs as uid 0")
	assert.Contains(t, r.Message, "the exec as uid 65534")
	assert.False(t, j.Exited())
	assert.NotContains(t, j.Log.String(), "stand-in agent")
	_, err := os.Stat(o.StateDir)
	assert.True(t, os.IsNotExist(err), "no load marker: nothing was sent to the JVM")
}

// Root may attach to another user's JVM (HotSpot accepts root), as an exec
// into a container running its JVM as a non-root user does when the
// container's user is root.
func TestRootAttachesToAnotherUsersJVM(t *testing.T) {
	helper := buildHelper(t)
	marker := jvmtest.Marker(t)
	dir := sharedDir(t)
	j := jvmtest.StartAs(t, jvmtest.Nobody(t), dir, nil, marker)
	o := sharedOptions(t, marker)

	r := runHelperAs(t, helper, nil, o)
	require.Equal(t, Attached, r.Result, "%s %s", r.Reason, r.Message)
	require.NotNil(t, r.JVM)
	assert.Equal(t, 65534, r.JVM.UID)
	assert.True(t, r.Serving, r.Message)
	assert.Regexp(t, `(?m)^jvm_heap_used_bytes [0-9.E]+$`, metrics(t, o.Port))
	assert.False(t, j.Exited())
}
