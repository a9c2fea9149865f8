package jvm

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
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

// The host has JDK 17 only. A fake HotSpot (this test binary, started as
// "java" under another user) plays the attach side of JDK 8 and JDK 21 at
// the protocol level: the trigger file check on SIGQUIT, the peer
// credential check on the socket, and the replies to jcmd and load.
const fakeHotSpotEnv = "DECKHAND_FAKE_HOTSPOT"

func TestMain(m *testing.M) {
	if jdk := os.Getenv(fakeHotSpotEnv); jdk != "" {
		fakeHotSpot(jdk, os.Getenv(fakeHotSpotEnv+"_LOG"))
		return
	}
	code := m.Run()
	if helperDir != "" {
		os.RemoveAll(helperDir)
	}
	os.Exit(code)
}

// triggerAccepted is HotSpot's AttachListener::is_init_trigger check of
// the .attach_pid file's owner: JDK 8 wants its own effective uid, JDK 9+
// also root (os::Posix::matches_effective_uid_or_root).
func triggerAccepted(jdk string, owner uint32) bool {
	return owner == uint32(os.Geteuid()) || (jdk != "8" && owner == 0)
}

// peerAccepted is the check of the connecting peer (SO_PEERCRED): JDK 8
// wants its own effective uid and gid, JDK 9+ also accepts uid 0
// (os::Posix::matches_effective_uid_and_gid_or_root).
func peerAccepted(jdk string, uid, gid uint32) bool {
	return (uid == uint32(os.Geteuid()) && gid == uint32(os.Getegid())) || (jdk != "8" && uid == 0)
}

func fakeHotSpot(jdk, logPath string) {
	logf := func(format string, a ...any) {
		f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o666)
		if err == nil {
			fmt.Fprintf(f, format+"\n", a...)
			f.Close()
		}
	}
	pid := os.Getpid()
	quit := make(chan os.Signal, 1)
	switch os.Getenv(fakeHotSpotEnv + "_SIGQUIT") {
	case "late":
		// A JVM still starting: no SIGQUIT handler for half a second.
		signal.Ignore(syscall.SIGQUIT)
		time.AfterFunc(500*time.Millisecond, func() { signal.Notify(quit, syscall.SIGQUIT) })
	case "never":
		signal.Ignore(syscall.SIGQUIT)
	default:
		signal.Notify(quit, syscall.SIGQUIT)
	}
	logf("started")
	listening := false
	for range quit {
		var st syscall.Stat_t
		trigger := ".attach_pid" + strconv.Itoa(pid)
		err := syscall.Stat(trigger, &st)
		if err != nil {
			err = syscall.Stat("/tmp/"+trigger, &st)
		}
		if err != nil || !triggerAccepted(jdk, st.Uid) {
			logf("thread dump (trigger file owner %d not accepted)", st.Uid)
			continue
		}
		if listening {
			continue
		}
		// As HotSpot's attach listener does: bind and listen under a
		// temporary name, then rename, so that a client never finds the
		// socket before it accepts (a connect between bind and listen is
		// refused).
		sock := fmt.Sprintf("/tmp/.java_pid%d", pid)
		tmp := sock + ".tmp"
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
		if err != nil {
			logf("listen: %v", err)
			continue
		}
		l.SetUnlinkOnClose(false)
		_ = os.Chmod(tmp, 0o600)
		if err := os.Rename(tmp, sock); err != nil {
			logf("rename: %v", err)
			l.Close()
			continue
		}
		listening = true
		go serveFakeAttach(jdk, l, logf)
	}
}

func serveFakeAttach(jdk string, l *net.UnixListener, logf func(string, ...any)) {
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			return
		}
		raw, _ := conn.SyscallConn()
		var cred *syscall.Ucred
		_ = raw.Control(func(fd uintptr) { cred, _ = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED) })
		if cred == nil || !peerAccepted(jdk, cred.Uid, cred.Gid) {
			logf("peer rejected (uid %d gid %d)", cred.Uid, cred.Gid)
			conn.Close()
			continue
		}
		r := bufio.NewReader(conn)
		var req []string
		for range 5 {
			s, err := r.ReadString(0)
			if err != nil {
				break
			}
			req = append(req, strings.TrimSuffix(s, "\x00"))
		}
		switch {
		case len(req) == 5 && req[1] == "jcmd" && req[2] == "VM.command_line":
			io.WriteString(conn, "0\nVM Arguments:\njvm_args: -Xmx64m\njava_command: Fake\n")
		case len(req) == 5 && req[1] == "load":
			logf("loaded %s", req[4])
			if jdk == "8" {
				io.WriteString(conn, "0\n0\n")
			} else {
				io.WriteString(conn, "0\nreturn code: 0\n")
			}
		default:
			io.WriteString(conn, "101\n")
		}
		conn.Close()
	}
}

