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
	"github.com/deckhand-dev/deckhand/operator/database/versionchange"
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
	return preUpgradeBackupOf(db, attemptHash(db, running, wanted))
}

// preUpgradeBackupOf names the backup of one attempt at a change.
func preUpgradeBackupOf(db *Cluster, attempt string) string {
	return fmt.Sprintf("%s-pre-upgrade-%s", db.Name, attempt)
}

// attemptHash is the same for every reconcile of one attempt at a change
// of spec.image (the images it is between) and differs for a later one:
// the Database's UID (a later Database of the same name, whose
// generations start again at 1, must not find this one's backup) and the
// generation that asked for it (going back and forth between two images
// makes a new attempt each time).
func attemptHash(db *Cluster, images ...string) string {
	fields := append([]string{string(db.UID)}, images...)
	fields = append(fields, strconv.FormatInt(db.Generation, 10))
	sum := sha256.Sum256([]byte(strings.Join(fields, "\x00")))
	return hex.EncodeToString(sum[:4])
}

// imageChange is the AnnotationImageChange value of a change.
func imageChange(running, wanted string) string { return running + " -> " + wanted }

// forgetImageChange: no image change is in progress.
func forgetImageChange(db *Cluster) {
	if db.Status.Backup != nil {
		db.Status.Backup.PreUpgradeBackup = ""
	}
}

// serversToRun decides what the StatefulSet runs. versionchange.Decide
// says what a change of spec.image is; this acts on it. A cluster that
// holds data changes image only after a backup of it has completed; a new
// major version goes through majorUpgrade (the servers stop, a Job
// upgrades the primary's data) for Kinds that record its steps. A refused
// change (a major-version downgrade, an image whose version cannot be
// read without AnnotationAllowUnknownVersion) sets UpgradeBlocked and the
// servers keep their image.
func (r *Reconciler) serversToRun(ctx context.Context, db *Cluster, eng engine.Engine, l *live) (serverPlan, error) {
	wanted := imageOf(db, eng)
	running := ""
	if l.has("StatefulSet", namesOf(db).StatefulSet) {
		running = liveImage(&l.statefulSet)
	}
	plan := versionchange.Decide(versionChangeInput(r, db, running, wanted), eng)
	if plan.Action == versionchange.Continue {
		return r.majorUpgrade(ctx, db, eng, l)
	}
	if err := r.endPastUpgrade(ctx, db, plan, wanted); err != nil {
		return serverPlan{Keep: true}, err
	}
	switch plan.Action {
	case versionchange.Steady:
		forgetImageChange(db)
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgradeBlocked)
		if !upgradeRunning(db.Status.Upgrade) {
			meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgrading)
		}
		return steadyPlan(db, wanted), nil
	case versionchange.Refused:
		r.blockUpgrade(db, plan.Reason, plan.Message)
		return steadyPlan(db, running), nil
	}
	meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgradeBlocked)
	switch plan.Action {
	case versionchange.RolledBack:
		return steadyPlan(db, running), nil
	case versionchange.Major:
		if err := r.requireFresh(ctx, db); err != nil {
			// An upgrade may have started already: its status is not
			// in the cache yet.
			return serverPlan{Keep: true}, err
		}
		r.startMajorUpgrade(db, eng, running, wanted, plan.FromVersion, plan.ToVersion)
		return r.majorUpgrade(ctx, db, eng, l)
	}
	image, err := r.backupBeforeRoll(ctx, db, running, wanted)
	return steadyPlan(db, image), err
}

// endPastUpgrade ends the upgrade status the plan leaves behind: one
// cancelled by a new spec.image, or a failure spec.image went back from.
func (r *Reconciler) endPastUpgrade(ctx context.Context, db *Cluster, plan versionchange.Plan, wanted string) error {
	if plan.CancelUpgrade {
		// Nothing was touched yet (but writes may be fenced, which the
		// unfence Job lifts). Only on the newest status: an older cached
		// one would cancel (and announce it) twice.
		if err := r.requireFresh(ctx, db); err != nil {
			return err
		}
		r.normal(db, "UpgradeCancelled", "Upgrade", "spec.image is now %s: the upgrade to %s is cancelled before the servers were touched (DatabaseBackup %s is kept)", wanted, db.Status.Upgrade.ToImage, db.Status.Upgrade.Backup)
		db.Status.Upgrade = nil
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgrading)
	}
	if plan.ClearFailure {
		// A new attempt starts when spec.image changes again.
		r.normal(db, "UpgradeFailureCleared", "Upgrade", "spec.image is %s again: condition UpgradeFailed cleared", wanted)
		db.Status.Upgrade = nil
		meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgradeFailed)
	}
	return nil
}

