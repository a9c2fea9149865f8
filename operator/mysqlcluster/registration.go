package mysqlcluster

import (
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// Registration is how the registry knows the MySQLCluster controller. It
// lists no Owns: like the Database controller, it watches what it owns
// through a cache of its own, selecting its own cluster label (Keys), so it
// runs with only its own toggle on and never sees a Database's objects.
var Registration = registration.Controller{
	Name:        Name,
	ValuesKey:   "mysqlCluster",
	AddToScheme: grtlv1.AddToScheme,
	Flags: func(fs *pflag.FlagSet) {
		fs.Bool(flagTLSDefault, true, "TLS on every connection for a new MySQLCluster that leaves spec.tls.enabled unset (recorded on it when first seen: annotation "+Keys.TLSDefault+")")
	},
	Setup: func(mgr ctrl.Manager, s registration.Settings) error {
		return Setup(mgr, Options{
			WatchNamespaces:   s.GetStringSlice(registration.FlagWatchNamespaces),
			ExcludeNamespaces: s.GetStringSlice(registration.FlagExcludeNamespaces),
			TLSByDefault:      s.GetBool(flagTLSDefault),
		})
	},
}

// flagTLSDefault: TLS for a new MySQLCluster that leaves spec.tls.enabled
// unset.
const flagTLSDefault = "mysqlcluster-tls-default"
