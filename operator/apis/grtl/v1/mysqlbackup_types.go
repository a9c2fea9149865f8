package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// Retention of a schedule's backups. The newest completed backup is always
// kept, and so is a backup that a restore is using.
// +kubebuilder:validation:XValidation:rule="has(self.keepLast) || has(self.maxAge)",message="retention needs keepLast, maxAge or both"
type Retention struct {
	// KeepLast keeps this many most recent completed backups.
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="retention.keepLast must be at least 1"
	// +optional
	KeepLast *int32 `json:"keepLast,omitempty"`

	// MaxAge deletes backups older than this (e.g. 720h for 30 days).
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="retention.maxAge must be more than 0 (e.g. 168h for a week)"
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// MySQLBackupScheduleSpec is grtl's schedule (cluster, time, storage) plus
// retention.
type MySQLBackupScheduleSpec struct {
	// Cluster is the name of a MySQLCluster in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",messageExpression="'cluster must be the name of a MySQLCluster (lower-case letters, digits and \\'-\\'), not \"' + self + '\"'"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cluster is immutable: make a new MySQLBackupSchedule for another cluster"
	// +required
	Cluster string `json:"cluster"`

	// Time is when backups are taken, in cron format: five fields (minute
	// hour day-of-month month day-of-week, as a Kubernetes CronJob's) or
	// @hourly, @daily, @weekly, @monthly, @yearly; in UTC. A time missed
	// while the operator was down gives one catch-up backup.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$') || self.matches('^[^ ]+( +[^ ]+){4}$')",messageExpression="'time must be five cron fields (minute hour day-of-month month day-of-week, e.g. \\'0 3 * * *\\') or one of @hourly, @daily, @weekly, @monthly, @yearly, not \"' + self + '\"'"
	// +required
	Time string `json:"time"`

	// Storage is the size of the cluster's backup volume when it is
	// created (it is not owned by the cluster and outlives it); default:
	// the cluster's storage.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",messageExpression="'storage must be a quantity such as 10Gi, not \"' + self + '\"'"
	// +optional
	Storage string `json:"storage,omitempty"`

	// Retention: how many backups, or how old, to keep; without it every
	// backup is kept.
	// +optional
	Retention *Retention `json:"retention,omitempty"`
}

// MySQLBackupScheduleStatus is what the schedule did.
type MySQLBackupScheduleStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastScheduleTime is when the last backup was created.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// NextScheduleTime is when the next one will be.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// LastSuccessfulBackup is the newest completed MySQLBackupInstance.
	// +optional
	LastSuccessfulBackup string `json:"lastSuccessfulBackup,omitempty"`
	// MissedSchedules counts the times for which no backup was made
	// because the schedule's previous backup was still waiting or running
	// (the cluster down, say): at most one waits at a time, and it stands
	// for every time missed meanwhile.
	// +optional
	MissedSchedules int64 `json:"missedSchedules,omitempty"`
	// Conditions: LastBackupSucceeded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MySQLBackupSchedule takes backups of a MySQLCluster at the given time,
// each a MySQLBackupInstance.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName={mb,mbs},singular=mysqlbackupschedule,categories=deckhand
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Time",type=string,JSONPath=`.spec.time`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Next",type=date,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MySQLBackupSchedule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MySQLBackupScheduleSpec `json:"spec"`
	// +optional
	Status MySQLBackupScheduleStatus `json:"status,omitempty"`
}

// MySQLBackupScheduleList is a list of MySQLBackupSchedules.
//
// +kubebuilder:object:root=true
type MySQLBackupScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MySQLBackupSchedule `json:"items"`
}

// MySQLBackupInstanceSpec is grtl's backup: the cluster, and the schedule
// that made it (empty for one made by hand).
//
// A rule on schedule itself would not see it added or removed (a
// transition rule runs only when the old and the new value both exist).
// +kubebuilder:validation:XValidation:rule="has(self.schedule) == has(oldSelf.schedule) && (!has(self.schedule) || self.schedule == oldSelf.schedule)",message="schedule is immutable: it names the MySQLBackupSchedule that made this backup, or none for a backup made by hand"
type MySQLBackupInstanceSpec struct {
	// Cluster is the name of a MySQLCluster in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",messageExpression="'cluster must be the name of a MySQLCluster (lower-case letters, digits and \\'-\\'), not \"' + self + '\"'"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cluster is immutable: make a new MySQLBackupInstance for another cluster"
	// +required
	Cluster string `json:"cluster"`

	// Schedule is the MySQLBackupSchedule that made this backup; empty
	// for an on-demand backup made by hand.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'schedule must be the name of a MySQLBackupSchedule (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +optional
	Schedule string `json:"schedule,omitempty"`
}

// BackupPhase is where a backup is (grtl's phases).
// +kubebuilder:validation:Enum=Scheduled;Started;Failed;Completed
type BackupPhase string

// Backup phases.
const (
	// BackupScheduled: waiting for its turn (one backup at a time per
	// cluster, none during a restore or an upgrade).
	BackupScheduled BackupPhase = "Scheduled"
	// BackupStarted: its Job runs.
	BackupStarted BackupPhase = "Started"
	// BackupFailed: no file was made; the Completed condition says why.
	BackupFailed BackupPhase = "Failed"
	// BackupCompleted: the file is complete; file, size and sha256 say
	// which.
	BackupCompleted BackupPhase = "Completed"
)

// MySQLBackupInstanceStatus is what the backup made.
type MySQLBackupInstanceStatus struct {
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
	// Size of the file in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// SHA256 of the file, hex.
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// Image that made it (the cluster's own).
	// +optional
	Image string `json:"image,omitempty"`
	// RunAsUser is the UID (and GID) the backup Job wrote the file as: the
	// MySQLCluster's spec.runAsUser when it ran. The Job that deletes the
	// file runs as it too, even once the MySQLCluster is gone.
	// +optional
	RunAsUser *int64 `json:"runAsUser,omitempty"`
	// Version of the server it was taken from.
	// +optional
	Version string `json:"version,omitempty"`
	// Source is the pod it was read from.
	// +optional
	Source string `json:"source,omitempty"`
	// LagBytes is the replica's lag the backup Job measured, when it read
	// from a replica.
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`
	// Tables and Rows: what the backup Job counted inside the dump's own
	// snapshot.
	// +optional
	Tables int32 `json:"tables,omitempty"`
	// +optional
	Rows int64 `json:"rows,omitempty"`
	// Verification is the newest verification of the backup (the same
	// type as a DatabaseBackup's).
	// +optional
	Verification *dbv1.BackupVerification `json:"verification,omitempty"`
	// Conditions: Completed (False with the reason while scheduled,
	// started or failed), Verified.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MySQLBackupInstance is one dump of a MySQLCluster on the cluster's
// backup volume. Creating one takes a backup; deleting one deletes its
// file. It is not owned by its cluster and outlives it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName={mbi,mbis},singular=mysqlbackupinstance,categories=deckhand
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Completed",type=date,JSONPath=`.status.completionTime`
// +kubebuilder:printcolumn:name="SHA256",type=string,JSONPath=`.status.sha256`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MySQLBackupInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MySQLBackupInstanceSpec `json:"spec"`
	// +optional
	Status MySQLBackupInstanceStatus `json:"status,omitempty"`
}

// MySQLBackupInstanceList is a list of MySQLBackupInstances.
//
// +kubebuilder:object:root=true
type MySQLBackupInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MySQLBackupInstance `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MySQLBackupSchedule{}, &MySQLBackupScheduleList{}, &MySQLBackupInstance{}, &MySQLBackupInstanceList{})
}
