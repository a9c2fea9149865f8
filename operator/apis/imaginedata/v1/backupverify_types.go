package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VerifyMode says which backups are verified (restored into a scratch
// server and checked).
// +kubebuilder:validation:Enum=EachBackup;Scheduled;Off
type VerifyMode string

// Verify modes.
const (
	// VerifyEachBackup verifies every backup once it completes.
	VerifyEachBackup VerifyMode = "EachBackup"
	// VerifyScheduled verifies the newest completed backup at each time of
	// verify.schedule.
	VerifyScheduled VerifyMode = "Scheduled"
	// VerifyOff verifies only backups annotated
	// stable.imaginedata.co/verify=now.
	VerifyOff VerifyMode = "Off"
)

// BackupVerify says how backups are proven by restoring them: each
// verification restores a backup into a scratch server of its own (in the
// verification Job's pod, on a temporary volume, listening on 127.0.0.1
// only) and checks its checksum, that the restore completes, each table's
// row count against the counts taken inside the dump's snapshot, and an
// optional user check. Shared by Database and MySQLCluster.
//
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'Scheduled' || (has(self.schedule) && size(self.schedule) > 0)",message="verify.schedule is required with mode Scheduled (five cron fields such as '0 4 * * 0', or @daily, @weekly, ...)"
// +kubebuilder:validation:XValidation:rule="!has(self.schedule) || size(self.schedule) == 0 || (has(self.mode) && self.mode == 'Scheduled')",message="verify.schedule is used only with mode Scheduled: set mode: Scheduled, or remove the schedule"
type BackupVerify struct {
	// Mode: EachBackup (default) verifies every backup once it completes,
	// so each backup is known to restore; Scheduled verifies the newest
	// completed backup at each time of schedule; Off verifies only a
	// backup annotated stable.imaginedata.co/verify=now.
	// +kubebuilder:default=EachBackup
	// +optional
	Mode VerifyMode `json:"mode,omitempty"`

	// Schedule of verifications with mode Scheduled, in cron format: five
	// fields or @hourly, @daily, @weekly, @monthly, @yearly; in the time
	// zone of backup.timeZone (default UTC).
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$') || self.matches('^[^ ]+( +[^ ]+){4}$')",messageExpression="'verify.schedule must be five cron fields (minute hour day-of-month month day-of-week, e.g. \\'0 4 * * 0\\') or one of @hourly, @daily, @weekly, @monthly, @yearly, not \"' + self + '\"'"
	// +optional
	Schedule string `json:"schedule,omitempty"`

	// UserCheck is an SQL query run in the restored database as the app's
	// role (never a superuser), in a read-only transaction; it must return
	// one value, true (e.g. "SELECT count(*) > 0 FROM orders").
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.trim() != ''",message="verify.userCheck must be an SQL query returning true (e.g. SELECT count(*) > 0 FROM orders), or absent"
	// +optional
	UserCheck string `json:"userCheck,omitempty"`

	// MaxAge: when the newest verified backup is older than this (or no
	// backup has been verified once the oldest completed backup is this
	// old), the cluster's BackupVerified condition turns False with an
	// Event, and the chart's alert fires. Default 216h (9 days): a weekly
	// verification of daily backups keeps the newest verified backup at
	// most 8 days old; a day more for a verification that ran late.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="verify.maxAge must be more than 0 (e.g. 216h)"
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// StartTimeout: a verification whose pod is not running within this
	// long after it was asked for (waiting for another verification, for
	// a node with room, for its scratch volume) ends with outcome Error
	// (reason NotStarted) instead of waiting forever. Default 1h.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="verify.startTimeout must be more than 0 (e.g. 1h)"
	// +optional
	StartTimeout *metav1.Duration `json:"startTimeout,omitempty"`

	// Resources of the verification Job's container (the scratch server
	// runs in it). Default: requests 100m CPU and 256Mi memory, limits
	// 1 CPU and 1Gi memory, but never more CPU requested than the
	// database's own pods request: none when they request none, and no
	// resources at all when they have none (BestEffort).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// VerificationOutcome is how a verification ended.
// +kubebuilder:validation:Enum=Verified;Failed;Error
type VerificationOutcome string

// Verification outcomes.
const (
	// Verified: every check passed.
	VerificationVerified VerificationOutcome = "Verified"
	// Failed: a check failed (failedCheck says which): the backup does not
	// restore as taken.
	VerificationFailed VerificationOutcome = "Failed"
	// Error: the verification could not run (its Job failed, did not start
	// within startTimeout, or the engine cannot verify); it says nothing
	// about the backup.
	VerificationError VerificationOutcome = "Error"
)

// VerificationCheck is one check of a verification.
type VerificationCheck struct {
	// Name: checksum, restore, rowCounts or userCheck.
	Name string `json:"name"`
	// Passed is whether it passed.
	Passed bool `json:"passed"`
	// Message says why it failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// BackupVerification is the newest verification of a backup.
type BackupVerification struct {
	// RequestTime is when it was asked for (the backup completed, a
	// schedule time, the annotation).
	// +optional
	RequestTime *metav1.Time `json:"requestTime,omitempty"`
	// StartTime is when its Job was created.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when its result was recorded.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Duration from StartTime to CompletionTime.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// Outcome: Verified, Failed or Error; empty while it waits or runs.
	// +optional
	Outcome VerificationOutcome `json:"outcome,omitempty"`
	// Checks that ran, in order; the last one failed when Outcome is
	// Failed.
	// +listType=atomic
	// +optional
	Checks []VerificationCheck `json:"checks,omitempty"`
	// FailedCheck names the check that failed.
	// +optional
	FailedCheck string `json:"failedCheck,omitempty"`
	// Message sums up the result.
	// +optional
	Message string `json:"message,omitempty"`
	// Tables and Rows are what the restored database held.
	// +optional
	Tables int32 `json:"tables,omitempty"`
	// +optional
	Rows int64 `json:"rows,omitempty"`
}
