package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DatabaseBackupSpec names the Database to back up, and how.
type DatabaseBackupSpec struct {
	// Database is the name of a Database in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",messageExpression="'database must be the name of a Database (lower-case letters, digits and \\'-\\'), not \"' + self + '\"'"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="database is immutable: make a new DatabaseBackup for another Database"
	// +required
	Database string `json:"database"`

	// Method is what the backup is: Dump (the default), a logical dump
	// on the Database's backup volume; or BaseBackup, a physical base
	// backup in the Database's WAL archive
	// (spec.backup.storage.objectStore), which a recovery
	// (spec.recovery) starts from. The operator makes a BaseBackup
	// object for each base backup the archive holds; creating one asks
	// the primary for a base backup now.
	// +kubebuilder:default=Dump
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="method is immutable: make a new DatabaseBackup for the other method"
	// +optional
	Method BackupMethod `json:"method,omitempty"`

	// Keep: retention never deletes this backup. For a base backup it is
	// Barman's keep in the archive, so the WAL a recovery from it needs
	// stays too. Deleting the object still deletes the backup.
	// +optional
	Keep bool `json:"keep,omitempty"`
}

// BackupMethod is how a backup is taken.
// +kubebuilder:validation:Enum=Dump;BaseBackup
type BackupMethod string

// Backup methods.
const (
	// BackupMethodDump: pg_dump (or mysqldump) to a file on the backup
	// volume.
	BackupMethodDump BackupMethod = "Dump"
	// BackupMethodBaseBackup: a physical base backup into the WAL
	// archive, by the primary's archiver (Barman Cloud).
	BackupMethodBaseBackup BackupMethod = "BaseBackup"
)

// BackupPhase is where a backup is.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type BackupPhase string

// Backup phases.
const (
	// BackupPending: waiting for its turn (one backup at a time per
	// Database, none during a restore or an upgrade).
	BackupPending BackupPhase = "Pending"
	// BackupRunning: its Job runs.
	BackupRunning BackupPhase = "Running"
	// BackupCompleted: the file is complete; file, size and sha256 say
	// which. For a base backup: the archive lists it as done.
	BackupCompleted BackupPhase = "Completed"
	// BackupFailed: no file (or base backup) was made; the Completed
	// condition says why.
	BackupFailed BackupPhase = "Failed"
)

// DatabaseBackupStatus is what the backup made.
type DatabaseBackupStatus struct {
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`
	// StartTime is when its Job was created.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when it completed or failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// ClaimName is the PersistentVolumeClaim the file is on.
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// File is the dump's path on that volume.
	// +optional
	File string `json:"file,omitempty"`
	// Size of the file in bytes; for a base backup, of its objects in
	// the store.
	// +optional
	Size int64 `json:"size,omitempty"`
	// SHA256 of the file, hex.
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// Image that made it (the Database's own).
	// +optional
	Image string `json:"image,omitempty"`
	// Engine of the Database it was taken from.
	// +optional
	Engine Engine `json:"engine,omitempty"`
	// RunAsUser is the UID (and GID) the backup Job wrote the file as: the
	// Database's spec.podTemplate.runAsUser when it ran. The Job that
	// deletes the file runs as it too, even once the Database is gone.
	// +optional
	RunAsUser *int64 `json:"runAsUser,omitempty"`
	// Version of the server it was taken from.
	// +optional
	Version string `json:"version,omitempty"`
	// Source is the pod it was read from: the primary, or a standby whose
	// replay lag the backup Job measured within spec.backup.maxStandbyLag.
	// +optional
	Source string `json:"source,omitempty"`
	// LagBytes is the standby's replay lag behind the primary, in bytes of
	// WAL, that the backup Job measured before the dump started; absent
	// when it read from the primary.
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`
	// SourceReason says why the backup Job read from Source when it had a
	// standby to choose from: the standby's measured lag, or why it read
	// the primary instead (the database holds unlogged tables or
	// sequences, whose contents a dump taken on a standby leaves out; the
	// standby lagged beyond spec.backup.maxStandbyLag or did not stream).
	// Absent when the backup was given the primary only.
	// +optional
	SourceReason string `json:"sourceReason,omitempty"`
	// Tables and Rows: what the backup Job counted inside the dump's own
	// snapshot (recorded beside the file; a verification compares a
	// restore with them).
	// +optional
	Tables int32 `json:"tables,omitempty"`
	// +optional
	Rows int64 `json:"rows,omitempty"`
	// BaseBackup is the base backup in the archive (method BaseBackup):
	// Barman's name and ID, its WAL positions and times. A recovery from
	// it reaches any moment after its end.
	// +optional
	BaseBackup *BaseBackupRecord `json:"baseBackup,omitempty"`
	// Archive is the archive a base backup is in: the store and server
	// name a recovery from it reads (spec.recovery.source), and where
	// deleting the object deletes it, even once the Database is gone.
	// +optional
	Archive *RecoverySource `json:"archive,omitempty"`
	// Verification is the newest verification of the backup (restored
	// into a scratch server and checked).
	// +optional
	Verification *BackupVerification `json:"verification,omitempty"`
	// Conditions: Completed (False with the reason while pending, running
	// or failed), Verified (True when the newest verification passed;
	// False with the failed check's name as reason; Unknown while one
	// waits or runs).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DatabaseBackup is one backup of a Database: a dump on the Database's
// backup volume, or a base backup in its WAL archive (spec.method).
// Creating one takes a backup; deleting one deletes its file or base
// backup. It is not owned by its Database and outlives it. The
// annotation stable.imaginedata.co/verify=now asks a dump for one
// verification now.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=dbbackup,singular=databasebackup,categories=deckhand
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database`
// +kubebuilder:printcolumn:name="Method",type=string,JSONPath=`.spec.method`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Completed",type=date,JSONPath=`.status.completionTime`
// +kubebuilder:printcolumn:name="Verified",type=string,JSONPath=`.status.verification.outcome`
// +kubebuilder:printcolumn:name="File",type=string,JSONPath=`.status.file`,priority=1
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.status.source`,priority=1
// +kubebuilder:printcolumn:name="SHA256",type=string,JSONPath=`.status.sha256`,priority=1
// +kubebuilder:printcolumn:name="End LSN",type=string,JSONPath=`.status.baseBackup.endLSN`,priority=1
// +kubebuilder:printcolumn:name="Keep",type=boolean,JSONPath=`.spec.keep`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DatabaseBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec DatabaseBackupSpec `json:"spec"`
	// +optional
	Status DatabaseBackupStatus `json:"status,omitempty"`
}

// DatabaseBackupList is a list of DatabaseBackups.
//
// +kubebuilder:object:root=true
type DatabaseBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DatabaseBackup `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DatabaseBackup{}, &DatabaseBackupList{})
}
