// Package operator names every deckhand controller and turns a
// --controllers selection into the set to run.
package operator

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	iximiuzv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/iximiuz/v1alpha1"
	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
	"github.com/deckhand-dev/deckhand/operator/blogpost"
	"github.com/deckhand-dev/deckhand/operator/configmonitor"
	"github.com/deckhand-dev/deckhand/operator/tdset"
)

// Controller is one reconciler deckhand can run, known by its name.
type Controller struct {
	// Name is used in --controllers.
	Name string
	// ValuesKey is the controller's key under `controllers:` in the chart's
	// values; the chart gates its flag, RBAC rules and CRDs on it.
	ValuesKey string
	// AddToScheme registers the API types the controller serves.
	AddToScheme func(*runtime.Scheme) error
	// Setup registers the controller with the manager.
	Setup func(ctrl.Manager, Settings) error
}

// Settings are the options of individual controllers, from the operator's
// configuration.
type Settings struct {
	// ConfigMonitorIgnoreSecrets runs ConfigMonitor without any access to
	// Secrets.
	ConfigMonitorIgnoreSecrets bool
	// ConfigMonitorRestartsPerSecond and ConfigMonitorRestartBurst pace
	// ConfigMonitor's restarts across all monitors (zero: its defaults).
	ConfigMonitorRestartsPerSecond float64
	ConfigMonitorRestartBurst      int
}

// Controllers is the registry: every controller deckhand has, by name.
var Controllers = []Controller{
	{Name: blogpost.Name, ValuesKey: "blogPost", AddToScheme: iximiuzv1alpha1.AddToScheme, Setup: withoutSettings(blogpost.Setup)},
	{Name: configmonitor.Name, ValuesKey: "configMonitor", AddToScheme: magalixv1.AddToScheme, Setup: setupConfigMonitor},
	{Name: tdset.Name, ValuesKey: "tdset", AddToScheme: schedulev1.AddToScheme, Setup: withoutSettings(tdset.Setup)},
}

func setupConfigMonitor(mgr ctrl.Manager, s Settings) error {
	return configmonitor.Setup(mgr, configmonitor.Options{
		IgnoreSecrets:     s.ConfigMonitorIgnoreSecrets,
		RestartsPerSecond: s.ConfigMonitorRestartsPerSecond,
		RestartBurst:      s.ConfigMonitorRestartBurst,
	})
}

// withoutSettings adapts the Setup of a controller that takes no settings.
func withoutSettings(setup func(ctrl.Manager) error) func(ctrl.Manager, Settings) error {
	return func(mgr ctrl.Manager, _ Settings) error { return setup(mgr) }
}

// Names lists the known controller names, sorted.
func Names() []string { return namesOf(Controllers) }

func namesOf(registry []Controller) []string {
	names := make([]string, 0, len(registry))
	for _, c := range registry {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return names
}

// Select resolves a --controllers selection with cert-manager's grammar:
// "*" is every controller, "a" adds a, "-a" removes a; removals win. The
// result keeps the registry's order.
func Select(items []string) ([]Controller, error) { return selectFrom(Controllers, items) }

func selectFrom(registry []Controller, items []string) ([]Controller, error) {
	known := namesOf(registry)
	all, enabled, disabled := false, map[string]bool{}, map[string]bool{}
	for _, raw := range items {
		item := strings.TrimSpace(raw)
		switch {
		case item == "":
			continue
		case item == "*":
			all = true
			continue
		}
		name, off := strings.CutPrefix(item, "-")
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("unknown controller %q in --controllers; known controllers: %s (use * for all, -name to leave one out)",
				name, strings.Join(known, ", "))
		}
		if off {
			disabled[name] = true
		} else {
			enabled[name] = true
		}
	}
	var selected []Controller
	for _, c := range registry {
		if (all || enabled[c.Name]) && !disabled[c.Name] {
			selected = append(selected, c)
		}
	}
	if len(selected) == 0 {
		return nil, fmt.Errorf("--controllers %q selects no controller; known controllers: %s",
			strings.Join(items, ","), strings.Join(known, ", "))
	}
	return selected, nil
}