// fakeJVM starts the fake HotSpot as user, named java, and returns its
// log file.
func fakeJVM(t *testing.T, jdk string, user *syscall.Credential, marker string, env ...string) (pid int, logPath string) {
	t.Helper()
	dir := sharedDir(t)
	self, err := os.Executable()
	require.NoError(t, err)
	bin := filepath.Join(dir, "fake-java")
	b, err := os.ReadFile(self)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	logPath = filepath.Join(dir, "hotspot.log")
	cmd := &exec.Cmd{Path: bin, Args: []string{"java", "-Dfake.jdk=" + jdk, "Fake", marker}, Dir: dir,
		Env:         append(append(os.Environ(), fakeHotSpotEnv+"="+jdk, fakeHotSpotEnv+"_LOG="+logPath), env...),
		SysProcAttr: &syscall.SysProcAttr{Credential: user}}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		_ = os.Remove(fmt.Sprintf("/tmp/.java_pid%d", cmd.Process.Pid))
	})
	require.Eventually(t, func() bool { b, _ := os.ReadFile(logPath); return strings.Contains(string(b), "started") }, 10*time.Second, 20*time.Millisecond)
	return cmd.Process.Pid, logPath
}

func readLog(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// JDK 8 ignores a trigger file of another uid and accepts only a peer of
// its own uid and gid: a root exec that did not become the JVM's user
// would only print a thread dump on every try. The helper switches to the
// JVM's uid and gid, so JDK 8 and JDK 21 both load the agent.
func TestAttachMeetsJDK8AndJDK21CredentialRules(t *testing.T) {
	helper := buildHelper(t)
	for _, jdk := range []string{"8", "21"} {
		t.Run("JDK "+jdk, func(t *testing.T) {
			marker := jvmtest.Marker(t)
			_, log := fakeJVM(t, jdk, jvmtest.Nobody(t), marker)
			o := sharedOptions(t, marker)
			r := runHelperAsContainerRoot(t, helper, o, "-wait", "0s") // the fake serves no metrics
			require.Equal(t, Attached, r.Result, "%s %s\n%s", r.Reason, r.Message, readLog(log))
			assert.Equal(t, 65534, r.JVM.GID)
			assert.Contains(t, readLog(log), "loaded "+o.Agent+"=")
			assert.NotContains(t, readLog(log), "thread dump")
			assert.NotContains(t, readLog(log), "peer rejected")
		})
	}
}

// A non-root exec of the JVM's uid but another gid cannot switch groups:
// JDK 9+ (and 8) would reject its connection after SIGQUIT, so the helper
// says so before signalling.
func TestAttachReportsAGroupMismatchBeforeSignalling(t *testing.T) {
	helper := buildHelper(t)
	marker := jvmtest.Marker(t)
	nobody := jvmtest.Nobody(t)
	_, log := fakeJVM(t, "21", nobody, marker)
	o := sharedOptions(t, marker)
	require.NoError(t, os.MkdirAll(o.StateDir, 0o777))
	r := runHelperAs(t, helper, &syscall.Credential{Uid: nobody.Uid, Gid: 0}, o)
	assert.Equal(t, Failed, r.Result, r.Message)
	assert.Equal(t, ReasonDifferentUser, r.Reason, r.Message)
	assert.Contains(t, r.Message, "gid 65534")
	assert.NotContains(t, readLog(log), "peer rejected", "the JVM was not even signalled")
	assert.NotContains(t, readLog(log), "thread dump")
}

// A JVM still starting has no SIGQUIT handler yet, and SIGQUIT would end
// it: the helper waits, bounded, until the handler is there, and reports
// a JVM that never gets one within SignalWait as retryable, unsignalled.
func TestAttachWaitsForAStartingJVMsSIGQUITHandler(t *testing.T) {
	wait, verify := SignalWait, VerifyWait
	SignalWait, VerifyWait = 1500*time.Millisecond, 0
	t.Cleanup(func() { SignalWait, VerifyWait = wait, verify })

	marker := jvmtest.Marker(t) + "-late"
	_, log := fakeJVM(t, "21", nil, marker, fakeHotSpotEnv+"_SIGQUIT=late")
	r := Attach(options(t, marker, heapRule))
	require.Equal(t, Attached, r.Result, "%s %s\n%s", r.Reason, r.Message, readLog(log))
	assert.Contains(t, readLog(log), "loaded ")

	marker = jvmtest.Marker(t) + "-never"
	_, log = fakeJVM(t, "21", nil, marker, fakeHotSpotEnv+"_SIGQUIT=never")
	start := time.Now()
	r = Attach(options(t, marker, heapRule))
	assert.Equal(t, Failed, r.Result, r.Message)
	assert.Equal(t, ReasonSignalNotHandled, r.Reason, r.Message)
	assert.True(t, r.Retry, "a JVM still starting may catch it later")
	assert.Contains(t, r.Message, "still starting")
	assert.Less(t, time.Since(start), SignalWait+2*time.Second, "the wait is bounded")
	assert.NotContains(t, readLog(log), "loaded")
}
