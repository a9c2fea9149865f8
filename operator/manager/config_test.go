package manager

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/configmonitor"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestDefaults(t *testing.T) {
	cfg, err := Load(nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"*"}, cfg.Controllers)
	assert.False(t, cfg.LeaderElect)
	assert.Equal(t, ":8080", cfg.MetricsBindAddress)
	assert.Equal(t, ":8081", cfg.HealthProbeBindAddress)
	assert.Equal(t, "0", cfg.PprofBindAddress, "profiles are served only when asked for")
	assert.Equal(t, "json", cfg.LogFormat)
	assert.Equal(t, 30*time.Second, cfg.GracefulShutdownTimeout)
	assert.GreaterOrEqual(t, cfg.KubeAPIQPS, float32(100), "client-go's default 5 QPS throttles every write")
	cm, err := configmonitor.OptionsFrom(cfg.Settings)
	require.NoError(t, err)
	assert.False(t, cm.IgnoreSecrets, "ConfigMonitor serves spec.secret by default")
	assert.EqualValues(t, 1, cm.RestartsPerSecond)
	assert.Equal(t, 100, cm.RestartBurst)
}

func TestIgnoreSecretsFromTheChartsConfigFile(t *testing.T) {
	t.Setenv("DECKHAND_CONFIG", writeFile(t, "configmonitor-ignore-secrets: true\n"))
	cfg, err := Load(nil)
	require.NoError(t, err)
	assert.True(t, cfg.Settings.GetBool("configmonitor-ignore-secrets"))
}

func TestPrecedenceFlagOverEnvOverFile(t *testing.T) {
	file := writeFile(t, "controllers: [blogpost]\nlog-level: debug\nmetrics-bind-address: \":9000\"\nleader-elect: true\n")
	t.Setenv("DECKHAND_CONFIG", file)
	t.Setenv("DECKHAND_LOG_LEVEL", "warn")
	t.Setenv("DECKHAND_METRICS_BIND_ADDRESS", ":9100")

	cfg, err := Load([]string{"--metrics-bind-address=0"})
	require.NoError(t, err)
	assert.Equal(t, "0", cfg.MetricsBindAddress, "flag wins over env and file")
	assert.Equal(t, "warn", cfg.LogLevel, "env wins over file")
	assert.Equal(t, []string{"blogpost"}, cfg.Controllers, "file wins over default")
	assert.True(t, cfg.LeaderElect)
}

func TestEnvList(t *testing.T) {
	t.Setenv("DECKHAND_CONTROLLERS", "*,-blogpost")
	cfg, err := Load(nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"*", "-blogpost"}, cfg.Controllers)
}

func TestMalformedConfigFileNamesFileAndField(t *testing.T) {
	for name, tc := range map[string]struct{ body, field string }{
		"wrong type":  {"leader-elect: perhaps\n", "leader-elect"},
		"unknown key": {"leader-elekt: true\n", "leader-elekt"},
		"bad yaml":    {"controllers: [blogpost\n", ""},
		"bad value":   {"log-format: xml\n", "log-format"},
		// A controller's own settings are checked the same way.
		"controller setting, wrong type": {"configmonitor-restart-burst: lots\n", "configmonitor-restart-burst"},
		"controller setting, typo":       {"configmonitor-restart-brust: 5\n", "configmonitor-restart-brust"},
	} {
		t.Run(name, func(t *testing.T) {
			file := writeFile(t, tc.body)
			_, err := Load([]string{"--config", file})
			require.Error(t, err)
			assert.Contains(t, err.Error(), file)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
}

func TestMissingConfigFile(t *testing.T) {
	_, err := Load([]string{"--config", "/nonexistent/deckhand.yaml"})
	require.ErrorContains(t, err, "/nonexistent/deckhand.yaml")
}

func TestBadFlags(t *testing.T) {
	_, err := Load([]string{"--log-level", "loud"})
	require.ErrorContains(t, err, `log-level "loud"`)
	_, err = Load([]string{"--no-such-flag"})
	require.ErrorContains(t, err, "no-such-flag")
	_, err = Load([]string{"--configmonitor-restarts-per-second=0"})
	require.ErrorContains(t, err, "configmonitor-restarts-per-second and configmonitor-restart-burst must be positive")
}

func TestRestartPaceFromTheConfigFile(t *testing.T) {
	t.Setenv("DECKHAND_CONFIG", writeFile(t, "configmonitor-restarts-per-second: 0.5\nconfigmonitor-restart-burst: 10\n"))
	cfg, err := Load(nil)
	require.NoError(t, err)
	cm, err := configmonitor.OptionsFrom(cfg.Settings)
	require.NoError(t, err)
	assert.EqualValues(t, 0.5, cm.RestartsPerSecond)
	assert.Equal(t, 10, cm.RestartBurst)
}

func TestLeaderElectionNamespace(t *testing.T) {
	ns, err := leaderElectionNamespace(Config{LeaderElect: true, LeaderElectionNamespace: "ops"})
	require.NoError(t, err)
	assert.Equal(t, "ops", ns)

	t.Setenv("POD_NAMESPACE", "deckhand-system")
	ns, err = leaderElectionNamespace(Config{LeaderElect: true})
	require.NoError(t, err)
	assert.Equal(t, "deckhand-system", ns)

	t.Setenv("POD_NAMESPACE", "")
	if _, statErr := os.Stat(inClusterNamespaceFile); statErr != nil {
		_, err = leaderElectionNamespace(Config{LeaderElect: true})
		require.ErrorContains(t, err, "--leader-election-namespace")
	}
}

func TestUnknownControllerIsAConfigError(t *testing.T) {
	_, err := Load([]string{"--controllers=blogpost,nope"})
	require.ErrorContains(t, err, `unknown controller "nope"`)
}

func TestEveryControllerSettingIsAFlag(t *testing.T) {
	// The chart's config keys and --help come from Flags(): a controller's
	// own settings must be there, with their defaults.
	f := Flags().Lookup("configmonitor-restart-burst")
	require.NotNil(t, f)
	assert.Equal(t, "100", f.DefValue)
}

func TestListsInTheConfigFile(t *testing.T) {
	t.Setenv("DECKHAND_CONFIG", writeFile(t, "controllers: [blogpost, tdset]\nwatch-namespaces: [a, b]\n"))
	cfg, err := Load(nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"blogpost", "tdset"}, cfg.Controllers)
	assert.Equal(t, []string{"a", "b"}, cfg.WatchNamespaces)
}

func TestExcludeNamespacesIsRefusedBesideWatchNamespacesAndForBadNames(t *testing.T) {
	cfg, err := Load([]string{"--exclude-namespaces=team-a,team-b"})
	require.NoError(t, err)
	assert.Equal(t, []string{"team-a", "team-b"}, cfg.ExcludeNamespaces)

	_, err = Load([]string{"--watch-namespaces=a", "--exclude-namespaces=b"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "watch-namespaces and exclude-namespaces cannot both be set")

	_, err = Load([]string{"--exclude-namespaces=Team_A"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `exclude-namespaces: "Team_A" is not a namespace name`)
	_, err = Load([]string{"--watch-namespaces=ok,-bad"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `watch-namespaces: "-bad" is not a namespace name`)
}
