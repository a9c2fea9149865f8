package jvm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// AttachOptions say which JVM gets which agent.
type AttachOptions struct {
	// Match is spec.jvmMatch: a substring of the JVM's command line.
	Match string
	// Agent is the agent jar's path, Config the exporter configuration's.
	Agent, Config string
	// Port the agent serves on, Path its metrics path (for the check).
	Port int
	Path string
	// StateDir keeps one marker per JVM the helper sent a load command to,
	// so nothing is loaded twice into one JVM, even when the controller
	// lost track.
	StateDir string
}

// Attach finds the one JVM to attach to, checks that the agent can start
// there, loads it, and checks that metrics answer.
func Attach(o AttachOptions) Result {
	jvms, err := Discover(o.Match)
	if err != nil {
		return failed(ReasonAttachError, err.Error(), true)
	}
	switch len(jvms) {
	case 0:
		return failed(ReasonNoJVM, "no Java process found"+matchNote(o.Match), true)
	case 1:
	default:
		r := failed(ReasonAmbiguousJVM, fmt.Sprintf("%d Java processes found%s (PIDs %s); one port serves one agent: set spec.jvmMatch to a part of the command line of the one to attach to",
			len(jvms), matchNote(o.Match), pids(jvms)), true)
		r.JVMs = jvms
		return r
	}
	j := jvms[0]
	r := attachTo(j, o)
	r.JVM = &j
	return r
}

func attachTo(j JVM, o AttachOptions) Result {
	marker := filepath.Join(o.StateDir, fmt.Sprintf("loaded-%d-%d", j.PID, j.StartTime))
	if earlier, err := os.ReadFile(marker); err == nil {
		if strings.TrimSpace(string(earlier)) == Attached {
			return withServing(Result{Result: AlreadyAttached, Message: fmt.Sprintf("the agent was loaded into JVM %d earlier", j.PID)}, o)
		}
		return Result{Result: Unknown, Reason: ReasonNoResponse, Message: fmt.Sprintf("an earlier load into JVM %d has an unknown outcome (%s); it is not tried again until the container restarts", j.PID, strings.TrimSpace(string(earlier)))}
	}
	if j.AttachDisabled {
		return failed(ReasonAttachDisabled, fmt.Sprintf("JVM %d was started with -XX:+DisableAttachMechanism: agents cannot be attached; add the agent with -javaagent at start instead", j.PID), false)
	}
	if me, gid := os.Geteuid(), os.Getegid(); me != 0 && (me != j.UID || gid != j.GID) {
		return failed(ReasonDifferentUser, fmt.Sprintf("JVM %d runs as uid %d gid %d, the exec as uid %d gid %d: HotSpot only accepts attaches from its own user and group, or root", j.PID, j.UID, j.GID, me, gid), false)
	}
	if r := removeStaleSocket(j); r.Result != "" {
		return r
	}
	// The checks and the attach run as the JVM's user: what it can read
	// and bind is what the agent will be able to.
	if r := asJVMUser(j, func() Result { return prepare(j, o) }); r.Result != "" {
		return r
	}
	// From here on the load may happen: the marker goes first, so a crash
	// or timeout is never followed by a second load.
	if err := writeMarker(marker, "Loading"); err != nil {
		return fileFailure("writing the marker "+marker, err)
	}
	r := asJVMUser(j, func() Result { return loadAgent(j.PID, o.Agent, strconv.Itoa(o.Port)+":"+o.Config) })
	if r.Result != Attached && !alive(j) {
		r = failed(ReasonJVMExited, fmt.Sprintf("JVM %d exited while the agent was loading (the agent exits the JVM when it cannot start); %s", j.PID, r.Message), false)
	}
	_ = os.WriteFile(marker, []byte(r.Result+"\n"), 0o600)
	if r.Result != Attached {
		return r
	}
	r.Warning = dynamicAgentWarning(j)
	return withServing(r, o)
}

