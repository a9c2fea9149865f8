package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
)

// TestSeedLabFromTheChart installs the chart's demo (seed 000's lab), runs
// the operator as the chart would, with only the ConfigMonitor controller
// and the chart's RBAC, and changes MSG as the seed does.
func TestSeedLabFromTheChart(t *testing.T) {
	c := testenv.Client(t)
	rel := installChart(t, c, localValues(t, append(disableAll(), "controllers.configMonitor.enabled=true", "demo.enabled=true")...))
	namespace := rel.namespace
	op := rel.runOperator(t)

	frontend := waitSeedLabReady(t, c, namespace)
	require.EqualValues(t, 1, frontend.Generation, "installing the demo restarted the app")
	changeMessageAndWaitForRollout(t, c, namespace)
	assert.Empty(t, op.Failures(), "the chart's RBAC is missing a rule")

	// Least privilege: it may read configuration and roll workloads, not
	// change configuration, delete workloads or read pods' logs.
	sa := rel.serviceAccount()
	assert.True(t, canI(t, c, sa, "apps", "deployments", "patch"))
	assert.True(t, canI(t, c, sa, "", "configmaps", "watch"))
	for _, denied := range [][3]string{
		{"", "configmaps", "update"}, {"", "secrets", "create"}, {"apps", "deployments", "delete"},
		{"", "pods/log", "get"}, {"", "pods/exec", "create"},
	} {
		assert.False(t, canI(t, c, sa, denied[0], denied[1], denied[2]), "ConfigMonitor must not %s %s", denied[2], denied[1])
	}
}

// TestConfigMonitorRunsWithoutAnyAccessToSecrets installs the chart with
// controllers.configMonitor.secrets=false: the operator, with the chart's
// RBAC, rolls the seed's lab and reports a monitor that names a Secret.
func TestConfigMonitorRunsWithoutAnyAccessToSecrets(t *testing.T) {
	c := testenv.Client(t)
	rel := installChart(t, c, localValues(t, append(disableAll(),
		"controllers.configMonitor.enabled=true", "controllers.configMonitor.secrets=false", "demo.enabled=true")...))
	namespace := rel.namespace
	sa := rel.serviceAccount()
	for _, verb := range []string{"get", "list", "watch"} {
		assert.False(t, canI(t, c, sa, "", "secrets", verb), "the operator may %s Secrets", verb)
	}
	op := rel.runOperator(t)

	withSecret := &magalixv1.ConfigMonitor{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "with-secret"},
		Spec:       magalixv1.ConfigMonitorSpec{ConfigMap: "flaskapp-config", Secret: "db", PodSelector: map[string]string{"app": "frontend"}},
	}
	require.NoError(t, c.Create(context.Background(), withSecret))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(withSecret), withSecret))
		ready := meta.FindStatusCondition(withSecret.Status.Conditions, "Ready")
		require.NotNil(ct, ready)
		require.Equal(ct, "SecretsIgnored", ready.Reason)
		require.Contains(ct, ready.Message, "controllers.configMonitor.secrets")
	}, 30*time.Second, 100*time.Millisecond)

	waitSeedLabReady(t, c, namespace)
	frontend := changeMessageAndWaitForRollout(t, c, namespace)
	assert.NotContains(t, frontend.Spec.Template.Annotations, "deckhand.dev/configmap-flaskapp-config.secret-db",
		"the monitor whose Secret is ignored restarted the app")
	assert.Empty(t, op.Failures(), "the operator still tried to reach Secrets")
}

// waitSeedLabReady waits until the demo's frontend runs and its monitor has
// recorded the configuration.
func waitSeedLabReady(t *testing.T, c client.Client, namespace string) *appsv1.Deployment {
	t.Helper()
	frontend := &appsv1.Deployment{}
	monitor := &magalixv1.ConfigMonitor{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "frontend"}, frontend))
		require.EqualValues(ct, 1, frontend.Status.ReadyReplicas)
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "flakapp-config-monitor"}, monitor))
		require.True(ct, meta.IsStatusConditionTrue(monitor.Status.Conditions, "Ready"), "%+v", monitor.Status.Conditions)
	}, 60*time.Second, 200*time.Millisecond)
	return frontend
}

// changeMessageAndWaitForRollout applies the seed's change of MSG and waits
// until the frontend has rolled once to it.
func changeMessageAndWaitForRollout(t *testing.T, c client.Client, namespace string) *appsv1.Deployment {
	t.Helper()
	out, err := testenv.Kubectl(t, "apply", "-n", namespace, "-f", filepath.Join(testenv.Root(t), "examples", "configmonitor", "configmap-changed.yml"))
	require.NoError(t, err, out)
	frontend := &appsv1.Deployment{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "frontend"}, frontend))
		require.EqualValues(ct, 2, frontend.Generation)
		require.EqualValues(ct, 2, frontend.Status.ObservedGeneration)
		require.EqualValues(ct, 1, frontend.Status.UpdatedReplicas)
	}, 30*time.Second, 100*time.Millisecond)
	return frontend
}
