package jvm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

// An exporter given at start under another jar name, through an @argfile
// or -XX:VMOptionsFile, is invisible in /proc/<pid>/cmdline; the JVM's own
// VM.command_line shows it, and the jar's manifest names the agent.
func TestAttachSeesARenamedExporterFromArgfilesAndVMOptionsFiles(t *testing.T) {
	for _, how := range []string{"@argfile", "-XX:VMOptionsFile"} {
		t.Run(how, func(t *testing.T) {
			marker := jvmtest.Marker(t)
			dir := t.TempDir()
			first := options(t, marker, heapRule)
			renamed := filepath.Join(dir, "metrics-agent.jar")
			b, err := os.ReadFile(first.Agent)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(renamed, b, 0o644))
			opts := filepath.Join(dir, "jvm.options")
			require.NoError(t, os.WriteFile(opts, []byte(fmt.Sprintf("-javaagent:%s=%d:%s\n", renamed, first.Port, first.Config)), 0o644))
			flag := "@" + opts
			if how != "@argfile" {
				flag = "-XX:VMOptionsFile=" + opts
			}
			j := jvmtest.Start(t, dir, []string{flag}, marker)
			require.Contains(t, j.Log.String(), "stand-in agent serving")

			r := Attach(options(t, marker, heapRule))
			assert.Equal(t, Failed, r.Result, r.Message)
			assert.Equal(t, ReasonAgentConfigured, r.Reason, r.Message)
			assert.Contains(t, r.Message, "metrics-agent.jar")
			assert.False(t, j.Exited(), "the second exporter exited the JVM: %s", j.Log.String())
			assert.Equal(t, 1, strings.Count(j.Log.String(), "stand-in agent serving"), j.Log.String())
		})
	}
}

// An exporter loaded by someone else from another copy of the jar shows
// neither in the JVM's arguments nor among its open files: its port, one
// of the JVM's listening sockets, answers with exporter metrics.
func TestAttachSeesAnExporterServingOnAnotherPort(t *testing.T) {
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), nil, marker)
	first := options(t, marker, heapRule)
	require.Equal(t, Attached, Attach(first).Result)

	second := options(t, marker, heapRule) // another jar copy, port and state
	r := Attach(second)
	assert.Equal(t, Failed, r.Result, r.Message)
	assert.Equal(t, ReasonAgentConfigured, r.Reason, r.Message)
	assert.Contains(t, r.Message, fmt.Sprintf("on port %d", first.Port))
	assert.False(t, j.Exited(), "the second exporter exited the JVM: %s", j.Log.String())
}

func TestJavaagentJars(t *testing.T) {
	out := "VM Arguments:\njvm_flags: -javaagent:/f.jar\njvm_args: -Xmx1g -javaagent:/a/x.jar=9404:/c.yaml -javaagent:rel.jar\njava_command: App -javaagent:/not/a/vm/arg.jar\n"
	assert.Equal(t, []string{"/f.jar", "/a/x.jar", "rel.jar"}, javaagentJars(out))
}

// Why every double-load check matters: a second exporter, even on another
// port, exits the JVM (upstream 1.0.1: BuildInfoMetrics.register throws on
// the taken jmx_exporter_build_info name and premain calls System.exit(1)),
// and the stand-in agent does the same.
func TestStandInAgentExitsTheJVMOnASecondLoad(t *testing.T) {
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), nil, marker)
	first, second := options(t, marker, heapRule), options(t, marker, heapRule)
	_, ok := startAttachListener(j.PID)
	require.True(t, ok)
	require.Equal(t, Attached, loadAgent(j.PID, first.Agent, fmt.Sprintf("%d:%s", first.Port, first.Config)).Result)
	loadAgent(j.PID, second.Agent, fmt.Sprintf("%d:%s", second.Port, second.Config))
	j.WaitExitSaying(t, "jmx_exporter_build_info because a metric with that name is already registered")
}
