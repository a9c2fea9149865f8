package jmxexporter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
)

// exitingConfig would make jmx_prometheus_javaagent 1.0.1 call System.exit
// in agent mode, at start and on the reload after a change
// (JmxCollector.exitOnConfigError).
// Its password is never shown in a refusal.
const exitingConfig = testConfig + "username: monitor\npassword: jmx-Pa55-never-shown\nhostPort: localhost:9999\n"

// A changed ConfigMap is checked before it is copied; a refused one
// leaves the running agent's file as it was and says why.
func TestPodReconcilerRefusesAConfigChangeTheAgentWouldExitOn(t *testing.T) {
	f := newPodFixture(t, exporter("exp", time.Now(), 9400))
	f.reconcile()
	f.box.takeSteps()
	f.drainEvents()
	loadedHash := f.state().ConfigHash

	setConfig(t, f, exitingConfig)
	f.reconcile()
	assert.Empty(t, f.box.takeSteps(), "nothing is copied into the container")
	assert.Equal(t, []byte(testConfig), f.box.files["/tmp/deckhand-jmx/config.yaml"], "the agent's file is as it was")
	st := f.state()
	assert.Equal(t, jvm.Attached, st.Result)
	assert.True(t, st.Serving, "the agent still serves with its previous configuration")
	assert.Equal(t, loadedHash, st.ConfigHash, "the state still names the configuration the agent has")
	assert.Equal(t, jvm.ReasonInvalidConfig, st.Reason)
	assert.Contains(t, st.Message, "hostPort")
	assert.Contains(t, st.Message, "exit the JVM")
	assert.Equal(t, "true", f.pod().Annotations[AnnotationScrape])
	evs := f.drainEvents()
	require.Len(t, evs, 1)
	assert.Contains(t, evs[0], "Warning ConfigRefused")
	assert.Contains(t, evs[0], "hostPort")
	assert.NotContains(t, evs[0]+objectJSON(t, f.pod()), "jmx-Pa55-never-shown")

	// Looked at again: still refused, no second Event.
	f.reconcile()
	assert.Empty(t, f.box.takeSteps())
	assert.Empty(t, f.drainEvents())

	// Undone: the agent has that configuration already, the refusal is gone.
	setConfig(t, f, testConfig)
	f.reconcile()
	assert.Empty(t, f.box.takeSteps())
	assert.Empty(t, f.state().Reason)
	assert.Empty(t, f.drainEvents())

	// Refused again, then fixed: copied, and the refusal is gone.
	setConfig(t, f, exitingConfig)
	f.reconcile()
	assert.Equal(t, jvm.ReasonInvalidConfig, f.state().Reason)
	f.drainEvents()
	setConfig(t, f, testConfig+"# fixed\n")
	f.reconcile()
	assert.Equal(t, []string{"probe", "copy " + configName, "checksum"}, f.box.takeSteps())
	assert.Equal(t, []byte(testConfig+"# fixed\n"), f.box.files["/tmp/deckhand-jmx/config.yaml"])
	assert.Empty(t, f.state().Reason)
	evs = f.drainEvents()
	require.Len(t, evs, 1)
	assert.Contains(t, evs[0], "ConfigUpdated")
}

// At attach the configuration is checked before anything is copied or
// run in the container.
func TestPodReconcilerRefusesAnExitingConfigBeforeAttaching(t *testing.T) {
	for name, config := range map[string]string{
		"jmxUrl":                 "jmxUrl: service:jmx:rmi:///jndi/rmi://localhost:9999/jmxrmi\n",
		"name: on (a Boolean)":   "rules:\n- pattern: x\n  name: on\n",
		"an invalid Java regex":  "rules:\n- pattern: 'kafka<name=${topic}>'\n",
		"an empty configuration": "",
	} {
		t.Run(name, func(t *testing.T) {
			f := newPodFixture(t, exporter("exp", time.Now(), 9400))
			setConfig(t, f, config)
			res := f.reconcile()
			assert.Empty(t, f.box.takeSteps(), "no exec: nothing copied, nothing attached")
			st := f.state()
			assert.Equal(t, jvm.Failed, st.Result)
			assert.Equal(t, jvm.ReasonInvalidConfig, st.Reason)
			assert.Contains(t, st.Message, "would exit the JVM")
			assert.True(t, st.Retry, "nothing was loaded; a fixed ConfigMap is attached with")
			assert.Positive(t, res.RequeueAfter)
			assert.NotContains(t, f.pod().Annotations, AnnotationScrape)
			evs := f.drainEvents()
			require.NotEmpty(t, evs)
			assert.Contains(t, evs[0], "Warning AttachFailed InvalidConfig")

			setConfig(t, f, testConfig)
			f.reconcile()
			assert.Contains(t, f.box.takeSteps(), "attach", "the fixed configuration is attached with at once")
			assert.Equal(t, jvm.Attached, f.state().Result)
		})
	}
}

// The exporter's status says the configuration is refused, also for pods
// whose agent keeps serving its previous one.
func TestExporterStatusSaysWhyTheConfigIsRefused(t *testing.T) {
	e := exporter("exp", time.Now(), 9400)
	f := newPodFixture(t, e)
	f.reconcile()
	setConfig(t, f, "lowercaseOutputName: yes\nrules:\n- pattern: x\n  name: n\n  labels:\n    enabled: on\n")
	er := &ExporterReconciler{Client: f.c, Cache: f.c, Reader: f.c, Recorder: f.events}
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKeyFromObject(e), e))
	require.NoError(t, er.summarise(context.Background(), e))

	valid := meta.FindStatusCondition(e.Status.Conditions, ConditionConfigValid)
	require.NotNil(t, valid)
	assert.Equal(t, metav1.ConditionFalse, valid.Status)
	assert.Equal(t, jvm.ReasonInvalidConfig, valid.Reason)
	assert.Contains(t, valid.Message, "labels.enabled is a Boolean")
	ready := meta.FindStatusCondition(e.Status.Conditions, ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, jvm.ReasonInvalidConfig, ready.Reason)
	assert.Contains(t, ready.Message, "running agents keep their previous configuration")

	// lowercaseOutputName: yes alone is valid YAML 1.1 for the agent.
	setConfig(t, f, "lowercaseOutputName: yes\n")
	require.NoError(t, er.summarise(context.Background(), e))
	assert.True(t, meta.IsStatusConditionTrue(e.Status.Conditions, ConditionConfigValid))
	assert.True(t, meta.IsStatusConditionTrue(e.Status.Conditions, ConditionReady))
}
