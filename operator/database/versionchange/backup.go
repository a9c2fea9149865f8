package versionchange

import dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"

// Backup is a change's own backup (a roll's, or a major upgrade attempt's)
// as the reconciler found it. Both paths wait for it the same way.
type Backup struct {
	// Found: a DatabaseBackup of the change's name exists.
	Found bool
	// NotOurs says why it is not this change's backup ("" when it is):
	// made for another Database of the same name, or another change.
	NotOurs string
	Phase   dbv1.BackupPhase
}

// Gate is where a change stands with its backup.
type Gate string

const (
	// TakeBackup: there is none yet; the change takes it.
	TakeBackup Gate = "TakeBackup"
	// WaitForBackup: it runs; the servers stay as they are.
	WaitForBackup Gate = "WaitForBackup"
	// BackupDone: it completed; the change goes on.
	BackupDone Gate = "BackupDone"
	// BackupNotBound: a DatabaseBackup of that name is not this change's:
	// the change is refused until it is deleted (it is never trusted).
	BackupNotBound Gate = "PreUpgradeBackupNotBound"
	// BackupFailed: the change is refused until the backup is deleted
	// (deleting it takes a new one).
	BackupFailed Gate = "PreUpgradeBackupFailed"
)

// Refuses: the change is blocked (condition UpgradeBlocked, the gate its
// reason) and the servers keep what they run.
func (g Gate) Refuses() bool { return g == BackupNotBound || g == BackupFailed }

// GateOn is where a change stands with its backup b.
func GateOn(b Backup) Gate {
	switch {
	case !b.Found:
		return TakeBackup
	case b.NotOurs != "":
		return BackupNotBound
	case b.Phase == dbv1.BackupCompleted:
		return BackupDone
	case b.Phase == dbv1.BackupFailed:
		return BackupFailed
	}
	return WaitForBackup
}
