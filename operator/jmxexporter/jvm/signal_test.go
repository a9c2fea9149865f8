package jvm

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

// A JVM started with -Xrs (or -XX:+ReduceSignalUsage) never installs a
// SIGQUIT handler: the signal's default action ends it. HotSpot opens its
// attach socket at start then (AttachListener::init_at_startup), so the
// helper only signals it once that socket is gone, which a /tmp cleaner
// (systemd-tmpfiles, tmpwatch) does to long-running JVMs. The helper must
// see from SigCgt that SIGQUIT is not caught and leave the JVM alone.
func TestAttachNeverSignalsAJVMThatDoesNotCatchSIGQUIT(t *testing.T) {
	for _, flag := range []string{"-Xrs", "-XX:+ReduceSignalUsage"} {
		t.Run(flag, func(t *testing.T) {
			marker := jvmtest.Marker(t)
			j := jvmtest.Start(t, t.TempDir(), []string{flag}, marker)
			// The /tmp cleaner's work, once HotSpot has made the socket:
			// it does so at start with this flag, but on a busy machine
			// after the app is already up.
			require.Eventually(t, func() bool {
				_, err := os.Stat(socketPath(j.PID))
				return err == nil
			}, 30*time.Second, 20*time.Millisecond, "HotSpot never opened its attach socket %s", socketPath(j.PID))
			require.NoError(t, os.Remove(socketPath(j.PID)))
			r := Attach(options(t, marker, heapRule))
			assert.Equal(t, Failed, r.Result, r.Message)
			assert.Equal(t, ReasonSignalNotHandled, r.Reason, r.Message)
			assert.False(t, r.Retry, "retrying cannot help: the JVM never handles SIGQUIT")
			assert.Contains(t, r.Message, flag)
			time.Sleep(300 * time.Millisecond)
			assert.False(t, j.Exited(), "the JVM was killed: %s", j.Log.String())
			assert.NotContains(t, j.Log.String(), "stand-in agent")
		})
	}
}

func TestCatchesSIGQUITReadsSigCgt(t *testing.T) {
	proc := t.TempDir()
	old := Proc
	Proc = proc
	t.Cleanup(func() { Proc = old })
	write := func(pid int, sigcgt string) {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tjava\nSigIgn:\t0000000000000000\nSigCgt:\t"+sigcgt+"\n"), 0o644))
	}
	write(1, "2000000181005ccf") // a JDK 17 JVM's handlers: bit 2 (SIGQUIT) set
	write(2, "2000000181005cc8") // the same with -Xrs: SIGQUIT not caught
	write(3, "0000000000000004")
	caught, err := catchesSIGQUIT(1)
	require.NoError(t, err)
	assert.True(t, caught)
	caught, err = catchesSIGQUIT(2)
	require.NoError(t, err)
	assert.False(t, caught)
	caught, _ = catchesSIGQUIT(3)
	assert.True(t, caught)
	_, err = catchesSIGQUIT(4)
	assert.Error(t, err)
}
