package instance

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SuperviseConfig is what Supervise runs and watches.
type SuperviseConfig struct {
	// Command is the server's entrypoint and its arguments.
	Command []string
	// FenceMarker is the fence marker's path (FenceMarker beside PGDATA).
	FenceMarker string
	// StateDir holds FencedServerRecord (the server's DECKHAND_ROLE_DIR).
	StateDir string
	// RestartPause is the wait between a fenced end and the next start
	// (an entrypoint that failed at once is not started in a tight loop).
	RestartPause time.Duration
	// Log gets one line per start and end (the container's log).
	Log io.Writer
}

// FencedServerRecord is the file, in the directory the server's container
// shares with the agent (RoleDirEnv), where the agent writes the PID of a
// postmaster it stops for a fence (Agent.stop).
const FencedServerRecord = "deckhand-fenced-server"

// FencedRestartEnv is set (to 1) in the environment of an entrypoint
// Supervise started again after a fence.
const FencedRestartEnv = "DECKHAND_FENCED_RESTART"

// SupervisedSignals are the signals Supervise passes on to the entrypoint:
// those the kubelet and a person send a container's main process.
var SupervisedSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}

// Supervise runs the server's entrypoint as its child, passing on the
// signals it receives, and returns the child's exit code once the child
// ends on its own or after a stopping signal.
//
// A child whose server the agent fenced (a switchover, a failover, its
// own guard) is started again when it ends, and the entrypoint waits on
// the marker while it is there. Fenced means the marker is in place, or
// the agent recorded the child as the server it stopped
// (FencedServerRecord: a hung server's fence may be lifted before its
// SIGKILLed processes run again and die). So a demoted server's container
// never ends, and the kubelet's restart back-off, which grows with every
// end of a container up to five minutes, never delays a rejoin. A crash
// without a fence still ends the container, as before.
//
// The process is made non-dumpable first: its environment holds the
// Secrets' passwords for as long as the container runs, and the pod's
// other containers share its process namespace and its user, so they
// could read /proc/<pid>/environ otherwise. The entrypoint's own process
// is dumpable again (an exec resets it), as it was without a supervisor;
// it unsets the passwords before the server starts.
func Supervise(cfg SuperviseConfig, signals <-chan os.Signal) (int, error) {
	if len(cfg.Command) == 0 {
		return 0, errors.New("no command to supervise")
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("making the supervisor non-dumpable: %w", err)
	}
	stopping, again := false, false
	for {
		code, run, err := runOnce(cfg, signals, again)
		if err != nil {
			return 0, err
		}
		stopping = stopping || run.stopped
		if stopping || !exists(cfg.FenceMarker) && !recordedFenced(cfg.StateDir, run.pid) {
			return code, nil
		}
		supervisorLog(cfg.Log, "the server's entrypoint ended (exit %d) after the server was fenced (%s): starting it again in %s; it waits while the fence is in place", code, cfg.FenceMarker, cfg.RestartPause)
		if waitOrStop(cfg.RestartPause, signals) {
			return code, nil
		}
		again = true
	}
}

// runEnd says how a run of the entrypoint ended: pid was its process
// (the postmaster, once bootstrap.sh has exec'd it); stopped, a stopping
// signal came.
type runEnd struct {
	pid     int
	stopped bool
}

// runOnce runs the entrypoint to its end and passes signals on meanwhile.
func runOnce(cfg SuperviseConfig, signals <-chan os.Signal, again bool) (code int, end runEnd, err error) {
	// A record of an earlier run's server: a new postmaster may be given
	// its PID again.
	if cfg.StateDir != "" {
		_ = os.Remove(filepath.Join(cfg.StateDir, FencedServerRecord))
	}
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	if again {
		// The entrypoint records the start after the fence for the
		// liveness probe (bootstrap.sh, probe.sh restarted_recently).
		cmd.Env = append(os.Environ(), FencedRestartEnv+"=1")
	}
	if err := cmd.Start(); err != nil {
		return 0, end, fmt.Errorf("starting %s: %w", cfg.Command[0], err)
	}
	end.pid = cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-signals:
			end.stopped = end.stopped || stops(sig)
			_ = cmd.Process.Signal(sig)
		case <-done:
			return exitCode(cmd.ProcessState), end, nil
		}
	}
}

// recordedFenced: the agent recorded pid as the server it fenced.
func recordedFenced(dir string, pid int) bool {
	if dir == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, FencedServerRecord))
	return err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid)
}

// waitOrStop waits d, and says whether a stopping signal came meanwhile.
func waitOrStop(d time.Duration, signals <-chan os.Signal) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case sig := <-signals:
			if stops(sig) {
				return true
			}
		case <-timer.C:
			return false
		}
	}
}

// stops: the signal ends a container (the kubelet's SIGTERM, a person's
// SIGINT or SIGQUIT); SIGHUP and the user signals only reach the server.
func stops(sig os.Signal) bool {
	return sig == syscall.SIGTERM || sig == syscall.SIGINT || sig == syscall.SIGQUIT
}

// exitCode is the child's code as a shell reports it: 128 + the signal
// that ended it.
func exitCode(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// supervisorLog writes a line as the scripts' log does: "<UTC time>
// supervise: ...".
func supervisorLog(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "%s supervise: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
	}
}
