package database

import (
	"fmt"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/pooler"
)

// poolerTarget describes a Database to the Pooler controller: the Service
// a Pooler of the type connects to, the Secrets and the state it needs.
func poolerTarget(d *dbv1.Database, typ dbv1.PoolerType) (pooler.Target, error) {
	db := DatabaseKind.Clusters.View(d)
	if engineOf(db) != dbv1.EnginePostgreSQL {
		return pooler.Target{}, fmt.Errorf("Database %s runs %s: PgBouncer pools PostgreSQL only", d.Name, engineOf(db))
	}
	eng := DatabaseKind.Engines[dbv1.EnginePostgreSQL]
	n := namesOf(db)
	service := n.ReadWrite
	if typ == dbv1.PoolerReadOnly {
		service = n.ReadOnly
	}
	return pooler.Target{
		Host:             fmt.Sprintf("%s.%s.svc", service, d.Namespace),
		Port:             portOf(db, eng),
		PrimaryHost:      fmt.Sprintf("%s.%s.svc", n.ReadWrite, d.Namespace),
		ReadWriteService: n.ReadWrite,
		AppDatabase:      d.Spec.Name,
		AppSecret:        n.App,
		SuperuserSecret:  n.Superuser,
		ServerCASecret:   tlsSecretOf(db),
		Image:            imageOf(db, eng),
		RunAsUser:        runAsUserOf(db),
		Initialized:      initializedOrRestored(db),
	}, nil
}
