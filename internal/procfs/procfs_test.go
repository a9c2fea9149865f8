package procfs_test

import (
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/procfs"
)

func TestStatFieldsReadTheParentAfterACommandNameWithSpacesAndParentheses(t *testing.T) {
	fields, ok := procfs.StatFields("/proc", os.Getpid())
	require.True(t, ok)
	assert.Equal(t, strconv.Itoa(os.Getppid()), fields[1])

	dir := t.TempDir()
	proc := dir + "/42"
	require.NoError(t, os.Mkdir(proc, 0o755))
	require.NoError(t, os.WriteFile(proc+"/stat", []byte("42 (a) b (c) S 7 42 42 0"), 0o644))
	fields, ok = procfs.StatFields(dir, 42)
	require.True(t, ok)
	assert.Equal(t, []string{"S", "7", "42", "42", "0"}, fields)
	_, ok = procfs.StatFields(dir, 43)
	assert.False(t, ok, "no such process")
}

// A shell and the sleep it started are the test process's tree, the
// test process first.
func TestTreeIsTheProcessAndEveryDescendant(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var tree []int
	require.Eventually(t, func() bool {
		tree = procfs.Tree("/proc", os.Getpid())
		return len(tree) >= 3
	}, 10*1e9, 50*1e6, "the shell's sleep never appeared")
	assert.Equal(t, os.Getpid(), tree[0])
	assert.Contains(t, tree, cmd.Process.Pid)
	assert.Equal(t, []int{42}, procfs.Tree(t.TempDir(), 42), "no /proc: the root alone")
}
