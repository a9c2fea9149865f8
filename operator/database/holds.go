package database

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Holds: a backup that something still needs carries an annotation per
// holder, Keys.HeldBy + "<purpose>.<holder's UID>" with a sentence saying
// who and why. Retention never prunes a held backup, and its finalizer
// waits before deleting the file. A hold whose holder is gone (no cluster
// of that UID in the namespace) counts no more, so a holder deleted
// before it let go leaves nothing stuck. Purposes today: an upgrade
// (from the pre-upgrade backup's completion until the upgrade ends) and
// a restore (fromBackup, until restored) and the newest verified backup
// (until a newer one is verified: retention never deletes the newest
// backup known to restore).
const (
	// AnnotationPrefixHeldBy prefixes a Database's holds on a
	// DatabaseBackup.
	AnnotationPrefixHeldBy = "held-by.stable.imaginedata.co/"

	holdUpgrade = "upgrade"
	holdRestore = "restore"
)

// holdKey is the annotation of one holder's hold.
func holdKey(kind *Kind, purpose string, holder *Cluster) string {
	return kind.Keys.HeldBy + purpose + "." + string(holder.UID)
}

// hold puts holder's hold on backup b (when not there yet).
func (r *Reconciler) hold(ctx context.Context, b *Backup, holder *Cluster, purpose, why string) error {
	key := holdKey(r.Kind, purpose, holder)
	if _, ok := b.Annotations[key]; ok {
		return nil
	}
	if err := r.patchHolds(ctx, b, map[string]*string{key: &why}); err != nil {
		return fmt.Errorf("holding %s %s (%s): %w", r.Kind.backupKind(), b.Name, purpose, err)
	}
	return nil
}

// patchHolds sets (or, with nil, removes) hold annotations with a merge
// patch: each holder writes its own key, so holders never overwrite each
// other.
func (r *Reconciler) patchHolds(ctx context.Context, b *Backup, holds map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": holds}})
	if err != nil {
		return err
	}
	obj := r.Kind.Backups.New()
	obj.SetNamespace(b.Namespace)
	obj.SetName(b.Name)
	return client.IgnoreNotFound(r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, body)))
}

// holdsWanted are the holds db needs now: hold key -> backup name.
func holdsWanted(db *Cluster) map[string]string {
	want := map[string]string{}
	if u := db.Status.Upgrade; upgradeRunning(u) && u.Backup != "" && u.Step != "" {
		want[holdKey(db.Kind, holdUpgrade, db)] = u.Backup
	}
	if db.Spec.FromBackup != "" && !restored(db) {
		want[holdKey(db.Kind, holdRestore, db)] = db.Spec.FromBackup
	}
	if b := db.Status.Backup; b != nil && b.LastVerifiedBackup != "" {
		want[holdKey(db.Kind, holdVerified, db)] = b.LastVerifiedBackup
	}
	return want
}

// releaseHolds takes db's holds off the backups it no longer needs (an
// upgrade that ended, a restore that is done). Holds are released here,
// from what the status says, rather than at each step's end, so a release
// that failed once is retried by the next reconcile.
func (r *Reconciler) releaseHolds(ctx context.Context, db *Cluster) error {
	all, err := r.Kind.Backups.List(ctx, r.Client, db.Namespace)
	if err != nil {
		return err
	}
	want := holdsWanted(db)
	suffix := "." + string(db.UID)
	for _, b := range all {
		drop := map[string]*string{}
		for key := range b.Annotations {
			if strings.HasPrefix(key, r.Kind.Keys.HeldBy) && strings.HasSuffix(key, suffix) && want[key] != b.Name {
				drop[key] = nil
			}
		}
		if len(drop) == 0 {
			continue
		}
		if err := r.patchHolds(ctx, b, drop); err != nil {
			return fmt.Errorf("releasing %s %s: %w", r.Kind.backupKind(), b.Name, err)
		}
	}
	return nil
}

// heldBy says who holds b (empty when nobody): the holds of clusters that
// still exist, and a cluster being restored from b whose first reconcile
// has not written its hold yet.
func heldBy(ctx context.Context, kind *Kind, c client.Reader, b *Backup) ([]string, error) {
	clusters, err := kind.Clusters.List(ctx, c, b.Namespace)
	if err != nil {
		return nil, err
	}
	alive := map[string]bool{}
	for _, cl := range clusters {
		alive[string(cl.UID)] = true
	}
	var out []string
	for key, why := range b.Annotations {
		rest, ok := strings.CutPrefix(key, kind.Keys.HeldBy)
		if !ok {
			continue
		}
		if _, uid, ok := strings.Cut(rest, "."); ok && alive[uid] {
			out = append(out, why)
		}
	}
	for _, cl := range clusters {
		_, written := b.Annotations[holdKey(kind, holdRestore, cl)]
		if cl.Spec.FromBackup == b.Name && !restored(cl) && !written {
			out = append(out, fmt.Sprintf("%s %s is being restored from it", kind.clusterKind(), cl.Name))
		}
	}
	sort.Strings(out)
	return out, nil
}
