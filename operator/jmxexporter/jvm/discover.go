package jvm

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/deckhand-dev/deckhand/internal/procfs"
)

// Proc is the /proc file system to read; tests never change it, but a
// helper run in a container with a non-standard mount could.
var Proc = "/proc"

// MatchEnv, set in the container's environment, is a second substring the
// JVM's command line must contain (on top of spec.jvmMatch). Containers
// never need it: it lets the tests, whose fake pods all exec on one host,
// keep each pod to its own JVMs.
const MatchEnv = "DECKHAND_JMX_MATCH"

// process is what /proc tells about one process.
type process struct {
	pid  int
	args []string
	exe  string
	env  map[string]string
	// envErr says why the environment could not be read (another user's
	// process without CAP_SYS_PTRACE).
	envErr error
}

// Discover lists the JVMs whose command line contains match (and the
// MatchEnv substring, when set), sorted by PID. Processes that vanish
// while being read are skipped.
func Discover(match string) ([]JVM, error) {
	entries, err := os.ReadDir(Proc)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", Proc, err)
	}
	perfPIDs := hsperfdataPIDs()
	extra := os.Getenv(MatchEnv)
	self := os.Getpid()
	var jvms []JVM
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		p, ok := readProcess(pid)
		if !ok {
			continue
		}
		if written, listed := perfPIDs[pid]; !isJava(p) && !(listed && writtenSinceStart(pid, written)) {
			continue
		}
		line := strings.Join(p.args, " ")
		if !strings.Contains(line, match) || !strings.Contains(line, extra) {
			continue
		}
		j, ok := describe(p)
		if ok {
			jvms = append(jvms, j)
		}
	}
	sort.Slice(jvms, func(a, b int) bool { return jvms[a].PID < jvms[b].PID })
	return jvms, nil
}

// hsperfdataPIDs are the PIDs of JVMs that publish performance data
// (/tmp/hsperfdata_<user>/<pid>), with when each file was last written:
// every HotSpot JVM unless started with -XX:-UsePerfData, whatever its
// launcher is called. A JVM killed leaves its file behind, and its PID
// goes to some later process: writtenSinceStart tells them apart.
func hsperfdataPIDs() map[int]time.Time {
	pids := map[int]time.Time{}
	files, _ := filepath.Glob(filepath.Join(hotspotTmp, "hsperfdata_*", "*"))
	for _, f := range files {
		pid, err := strconv.Atoi(filepath.Base(f))
		if err != nil {
			continue
		}
		if fi, err := os.Stat(f); err == nil {
			pids[pid] = fi.ModTime()
		}
	}
	return pids
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's start time: 100
// on every Linux architecture Go builds for.
const clockTicks = 100

// writtenSinceStart: a file of process pid's (its hsperfdata file, its
// attach socket) was written since the process started. HotSpot makes
// both after it starts, so an older one is a dead JVM's whose PID this
// process was given later. Taken for a JVM, a process that catches
// SIGQUIT (a PostgreSQL backend, whose server then restarts) would be sent
// it. /proc/<pid>/maps would show libjvm.so, but a container's root,
// without CAP_SYS_PTRACE, cannot read another user's. The boot time is
// whole seconds, so a start is placed up to a second early: lenient to a
// JVM, never to a file a second older.
func writtenSinceStart(pid int, written time.Time) bool {
	ticks, ok := startTime(pid)
	if !ok {
		return false
	}
	boot, ok := bootTime()
	if !ok {
		return false
	}
	started := boot.Add(time.Duration(ticks) * time.Second / clockTicks)
	return !written.Before(started)
}

// bootTime is /proc/stat's btime.
func bootTime() (time.Time, bool) {
	raw, err := os.ReadFile(filepath.Join(Proc, "stat"))
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Unix(secs, 0), err == nil
		}
	}
	return time.Time{}, false
}

func readProcess(pid int) (process, bool) {
	dir := filepath.Join(Proc, strconv.Itoa(pid))
	raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil || len(raw) == 0 {
		return process{}, false // gone, or a kernel thread
	}
	p := process{pid: pid, args: strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")}
	p.exe, _ = os.Readlink(filepath.Join(dir, "exe"))
	env, err := os.ReadFile(filepath.Join(dir, "environ"))
	p.envErr = err
	if err == nil {
		p.env = map[string]string{}
		for _, kv := range strings.Split(string(env), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				p.env[k] = v
			}
		}
	}
	return p, true
}

