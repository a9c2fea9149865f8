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

	// AnnotationImageChange on a pre-upgrade DatabaseBackup of a change
	// within one major version: "<running image> -> <new image>", the
	// change it was taken for.
	AnnotationImageChange = "stable.imaginedata.co/image-change"
)

// liveImage is the image the StatefulSet's servers run.
func liveImage(sts *appsv1.StatefulSet) string {
	if c := sts.Spec.Template.Spec.Containers; len(c) > 0 {
		return c[0].Image
	}
	return ""
}

// preUpgradeBackupName is one per attempt at an image change: the
// Database (its UID: a later Database of the same name gets its own), the
// change and the generation that asked for it, so going back and forth
// between two images takes a new backup each time.
func preUpgradeBackupName(db *Cluster, running, wanted string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%d", db.UID, running, wanted, db.Generation))
	return fmt.Sprintf("%s-pre-upgrade-%s", db.Name, hex.EncodeToString(sum[:4]))
}

// imageChange is the AnnotationImageChange value of a change.
func imageChange(running, wanted string) string { return running + " -> " + wanted }

// forgetImageChange: no image change is in progress.
func forgetImageChange(db *Cluster) {
	if db.Status.Backup != nil {
		db.Status.Backup.PreUpgradeBackup = ""
	}
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
		// Nothing was touched yet (but writes may be fenced, which the
		// unfence Job lifts): a new spec.image replaces the upgrade. Only
		// on the newest status: an older cached one would cancel (and
		// announce it) twice.
		if err := r.requireFresh(ctx, db); err != nil {
			return serverPlan{Keep: true}, err
		}
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
		forgetImageChange(db)
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
		case compareVersions(toM, fromM) > 0 || (r.MajorPathWithinMajor && db.Kind.MajorUpgrades):
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
// one for this very change has completed, the old image until then. The
// backup is this attempt's: named in status.backup.preUpgradeBackup, made
// for this Database's UID and for this change (checked before it is
// trusted); a change made again later takes a new one.
func (r *Reconciler) backupBeforeRoll(ctx context.Context, db *Cluster, running, wanted string) (string, error) {
	if db.Status.Backup == nil {
		db.Status.Backup = &dbv1.BackupStatus{}
	}
	name := db.Status.Backup.PreUpgradeBackup
	var b *Backup
	var err error
	if name != "" {
		b, err = r.Kind.getBackup(ctx, r.Client, client.ObjectKey{Namespace: db.Namespace, Name: name})
	}
	if name == "" || (err == nil && b.Annotations[db.Kind.Keys.ImageChange] != imageChange(running, wanted)) {
		// No attempt yet, or the recorded one was for another change.
		name = preUpgradeBackupName(db, running, wanted)
		b, err = r.Kind.getBackup(ctx, r.Client, client.ObjectKey{Namespace: db.Namespace, Name: name})
	}
	db.Status.Backup.PreUpgradeBackup = name
	if apierrors.IsNotFound(err) {
		if _, err := r.createBackup(ctx, db, name, reasonPreUpgrade, nil, map[string]string{db.Kind.Keys.ImageChange: imageChange(running, wanted)}); err != nil {
			return running, err
		}
		r.normal(db, "Upgrading", "Upgrade", "image %s to %s: DatabaseBackup %s first, then the servers roll (standbys first)", running, wanted, name)
		r.setCondition(db, ConditionUpgrading, true, "BackingUp", fmt.Sprintf("DatabaseBackup %s runs before the servers roll from %s to %s", name, running, wanted))
		return running, nil
	}
	if err != nil {
		return running, err
	}
	if why := notThisChange(db, b, running, wanted); why != "" {
		r.blockUpgrade(db, "PreUpgradeBackupNotBound", fmt.Sprintf(
			"DatabaseBackup %s %s, so it is not used as the backup before the change from %s to %s; the servers keep %s. Delete it to let the operator take its own",
			name, why, running, wanted, running))
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgrading)
		return running, nil
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

// notThisChange says why b is not the backup of this Database for the
// change from running to wanted ("" when it is).
func notThisChange(db *Cluster, b *Backup, running, wanted string) string {
	if b.Annotations[db.Kind.Keys.ClusterUID] != string(db.UID) {
		return fmt.Sprintf("was not made for this %s (annotation %s is not its UID %s)", db.Kind.clusterKind(), db.Kind.Keys.ClusterUID, db.UID)
	}
	if got := b.Annotations[db.Kind.Keys.ImageChange]; got != imageChange(running, wanted) {
		return fmt.Sprintf("was taken for another image change (%q)", got)
	}
	return ""
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
