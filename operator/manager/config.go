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
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/deckhand-dev/deckhand/operator"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// Config is everything the manager can be told. Each field's key is its
// flag name, which is also its key in the config file; DECKHAND_<KEY> with
// dashes as underscores is its environment variable.
type Config struct {
	Kubeconfig              string   `mapstructure:"kubeconfig"`
	Controllers             []string `mapstructure:"controllers"`
	WatchNamespaces         []string `mapstructure:"watch-namespaces"`
	ExcludeNamespaces       []string `mapstructure:"exclude-namespaces"`
	LeaderElect             bool     `mapstructure:"leader-elect"`
	LeaderElectionNamespace string   `mapstructure:"leader-election-namespace"`
	LeaderElectionID        string   `mapstructure:"leader-election-id"`
	// The leader elector's times (zero: controller-runtime's defaults, as
	// the flags'); checkLeaderElectionTimes says what they must satisfy.
	LeaderElectionLeaseDuration time.Duration `mapstructure:"leader-election-lease-duration"`
	LeaderElectionRenewDeadline time.Duration `mapstructure:"leader-election-renew-deadline"`
	LeaderElectionRetryPeriod   time.Duration `mapstructure:"leader-election-retry-period"`
	MetricsBindAddress          string        `mapstructure:"metrics-bind-address"`
	HealthProbeBindAddress      string        `mapstructure:"health-probe-bind-address"`
	PprofBindAddress            string        `mapstructure:"pprof-bind-address"`
	LogLevel                    string        `mapstructure:"log-level"`
	LogFormat                   string        `mapstructure:"log-format"`
	KubeAPIQPS                  float32       `mapstructure:"kube-api-qps"`
	KubeAPIBurst                int           `mapstructure:"kube-api-burst"`
	GracefulShutdownTimeout     time.Duration `mapstructure:"graceful-shutdown-timeout"`

	// Settings holds every option by flag name, the controllers' own
	// included; each controller reads its settings from it. Nil means the
	// defaults.
	Settings registration.Settings `mapstructure:"-"`

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
	fs.StringSlice("exclude-namespaces", nil, "namespaces to leave alone when watch-namespaces is empty: every controller ignores their objects (e.g. where another deckhand release runs)")
	fs.Bool("leader-elect", false, "elect a leader with a Lease so only one replica reconciles")
	fs.String("leader-election-namespace", "", "namespace of the leader-election Lease (default: the operator's own namespace)")
	fs.String("leader-election-id", "deckhand.deckhand.dev", "name of the leader-election Lease")
	fs.Duration("leader-election-lease-duration", DefaultLeaseDuration, "how long a leader's Lease holds after its last renewal: another operator pod takes over that long after the leader dies without releasing it (a restart in the same pod takes it back at once); whole seconds")
	fs.Duration("leader-election-renew-deadline", DefaultRenewDeadline, "how long the leader keeps failing to renew its Lease before it stops leading and starts afresh in its process; shorter than leader-election-lease-duration")
	fs.Duration("leader-election-retry-period", DefaultRetryPeriod, "how often the leader renews its Lease, and how often the others try to take it; under leader-election-renew-deadline / 1.2")
	fs.String("metrics-bind-address", ":8080", `address of the Prometheus metrics endpoint; "0" turns it off`)
	fs.String("health-probe-bind-address", ":8081", "address serving /healthz and /readyz")
	fs.String("pprof-bind-address", "0", `address serving Go's /debug/pprof profiles, for finding where memory or CPU goes; "0" (the default) turns it off. It has no authentication: bind it to 127.0.0.1 and port-forward`)
	fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.String("log-format", "json", "log format: json or console")
	fs.Float32("kube-api-qps", 200, "client-side rate limit on API requests per second")
	fs.Int("kube-api-burst", 400, "client-side burst of API requests")
	fs.Duration("graceful-shutdown-timeout", 30*time.Second, "time given to running reconciles after SIGTERM")
	// Each controller declares its own settings.
	for _, c := range operator.Controllers {
		if c.Flags != nil {
			c.Flags(fs)
		}
	}
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
		if err := checkConfigFile(file, Flags()); err != nil {
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
	cfg.Settings = v
	if err := cfg.validate(); err != nil {
		return Config{}, fmt.Errorf("configuration (%s): %w", sources, err)
	}
	return cfg, nil
}

// DefaultSettings are every option at its default.
func DefaultSettings() registration.Settings {
	v := viper.New()
	if err := v.BindPFlags(Flags()); err != nil {
		panic(err) // a flag set that cannot be bound is a programming error
	}
	return v
}

// checkConfigFile reads the file on its own, strictly: every key must be
// an option and every value must parse as that option's flag would, so a
// typo or a wrong type is reported with the file's name.
func checkConfigFile(file string, fs *pflag.FlagSet) error {
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	v := viper.New()
	v.SetConfigFile(file)
	if err := v.ReadInConfig(); err != nil {
		return fmt.Errorf("config file %s is not valid YAML: %w", file, err)
	}
	var errs []error
	for _, key := range v.AllKeys() {
		f := fs.Lookup(key)
		if f == nil || key == configFileKey {
			errs = append(errs, fmt.Errorf("unknown option %q", key))
			continue
		}
		if err := f.Value.Set(flagText(v.Get(key))); err != nil {
			errs = append(errs, fmt.Errorf("option %q: %w", key, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("config file %s: %w", file, err)
	}
	return nil
}

// flagText writes a YAML value the way it would be given on the command
// line: lists comma-separated.
func flagText(value any) string {
	if list, ok := value.([]any); ok {
		parts := make([]string, len(list))
		for i, item := range list {
			parts[i] = fmt.Sprint(item)
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(value)
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
	// As given: zero is not a default here (it is in a Config built in code).
	if err := checkLeaderElectionTimes(c.LeaderElectionLeaseDuration, c.LeaderElectionRenewDeadline, c.LeaderElectionRetryPeriod); err != nil {
		errs = append(errs, err)
	}
	if err := checkNamespaces(c.WatchNamespaces, c.ExcludeNamespaces); err != nil {
		errs = append(errs, err)
	}
	if c.KubeAPIQPS <= 0 || c.KubeAPIBurst <= 0 {
		errs = append(errs, fmt.Errorf("kube-api-qps and kube-api-burst must be positive"))
	}
	// Each controller checks its own settings, selected or not: a bad
	// value fails now, not when someone enables the controller later.
	for _, ctl := range operator.Controllers {
		if ctl.Check != nil {
			if err := ctl.Check(c.settings()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// settings are every option by name, defaults when none were loaded.
func (c Config) settings() registration.Settings {
	if c.Settings == nil {
		return DefaultSettings()
	}
	return c.Settings
}

// checkNamespaces refuses watch-namespaces and exclude-namespaces together
// (leaving a namespace out of a list is not listing it) and names that
// cannot be namespaces.
func checkNamespaces(watch, exclude []string) error {
	if len(watch) > 0 && len(exclude) > 0 {
		return fmt.Errorf("watch-namespaces and exclude-namespaces cannot both be set: exclude-namespaces applies when every namespace is watched; leave the namespace out of watch-namespaces instead")
	}
	var errs []error
	for _, list := range []struct {
		flag  string
		names []string
	}{{"watch-namespaces", watch}, {"exclude-namespaces", exclude}} {
		for _, ns := range list.names {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s: %q is not a namespace name: %s", list.flag, ns, strings.Join(msgs, "; ")))
			}
		}
	}
	return errors.Join(errs...)
}
