package jmxexporter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
)

// Names of the files in the container's target directory.
const (
	helperName = "deckhand-jmx-attach"
	agentName  = "jmx_prometheus_javaagent.jar"
	configName = "config.yaml"
)

// Exec timeouts, per step. The copy moves a few MB through the API server.
var (
	probeTimeout  = 30 * time.Second
	copyTimeout   = 2 * time.Minute
	attachTimeout = 2 * time.Minute
)

// file is one file to put into the container.
type file struct {
	name string
	data []byte
	mode string
	sum  string
}

func newFile(name string, data []byte, mode string) file {
	h := sha256.Sum256(data)
	return file{name: name, data: data, mode: mode, sum: hex.EncodeToString(h[:])}
}

// container runs the helper's steps in one container of a pod.
type container struct {
	exec Executor
	pod  *corev1.Pod
	name string
	dir  string
}

func (c *container) path(name string) string { return path.Join(c.dir, name) }

// run execs cmd and records the step's duration.
func (c *container) run(ctx context.Context, step string, cmd []string, stdin []byte, timeout time.Duration) (ExecResult, error) {
	start := time.Now()
	res, err := c.exec.Exec(ctx, c.pod, c.name, cmd, stdin, timeout)
	execDuration.WithLabelValues(step).Observe(time.Since(start).Seconds())
	return res, err
}

// probe learns the container's architecture and, when the helper is
// already there, the checksums of the files in place, in one exec.
func (c *container) probe(ctx context.Context, files []file) (arch string, sums map[string]string, problem *jvm.Result) {
	// The helper in place runs only when this user owns it and its
	// directory and nobody else may write them: root must never run a
	// file the JVM's user could have put there.
	script := ownedByMe + `uname -m 2>/dev/null || echo unknown; if owned "${1%/*}" && owned "$1" && [ -x "$1" ]; then "$@"; fi`
	cmd := []string{"sh", "-c", script, "sh", c.path(helperName), "checksum"}
	for _, f := range files {
		cmd = append(cmd, c.path(f.name))
	}
	res, err := c.run(ctx, "probe", cmd, nil, probeTimeout)
	if p := shellProblem(res, err); p != nil {
		return "", nil, p
	}
	first, rest, _ := strings.Cut(res.Stdout, "\n")
	if r, ok := parseResult(rest); ok {
		sums = r.Checksums
	}
	return strings.TrimSpace(first), sums, nil
}

// ensure copies the files whose checksum differs (helper first) and checks
// every checksum afterwards.
func (c *container) ensure(ctx context.Context, files []file, sums map[string]string) *jvm.Result {
	copied := false
	for _, f := range files {
		if sums[c.path(f.name)] == f.sum {
			continue
		}
		if p := c.copy(ctx, f); p != nil {
			return p
		}
		copied = true
	}
	if !copied {
		return nil
	}
	cmd := []string{c.path(helperName), "checksum"}
	for _, f := range files {
		cmd = append(cmd, c.path(f.name))
	}
	res, err := c.run(ctx, "checksum", cmd, nil, probeTimeout)
	if p := execProblem(res, err); p != nil {
		return p
	}
	r, ok := parseResult(res.Stdout)
	if !ok {
		return &jvm.Result{Result: jvm.Failed, Reason: "CopyFailed", Retry: true, Message: "the helper copied into the container does not run: " + short(res.Stdout+res.Stderr)}
	}
	for _, f := range files {
		if got := r.Checksums[c.path(f.name)]; got != f.sum {
			return &jvm.Result{Result: jvm.Failed, Reason: "CopyFailed", Retry: true,
				Message: fmt.Sprintf("%s arrived with SHA-256 %q, expected %s", c.path(f.name), got, f.sum)}
		}
	}
	return nil
}

// ownedByMe defines shell functions for the probe and copy scripts (POSIX
// sh, busybox included; only ls and id): owner prints a path's numeric
// owner without following a symbolic link, owned says that path is no
// link, belongs to this user and is not writable by group or others.
const ownedByMe = `owner() { set -- $(ls -lnd -- "$1" 2>/dev/null); echo "$3"; }
owned() {
  [ ! -L "$1" ] && [ -e "$1" ] && [ "$(owner "$1")" = "$(id -u)" ] || return 1
  case "$(ls -lnd -- "$1")" in ?????w*|????????w*) return 1;; esac
}
`