// versionChangeInput is what versionchange.Decide reads of the Database.
func versionChangeInput(r *Reconciler, db *Cluster, running, wanted string) versionchange.Input {
	return versionchange.Input{
		Running: running, Wanted: wanted,
		Initialized:  meta.IsStatusConditionTrue(db.Status.Conditions, ConditionInitialized),
		CurrentImage: db.Status.CurrentImage, CurrentVersion: db.Status.CurrentVersion,
		Upgrade:                db.Status.Upgrade,
		AllowUnknownVersion:    db.Annotations[db.Kind.Keys.AllowUnknownVersion] == "true",
		AllowUnknownVersionKey: db.Kind.Keys.AllowUnknownVersion,
		MajorUpgrades:          db.Kind.MajorUpgrades,
		MajorPathWithinMajor:   r.MajorPathWithinMajor,
	}
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
	if name != "" {
		if b, err := r.Kind.getBackup(ctx, r.Client, client.ObjectKey{Namespace: db.Namespace, Name: name}); err == nil && b.Annotations[db.Kind.Keys.ImageChange] != imageChange(running, wanted) {
			name = "" // The recorded attempt was for another change.
		}
	}
	if name == "" {
		name = preUpgradeBackupName(db, running, wanted)
	}
	db.Status.Backup.PreUpgradeBackup = name
	b, gate, why, err := r.backupGate(ctx, db, name, func(b *Backup) string { return notThisChange(db, b, running, wanted) })
	switch {
	case err != nil:
		return running, err
	case gate == versionchange.TakeBackup:
		if _, err := r.createBackup(ctx, db, name, reasonPreUpgrade, nil, map[string]string{db.Kind.Keys.ImageChange: imageChange(running, wanted)}); err != nil {
			return running, err
		}
		r.normal(db, "Upgrading", "Upgrade", "image %s to %s: DatabaseBackup %s first, then the servers roll (standbys first)", running, wanted, name)
	case gate.Refuses():
		r.refuseOnBackup(db, gate, b, why, fmt.Sprintf("change from %s to %s", running, wanted), running)
		return running, nil
	case gate == versionchange.BackupDone:
		if c := meta.FindStatusCondition(db.Status.Conditions, ConditionUpgrading); c == nil || c.Reason != "Rolling" {
			r.normal(db, "Upgrading", "Upgrade", "DatabaseBackup %s completed: the servers roll from %s to %s", name, running, wanted)
		}
		r.setCondition(db, ConditionUpgrading, true, "Rolling", fmt.Sprintf("rolling from %s to %s after DatabaseBackup %s", running, wanted, name))
		return wanted, nil
	}
	r.setCondition(db, ConditionUpgrading, true, "BackingUp", fmt.Sprintf("DatabaseBackup %s runs before the servers roll from %s to %s", name, running, wanted))
	return running, nil
}

// backupGate reads a change's backup (a roll's or a major upgrade
// attempt's) and says where the change stands with it: b is nil when there
// is none yet; why says why a DatabaseBackup of that name is not the
// change's own (notOurs), and it is then never trusted.
func (r *Reconciler) backupGate(ctx context.Context, db *Cluster, name string, notOurs func(*Backup) string) (b *Backup, gate versionchange.Gate, why string, err error) {
	b, err = r.Kind.getBackup(ctx, r.Client, client.ObjectKey{Namespace: db.Namespace, Name: name})
	if apierrors.IsNotFound(err) {
		return nil, versionchange.GateOn(versionchange.Backup{}), "", nil
	}
	if err != nil {
		return nil, "", "", err
	}
	why = notOurs(b)
	return b, versionchange.GateOn(versionchange.Backup{Found: true, NotOurs: why, Phase: b.Status.Phase}), why, nil
}

// refuseOnBackup blocks a change whose backup gate refuses it: b is
// another's (why says how), or failed. Deleting it lets the operator take
// a new one.
func (r *Reconciler) refuseOnBackup(db *Cluster, gate versionchange.Gate, b *Backup, why, change, running string) {
	msg := fmt.Sprintf("the backup before the %s (DatabaseBackup %s) failed; the servers keep %s. Delete DatabaseBackup %s to try again", change, b.Name, running, b.Name)
	if gate == versionchange.BackupNotBound {
		msg = fmt.Sprintf("DatabaseBackup %s %s, so it is not used as the backup before the %s; the servers keep %s. Delete it to let the operator take its own",
			b.Name, why, change, running)
	}
	r.blockUpgrade(db, string(gate), msg)
	meta.RemoveStatusCondition(&db.Status.Conditions, ConditionUpgrading)
}

// notThisChange says why b is not the backup of this Database for the
// change from running to wanted ("" when it is).
func notThisChange(db *Cluster, b *Backup, running, wanted string) string {
	return notOurBackup(db, b, "image change", b.Annotations[db.Kind.Keys.ImageChange], imageChange(running, wanted))
}

// notOurBackup says why b is not this Database's backup for one change
// ("" when it is): made for this Database (its UID: a former one of the
// same name does not count) and marked with the change's own value.
func notOurBackup(db *Cluster, b *Backup, what, got, want string) string {
	if b.Annotations[db.Kind.Keys.ClusterUID] != string(db.UID) {
		return fmt.Sprintf("was not made for this %s (annotation %s is not its UID %s)", db.Kind.clusterKind(), db.Kind.Keys.ClusterUID, db.UID)
	}
	if got != want {
		return fmt.Sprintf("was taken for another %s (%q, not %q)", what, got, want)
	}
	return ""
}

func (r *Reconciler) blockUpgrade(db *Cluster, reason, msg string) {
	if c := meta.FindStatusCondition(db.Status.Conditions, ConditionUpgradeBlocked); c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
		r.Recorder.Eventf(db.Object, nil, "Warning", reason, "Upgrade", "%s", msg)
	}
	r.setCondition(db, ConditionUpgradeBlocked, true, reason, msg)
}
