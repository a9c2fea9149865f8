package tdset

import (
	"fmt"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// flagWorkers is TDSet's one setting.
const flagWorkers = "tdset-workers"

// Registration is how the registry knows TDSet. Its Deployments and
// Services carry deckhand's managed-by label, so only those are cached.
var Registration = registration.Controller{
	Name:        Name,
	ValuesKey:   "tdset",
	AddToScheme: schedulev1.AddToScheme,
	Owns:        []client.Object{&appsv1.Deployment{}, &corev1.Service{}},
	Flags: func(fs *pflag.FlagSet) {
		fs.Int(flagWorkers, DefaultWorkers, "TDSets reconciled at once; at a window boundary shared by many TDSets each waits on one API write, so more workers scale them sooner")
	},
	Check: func(s registration.Settings) error { _, err := OptionsFrom(s); return err },
	Setup: func(mgr ctrl.Manager, s registration.Settings) error {
		o, err := OptionsFrom(s)
		if err != nil {
			return err
		}
		return SetupWithOptions(mgr, o)
	},
}

// OptionsFrom reads TDSet's settings and checks them.
func OptionsFrom(s registration.Settings) (Options, error) {
	o := Options{Workers: s.GetInt(flagWorkers)}
	if o.Workers <= 0 {
		return o, fmt.Errorf("%s must be positive", flagWorkers)
	}
	return o, nil
}
