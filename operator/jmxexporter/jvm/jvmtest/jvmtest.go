// Package jvmtest gives tests real JVMs: it compiles (with the JDK's javac
// and jar) a tiny application and a stand-in for the Prometheus JMX
// exporter agent, and starts JVMs on the host, stopped when the test ends.
package jvmtest

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/freeport"
	"github.com/deckhand-dev/deckhand/internal/syncbuf"
)

//go:embed java/*.java
var sources embed.FS

// Build holds the compiled application classes and the agent jar.
type Build struct {
	Classes string
	Agent   string
}

var (
	buildOnce sync.Once
	build     Build
	buildErr  error
)

// Compile compiles App and StandInAgent once per test process, into a
// directory named after the sources' hash (so packages share it).
func Compile(t testing.TB) Build {
	t.Helper()
	buildOnce.Do(func() { build, buildErr = compile() })
	require.NoError(t, buildErr)
	return build
}

func compile() (Build, error) {
	for _, tool := range []string{"java", "javac", "jar"} {
		if _, err := exec.LookPath(tool); err != nil {
			return Build{}, fmt.Errorf("%s not found: install a JDK (hack/test-deps.sh installs Debian's openjdk-17-jdk-headless)", tool)
		}
	}
	files, _ := sources.ReadDir("java")
	h := sha256.New()
	for _, f := range files {
		b, _ := sources.ReadFile("java/" + f.Name())
		h.Write(b)
	}
	dir := filepath.Join(os.TempDir(), "deckhand-jvmtest-"+hex.EncodeToString(h.Sum(nil))[:12])
	b := Build{Classes: filepath.Join(dir, "classes"), Agent: filepath.Join(dir, "stand-in-agent.jar")}
	if _, err := os.Stat(b.Agent); err == nil {
		// Readable by the unprivileged users tests run JVMs and helpers as.
		return b, os.Chmod(dir, 0o755)
	}
	work, err := os.MkdirTemp(os.TempDir(), "deckhand-jvmtest-build-")
	if err != nil {
		return Build{}, err
	}
	defer os.RemoveAll(work)
	var srcs []string
	for _, f := range files {
		b, _ := sources.ReadFile("java/" + f.Name())
		p := filepath.Join(work, f.Name())
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return Build{}, err
		}
		srcs = append(srcs, p)
	}
	classes := filepath.Join(work, "classes")
	if err := run("javac", append([]string{"-d", classes}, srcs...)...); err != nil {
		return Build{}, err
	}
	manifest := filepath.Join(work, "MANIFEST.MF")
	if err := os.WriteFile(manifest, []byte("Agent-Class: StandInAgent\nPremain-Class: StandInAgent\n"), 0o644); err != nil {
		return Build{}, err
	}
	agentClasses, _ := filepath.Glob(filepath.Join(classes, "StandInAgent*.class"))
	args := []string{"cfm", filepath.Join(work, "stand-in-agent.jar"), manifest}
	for _, c := range agentClasses {
		args = append(args, "-C", classes, filepath.Base(c))
	}
	if err := run("jar", args...); err != nil {
		return Build{}, err
	}
	// Publish atomically: other test processes may compile at the same time.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return Build{}, err
	}
	if err := os.Chmod(work, 0o755); err != nil {
		return Build{}, err
	}
	if err := os.Rename(work, dir); err != nil && !os.IsExist(err) && !isNotEmpty(err) {
		return Build{}, err
	}
	return b, nil
}

func isNotEmpty(err error) bool { return strings.Contains(err.Error(), "directory not empty") }

func run(name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
}

// JVM is a running java process.
type JVM struct {
	Cmd *exec.Cmd
	PID int
	// Log holds its stdout and stderr.
	Log *syncbuf.Buffer
	// Dir is its working directory.
	Dir string
}

// Exited says whether the JVM has ended (the stand-in agent exits it when
// it cannot start).
func (j *JVM) Exited() bool { return syscall.Kill(j.PID, 0) != nil || isZombie(j.PID) }

// WaitExitSaying waits for the JVM to exit and for its log to say want.
// Exited counts a zombie, and the last lines are copied from the JVM's
// pipes after it is gone: on a loaded machine they arrive after the exit
// is seen.
func (j *JVM) WaitExitSaying(t testing.TB, want string) {
	t.Helper()
	require.Eventually(t, j.Exited, 30*time.Second, 50*time.Millisecond, j.Log.String())
	require.Eventually(t, func() bool { return strings.Contains(j.Log.String(), want) }, 10*time.Second, 50*time.Millisecond,
		"the JVM's log does not say %q:\n%s", want, j.Log)
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}

// Stop kills the JVM and waits for it.
func (j *JVM) Stop() {
	_ = j.Cmd.Process.Kill()
	_, _ = j.Cmd.Process.Wait()
	// Killed, HotSpot leaves its attach socket behind, where a later test's
	// JVM given the same PID would find it.
	_ = os.Remove(filepath.Join("/tmp", ".java_pid"+strconv.Itoa(j.PID)))
}

// Start runs App with the given JVM options and markers (its arguments,
// which tests match with jvmMatch), in dir, until the test ends. It
// returns once the JVM has started (its hsperfdata file exists).
func Start(t testing.TB, dir string, jvmOptions []string, markers ...string) *JVM {
	t.Helper()
	return StartAs(t, nil, dir, jvmOptions, markers...)
}

// StartAs is Start with the JVM running as another user (nil: this
// process's); dir must be writable by that user.
func StartAs(t testing.TB, user *syscall.Credential, dir string, jvmOptions []string, markers ...string) *JVM {
	t.Helper()
	return StartWithEnv(t, user, dir, nil, jvmOptions, markers...)
}

// StartWithEnv is StartAs with extra environment variables ("K=V"), such
// as JAVA_TOOL_OPTIONS, which only the JVM's user (or CAP_SYS_PTRACE) can
// read back from /proc.
func StartWithEnv(t testing.TB, user *syscall.Credential, dir string, env []string, jvmOptions []string, markers ...string) *JVM {
	t.Helper()
	b := Compile(t)
	args := append(append([]string{"-Xmx64m", "-XX:TieredStopAtLevel=1", "-cp", b.Classes}, jvmOptions...), "App")
	cmd := exec.Command("java", append(args, markers...)...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if user != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: user}
	}
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	j := &JVM{Cmd: cmd, PID: cmd.Process.Pid, Log: log, Dir: dir}
	t.Cleanup(j.Stop)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(log.String(), "app started") {
		require.False(t, j.Exited(), "JVM exited: %s", log.String())
		require.True(t, time.Now().Before(deadline), "JVM did not start: %s", log.String())
		time.Sleep(20 * time.Millisecond)
	}
	return j
}

// Nobody is Debian's unprivileged user (uid 65534), to run a JVM or the
// helper as someone else than root. It fails the test when not root.
func Nobody(t testing.TB) *syscall.Credential {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "running processes as another user needs root")
	u, err := user.Lookup("nobody")
	require.NoError(t, err)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// FreePort is a TCP port of 127.0.0.1 nothing listens on, the test's
// until it ends: no other test, in this process or another, is given it
// meanwhile (see internal/freeport).
func FreePort(t testing.TB) int {
	t.Helper()
	return freeport.Get(t)
}

// Marker is a string unique to this test, for jvmMatch.
func Marker(t testing.TB) string {
	return fmt.Sprintf("deckhand-test-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
}
