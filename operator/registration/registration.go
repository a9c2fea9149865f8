// Package registration is what a controller hands to the registry
// (package operator): its name, its API types, its own settings and how to
// set it up. It imports no controller, so every controller package can
// declare its registration without an import cycle.
package registration

import (
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagedByLabel marks every object a deckhand controller creates. The
// caches of the types a controller lists in Owns hold only objects with
// this label, so the operator never caches the cluster's other Deployments,
// Services or StatefulSets.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "deckhand"
)

// Settings reads the operator's configuration by flag name (a
// *viper.Viper satisfies it).
type Settings interface {
	GetBool(key string) bool
	GetInt(key string) int
	GetFloat64(key string) float64
	GetString(key string) string
	GetStringSlice(key string) []string
	GetDuration(key string) time.Duration
}

// Controller is one reconciler deckhand can run, known by its name.
type Controller struct {
	// Name is used in --controllers.
	Name string
	// ValuesKey is the controller's key under `controllers:` in the chart's
	// values; the chart gates its flag, RBAC rules and CRDs on it.
	ValuesKey string
	// AddToScheme registers the API types the controller serves.
	AddToScheme func(*runtime.Scheme) error
	// Flags declares the controller's own settings with their defaults,
	// each named after the controller (nil: it has none).
	Flags func(*pflag.FlagSet)
	// Check validates those settings when the configuration is loaded,
	// before any cluster is contacted (nil: nothing to check).
	Check func(Settings) error
	// Owns lists the types the controller creates, all labelled
	// ManagedByLabel=ManagedByValue: their caches hold only such objects.
	// Types other controllers watch unfiltered (ConfigMaps, Secrets, pods)
	// do not belong here: read them live or through a metadata watch.
	Owns []client.Object
	// Setup registers the controller with the manager.
	Setup func(ctrl.Manager, Settings) error
}