// prepare checks, as the JVM's user, that the agent can start and is not
// there yet, and opens the JVM's attach socket. A zero Result means ready.
func prepare(j JVM, o AttachOptions) Result {
	if r := agentHolder(j.PID, o.Agent); r != nil {
		return *r
	}
	if r := CheckConfig(o.Config); r != nil {
		return *r
	}
	if r := CheckPort(o.Port); r != nil {
		return *r
	}
	if r, ok := startAttachListener(j.PID); !ok {
		return r
	}
	if r := exporterInJVM(j.PID, o.Agent); r != nil {
		return *r
	}
	return Result{}
}

func withServing(r Result, o AttachOptions) Result {
	v := Verify(o.Port, o.Path, VerifyWait)
	r.Serving = v.Result == Serving
	if !r.Serving {
		r.Message = strings.TrimSpace(r.Message + " " + v.Message)
	}
	return r
}

func writeMarker(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, content+"\n")
	return errors.Join(err, f.Close())
}

// agentHolder refuses a JVM that already has an exporter: our jar open
// (loaded by an earlier helper whose marker is gone), or a -javaagent with
// jmx_prometheus in its name in its options. When what would prove that
// no exporter is there cannot be read, it refuses too: a second exporter
// exits the JVM.
func agentHolder(pid int, agent string) *Result {
	refuse := func(holder string) *Result {
		r := failed(ReasonAgentConfigured, fmt.Sprintf("JVM %d already runs %s; not loading a second exporter (the agent exits the JVM when loaded twice)", pid, holder), false)
		return &r
	}
	dir := filepath.Join(Proc, strconv.Itoa(pid))
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return notInspectable(pid, "fd", err)
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && target == agent {
			return refuse("the agent " + agent)
		}
	}
	p, ok := readProcess(pid)
	if !ok {
		r := failed(ReasonNoJVM, fmt.Sprintf("JVM %d is gone", pid), true)
		return &r
	}
	if p.envErr != nil {
		return notInspectable(pid, "environ", p.envErr)
	}
	for _, o := range vmOptions(p) {
		if strings.HasPrefix(o, "-javaagent:") && strings.Contains(o, "jmx_prometheus") {
			return refuse("the JMX exporter agent from its options (-javaagent)")
		}
	}
	return nil
}

// notInspectable reports a JVM whose /proc entry cannot be read: nothing
// proves that no exporter is loaded, so nothing is loaded.
func notInspectable(pid int, entry string, err error) *Result {
	r := failed(ReasonNotInspectable, fmt.Sprintf("cannot read /proc/%d/%s (%v), so it cannot be ruled out that JVM %d already has an exporter (a second one exits the JVM); not attaching. "+
		"Run the exec as the JVM's user, or as root with CAP_SETUID and CAP_SETGID (a container's root has them by default)", pid, entry, err, pid), false)
	return &r
}

// alive says whether the JVM still runs (same PID, same start time).
func alive(j JVM) bool {
	start, ok := startTime(j.PID)
	return ok && start == j.StartTime
}

// dynamicAgentWarning: JDK 21+ prints a warning for each agent loaded into
// a running JVM (JEP 451), and a later JDK will refuse them by default.
func dynamicAgentWarning(j JVM) string {
	if javaMajor(j.JavaVersion) < 21 || j.DynamicAgentsAllowed {
		return ""
	}
	return fmt.Sprintf("JDK %s printed a warning that an agent was loaded dynamically (JEP 451); future JDKs refuse this unless the JVM runs with -XX:+EnableDynamicAgentLoading", j.JavaVersion)
}

func matchNote(match string) string {
	extra := os.Getenv(MatchEnv)
	switch {
	case match != "" && extra != "":
		return fmt.Sprintf(" whose command line contains %q and %q", match, extra)
	case match != "":
		return fmt.Sprintf(" whose command line contains %q", match)
	case extra != "":
		return fmt.Sprintf(" whose command line contains %q", extra)
	}
	return ""
}

func pids(jvms []JVM) string {
	s := make([]string, len(jvms))
	for i, j := range jvms {
		s[i] = strconv.Itoa(j.PID)
	}
	return strings.Join(s, ", ")
}

// Checksums are the SHA-256 of each file, "" for one that does not exist.
func Checksums(files []string) Result {
	sums := map[string]string{}
	for _, f := range files {
		sums[f] = fileSHA256(f)
	}
	return Result{Result: "Checksums", Checksums: sums}
}

func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}
