package jvm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hotspotTmp is where HotSpot keeps its attach socket and hsperfdata on
// Linux, whatever java.io.tmpdir says.
const hotspotTmp = "/tmp"

// Timeouts of the attach protocol. A JVM answers SIGQUIT within
// milliseconds unless it is stuck in a long safepoint; the agent's
// agentmain runs while we wait for the load reply.
var (
	SocketWait  = 10 * time.Second
	ReplyWait   = 60 * time.Second
	maxReplyLen = 64 << 10
)

// socketPath is the JVM's attach socket, seen through its own root so it
// is found even from another mount namespace.
func socketPath(pid int) string {
	name := ".java_pid" + strconv.Itoa(pid)
	root := filepath.Join(Proc, strconv.Itoa(pid), "root", hotspotTmp)
	if _, err := os.Stat(root); err == nil {
		return filepath.Join(root, name)
	}
	return filepath.Join(hotspotTmp, name)
}

// startAttachListener makes the JVM open its attach socket, the way the
// JDK's own tools do: an .attach_pid<pid> file in its working directory
// (or /tmp), then SIGQUIT. No signal is sent when the file cannot be made:
// without it, SIGQUIT would only print a thread dump.
func startAttachListener(pid int) (Result, bool) {
	sock := socketPath(pid)
	if isSocket(sock) {
		return Result{}, true
	}
	name := ".attach_pid" + strconv.Itoa(pid)
	var trigger string
	var lastErr error
	for _, dir := range []string{filepath.Join(Proc, strconv.Itoa(pid), "cwd"), filepath.Join(Proc, strconv.Itoa(pid), "root", hotspotTmp), hotspotTmp} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			f.Close()
			trigger = filepath.Join(dir, name)
			break
		}
		lastErr = err
	}
	if trigger == "" {
		return fileFailure("creating the attach trigger file "+name, lastErr), false
	}
	defer os.Remove(trigger)
	if r, ok := awaitSIGQUITHandler(pid); !ok {
		return r, false
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return failed(ReasonDifferentUser, fmt.Sprintf("not allowed to signal JVM %d: it runs as another user; run the container's main process and exec as the same user", pid), false), false
		}
		return failed(ReasonNoJVM, fmt.Sprintf("JVM %d is gone: %v", pid, err), true), false
	}
	deadline := time.Now().Add(SocketWait)
	for delay := 20 * time.Millisecond; time.Now().Before(deadline); delay = min(delay*2, 500*time.Millisecond) {
		time.Sleep(delay)
		if isSocket(sock) {
			return Result{}, true
		}
	}
	return failed(ReasonAttachTimeout, fmt.Sprintf("JVM %d did not open its attach socket %s within %s after SIGQUIT "+
		"(attach disabled by -XX:+DisableAttachMechanism, a JVM that is not HotSpot, or /tmp not shared with the JVM)", pid, sock, SocketWait), true), false
}

// removeStaleSocket removes an attach socket that cannot be JVM j's:
// HotSpot makes its socket after the JVM starts and owned by the JVM's
// user, so one older than the JVM, or another user's, was left by a dead
// process that had the same PID (killed before it could remove it: a
// container restarted with /tmp on an emptyDir, where the JVM is PID 1
// again, or PIDs that wrapped). Taken for the JVM's, it refuses the
// connection or, another user's, denies it. It runs as the helper's own
// user: removing another user's file from the sticky /tmp needs root's
// CAP_FOWNER. A zero Result means no stale socket is in the way.
func removeStaleSocket(j JVM) Result {
	sock := socketPath(j.PID)
	st, err := os.Stat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return Result{}
	}
	owner := -1
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		owner = int(sys.Uid)
	}
	if owner == j.UID && writtenSinceStart(j.PID, st.ModTime()) {
		return Result{}
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return failed(ReasonAttachError, fmt.Sprintf("the attach socket %s (owned by uid %d, made %s) was left by an earlier process with PID %d, not JVM %d, and cannot be removed: %v; remove it, then try again",
			sock, owner, st.ModTime().UTC().Format(time.RFC3339), j.PID, j.PID, err), false)
	}
	return Result{}
}

func isSocket(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&os.ModeSocket != 0
}

// fileFailure names the file system problem users can act on.
func fileFailure(what string, err error) Result {
	switch {
	case errors.Is(err, syscall.EROFS):
		return failed(ReasonReadOnlyFS, what+": read-only file system; mount a writable emptyDir at /tmp", false)
	case errors.Is(err, syscall.ENOSPC):
		return failed(ReasonNoSpace, what+": no space left on device", true)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return failed(ReasonDifferentUser, what+": permission denied; the exec runs as another user than the JVM", false)
	}
	return failed(ReasonAttachError, fmt.Sprintf("%s: %v", what, err), true)
}

