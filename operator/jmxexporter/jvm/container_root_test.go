package jvm

import (
	"fmt"
	"net"
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

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

// containerRootCaps are the capabilities a container runtime gives root by
// default (containerd, CRI-O, Docker): no CAP_SYS_PTRACE, so another
// user's /proc/<pid>/environ, fd, cwd and root are closed to it.
const containerRootCaps = "chown,dac_override,fowner,fsetid,kill,setgid,setuid,setpcap,net_bind_service,net_raw,sys_chroot,mknod,audit_write,setfcap"

// runHelperAsContainerRoot runs the helper's attach as root with only a
// container root's capabilities (setpriv drops the rest).
func runHelperAsContainerRoot(t *testing.T, helper string, o AttachOptions, extra ...string) Result {
	t.Helper()
	caps := "-all"
	for _, c := range strings.Split(containerRootCaps, ",") {
		caps += ",+" + c
	}
	cmd := exec.Command("setpriv", "--bounding-set="+caps, "--inh-caps=-all", "--",
		helper, "attach", "-agent", o.Agent, "-config", o.Config, "-port", strconv.Itoa(o.Port),
		"-path", o.Path, "-match", o.Match, "-state-dir", o.StateDir)
	cmd.Args = append(cmd.Args, extra...)
	out, err := cmd.Output()
	require.NoError(t, err, "setpriv: %s", out)
	return helperResult(t, out)
}

// A real JDK 17 JVM running as another user than the exec, the exec a
// container's root without CAP_SYS_PTRACE, with and without -Xrs (its
// attach socket is open from the start): the helper attaches.
func TestContainerRootAttachesToAnotherUsersJVM(t *testing.T) {
	for _, flags := range [][]string{nil, {"-Xrs"}} {
		t.Run(fmt.Sprint(flags), func(t *testing.T) {
			helper := buildHelper(t)
			marker := jvmtest.Marker(t)
			j := jvmtest.StartAs(t, jvmtest.Nobody(t), sharedDir(t), flags, marker)
			o := sharedOptions(t, marker)

			r := runHelperAsContainerRoot(t, helper, o)
			require.Equal(t, Attached, r.Result, "%s %s", r.Reason, r.Message)
			assert.Equal(t, 65534, r.JVM.UID)
			assert.True(t, r.Serving, r.Message)
			assert.Regexp(t, `(?m)^jvm_heap_used_bytes [0-9.E]+$`, metrics(t, o.Port))
			assert.False(t, j.Exited(), j.Log.String())
		})
	}
}

// An exporter given in JAVA_TOOL_OPTIONS is only visible in the JVM's
// /proc/<pid>/environ, which a container's root cannot read for another
// user. The helper reads it as the JVM's user and leaves the JVM alone
// (taking the unreadable file for "no exporter" would load a second one,
// which exits the JVM).
func TestContainerRootSeesAnExporterFromAnotherUsersEnvironment(t *testing.T) {
	helper := buildHelper(t)
	marker := jvmtest.Marker(t)
	dir := sharedDir(t)
	first := sharedOptions(t, marker)
	jar := filepath.Join(dir, "jmx_prometheus_javaagent-1.0.1.jar")
	b, err := os.ReadFile(first.Agent)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(jar, b, 0o644))
	env := []string{fmt.Sprintf("JAVA_TOOL_OPTIONS=-javaagent:%s=%d:%s", jar, first.Port, first.Config)}
	j := jvmtest.StartWithEnv(t, jvmtest.Nobody(t), dir, env, nil, marker)
	require.Contains(t, j.Log.String(), "stand-in agent serving")

	o := sharedOptions(t, marker)
	r := runHelperAsContainerRoot(t, helper, o)
	assert.Equal(t, Failed, r.Result, r.Message)
	assert.Equal(t, ReasonAgentConfigured, r.Reason, r.Message)
	assert.False(t, j.Exited(), "the second exporter exited the JVM: %s", j.Log.String())
	assert.Equal(t, 1, strings.Count(j.Log.String(), "stand-in agent serving"), j.Log.String())
}

// An attach socket left in /tmp by a dead process that had the JVM's PID
// (a container restarted with /tmp on an emptyDir, PIDs that wrapped):
// another user's, which denies the connection, or the JVM's user's but
// older than the JVM, which refuses it. The helper removes it, has the
// JVM open its own, and attaches.
func TestContainerRootAttachesPastASocketLeftByAnEarlierProcess(t *testing.T) {
	for name, owner := range map[string]int{"another user's": 0, "the JVM user's": 65534} {
		t.Run(name, func(t *testing.T) {
			helper := buildHelper(t)
			marker := jvmtest.Marker(t)
			j := jvmtest.StartAs(t, jvmtest.Nobody(t), sharedDir(t), nil, marker)
			o := sharedOptions(t, marker)
			stale := leaveSocket(t, filepath.Join("/tmp", ".java_pid"+strconv.Itoa(j.PID)), owner)

			r := runHelperAsContainerRoot(t, helper, o)
			require.Equal(t, Attached, r.Result, "%s %s", r.Reason, r.Message)
			assert.Regexp(t, `(?m)^jvm_heap_used_bytes [0-9.E]+$`, metrics(t, o.Port))
			st, err := os.Stat(stale)
			require.NoError(t, err, "the JVM's own socket")
			assert.Equal(t, uint32(65534), st.Sys().(*syscall.Stat_t).Uid, "the socket is the JVM's now")
		})
	}
}

// leaveSocket makes the socket a killed process leaves behind: bound, not
// listened on by anyone, owned by uid and an hour old.
func leaveSocket(t *testing.T, path string, uid int) string {
	t.Helper()
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, l.Close())
	t.Cleanup(func() { os.Remove(path) })
	require.NoError(t, os.Chown(path, uid, uid))
	hourAgo := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(path, hourAgo, hourAgo))
	return path
}
