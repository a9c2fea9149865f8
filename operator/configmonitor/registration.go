package configmonitor

import (
	"fmt"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// ConfigMonitor's settings, by flag name.
const (
	flagRestartsPerSecond = "configmonitor-restarts-per-second"
	flagRestartBurst      = "configmonitor-restart-burst"
	flagIgnoreSecrets     = "configmonitor-ignore-secrets"
	flagWorkers           = "configmonitor-workers"
)

// Registration is how the registry knows ConfigMonitor.
var Registration = registration.Controller{
	Name:        Name,
	ValuesKey:   "configMonitor",
	AddToScheme: magalixv1.AddToScheme,
	Flags:       addFlags,
	Check:       func(s registration.Settings) error { _, err := OptionsFrom(s); return err },
	Setup: func(mgr ctrl.Manager, s registration.Settings) error {
		o, err := OptionsFrom(s)
		if err != nil {
			return err
		}
		return Setup(mgr, o)
	},
}

func addFlags(fs *pflag.FlagSet) {
	fs.Float64(flagRestartsPerSecond, DefaultRestartsPerSecond, "ConfigMonitor's restarts per second across all monitors (a token bucket), so a configuration storm cannot flood the API server")
	fs.Int(flagRestartBurst, DefaultRestartBurst, "restarts ConfigMonitor may make at once before --"+flagRestartsPerSecond+" applies")
	fs.Int(flagWorkers, DefaultWorkers, "ConfigMonitors reconciled at once; each mostly waits on two API round trips, so more workers cut queueing when many configurations change together")
	fs.Bool(flagIgnoreSecrets, false, "run ConfigMonitor without any access to Secrets: monitors naming one (spec.secret) are reported, not served")
}

// OptionsFrom reads ConfigMonitor's settings and checks them.
func OptionsFrom(s registration.Settings) (Options, error) {
	o := Options{
		IgnoreSecrets:     s.GetBool(flagIgnoreSecrets),
		RestartsPerSecond: s.GetFloat64(flagRestartsPerSecond),
		RestartBurst:      s.GetInt(flagRestartBurst),
		Workers:           s.GetInt(flagWorkers),
		Namespaces:        s.GetStringSlice(registration.FlagWatchNamespaces),
		ExcludeNamespaces: s.GetStringSlice(registration.FlagExcludeNamespaces),
	}
	if o.RestartsPerSecond <= 0 || o.RestartBurst <= 0 {
		return o, fmt.Errorf("%s and %s must be positive (suspend a monitor with spec.suspend instead)", flagRestartsPerSecond, flagRestartBurst)
	}
	if o.Workers <= 0 {
		return o, fmt.Errorf("%s must be positive", flagWorkers)
	}
	return o, nil
}