// loadAgent sends `load instrument false <jar>=<options>` on the JVM's
// attach socket (protocol version 1) and reads the reply. Once the
// command is written, any failure is Unknown: the agent may be loaded.
func loadAgent(pid int, jar, options string) Result {
	conn, err := net.DialTimeout("unix", socketPath(pid), 5*time.Second)
	if err != nil {
		if errors.Is(err, syscall.EACCES) {
			return failed(ReasonDifferentUser, fmt.Sprintf("connecting to JVM %d's attach socket: permission denied; the exec runs as another user than the JVM", pid), false)
		}
		return failed(ReasonAttachError, fmt.Sprintf("connecting to JVM %d's attach socket: %v", pid, err), true)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(ReplyWait))
	request := strings.Join([]string{"1", "load", "instrument", "false", jar + "=" + options}, "\x00") + "\x00"
	if _, err := io.WriteString(conn, request); err != nil {
		return Result{Result: Unknown, Reason: ReasonNoResponse, Message: fmt.Sprintf("sending the load command to JVM %d: %v", pid, err)}
	}
	reply, err := io.ReadAll(io.LimitReader(conn, int64(maxReplyLen)))
	if err != nil && len(reply) == 0 {
		return Result{Result: Unknown, Reason: ReasonNoResponse, Message: fmt.Sprintf("JVM %d did not answer the load command: %v", pid, err)}
	}
	return parseLoadReply(pid, string(reply))
}

// parseLoadReply reads HotSpot's answer: the command's status ("0"), then
// the agent's Agent_OnAttach result ("return code: 0" since JDK 9's
// format change, a bare "0" before).
func parseLoadReply(pid int, reply string) Result {
	s := bufio.NewScanner(strings.NewReader(reply))
	var lines []string
	for s.Scan() {
		lines = append(lines, strings.TrimSpace(s.Text()))
	}
	if len(lines) == 0 {
		return Result{Result: Unknown, Reason: ReasonNoResponse, Message: fmt.Sprintf("JVM %d closed the attach connection without an answer", pid)}
	}
	if lines[0] != "0" {
		return failed(ReasonAttachRefused, fmt.Sprintf("JVM %d refused the load command: %s", pid, strings.Join(lines, " ")), false)
	}
	if len(lines) < 2 {
		return Result{Result: Unknown, Reason: ReasonNoResponse, Message: fmt.Sprintf("JVM %d accepted the load command but sent no agent result", pid)}
	}
	code := strings.TrimPrefix(lines[1], "return code: ")
	if code == "0" {
		return Result{Result: Attached}
	}
	// The jar is on the JVM's class path now; loading it again is not safe.
	return failed(ReasonAgentFailed, fmt.Sprintf("the agent failed to start in JVM %d (Agent_OnAttach returned %s): %s", pid, code, strings.Join(lines[2:], " ")), false)
}

// SignalWait bounds the wait for a starting JVM to install its SIGQUIT
// handler.
var SignalWait = 10 * time.Second

// awaitSIGQUITHandler makes sure SIGQUIT reaches a handler: a JVM that
// does not catch it (started with -Xrs or -XX:+ReduceSignalUsage, or not
// yet done starting) is ended by it. The JDK's own attach client checks
// the same SigCgt bit since JDK 24. It waits, bounded, for a JVM still
// starting; one that never catches SIGQUIT is reported, never signalled.
func awaitSIGQUITHandler(pid int) (Result, bool) {
	if flag := signalFlag(pid); flag != "" {
		if caught, err := catchesSIGQUIT(pid); err == nil && !caught {
			return failed(ReasonSignalNotHandled, fmt.Sprintf("JVM %d was started with %s, so SIGQUIT would end it, and its attach socket (opened at start with that flag) is gone, "+
				"usually removed by a /tmp cleaner; not signalled. Restart the container and keep /tmp/.java_pid* files from being cleaned, or add the agent with -javaagent at start", pid, flag), false), false
		}
	}
	deadline := time.Now().Add(SignalWait)
	for delay := 20 * time.Millisecond; ; delay = min(delay*2, 500*time.Millisecond) {
		caught, err := catchesSIGQUIT(pid)
		switch {
		case err != nil:
			return failed(ReasonNoJVM, fmt.Sprintf("reading JVM %d's signal handlers: %v; not signalled", pid, err), true), false
		case caught:
			return Result{}, true
		case time.Now().After(deadline):
			return failed(ReasonSignalNotHandled, fmt.Sprintf("JVM %d did not install its SIGQUIT handler within %s (still starting?); not signalled, since SIGQUIT would end it; tried again later", pid, SignalWait), true), false
		}
		time.Sleep(delay)
	}
}

// catchesSIGQUIT reads bit SIGQUIT-1 of the SigCgt mask in
// /proc/<pid>/status (readable by anyone).
func catchesSIGQUIT(pid int) (bool, error) {
	f, err := os.Open(filepath.Join(Proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return false, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if hexMask, ok := strings.CutPrefix(s.Text(), "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hexMask), 16, 64)
			if err != nil {
				return false, fmt.Errorf("SigCgt %q: %w", hexMask, err)
			}
			return mask&(1<<(uint(syscall.SIGQUIT)-1)) != 0, nil
		}
	}
	return false, fmt.Errorf("no SigCgt line in /proc/%d/status", pid)
}

// signalFlag is the option that keeps the JVM from handling SIGQUIT,
// "" when none (or the command line cannot be read).
func signalFlag(pid int) string {
	p, ok := readProcess(pid)
	if !ok {
		return ""
	}
	flag := ""
	for _, o := range vmOptions(p) {
		switch o {
		case "-Xrs", "-XX:+ReduceSignalUsage":
			flag = o
		case "-XX:-ReduceSignalUsage":
			flag = ""
		}
	}
	return flag
}