// copy writes one file with the length first: head -c reads exactly that
// many bytes, so the copy never waits for an end of input that kwok (and
// some runtimes) do not pass on. The file appears complete or not at all.
// The directory belongs to the exec's user with mode 0755 and the files
// are 0644 (the helper 0755): a JVM of another user can read the agent
// and its configuration but change nothing root runs. A directory that
// is a symbolic link or belongs to someone else is refused (a JVM user
// could have made it to have root write or run its files).
func (c *container) copy(ctx context.Context, f file) *jvm.Result {
	script := ownedByMe + `umask 022
if [ -L "$1" ] || { [ -e "$1" ] && ! [ "$(owner "$1")" = "$(id -u)" ]; }; then
  echo "deckhand: refusing $1: it is a symbolic link or belongs to another user" >&2; exit 3
fi
mkdir -p "$1" && chmod 755 "$1" || exit 1
rm -f "$1/.$3.part" && head -c "$2" > "$1/.$3.part" && chmod "$4" "$1/.$3.part" && mv -f "$1/.$3.part" "$1/$3"`
	cmd := []string{"sh", "-c", script, "sh", c.dir, strconv.Itoa(len(f.data)), f.name, f.mode}
	res, err := c.run(ctx, "copy", cmd, f.data, copyTimeout)
	if p := shellProblem(res, err); p != nil {
		return p
	}
	if res.ExitCode != 0 {
		return fileProblem("copying "+f.name+" to "+c.dir, res.Stderr)
	}
	return nil
}

// helper runs a helper command and parses its result.
func (c *container) helper(ctx context.Context, step string, timeout time.Duration, args ...string) jvm.Result {
	res, err := c.run(ctx, step, append([]string{c.path(helperName)}, args...), nil, timeout)
	if p := execProblem(res, err); p != nil {
		if step == "attach" && err != nil {
			// The load may have been sent before the exec broke off.
			p.Result, p.Retry = jvm.Unknown, false
		}
		return *p
	}
	r, ok := parseResult(res.Stdout)
	if !ok {
		out := jvm.Result{Result: jvm.Failed, Reason: "HelperFailed", Retry: step != "attach",
			Message: fmt.Sprintf("the helper's %s printed no result (exit code %d): %s", step, res.ExitCode, short(res.Stdout+" "+res.Stderr))}
		if step == "attach" {
			out.Result = jvm.Unknown
		}
		return out
	}
	return r
}

// parseResult reads the helper's JSON line (the last non-empty line).
func parseResult(out string) (jvm.Result, bool) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var r jvm.Result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil || r.Result == "" {
		return jvm.Result{}, false
	}
	return r, true
}

// shellProblem turns a failed `sh` exec into a reason users understand.
func shellProblem(res ExecResult, err error) *jvm.Result {
	if p := execProblem(res, err); p != nil {
		return p
	}
	if res.ExitCode == 126 || res.ExitCode == 127 {
		return noShell(res.Stderr)
	}
	return nil
}

func execProblem(res ExecResult, err error) *jvm.Result {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if strings.Contains(msg, "executable file not found") || strings.Contains(msg, "no such file or directory") {
		return noShell(msg)
	}
	return &jvm.Result{Result: jvm.Failed, Reason: "ExecFailed", Retry: true, Message: short(msg)}
}

func noShell(detail string) *jvm.Result {
	return &jvm.Result{Result: jvm.Failed, Reason: "NoShell", Retry: false,
		Message: "the container has no sh or head to receive the agent (" + short(detail) + "); images without a shell are not supported"}
}

// fileProblem names what went wrong writing into the container.
func fileProblem(what, stderr string) *jvm.Result {
	switch {
	case strings.Contains(stderr, "deckhand: refusing"):
		return &jvm.Result{Result: jvm.Failed, Reason: "UnsafeTargetDir", Message: what + ": " + short(strings.TrimPrefix(stderr, "deckhand: ")) +
			"; remove it in the container (or restart the container), or set the operator's --jmxexporter-target-dir to a path only the exec's user controls"}
	case strings.Contains(stderr, "Read-only file system"):
		return &jvm.Result{Result: jvm.Failed, Reason: jvm.ReasonReadOnlyFS, Message: what + ": read-only file system; mount a writable emptyDir at /tmp (or set the operator's --jmxexporter-target-dir)"}
	case strings.Contains(stderr, "No space left"):
		return &jvm.Result{Result: jvm.Failed, Reason: jvm.ReasonNoSpace, Retry: true, Message: what + ": no space left on device"}
	case strings.Contains(stderr, "Permission denied"):
		return &jvm.Result{Result: jvm.Failed, Reason: "PermissionDenied", Message: what + ": permission denied for the container's user"}
	}
	return &jvm.Result{Result: jvm.Failed, Reason: "CopyFailed", Retry: true, Message: what + ": " + short(stderr)}
}

func short(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= 300 {
		return s
	}
	// Cut before a character, not inside one: the text ends up in JSON
	// (status, the pod's annotation), where half a character is invalid.
	cut := 300
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

var errNoArch = errors.New("unknown architecture")

// goArch maps uname -m to Go's names for the helper builds.
func goArch(uname string) (string, error) {
	switch uname {
	case "x86_64", "amd64":
		return "amd64", nil
	case "aarch64", "arm64":
		return "arm64", nil
	}
	return "", fmt.Errorf("%w %q", errNoArch, uname)
}
