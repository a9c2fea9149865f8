package jmxexporter

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

// containerRootCaps are the capabilities a container runtime gives root
// by default: no CAP_SYS_PTRACE.
const containerRootCaps = "-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,+net_bind_service,+net_raw,+sys_chroot,+mknod,+audit_write,+setfcap"

// hostExec runs a "container's" commands on this host as a container's
// root (setpriv drops the other capabilities), as kwok's exec does for
// the integration tests, with stdin as the exec passes it.
type hostExec struct{}

func (hostExec) Exec(ctx context.Context, _ *corev1.Pod, _ string, cmd []string, stdin []byte, timeout time.Duration) (ExecResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "setpriv", append([]string{"--bounding-set=" + containerRootCaps, "--inh-caps=-all", "--"}, cmd...)...)
	var out, errOut bytes.Buffer
	c.Stdin, c.Stdout, c.Stderr = bytes.NewReader(stdin), &out, &errOut
	err := c.Run()
	res := ExecResult{Stdout: out.String(), Stderr: errOut.String()}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		res.ExitCode, err = exit.ExitCode(), nil
	}
	return res, err
}

func buildHelperFile(t *testing.T) file {
	t.Helper()
	out := filepath.Join(t.TempDir(), helperName)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/deckhand-dev/deckhand/cmd/deckhand-jmx-attach")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	return newFile(helperName, data, "0755")
}

// targetDir is a fresh path in /tmp (whose parents every user may pass).
func targetDir(t *testing.T) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "deckhand-copy-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(parent, 0o755))
	t.Cleanup(func() { os.RemoveAll(parent) })
	return filepath.Join(parent, "deckhand-jmx")
}

// A container's root copies the files and attaches to a JVM of another
// user: the directory is root's with 0755, the files 0644 (the helper
// 0755), so the JVM reads the agent and its configuration and can change
// nothing root runs.
func TestRootCopiesFilesANonRootJVMCanReadButNotChange(t *testing.T) {
	marker := jvmtest.Marker(t)
	c := &container{exec: hostExec{}, pod: &corev1.Pod{}, name: "app", dir: targetDir(t)}
	agent, err := os.ReadFile(jvmtest.Compile(t).Agent)
	require.NoError(t, err)
	port := jvmtest.FreePort(t)
	files := []file{buildHelperFile(t), newFile(agentName, agent, "0644"), newFile(configName, []byte(testConfig), "0644")}
	arch, sums, p := c.probe(context.Background(), files)
	require.Nil(t, p)
	assert.NotEmpty(t, arch)
	require.Nil(t, c.ensure(context.Background(), files, sums))

	st, err := os.Lstat(c.dir)
	require.NoError(t, err)
	assert.Equal(t, os.ModeDir|0o755, st.Mode())
	assert.Equal(t, uint32(0), st.Sys().(*syscall.Stat_t).Uid)
	for name, mode := range map[string]os.FileMode{helperName: 0o755, agentName: 0o644, configName: 0o644} {
		st, err := os.Lstat(c.path(name))
		require.NoError(t, err)
		assert.Equal(t, mode, st.Mode(), name)
		assert.Equal(t, uint32(0), st.Sys().(*syscall.Stat_t).Uid, name)
	}

	jvmDir := filepath.Join(filepath.Dir(c.dir), "jvm")
	require.NoError(t, os.Mkdir(jvmDir, 0o777))
	require.NoError(t, os.Chmod(jvmDir, 0o777))
	j := jvmtest.StartAs(t, jvmtest.Nobody(t), jvmDir, nil, marker)
	res := c.helper(context.Background(), "attach", time.Minute, "attach", "-agent", c.path(agentName), "-config", c.path(configName),
		"-port", strconv.Itoa(port), "-path", "/metrics", "-match", marker, "-state-dir", filepath.Join(c.dir, "state"))
	require.Equal(t, jvm.Attached, res.Result, "%s %s", res.Reason, res.Message)
	assert.True(t, res.Serving, res.Message)
	assert.False(t, j.Exited(), j.Log.String())
}

// A directory the JVM's user prepared (its own, or a symbolic link to
// somewhere root would then write) is refused, and a helper planted in it
// is never run.
func TestCopyRefusesATargetDirectoryAnotherUserControls(t *testing.T) {
	nobody := jvmtest.Nobody(t)
	planted := "#!/bin/sh\necho planted > \"$0.ran\"\n"
	for name, prepare := range map[string]func(dir string){
		"owned by another user": func(dir string) {
			require.NoError(t, os.Mkdir(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, helperName), []byte(planted), 0o755))
			require.NoError(t, os.Chown(filepath.Join(dir, helperName), int(nobody.Uid), int(nobody.Gid)))
			require.NoError(t, os.Chown(dir, int(nobody.Uid), int(nobody.Gid)))
		},
		"symbolic link": func(dir string) {
			elsewhere := filepath.Join(filepath.Dir(dir), "elsewhere")
			require.NoError(t, os.Mkdir(elsewhere, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(elsewhere, helperName), []byte(planted), 0o755))
			require.NoError(t, os.Symlink(elsewhere, dir))
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := &container{exec: hostExec{}, pod: &corev1.Pod{}, name: "app", dir: targetDir(t)}
			prepare(c.dir)
			files := []file{newFile(helperName, []byte("#!/bin/sh\n"), "0755"), newFile(configName, []byte(testConfig), "0644")}
			_, sums, p := c.probe(context.Background(), files)
			require.Nil(t, p)
			assert.Empty(t, sums, "the planted helper must not run")
			_, err := os.Stat(c.path(helperName) + ".ran")
			assert.True(t, os.IsNotExist(err), "the planted helper ran as root")

			p = c.ensure(context.Background(), files, sums)
			require.NotNil(t, p)
			assert.Equal(t, "UnsafeTargetDir", p.Reason, p.Message)
			assert.False(t, p.Retry)
			assert.Contains(t, p.Message, "symbolic link or belongs to another user")
			b, err := os.ReadFile(c.path(helperName))
			require.NoError(t, err)
			assert.Equal(t, planted, string(b), "nothing was written through it")
		})
	}
}
