package jvm

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm/jvmtest"
)

// hostPortRule is heapRule with the standalone exporter's hostPort, which
// makes jmx_prometheus_javaagent 1.0.1 call System.exit in agent mode
// (JmxCollector.exitOnConfigError), as the stand-in agent does.
const hostPortRule = heapRule + "hostPort: localhost:9999\n"

// The attach refuses a configuration with hostPort, and the real JVM
// (JDK 17) lives on; the stand-in, loaded with it anyway, exits the JVM
// as upstream does.
func TestAttachRefusesAHostPortConfigAndTheJVMLives(t *testing.T) {
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), nil, marker)
	o := options(t, marker, hostPortRule)

	r := Attach(o)
	assert.Equal(t, Failed, r.Result)
	assert.Equal(t, ReasonInvalidConfig, r.Reason, r.Message)
	assert.Contains(t, r.Message, "hostPort")
	assert.Contains(t, r.Message, "would exit the JVM")
	time.Sleep(500 * time.Millisecond)
	assert.False(t, j.Exited(), "the JVM must live: %s", j.Log.String())
	assert.NotContains(t, j.Log.String(), "stand-in agent", "nothing was loaded")

	// The same configuration loaded without the check: the JVM is gone.
	_, ok := startAttachListener(j.PID)
	require.True(t, ok)
	loadAgent(j.PID, o.Agent, fmt.Sprintf("%d:%s", o.Port, o.Config))
	j.WaitExitSaying(t, "must not configure 'jmxUrl' or 'hostPort'")
}

// Upstream also exits after a reload that sets hostPort (getLatestConfig
// calls exitOnConfigError on every scrape); this is why the operator
// never copies such a change. The stand-in does the same.
func TestStandInAgentExitsTheJVMOnAReloadedHostPort(t *testing.T) {
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), nil, marker)
	o := options(t, marker, "lowercaseOutputName: yes\n"+heapRule[len("lowercaseOutputName: true\n"):])
	r := Attach(o)
	require.Equal(t, Attached, r.Result, r.Message)
	// lowercaseOutputName: yes is YAML 1.1's true, for the agent and the check.
	assert.Regexp(t, `(?m)^jvm_heap_used_bytes [0-9.E]+$`, metrics(t, o.Port))

	require.NoError(t, os.WriteFile(o.Config, []byte(hostPortRule), 0o644))
	require.NoError(t, os.Chtimes(o.Config, time.Now().Add(time.Minute), time.Now().Add(time.Minute)))
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", o.Port))
	if err == nil {
		resp.Body.Close()
	}
	j.WaitExitSaying(t, "must not configure 'jmxUrl' or 'hostPort'")
}

// `name: on` is a Boolean to the agent, a ClassCastException at start
// that exits the JVM; the attach refuses it.
func TestAttachRefusesAYAML11BooleanName(t *testing.T) {
	marker := jvmtest.Marker(t)
	j := jvmtest.Start(t, t.TempDir(), nil, marker)
	o := options(t, marker, "rules:\n- pattern: 'java.lang<type=Memory><HeapMemoryUsage>used'\n  name: on\n")

	r := Attach(o)
	assert.Equal(t, ReasonInvalidConfig, r.Reason, r.Message)
	assert.Contains(t, r.Message, "name is a Boolean")
	assert.False(t, j.Exited(), j.Log.String())

	_, ok := startAttachListener(j.PID)
	require.True(t, ok)
	loadAgent(j.PID, o.Agent, fmt.Sprintf("%d:%s", o.Port, o.Config))
	j.WaitExitSaying(t, "ClassCastException")
}
