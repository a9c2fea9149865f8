package jvm

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

const heapRule = `lowercaseOutputName: true
rules:
- pattern: 'java.lang<type=Memory><HeapMemoryUsage>used'
  name: JVM_Heap_Used_Bytes
  help: Heap memory used by the JVM.
  type: GAUGE
`

// options are attach options for a fresh agent copy and configuration.
func options(t *testing.T, match, config string) AttachOptions {
	t.Helper()
	dir := t.TempDir()
	agent, err := os.ReadFile(jvmtest.Compile(t).Agent)
	require.NoError(t, err)
	o := AttachOptions{Match: match, Agent: filepath.Join(dir, "agent.jar"), Config: filepath.Join(dir, "config.yaml"),
		Port: jvmtest.FreePort(t), Path: "/metrics", StateDir: filepath.Join(dir, "state")}
	require.NoError(t, os.WriteFile(o.Agent, agent, 0o644))
	require.NoError(t, os.WriteFile(o.Config, []byte(config), 0o644))
	return o
}

func metrics(t *testing.T, port int) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestAttachLoadsTheAgentIntoARunningJVMOnce(t *testing.T) {
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), nil, marker)
	o := options(t, marker, heapRule)

	r := Attach(o)
	require.Equal(t, Attached, r.Result, r.Message)
	assert.True(t, r.Serving, r.Message)
	require.NotNil(t, r.JVM)
	assert.Equal(t, j.PID, r.JVM.PID)
	assert.Equal(t, "App", r.JVM.Main)
	assert.True(t, strings.HasPrefix(r.JVM.JavaVersion, "17"), r.JVM.JavaVersion)
	assert.Empty(t, r.Warning, "JDK 17 does not warn about dynamic agents")
	// The rule renamed the heap metric and lowercaseOutputName lowered it:
	// the configuration reached the agent as written.
	assert.Regexp(t, `(?m)^jvm_heap_used_bytes [0-9.E]+$`, metrics(t, o.Port))
	assert.Contains(t, metrics(t, o.Port), "# HELP jvm_heap_used_bytes Heap memory used by the JVM.")

	again := Attach(o)
	assert.Equal(t, AlreadyAttached, again.Result, again.Message)
	assert.True(t, again.Serving)
	assert.False(t, j.Exited(), "a second attach must not load the agent again: %s", j.Log.String())
	assert.Equal(t, 1, strings.Count(j.Log.String(), "stand-in agent serving"), j.Log.String())

	// Without the marker (state lost), the open agent jar still gives it away.
	o.StateDir = t.TempDir()
	lost := Attach(o)
	assert.Equal(t, Failed, lost.Result)
	assert.Equal(t, ReasonAgentConfigured, lost.Reason, lost.Message)
	assert.False(t, j.Exited())
}

func TestStandInAgentExitsTheJVMWhenItCannotBind(t *testing.T) {
	// Why the helper checks the port first: loaded anyway, the agent (like
	// the real one) calls System.exit(1) and the application is gone.
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), nil, marker)
	o := options(t, marker, heapRule)
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", o.Port))
	require.NoError(t, err)
	defer l.Close()

	_, ok := startAttachListener(j.PID)
	require.True(t, ok)
	r := loadAgent(j.PID, o.Agent, fmt.Sprintf("%d:%s", o.Port, o.Config))
	assert.NotEqual(t, Attached, r.Result)
	j.WaitExitSaying(t, "stand-in agent failed to start")
}

func TestAttachChecksPortAndConfigBeforeLoading(t *testing.T) {
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), nil, marker)

	o := options(t, marker, heapRule)
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", o.Port))
	require.NoError(t, err)
	r := Attach(o)
	require.NoError(t, l.Close())
	assert.Equal(t, Failed, r.Result)
	assert.Equal(t, ReasonPortInUse, r.Reason, r.Message)
	assert.True(t, r.Retry)

	bad := options(t, marker, "rules:\n  pattern: not-a-list\n")
	r = Attach(bad)
	assert.Equal(t, ReasonInvalidConfig, r.Reason, r.Message)
	assert.Contains(t, r.Message, "rules is a Map, not a list")

	assert.False(t, j.Exited(), j.Log.String())
	assert.NotContains(t, j.Log.String(), "stand-in agent")

	// Both fixed: the attach goes ahead.
	r = Attach(options(t, marker, heapRule))
	assert.Equal(t, Attached, r.Result, r.Message)
}

func TestAttachNeverRetriesAnUnknownOutcome(t *testing.T) {
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), nil, marker)
	o := options(t, marker, heapRule)
	jvms, err := Discover(marker)
	require.NoError(t, err)
	require.Len(t, jvms, 1)
	// An earlier helper sent the load command and never heard back.
	require.NoError(t, writeMarker(filepath.Join(o.StateDir, fmt.Sprintf("loaded-%d-%d", j.PID, jvms[0].StartTime)), "Loading"))

	r := Attach(o)
	assert.Equal(t, Unknown, r.Result)
	assert.Contains(t, r.Message, "not tried again until the container restarts")
	assert.NotContains(t, j.Log.String(), "stand-in agent")
}

