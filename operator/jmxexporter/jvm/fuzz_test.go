package jvm

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseLoadReply feeds the parser of HotSpot's answer to the load
// command (bytes from the JVM's attach socket) arbitrary text: only a
// command status of 0 followed by an agent result of 0 is Attached; every
// other answer is Failed or Unknown with a message, never a panic.
func FuzzParseLoadReply(f *testing.F) {
	f.Add("0\nreturn code: 0\n")
	f.Add("0\n0\n")
	f.Add("0\nreturn code: -1\nagent failed\n")
	f.Add("101\n")
	f.Add("0\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, reply string) {
		r := parseLoadReply(42, reply)
		switch r.Result {
		case Attached:
			var lines []string
			for _, l := range strings.Split(reply, "\n") {
				lines = append(lines, strings.TrimSpace(l))
			}
			if len(lines) < 2 || lines[0] != "0" || strings.TrimPrefix(lines[1], "return code: ") != "0" {
				t.Fatalf("reply %q taken for an attach", reply)
			}
		case Failed, Unknown:
			if r.Reason == "" || r.Message == "" {
				t.Fatalf("reply %q gave %+v without reason or message", reply, r)
			}
			if r.Retry {
				t.Fatalf("reply %q: a load that may have run is never retried", reply)
			}
		default:
			t.Fatalf("reply %q gave outcome %q", reply, r.Result)
		}
	})
}