func isJava(p process) bool {
	return filepath.Base(p.exe) == "java" || filepath.Base(p.args[0]) == "java"
}

// describe reads what the attach needs to know about a JVM.
func describe(p process) (JVM, bool) {
	start, ok := startTime(p.pid)
	if !ok {
		return JVM{}, false
	}
	uid, gid := effectiveIDs(p.pid)
	j := JVM{PID: p.pid, StartTime: start, UID: uid, GID: gid, Main: mainOf(p.args[1:])}
	if p.exe != "" {
		j.JavaVersion = javaVersion(filepath.Dir(filepath.Dir(p.exe)))
	}
	opts := vmOptions(p)
	j.AttachDisabled = lastFlag(opts, "DisableAttachMechanism")
	j.DynamicAgentsAllowed = lastFlag(opts, "EnableDynamicAgentLoading")
	return j, true
}

// startTime is field 22 of /proc/<pid>/stat, counted after the command
// name, which may itself contain spaces and parentheses.
func startTime(pid int) (uint64, bool) {
	fields, ok := procfs.StatFields(Proc, pid)
	if !ok || len(fields) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(fields[19], 10, 64)
	return v, err == nil
}

// effectiveIDs are the second values of the Uid: and Gid: lines of
// /proc/<pid>/status (readable by anyone), -1 when unreadable.
func effectiveIDs(pid int) (uid, gid int) {
	uid, gid = -1, -1
	f, err := os.Open(filepath.Join(Proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return uid, gid
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		key, rest, _ := strings.Cut(s.Text(), ":")
		fields := strings.Fields(rest)
		if len(fields) < 2 || (key != "Uid" && key != "Gid") {
			continue
		}
		if id, err := strconv.Atoi(fields[1]); err == nil {
			if key == "Uid" {
				uid = id
			} else {
				gid = id
			}
		}
	}
	return uid, gid
}

// optionsWithValue are java launcher options whose value is the next
// argument.
var optionsWithValue = map[string]bool{
	"-cp": true, "-classpath": true, "--class-path": true, "-p": true, "--module-path": true,
	"--upgrade-module-path": true, "--add-modules": true, "--add-opens": true, "--add-exports": true,
	"--add-reads": true, "--patch-module": true, "--limit-modules": true, "--enable-native-access": true,
}

// mainOf is the main class, "-jar <file>" or "-m <module>" of a java
// command line, without the options (which may carry secrets).
func mainOf(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case (a == "-jar" || a == "-m" || a == "--module") && i+1 < len(args):
			return args[i+1]
		case optionsWithValue[a]:
			i++
		case strings.HasPrefix(a, "-"):
		default:
			return a
		}
	}
	return ""
}

// vmOptions are the JVM options in the order HotSpot applies them, later
// ones winning: JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS, the command line,
// _JAVA_OPTIONS.
func vmOptions(p process) []string {
	var opts []string
	opts = append(opts, strings.Fields(p.env["JAVA_TOOL_OPTIONS"])...)
	opts = append(opts, strings.Fields(p.env["JDK_JAVA_OPTIONS"])...)
	opts = append(opts, p.args[1:]...)
	return append(opts, strings.Fields(p.env["_JAVA_OPTIONS"])...)
}

// lastFlag is the value of boolean -XX flag name, false when not given.
func lastFlag(opts []string, name string) bool {
	on := false
	for _, o := range opts {
		switch o {
		case "-XX:+" + name:
			on = true
		case "-XX:-" + name:
			on = false
		}
	}
	return on
}

// javaVersion reads JAVA_VERSION from the JDK's release file.
func javaVersion(javaHome string) string {
	raw, err := os.ReadFile(filepath.Join(javaHome, "release"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "JAVA_VERSION="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// javaMajor is the feature release of a JAVA_VERSION ("17.0.15" → 17,
// "1.8.0_392" → 8), 0 when unknown.
func javaMajor(version string) int {
	parts := strings.Split(version, ".")
	if parts[0] == "1" && len(parts) > 1 {
		parts = parts[1:]
	}
	n, err := strconv.Atoi(strings.TrimFunc(parts[0], func(r rune) bool { return r < '0' || r > '9' }))
	if err != nil {
		return 0
	}
	return n
}
