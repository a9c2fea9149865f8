package database

import (
	"os"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/pooler"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// flagFailoverDefault is the Database controller's one setting.
const flagFailoverDefault = "database-failover-default"

// flagTLSDefault: TLS for new Databases.
const flagTLSDefault = "database-tls-default"

// flagMonitoringDefault: metrics for new Databases.
const flagMonitoringDefault = "database-monitoring-default"

// flagArchiverImage: the archiver sidecar's image.
const flagArchiverImage = "database-archiver-image"

// flagPoolerImage: PgBouncer's image for Poolers that name none.
const flagPoolerImage = "database-pooler-image"

// Registration is how the registry knows the Database controller. It lists
// no Owns: its objects include Secrets, ConfigMaps and pods, which other
// controllers watch unfiltered in the manager's cache, so it watches
// everything it owns through a cache of its own that selects LabelDatabase
// (see Setup).
var Registration = registration.Controller{
	Name:        Name,
	ValuesKey:   "database",
	AddToScheme: dbv1.AddToScheme,
	Flags: func(fs *pflag.FlagSet) {
		fs.Bool(flagTLSDefault, true, "TLS on every connection for a new Database that leaves spec.tls.enabled unset (recorded on it when first seen: annotation "+AnnotationTLSDefault+")")
		fs.Bool(flagMonitoringDefault, true, "PostgreSQL's metrics served by every pod of a new PostgreSQL Database that leaves spec.monitoring.enabled unset (recorded on it when first seen: annotation "+AnnotationMonitoringDefault+")")
		fs.String(flagArchiverImage, DefaultArchiverImage, "image of the archiver sidecar (Barman Cloud) in the pods of a Database with spec.backup.storage.objectStore")
		fs.String(flagPoolerImage, pooler.DefaultImage, "PgBouncer's image for a Pooler that leaves spec.image unset")
		fs.Bool(flagFailoverDefault, true, "automatic failover for a new PostgreSQL Database that leaves spec.failover.enabled unset (recorded on it when first seen: annotation "+AnnotationFailoverDefault+")")
	},
	Setup: func(mgr ctrl.Manager, s registration.Settings) error {
		// The chart sets the operator's own image: database pods copy
		// the instance agent from it (spec.failover).
		return Setup(mgr, Options{
			WatchNamespaces:     s.GetStringSlice(registration.FlagWatchNamespaces),
			ExcludeNamespaces:   s.GetStringSlice(registration.FlagExcludeNamespaces),
			OperatorImage:       os.Getenv("DECKHAND_OPERATOR_IMAGE"),
			FailoverByDefault:   s.GetBool(flagFailoverDefault),
			TLSByDefault:        s.GetBool(flagTLSDefault),
			MonitoringByDefault: s.GetBool(flagMonitoringDefault),
			ArchiverImage:       s.GetString(flagArchiverImage),
			PoolerImage:         s.GetString(flagPoolerImage),
		})
	},
}