// FuzzMainOf feeds the reading of the main class from a Java command line
// (/proc/<pid>/cmdline, NUL-separated) arbitrary arguments: the answer is
// one of the arguments or nothing, and an option is never taken for it
// unless it follows -jar, -m or --module.
func FuzzMainOf(f *testing.F) {
	f.Add("-Xmx1g\x00-cp\x00a.jar:b.jar\x00com.example.Main\x00arg")
	f.Add("-Dpassword=secret\x00-jar\x00app.jar")
	f.Add("--module-path\x00mods\x00-m\x00com.example/com.example.Main")
	f.Add("-cp")
	f.Fuzz(func(t *testing.T, cmdline string) {
		args := strings.Split(cmdline, "\x00")
		main := mainOf(args)
		if main == "" {
			return
		}
		i := slices.Index(args, main)
		if i < 0 {
			t.Fatalf("main %q is none of the arguments %q", main, args)
		}
		if strings.HasPrefix(main, "-") {
			ok := false
			for j, a := range args[:len(args)-1] {
				if args[j+1] == main && (a == "-jar" || a == "-m" || a == "--module") {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("option %q taken for the main class of %q", main, args)
			}
		}
	})
}

// FuzzProcFiles feeds the reading of one process from a /proc of the
// test's own (cmdline, stat, status, environ, as a container's processes
// may write them: a command name with spaces and parentheses, any
// arguments and environment) arbitrary content. Discover never panics,
// and reports the process exactly when its command is java, its command
// line holds the match, and its stat has a start time, which it reports.
func FuzzProcFiles(f *testing.F) {
	stat := func(comm string) string {
		return "4242 (" + comm + ") S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 20 0 123456 1000000 500 18446744073709551615"
	}
	f.Add("/usr/bin/java\x00-XX:+DisableAttachMechanism\x00-jar\x00app.jar\x00", stat("java"), "Uid:\t1000\t1000\t1000\t1000\n", "JAVA_TOOL_OPTIONS=-XX:-DisableAttachMechanism\x00", "app.jar")
	f.Add("java\x00Main\x00", stat("a) (b"), "Uid:\n", "", "")
	f.Add("\x00\x00", stat("x"), "", "=\x00", "")
	f.Add("java", "4242 (java", "Uid: x y", "_JAVA_OPTIONS", "java")
	f.Fuzz(func(t *testing.T, cmdline, stat, status, environ, match string) {
		proc := t.TempDir()
		dir := filepath.Join(proc, "4242")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range map[string]string{"cmdline": cmdline, "stat": stat, "status": status, "environ": environ} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		defer func(old string) { Proc = old }(Proc)
		Proc = proc
		t.Setenv(MatchEnv, "")

		jvms, err := Discover(match)
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Split(strings.TrimRight(cmdline, "\x00"), "\x00")
		start, started := statStart(stat)
		// An empty cmdline is a kernel thread or a process gone.
		want := len(cmdline) > 0 && filepath.Base(args[0]) == "java" && strings.Contains(strings.Join(args, " "), match) && started
		if !want {
			// A JVM that publishes hsperfdata is found whatever its
			// command; none runs as PID 4242 in the test's /tmp.
			if len(jvms) > 0 {
				t.Fatalf("found %+v in cmdline %q stat %q", jvms, cmdline, stat)
			}
			return
		}
		if len(jvms) != 1 || jvms[0].PID != 4242 || jvms[0].StartTime != start {
			t.Fatalf("cmdline %q stat %q: found %+v, want PID 4242 started at %d", cmdline, stat, jvms, start)
		}
	})
}

// statStart is the test's own reading of field 22 of a stat line.
func statStart(stat string) (uint64, bool) {
	i := strings.LastIndex(stat, ")")
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(fields[19], 10, 64)
	return v, err == nil
}

// FuzzConfigProblem feeds the check of the exporter's configuration (the
// user's ConfigMap, which the agent would exit the JVM over) arbitrary
// bytes: never a panic; what it passes is empty or a mapping, and every
// refusal says what the agent would do.
func FuzzConfigProblem(f *testing.F) {
	f.Add([]byte(heapRule))
	f.Add([]byte("rules:\n- pattern: x\n  type: SUMMARY\n"))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("startDelaySeconds: 1e3\n"))
	f.Add([]byte("rules:\n- pattern: '(?<n>a)[b-\\x{7a}&&[^c]]\\k<n>{1,2}+'\n  name: $1_${n}\n"))
	f.Add([]byte("includeObjectNames: ['a:b=\"c\\\\\",*', 'd:*']\nhttpServer: {threads: {minimum: 1, maximum: '2', keepAliveTime: 3}}\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		v := CheckAgentConfig(raw)
		if v.Refused() {
			if v.AtStart == "" || v.OnReload == "" || v.Message(true) == "" {
				t.Fatalf("a refusal without upstream's outcome: %+v", v)
			}
			return
		}
		trimmed := strings.TrimSpace(string(raw))
		if strings.HasPrefix(trimmed, "- ") || strings.HasPrefix(trimmed, "[") {
			t.Fatalf("a list passed as the configuration: %q", raw)
		}
	})
}

// FuzzListening feeds the scan of /proc/net/tcp for a port in use
// arbitrary tables: never a panic, and a port is reported in use only
// when a line in LISTEN state (0A) has it as its local port.
func FuzzListening(f *testing.F) {
	f.Add("  sl  local_address rem_address   st\n   0: 00000000:24C4 00000000:0000 0A 00000000:00000000\n", 9412)
	f.Add("0: 0100007F:1F90 00000000:0000 01\n", 8080)
	f.Add("x :::: y 0A\n", 0)
	f.Fuzz(func(t *testing.T, table string, port int) {
		proc := t.TempDir()
		if err := os.MkdirAll(filepath.Join(proc, "net"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, "net", "tcp"), []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
		defer func(old string) { Proc = old }(Proc)
		Proc = proc
		if listening(port) == "" {
			return
		}
		for _, line := range strings.Split(table, "\n") {
			fields := strings.Fields(line)
			if len(fields) >= 4 && fields[3] == "0A" {
				if _, p, ok := strings.Cut(fields[1], ":"); ok {
					if v, err := strconv.ParseUint(p, 16, 16); err == nil && int(v) == port {
						return
					}
				}
			}
		}
		t.Fatalf("port %d reported in use by table %q", port, table)
	})
}
