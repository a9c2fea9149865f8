// Package versionchange decides what a change of a Database's image is:
// nothing to do, a roll within one major version (a backup first), the
// major path (fence, dump, restore into a new data directory), or refused,
// and why. Each check is made here once, as pure functions of what the
// reconciler observed; operator/database's upgrade.go acts on the plan and
// majorupgrade.go carries the major path's steps. "How a version changes"
// is read here.
package versionchange

import (
	"fmt"
	"strconv"
	"strings"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// Versions is what the decision needs of an engine (engine.Engine has it).
type Versions interface {
	// Name is the engine's name, for messages ("PostgreSQL").
	Name() string
	// VersionFromImage reads the version from an image's tag.
	VersionFromImage(image string) (string, bool)
	// MajorVersion is the part of a version an in-place restart cannot
	// cross.
	MajorVersion(version string) (string, bool)
}

// Input is what the reconciler observed.
type Input struct {
	// Running is the image the StatefulSet runs; "" when there is none.
	Running string
	// Wanted is the image spec.image asks for.
	Wanted string
	// Initialized: the servers hold data (condition Initialized), so a
	// change must protect it. A failed init's image can be fixed freely.
	Initialized bool
	// CurrentImage and CurrentVersion are the status's: the version a
	// server reported for the image it runs, trusted over the tag.
	CurrentImage, CurrentVersion string
	// Upgrade is status.upgrade.
	Upgrade *dbv1.UpgradeStatus
	// AllowUnknownVersion: the Database is annotated AllowUnknownVersionKey
	// =true, so an image whose version cannot be read rolls (after a
	// backup, as a same-major change).
	AllowUnknownVersion    bool
	AllowUnknownVersionKey string
	// MajorUpgrades: the Kind automates the major path (status.upgrade).
	MajorUpgrades bool
	// MajorPathWithinMajor is the TEST-ONLY seam that sends a change
	// within one major version down the major path.
	MajorPathWithinMajor bool
}

// Action is what the change is.
type Action string

const (
	// Continue: an upgrade in status.upgrade runs on; its own steps decide
	// (spec.image is not looked at until it ends).
	Continue Action = "Continue"
	// Steady: run Wanted as it is. Nothing runs yet, nothing changes, or
	// there is no data to protect yet.
	Steady Action = "Steady"
	// Roll: within one major version (or an unreadable version the user
	// allowed): a backup with the running image, then the servers roll to
	// Wanted.
	Roll Action = "Roll"
	// Major: a new major version: the major path starts.
	Major Action = "Major"
	// RolledBack: the last attempt at Wanted failed and was rolled back;
	// the servers keep Running and no new attempt starts until spec.image
	// changes.
	RolledBack Action = "RolledBack"
	// Refused: the servers keep Running; Reason and Message say why
	// (condition UpgradeBlocked).
	Refused Action = "Refused"
)

// Refusal reasons (condition UpgradeBlocked's reason).
const (
	ReasonVersionUnreadable        = "VersionUnreadable"
	ReasonDowngrade                = "Downgrade"
	ReasonMajorUpgradeNotAutomated = "MajorUpgradeNotAutomated"
)

// Plan is the decision.
type Plan struct {
	Action Action
	// CancelUpgrade: status.upgrade is for another image and still taking
	// its backup (the servers untouched): spec.image replaces it. Decided
	// before Action, which is then decided without it.
	CancelUpgrade bool
	// ClearFailure: spec.image is back to the image that runs after a
	// failed upgrade: the failure is dealt with (UpgradeFailed goes).
	ClearFailure bool
	// FromVersion and ToVersion, when read (Roll, Major, Refused).
	FromVersion, ToVersion string
	// Reason and Message, for Refused.
	Reason, Message string
}

// InProgress: an upgrade is under way (not yet Completed or Failed).
func InProgress(u *dbv1.UpgradeStatus) bool {
	return u != nil && u.Step != dbv1.UpgradeCompleted && u.Step != dbv1.UpgradeFailed
}

// Decide is the plan for the change from in.Running to in.Wanted.
func Decide(in Input, eng Versions) Plan {
	var plan Plan
	upgrade := in.Upgrade
	if InProgress(upgrade) {
		if upgrade.Step != dbv1.UpgradeBackingUp || upgrade.ToImage == in.Wanted {
			// Once the servers stop, the upgrade finishes or is rolled
			// back before spec.image is looked at again.
			return Plan{Action: Continue}
		}
		// Nothing was touched yet: a new spec.image replaces it.
		plan.CancelUpgrade, upgrade = true, nil
	}
	if upgrade != nil && upgrade.Step == dbv1.UpgradeFailed && in.Running == in.Wanted {
		plan.ClearFailure, upgrade = true, nil
	}
	if in.Running == "" || in.Running == in.Wanted || !in.Initialized {
		plan.Action = Steady
		return plan
	}
	return decideChange(in, upgrade, eng, plan)
}

// decideChange decides a change of the image of servers that hold data.
func decideChange(in Input, upgrade *dbv1.UpgradeStatus, eng Versions, plan Plan) Plan {
	fromV, fromOK := fromVersion(in, eng)
	toV, toOK := eng.VersionFromImage(in.Wanted)
	plan.FromVersion, plan.ToVersion = fromV, toV
	if !fromOK || !toOK {
		if !in.AllowUnknownVersion {
			unknown := in.Wanted
			if !fromOK {
				unknown = in.Running
			}
			return refuse(plan, ReasonVersionUnreadable, fmt.Sprintf(
				"image %s has no readable version, so the operator cannot tell a minor update from a major upgrade or a downgrade; the servers keep %s. Use an image tagged with its version, or annotate the Database %s=true to roll after a backup",
				unknown, in.Running, in.AllowUnknownVersionKey))
		}
		plan.Action = Roll
		return plan
	}
	fromM, okF := eng.MajorVersion(fromV)
	toM, okT := eng.MajorVersion(toV)
	if !okF || !okT {
		return refuse(plan, ReasonVersionUnreadable, fmt.Sprintf("versions %s and %s are not %s versions; the servers keep %s", fromV, toV, eng.Name(), in.Running))
	}
	switch major := CompareVersions(toM, fromM); {
	case major < 0:
		return refuse(plan, ReasonDowngrade, fmt.Sprintf(
			"%s %s to %s is a major-version downgrade, which a data directory cannot take: refused, nothing changed; the servers keep %s. Set spec.image back to %s, or restore a backup into a new Database of the older version",
			eng.Name(), fromV, toV, in.Running, in.Running))
	case major > 0 && !in.MajorUpgrades:
		return refuse(plan, ReasonMajorUpgradeNotAutomated, fmt.Sprintf(
			"%s %s to %s is a major upgrade; upgrade Jobs are not automated yet: the servers keep %s. Take a DatabaseBackup and restore it into a new Database with image %s (fromBackup)",
			eng.Name(), fromV, toV, in.Running, in.Wanted))
	case major > 0 || (in.MajorPathWithinMajor && in.MajorUpgrades):
		if upgrade != nil && upgrade.Step == dbv1.UpgradeFailed && upgrade.ToImage == in.Wanted {
			plan.Action = RolledBack
			return plan
		}
		plan.Action = Major
		return plan
	}
	plan.Action = Roll
	return plan
}

// fromVersion is the running servers' version: the one a server reported
// for this very image, else the image's tag.
func fromVersion(in Input, eng Versions) (string, bool) {
	if in.CurrentVersion != "" && in.CurrentImage == in.Running {
		return in.CurrentVersion, true
	}
	return eng.VersionFromImage(in.Running)
}

func refuse(plan Plan, reason, msg string) Plan {
	plan.Action, plan.Reason, plan.Message = Refused, reason, msg
	return plan
}

// CompareVersions compares dotted numbers ("17" < "18", "8.0" < "8.4").
func CompareVersions(a, b string) int {
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
