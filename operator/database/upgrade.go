package database

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// Upgrade names.
const (
	// AnnotationAllowUnknownVersion: "true" lets an image change roll when
	// the version of the old or the new image cannot be read (after a
	// backup, as a same-major change).
	AnnotationAllowUnknownVersion = "stable.imaginedata.co/allow-unknown-version"

	ConditionUpgradeBlocked = "UpgradeBlocked"
	ConditionUpgrading      = "Upgrading"
	// ConditionUpgradeFailed is True after a major upgrade was rolled back
	// (or could not be): its reason says which step failed.
	ConditionUpgradeFailed = "UpgradeFailed"

	reasonPreUpgrade = "pre-upgrade"
)

// liveImage is the image the StatefulSet's servers run.
func liveImage(sts *appsv1.StatefulSet) string {
	if c := sts.Spec.Template.Spec.Containers; len(c) > 0 {
		return c[0].Image
	}
	return ""
}

// preUpgradeBackupName is one per target image.
func preUpgradeBackupName(db *Cluster, image string) string {
	sum := sha256.Sum256([]byte(image))
	return fmt.Sprintf("%s-pre-upgrade-%s", db.Name, hex.EncodeToString(sum[:4]))
}

// serversToRun decides what the StatefulSet runs. A cluster that holds
// data changes image only after a backup of it has completed; a new major
// version goes through majorUpgrade (the servers stop, a Job upgrades the
// primary's data) for Kinds that record its steps. A major-version
// downgrade, and an image whose version cannot be read (without
// AnnotationAllowUnknownVersion), are refused with UpgradeBlocked and the
// servers keep their image.
func (r *Reconciler) serversToRun(ctx context.Context, db *Cluster, eng engine.Engine, l *live) (serverPlan, error) {
	wanted := imageOf(db, eng)
	if u := db.Status.Upgrade; upgradeRunning(u) {
		if u.Step != dbv1.UpgradeBackingUp || u.ToImage == wanted {
			// Once the servers stop, the upgrade finishes or is rolled
			// back before spec.image is looked at again.
			return r.majorUpgrade(ctx, db, eng, l)
		}
		// Nothing was touched yet: a new spec.image replaces the upgrade.
		r.normal(db, "UpgradeCancelled", "Upgrade", "spec.image is now %s: the upgrade to %s is cancelled before the servers were touched (DatabaseBackup %s is kept)", wanted, u.ToImage, u.Backup)
		db.Status.Upgrade = nil
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgrading)
	}
	running := ""
	if l.has("StatefulSet", namesOf(db).StatefulSet) {
		running = liveImage(&l.statefulSet)
	}
	if u := db.Status.Upgrade; u != nil && u.Step == dbv1.UpgradeFailed && running == wanted {
		// The user set spec.image back to what runs: the failure is dealt
		// with; a new attempt starts when spec.image changes again.
		r.normal(db, "UpgradeFailureCleared", "Upgrade", "spec.image is %s again: condition UpgradeFailed cleared", wanted)
		db.Status.Upgrade = nil
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgradeFailed)
	}
	if running == "" || running == wanted || !meta.IsStatusConditionTrue(db.Status.Conditions, ConditionInitialized) {
		// Nothing runs yet, nothing changes, or no data to protect yet
		// (a failed init's image can be fixed freely).
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgradeBlocked)
		if !upgradeRunning(db.Status.Upgrade) {
			meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgrading)
		}
		return steadyPlan(db, wanted), nil
	}
	fromV, fromOK := db.Status.CurrentVersion, db.Status.CurrentVersion != "" && db.Status.CurrentImage == running
	if !fromOK {
		fromV, fromOK = eng.VersionFromImage(running)
	}
	toV, toOK := eng.VersionFromImage(wanted)
	if (!fromOK || !toOK) && db.Annotations[db.Kind.Keys.AllowUnknownVersion] != "true" {
		unknown := wanted
		if !fromOK {
			unknown = running
		}
		r.blockUpgrade(db, "VersionUnreadable", fmt.Sprintf(
			"image %s has no readable version, so the operator cannot tell a minor update from a major upgrade or a downgrade; the servers keep %s. Use an image tagged with its version, or annotate the Database %s=true to roll after a backup",
			unknown, running, db.Kind.Keys.AllowUnknownVersion))
		return steadyPlan(db, running), nil
	}
	if fromOK && toOK {
		fromM, okF := eng.MajorVersion(fromV)
		toM, okT := eng.MajorVersion(toV)
		switch {
		case !okF || !okT:
			r.blockUpgrade(db, "VersionUnreadable", fmt.Sprintf("versions %s and %s are not %s versions; the servers keep %s", fromV, toV, eng.Name(), running))
			return steadyPlan(db, running), nil
		case compareVersions(toM, fromM) < 0:
			r.blockUpgrade(db, "Downgrade", fmt.Sprintf(
				"%s %s to %s is a major-version downgrade, which a data directory cannot take: refused, nothing changed; the servers keep %s. Set spec.image back to %s, or restore a backup into a new Database of the older version",
				eng.Name(), fromV, toV, running, running))
			return steadyPlan(db, running), nil
		case compareVersions(toM, fromM) > 0 && !db.Kind.MajorUpgrades:
			r.blockUpgrade(db, "MajorUpgradeNotAutomated", fmt.Sprintf(
				"%s %s to %s is a major upgrade; upgrade Jobs are not automated yet: the servers keep %s. Take a DatabaseBackup and restore it into a new Database with image %s (fromBackup)",
				eng.Name(), fromV, toV, running, wanted))
			return steadyPlan(db, running), nil
		case compareVersions(toM, fromM) > 0:
			meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgradeBlocked)
			if u := db.Status.Upgrade; u != nil && u.Step == dbv1.UpgradeFailed && u.ToImage == wanted {
				// Rolled back: no new attempt until spec.image changes.
				return steadyPlan(db, running), nil
			}
			if err := r.requireFresh(ctx, db); err != nil {
				// An upgrade may have started already: its status is not
				// in the cache yet.
				return serverPlan{Keep: true}, err
			}
			r.startMajorUpgrade(db, eng, running, wanted, fromV, toV)
			return r.majorUpgrade(ctx, db, eng, l)
		}
	}
	meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgradeBlocked)
	image, err := r.backupBeforeRoll(ctx, db, running, wanted)
	return steadyPlan(db, image), err
}

