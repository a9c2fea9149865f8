package jvm

import (
	"archive/zip"
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// exporterMetric is a metric upstream's agent always serves (1.0.1:
// BuildInfoMetrics), so a port answering with it is an exporter.
const exporterMetric = "jmx_exporter_build_info"

// exporterInJVM asks the JVM itself, once its attach socket is open, what
// /proc cannot show: its expanded arguments (@argfiles, -XX:VMOptionsFile,
// through `jcmd VM.command_line`) with any -javaagent whose jar is the
// exporter under another name, and its listening ports, one of which may
// serve an exporter loaded by someone else. nil means none was found; what
// cannot be read is a refusal too.
func exporterInJVM(pid int, agent string) *Result {
	want, err := agentClass(agent)
	if err != nil {
		r := failed(ReasonAttachError, fmt.Sprintf("reading the agent jar %s: %v", agent, err), true)
		return &r
	}
	out, err := jcmd(pid, "VM.command_line")
	if err != nil {
		return notInspectable(pid, "attach socket (jcmd VM.command_line)", err)
	}
	for _, jar := range javaagentJars(out) {
		path := jvmPath(pid, jar)
		class, err := agentClass(path)
		switch {
		case strings.Contains(filepath.Base(jar), "jmx_prometheus") || (err == nil && class == want):
			r := failed(ReasonAgentConfigured, fmt.Sprintf("JVM %d was started with the exporter agent (-javaagent:%s); not loading a second one (the agent exits the JVM when loaded twice)", pid, jar), false)
			return &r
		case err != nil:
			return notInspectable(pid, "root"+jar+" (a -javaagent jar)", err)
		}
	}
	if port := exporterPort(pid); port != 0 {
		r := failed(ReasonAgentConfigured, fmt.Sprintf("JVM %d already serves exporter metrics (%s) on port %d; not loading a second exporter (the agent exits the JVM when loaded twice)", pid, exporterMetric, port), false)
		return &r
	}
	return nil
}

// jcmd runs a diagnostic command through the attach socket (the "jcmd"
// attach command, JDK 7 and later) and returns its output.
func jcmd(pid int, command string) (string, error) {
	conn, err := net.DialTimeout("unix", socketPath(pid), 5*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	request := strings.Join([]string{"1", "jcmd", command, "", ""}, "\x00") + "\x00"
	if _, err := io.WriteString(conn, request); err != nil {
		return "", err
	}
	reply, err := io.ReadAll(io.LimitReader(conn, int64(maxReplyLen)))
	if err != nil && len(reply) == 0 {
		return "", err
	}
	status, out, _ := strings.Cut(string(reply), "\n")
	if strings.TrimSpace(status) != "0" {
		return "", fmt.Errorf("status %s: %s", strings.TrimSpace(status), strings.TrimSpace(out))
	}
	return out, nil
}

// javaagentJars are the jars of the -javaagent options in VM.command_line's
// jvm_flags and jvm_args lines.
func javaagentJars(commandLine string) []string {
	var jars []string
	s := bufio.NewScanner(strings.NewReader(commandLine))
	for s.Scan() {
		key, rest, ok := strings.Cut(s.Text(), ":")
		if !ok || (key != "jvm_args" && key != "jvm_flags") {
			continue
		}
		for _, arg := range strings.Fields(rest) {
			if spec, ok := strings.CutPrefix(arg, "-javaagent:"); ok {
				jar, _, _ := strings.Cut(spec, "=")
				jars = append(jars, jar)
			}
		}
	}
	return jars
}

// jvmPath is a path of the JVM's, seen through its root and working
// directory (it may live in another mount namespace).
func jvmPath(pid int, p string) string {
	base := filepath.Join(Proc, strconv.Itoa(pid), "root")
	if !filepath.IsAbs(p) {
		base = filepath.Join(Proc, strconv.Itoa(pid), "cwd")
	}
	return filepath.Join(base, p)
}

// agentClass is a jar's Premain-Class (or Agent-Class): jars with the same
// one are the same agent, whatever their names.
func agentClass(jar string) (string, error) {
	z, err := zip.OpenReader(jar)
	if err != nil {
		return "", err
	}
	defer z.Close()
	f, err := z.Open("META-INF/MANIFEST.MF")
	if err != nil {
		return "", err
	}
	defer f.Close()
	var agentClass string
	s := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for s.Scan() {
		key, value, _ := strings.Cut(s.Text(), ":")
		switch strings.TrimSpace(key) {
		case "Premain-Class":
			return strings.TrimSpace(value), nil
		case "Agent-Class":
			agentClass = strings.TrimSpace(value)
		}
	}
	if agentClass == "" {
		return "", errors.New("no Premain-Class or Agent-Class in its manifest")
	}
	return agentClass, nil
}

// exporterPort is a TCP port the JVM listens on that answers with
// exporter metrics, 0 when none.
func exporterPort(pid int) int {
	client := &http.Client{Timeout: 2 * time.Second}
	for _, port := range listeningPorts(pid) {
		resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if strings.Contains(string(body), exporterMetric) {
			return port
		}
	}
	return 0
}

// listeningPorts are the TCP ports of the JVM's own listening sockets:
// the entries of /proc/<pid>/net/tcp{,6} in LISTEN state whose inode is
// one of its open sockets.
func listeningPorts(pid int) []int {
	dir := filepath.Join(Proc, strconv.Itoa(pid))
	fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, _ := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var ports []int
	for _, file := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(dir, "net", file))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports = append(ports, int(p))
			}
		}
		f.Close()
	}
	return ports
}