func TestDiscoverReportsZeroAndSeveralJVMs(t *testing.T) {
	marker := jvmtest.Marker(t)
	none := Attach(options(t, marker, heapRule))
	assert.Equal(t, ReasonNoJVM, none.Reason)
	assert.True(t, none.Retry)

	a := jvmtest.Start(t, t.TempDir(), nil, marker, "one")
	b := jvmtest.Start(t, t.TempDir(), nil, marker, "two")
	two := Attach(options(t, marker, heapRule))
	assert.Equal(t, ReasonAmbiguousJVM, two.Reason)
	assert.Contains(t, two.Message, "set spec.jvmMatch")
	require.Len(t, two.JVMs, 2)
	assert.ElementsMatch(t, []int{a.PID, b.PID}, []int{two.JVMs[0].PID, two.JVMs[1].PID})

	// jvmMatch picks one; the extra match from the environment narrows too.
	t.Setenv(MatchEnv, marker+" two")
	one := Attach(options(t, "", heapRule))
	assert.Equal(t, Attached, one.Result, one.Message)
	assert.Equal(t, b.PID, one.JVM.PID)
}

func TestAttachDisabledIsReportedWithoutSignallingTheJVM(t *testing.T) {
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), []string{"-XX:+DisableAttachMechanism"}, marker)
	r := Attach(options(t, marker, heapRule))
	assert.Equal(t, ReasonAttachDisabled, r.Reason, r.Message)
	assert.False(t, r.Retry)
	time.Sleep(200 * time.Millisecond)
	assert.NotContains(t, j.Log.String(), "Full thread dump", "SIGQUIT was sent")
}

func TestParseLoadReply(t *testing.T) {
	for reply, want := range map[string]string{
		"0\nreturn code: 0\n": Attached,
		"0\n0\n":              Attached, // JDK 8
		"0\nreturn code: -1\njava.lang.reflect.InvocationTargetException\n": ReasonAgentFailed,
		"101\n": ReasonAttachRefused,
		"":      ReasonNoResponse,
		"0\n":   ReasonNoResponse,
	} {
		r := parseLoadReply(1, reply)
		got := r.Result
		if got != Attached {
			got = r.Reason
		}
		assert.Equal(t, want, got, "%q", reply)
	}
}

func TestMainOf(t *testing.T) {
	assert.Equal(t, "com.example.Main", mainOf(strings.Fields("-Xmx1g -cp a.jar:b.jar -Dpassword=secret com.example.Main --flag")))
	assert.Equal(t, "/app/app.jar", mainOf(strings.Fields("-XX:+UseG1GC -jar /app/app.jar")))
	assert.Equal(t, "my.module/my.Main", mainOf(strings.Fields("--module-path mods -m my.module/my.Main")))
	assert.Equal(t, 21, javaMajor("21.0.2"))
	assert.Equal(t, 8, javaMajor("1.8.0_392"))
	assert.Equal(t, 0, javaMajor(""))
}

func TestDynamicAgentWarningFromJDK21(t *testing.T) {
	assert.Empty(t, dynamicAgentWarning(JVM{JavaVersion: "17.0.15"}))
	assert.Contains(t, dynamicAgentWarning(JVM{JavaVersion: "21.0.2"}), "-XX:+EnableDynamicAgentLoading")
	assert.Empty(t, dynamicAgentWarning(JVM{JavaVersion: "21.0.2", DynamicAgentsAllowed: true}))
}

// A PID named in hsperfdata is not a JVM by that alone: a JVM killed
// leaves its file, and its PID goes to a later process. One that catches
// SIGQUIT (here a shell that traps it; a PostgreSQL backend is another,
// and SIGQUIT ends it) is not found, so never signalled: the file is
// older than the process. A file written since the process started still
// counts (a JVM whose launcher is not called java).
func TestAStaleHsperfdataFileDoesNotMakeAProcessAJVM(t *testing.T) {
	marker := jvmtest.Marker(t)
	quits := filepath.Join(t.TempDir(), "quits")
	cmd := exec.Command("sh", "-c", `trap 'echo quit >>"$1"' QUIT; while :; do sleep 0.1; done`, marker, quits)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	me, err := user.Current()
	require.NoError(t, err)
	dir := filepath.Join("/tmp", "hsperfdata_"+me.Username)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	stale := filepath.Join(dir, strconv.Itoa(cmd.Process.Pid))
	require.NoError(t, os.WriteFile(stale, make([]byte, 32<<10), 0o600))
	t.Cleanup(func() { _ = os.Remove(stale) })
	// The shell has installed its handler once SigCgt says so.
	require.Eventually(t, func() bool {
		caught, err := catchesSIGQUIT(cmd.Process.Pid)
		return err == nil && caught
	}, 10*time.Second, 20*time.Millisecond)

	// A file written since the process started is taken for its own: how
	// a JVM whose launcher is not called java is found.
	jvms, err := Discover(marker)
	require.NoError(t, err)
	require.Len(t, jvms, 1, "a process with a file of its own in hsperfdata")
	assert.Equal(t, cmd.Process.Pid, jvms[0].PID)

	// Last written by its JVM before it died, a minute before the shell
	// was given its PID.
	old := time.Now().Add(-time.Minute)
	require.NoError(t, os.Chtimes(stale, old, old))
	jvms, err = Discover(marker)
	require.NoError(t, err)
	assert.Empty(t, jvms, "a shell whose PID a dead JVM's hsperfdata file names")
	r := Attach(options(t, marker, heapRule))
	assert.Equal(t, ReasonNoJVM, r.Reason, r.Message)
	time.Sleep(300 * time.Millisecond)
	_, err = os.Stat(quits)
	assert.True(t, os.IsNotExist(err), "the shell was sent SIGQUIT")
}