// backupBeforeRoll returns the new image once a backup taken with the old
// one has completed, the old image until then.
func (r *Reconciler) backupBeforeRoll(ctx context.Context, db *Cluster, running, wanted string) (string, error) {
	name := preUpgradeBackupName(db, wanted)
	b, err := r.Kind.getBackup(ctx, r.Client, client.ObjectKey{Namespace: db.Namespace, Name: name})
	if apierrors.IsNotFound(err) {
		if _, err := r.createBackup(ctx, db, name, reasonPreUpgrade); err != nil {
			return running, err
		}
		r.normal(db, "Upgrading", "Upgrade", "image %s to %s: DatabaseBackup %s first, then the servers roll (standbys first)", running, wanted, name)
		r.setCondition(db, ConditionUpgrading, true, "BackingUp", fmt.Sprintf("DatabaseBackup %s runs before the servers roll from %s to %s", name, running, wanted))
		return running, nil
	}
	if err != nil {
		return running, err
	}
	switch b.Status.Phase {
	case dbv1.BackupCompleted:
		if c := meta.FindStatusCondition(db.Status.Conditions, ConditionUpgrading); c == nil || c.Reason != "Rolling" {
			r.normal(db, "Upgrading", "Upgrade", "DatabaseBackup %s completed: the servers roll from %s to %s", name, running, wanted)
		}
		r.setCondition(db, ConditionUpgrading, true, "Rolling", fmt.Sprintf("rolling from %s to %s after DatabaseBackup %s", running, wanted, name))
		return wanted, nil
	case dbv1.BackupFailed:
		r.blockUpgrade(db, "PreUpgradeBackupFailed", fmt.Sprintf(
			"the backup before the change from %s to %s (DatabaseBackup %s) failed; the servers keep %s. Delete DatabaseBackup %s to try again",
			running, wanted, name, running, name))
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgrading)
		return running, nil
	default:
		r.setCondition(db, ConditionUpgrading, true, "BackingUp", fmt.Sprintf("DatabaseBackup %s runs before the servers roll from %s to %s", name, running, wanted))
		return running, nil
	}
}

func (r *Reconciler) blockUpgrade(db *Cluster, reason, msg string) {
	if c := meta.FindStatusCondition(db.Status.Conditions, ConditionUpgradeBlocked); c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
		r.Recorder.Eventf(db.Object, nil, "Warning", reason, "Upgrade", "%s", msg)
	}
	r.setCondition(db, ConditionUpgradeBlocked, true, reason, msg)
}

// compareVersions compares dotted numbers ("17" < "18", "8.0" < "8.4").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}
