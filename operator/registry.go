// Package operator names every deckhand controller and turns a
// --controllers selection into the set to run. Each controller describes
// itself (name, types, settings, set-up) in its own package; adding one
// touches this list and that package only.
package operator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/deckhand-dev/deckhand/operator/blogpost"
	"github.com/deckhand-dev/deckhand/operator/configmonitor"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter"
	"github.com/deckhand-dev/deckhand/operator/mysqlcluster"
	"github.com/deckhand-dev/deckhand/operator/registration"
	"github.com/deckhand-dev/deckhand/operator/tdset"
)

// Controllers is the registry: every controller deckhand has, by name.
var Controllers = []registration.Controller{
	blogpost.Registration,
	configmonitor.Registration,
	tdset.Registration,
	database.Registration,
	jmxexporter.Registration,
	mysqlcluster.Registration,
}

// Names lists the known controller names, sorted.
func Names() []string { return namesOf(Controllers) }

func namesOf(registry []registration.Controller) []string {
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
func Select(items []string) ([]registration.Controller, error) {
	return selectFrom(Controllers, items)
}

func selectFrom(registry []registration.Controller, items []string) ([]registration.Controller, error) {
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
	var selected []registration.Controller
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
