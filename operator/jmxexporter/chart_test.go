package jmxexporter_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// grantsExec says whether rules allow creating pods/exec.
func grantsExec(rules []rbacv1.PolicyRule) bool {
	for _, r := range rules {
		if slices.Contains(r.Resources, "pods/exec") && slices.Contains(r.Verbs, "create") {
			return true
		}
	}
	return false
}

// execGrants renders the chart and returns where pods/exec is granted:
// "cluster" for the ClusterRole, else the namespaces of the Roles.
func execGrants(t *testing.T, jmx map[string]any) ([]string, error) {
	t.Helper()
	vals := map[string]any{"controllers": map[string]any{"jmxExporter": jmx}, "crds": map[string]any{"enabled": false}}
	r, err := testenv.RenderChart(t, testenv.ChartDir(t), "deckhand", "deckhand-system", vals)
	if err != nil {
		return nil, err
	}
	var where []string
	for _, o := range r.Kind("ClusterRole") {
		if grantsExec(testenv.Into[rbacv1.ClusterRole](t, o).Rules) {
			where = append(where, "cluster")
		}
	}
	for _, o := range r.Kind("Role") {
		role := testenv.Into[rbacv1.Role](t, o)
		if grantsExec(role.Rules) {
			where = append(where, role.Namespace)
		}
	}
	return where, nil
}

// Least privilege by default: in cluster-wide mode the JMX exporter's
// pods/exec is granted in the listed namespaces only, or everywhere when
// the user says so explicitly; neither is refused with a message naming
// both ways out.
func TestChartGrantsPodsExecOnlyWhereAsked(t *testing.T) {
	_, err := execGrants(t, map[string]any{"enabled": true})
	require.Error(t, err, "pods/exec on every namespace must not be the default")
	assert.Contains(t, err.Error(), "allNamespaces")

	where, err := execGrants(t, map[string]any{"enabled": true, "namespaces": []any{"shop", "billing"}})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"shop", "billing"}, where)

	where, err = execGrants(t, map[string]any{"enabled": true, "allNamespaces": true})
	require.NoError(t, err)
	assert.Equal(t, []string{"cluster"}, where)

	where, err = execGrants(t, map[string]any{"enabled": false})
	require.NoError(t, err)
	assert.Empty(t, where)
}
