package database

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

// Holds on base backups (docs/design/database-backup.md): what retention
// must not delete from a Database's archive. The operator writes them into
// the scripts ConfigMap (postgres.BaseBackupHoldsKey); the primary's
// archiver applies them as Barman keep annotations before retention runs
// (archive/holds.sh), so the tool's own expiry skips what they keep:
//   - keep: the newest verified base backup (status.baseBackups.lastVerified),
//     until a newer one is verified, as the newest verified dump is held;
//   - pause: while another Database recovers from this archive, retention
//     deletes nothing, so the base backup and WAL its recovery reads stay;
//   - keep: each base backup whose DatabaseBackup has spec.keep.

// baseBackupHoldsOf is the holds key's value for db: none without an
// archive.
func (r *Reconciler) baseBackupHoldsOf(ctx context.Context, db *Cluster) (string, error) {
	if objectStoreOf(db) == nil {
		return "", nil
	}
	recoveries, err := recoveriesFrom(ctx, r.Kind, r.Client, db)
	if err != nil {
		return "", err
	}
	objs, err := r.Kind.baseBackupsOf(ctx, r.Client, db)
	if err != nil {
		return "", err
	}
	return baseBackupHolds(db, recoveries, keptBaseBackups(objs)), nil
}

// baseBackupHolds is the holds key's value for db; recoveries are the
// Databases recovering from its archive ("namespace/name"), kept the
// lines of its base backup objects with spec.keep (keptBaseBackups).
func baseBackupHolds(db *Cluster, recoveries []string, kept string) string {
	var b strings.Builder
	b.WriteString(kept)
	if bb := db.Status.BaseBackups; bb != nil && bb.LastVerified != nil {
		b.WriteString(postgres.KeepHold(bb.LastVerified.ID, fmt.Sprintf("the newest verified base backup (%s) of Database %s/%s", bb.LastVerified.Name, db.Namespace, db.Name)))
	}
	for _, r := range recoveries {
		b.WriteString(postgres.PauseHold(fmt.Sprintf("Database %s recovers from this archive", r)))
	}
	return b.String()
}

// recoveriesFrom are the Databases (in any namespace the operator
// watches) recovering from db's archive and not recovered yet nor being
// deleted, as "namespace/name", sorted.
func recoveriesFrom(ctx context.Context, kind *Kind, c client.Reader, db *Cluster) ([]string, error) {
	store := objectStoreOf(db)
	if store == nil {
		return nil, nil
	}
	all, err := kind.Clusters.List(ctx, c, "")
	if err != nil {
		return nil, fmt.Errorf("listing the Databases that may recover from %s's archive: %w", db.Name, err)
	}
	var out []string
	for _, c := range all {
		// One being deleted no longer recovers.
		if rc := recoveryOf(c); rc != nil && !restored(c) && c.DeletionTimestamp.IsZero() && readsArchiveOf(rc.Source, db.Name, store) {
			out = append(out, c.Namespace+"/"+c.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// readsArchiveOf: source is the archive written under server in store.
func readsArchiveOf(source dbv1.RecoverySource, server string, store *dbv1.ObjectStore) bool {
	s := source.ObjectStore
	return source.ServerName == server && s.Bucket == store.Bucket && s.Endpoint == store.Endpoint &&
		strings.Trim(s.Path, "/") == strings.Trim(store.Path, "/")
}

// sourcesOfRecovery maps a Database recovering from an archive to the
// Databases (in the namespaces watched) that may have written it, so their holds
// pause retention as soon as the recovery is asked for, and lift the
// pause once it is done.
func sourcesOfRecovery(kind *Kind, clusters client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		rc := recoveryOf(kind.Clusters.View(o))
		if rc == nil {
			return nil
		}
		all, err := kind.Clusters.List(ctx, clusters, "")
		if err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, c := range all {
			if store := objectStoreOf(c); store != nil && readsArchiveOf(rc.Source, c.Name, store) {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
			}
		}
		return out
	}
}
