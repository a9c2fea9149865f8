package manager_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	"github.com/deckhand-dev/deckhand/operator/manager"
)

// renderLeaderElection renders the chart with these leaderElection values.
func renderLeaderElection(t *testing.T, le map[string]any, more map[string]any) (*testenv.Rendered, error) {
	t.Helper()
	vals := map[string]any{"leaderElection": le, "crds": map[string]any{"enabled": false}}
	for k, v := range more {
		vals[k] = v
	}
	return testenv.RenderChart(t, testenv.ChartDir(t), "deckhand", "deckhand-system", vals)
}

// loadChartConfig loads the rendered config file as the operator does.
func loadChartConfig(t *testing.T, r *testenv.Rendered) manager.Config {
	t.Helper()
	cm := testenv.Into[corev1.ConfigMap](t, r.Operator(t, "ConfigMap"))
	file := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(file, []byte(cm.Data["config.yaml"]), 0o600))
	cfg, err := manager.Load([]string{"--config", file})
	require.NoError(t, err, cm.Data["config.yaml"])
	return cfg
}

func TestTheChartsLeaderElectionTimesReachTheOperator(t *testing.T) {
	// By default the operator's own defaults.
	r, err := renderLeaderElection(t, map[string]any{}, nil)
	require.NoError(t, err)
	cfg := loadChartConfig(t, r)
	for flag, got := range map[string]time.Duration{
		"leader-election-lease-duration": cfg.LeaderElectionLeaseDuration,
		"leader-election-renew-deadline": cfg.LeaderElectionRenewDeadline,
		"leader-election-retry-period":   cfg.LeaderElectionRetryPeriod,
	} {
		assert.Equal(t, manager.Flags().Lookup(flag).DefValue, got.String(), "values.yaml's default of %s", flag)
	}

	r, err = renderLeaderElection(t, map[string]any{"leaseDuration": "1m", "renewDeadline": "45s", "retryPeriod": "5s"}, nil)
	require.NoError(t, err)
	cfg = loadChartConfig(t, r)
	assert.Equal(t, time.Minute, cfg.LeaderElectionLeaseDuration)
	assert.Equal(t, 45*time.Second, cfg.LeaderElectionRenewDeadline)
	assert.Equal(t, 5*time.Second, cfg.LeaderElectionRetryPeriod)
}

func TestTheChartRefusesLeaderElectionTimesTheOperatorWould(t *testing.T) {
	for name, tc := range map[string]struct {
		le   map[string]any
		want string
	}{
		"lease not longer than renew": {map[string]any{"leaseDuration": "8s"},
			"leaderElection.leaseDuration 8s must be longer than leaderElection.renewDeadline 8s"},
		"lease in minutes, renew longer": {map[string]any{"leaseDuration": "1m", "renewDeadline": "1m0.5s"},
			"leaderElection.leaseDuration 1m must be longer than leaderElection.renewDeadline 1m0.5s"},
		"renew within the retry's jitter": {map[string]any{"renewDeadline": "2400ms"},
			"leaderElection.renewDeadline 2400ms must be longer than 1.2 × leaderElection.retryPeriod 2s"},
		"zero retry":            {map[string]any{"retryPeriod": "0s"}, "must be positive"},
		"lease in part seconds": {map[string]any{"leaseDuration": "15.5s"}, "leaderElection.leaseDuration 15.5s: must be whole seconds"},
		"not a duration":        {map[string]any{"leaseDuration": "15"}, "leaseDuration"},
		"a number":              {map[string]any{"leaseDuration": 15}, "leaseDuration"},
		"unknown key":           {map[string]any{"leaseDurationSeconds": 15}, "leaseDurationSeconds"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := renderLeaderElection(t, tc.le, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	// Accepted: what the operator accepts, in the units people write.
	for _, le := range []map[string]any{
		{"leaseDuration": "1m30s", "renewDeadline": "1m", "retryPeriod": "10s"},
		{"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "500ms"},
	} {
		r, err := renderLeaderElection(t, le, nil)
		require.NoError(t, err, "%v", le)
		loadChartConfig(t, r)
	}

	// Through config: refused, pointing at the value to use.
	_, err := renderLeaderElection(t, map[string]any{}, map[string]any{"config": map[string]any{"leader-election-lease-duration": "30s"}})
	require.ErrorContains(t, err, "config.leader-election-lease-duration is set by the chart: use leaderElection.leaseDuration")
}

// The leader Lease is held by the pod's name: the chart gives the
// operator its name through the downward API.
func TestTheChartGivesTheOperatorItsPodsName(t *testing.T) {
	r, err := renderLeaderElection(t, map[string]any{}, nil)
	require.NoError(t, err)
	d := testenv.Into[appsv1.Deployment](t, r.Operator(t, "Deployment"))
	var podName *corev1.EnvVar
	for i, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "POD_NAME" {
			podName = &d.Spec.Template.Spec.Containers[0].Env[i]
		}
	}
	require.NotNil(t, podName, "no POD_NAME in the operator's environment")
	require.NotNil(t, podName.ValueFrom)
	require.NotNil(t, podName.ValueFrom.FieldRef)
	assert.Equal(t, "metadata.name", podName.ValueFrom.FieldRef.FieldPath)
}
