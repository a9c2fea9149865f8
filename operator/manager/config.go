// Package manager builds deckhand's controller-runtime manager from its
// configuration: flags, DECKHAND_* environment variables and an optional
// config file, in that order of precedence.
package manager

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/deckhand-dev/deckhand/operator"
	"github.com/deckhand-dev/deckhand/operator/configmonitor"
)

// Config is everything the manager can be told. Each field's key is its
// flag name, which is also its key in the config file; DECKHAND_<KEY> with
// dashes as underscores is its environment variable.
type Config struct {
	Kubeconfig                     string        `mapstructure:"kubeconfig"`
	Controllers                    []string      `mapstructure:"controllers"`
	WatchNamespaces                []string      `mapstructure:"watch-namespaces"`
	ConfigMonitorIgnoreSecrets     bool          `mapstructure:"configmonitor-ignore-secrets"`
	ConfigMonitorRestartsPerSecond float64       `mapstructure:"configmonitor-restarts-per-second"`
	ConfigMonitorRestartBurst      int           `mapstructure:"configmonitor-restart-burst"`
	LeaderElect                    bool          `mapstructure:"leader-elect"`
	LeaderElectionNamespace        string        `mapstructure:"leader-election-namespace"`
	LeaderElectionID               string        `mapstructure:"leader-election-id"`
	MetricsBindAddress             string        `mapstructure:"metrics-bind-address"`
	HealthProbeBindAddress         string        `mapstructure:"health-probe-bind-address"`
	LogLevel                       string        `mapstructure:"log-level"`
	LogFormat                      string        `mapstructure:"log-format"`
	KubeAPIQPS                     float32       `mapstructure:"kube-api-qps"`
	KubeAPIBurst                   int           `mapstructure:"kube-api-burst"`
	GracefulShutdownTimeout        time.Duration `mapstructure:"graceful-shutdown-timeout"`

	// ManyPerProcess lets tests start several managers in one process
	// (controller-runtime otherwise rejects a second controller name).
	ManyPerProcess bool `mapstructure:"-"`
}

// envPrefix prefixes every environment variable deckhand reads.
const envPrefix = "DECKHAND"

// configFileKey names the config file; it is a flag and env var only.
const configFileKey = "config"

// Flags declares every option with its default.
func Flags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("deckhand", pflag.ContinueOnError)
	fs.String(configFileKey, "", "config file (YAML) with any of these options as keys; flags and DECKHAND_* env vars override it")
	fs.String("kubeconfig", "", "kubeconfig for running outside a cluster (default: in-cluster config, then $KUBECONFIG)")
	fs.StringSlice("controllers", []string{"*"}, `controllers to run: "*" for all, "a,b" for those, "*,-a" for all but a`)
	fs.StringSlice("watch-namespaces", nil, "namespaces to watch (default: all)")
	fs.Float64("configmonitor-restarts-per-second", configmonitor.DefaultRestartsPerSecond, "ConfigMonitor's restarts per second across all monitors (a token bucket), so a configuration storm cannot flood the API server")
	fs.Int("configmonitor-restart-burst", configmonitor.DefaultRestartBurst, "restarts ConfigMonitor may make at once before --configmonitor-restarts-per-second applies")
	fs.Bool("configmonitor-ignore-secrets", false, "run ConfigMonitor without any access to Secrets: monitors naming one (spec.secret) are reported, not served")
	fs.Bool("leader-elect", false, "elect a leader with a Lease so only one replica reconciles")
	fs.String("leader-election-namespace", "", "namespace of the leader-election Lease (default: the operator's own namespace)")
	fs.String("leader-election-id", "deckhand.deckhand.dev", "name of the leader-election Lease")
	fs.String("metrics-bind-address", ":8080", `address of the Prometheus metrics endpoint; "0" turns it off`)
	fs.String("health-probe-bind-address", ":8081", "address serving /healthz and /readyz")
	fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.String("log-format", "json", "log format: json or console")
	fs.Float32("kube-api-qps", 200, "client-side rate limit on API requests per second")
	fs.Int("kube-api-burst", 400, "client-side burst of API requests")
	fs.Duration("graceful-shutdown-timeout", 30*time.Second, "time given to running reconciles after SIGTERM")
	return fs
}

// Load parses args and merges them over the environment and the config file.
func Load(args []string) (Config, error) {
	fs := Flags()
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	v := viper.New()
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(fs); err != nil {
		return Config{}, err
	}

	if file := v.GetString(configFileKey); file != "" {
		if err := checkConfigFile(file); err != nil {
			return Config{}, err
		}
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", file, err)
		}
	}

	sources := fmt.Sprintf("flags, %s_* environment", envPrefix)
	if file := v.GetString(configFileKey); file != "" {
		sources += ", config file " + file
	}
	var cfg Config
	if err := v.Unmarshal(&cfg); err != nil {
		return Config{}, fmt.Errorf("configuration (%s): %w", sources, err)
	}
	if err := cfg.validate(); err != nil {
		return Config{}, fmt.Errorf("configuration (%s): %w", sources, err)
	}
	return cfg, nil
}

// checkConfigFile decodes the file on its own, strictly, so an unknown key
// or a value of the wrong type is reported with the file's name.
func checkConfigFile(file string) error {
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	v := viper.New()
	v.SetConfigFile(file)
	if err := v.ReadInConfig(); err != nil {
		return fmt.Errorf("config file %s is not valid YAML: %w", file, err)
	}
	var cfg Config
	if err := v.UnmarshalExact(&cfg); err != nil {
		return fmt.Errorf("config file %s: %w", file, err)
	}
	return nil
}

func (c Config) validate() error {
	var errs []error
	switch c.LogFormat {
	case "json", "console":
	default:
		errs = append(errs, fmt.Errorf("log-format %q: must be json or console", c.LogFormat))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	// Unknown controller names fail here, before any cluster is contacted.
	if _, err := operator.Select(c.Controllers); err != nil {
		errs = append(errs, err)
	}
	if c.KubeAPIQPS <= 0 || c.KubeAPIBurst <= 0 {
		errs = append(errs, fmt.Errorf("kube-api-qps and kube-api-burst must be positive"))
	}
	if c.ConfigMonitorRestartsPerSecond <= 0 || c.ConfigMonitorRestartBurst <= 0 {
		errs = append(errs, fmt.Errorf("configmonitor-restarts-per-second and configmonitor-restart-burst must be positive (suspend a monitor with spec.suspend instead)"))
	}
	return errors.Join(errs...)
}

// settings are the options the controllers take.
func (c Config) settings() operator.Settings {
	return operator.Settings{
		ConfigMonitorIgnoreSecrets:     c.ConfigMonitorIgnoreSecrets,
		ConfigMonitorRestartsPerSecond: c.ConfigMonitorRestartsPerSecond,
		ConfigMonitorRestartBurst:      c.ConfigMonitorRestartBurst,
	}
}
