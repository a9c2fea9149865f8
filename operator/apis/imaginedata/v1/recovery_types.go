package v1

// Recovery makes a new Database from an archive in an object store: the
// base backups and WAL that a Database's primary archived
// (spec.backup.storage.objectStore), replayed to a point in time. The
// new primary starts from the restored data directory, never empty
// first, and the recovery never happens in place: the source archive is
// only read.
type Recovery struct {
	// Source is the archive to recover from.
	Source RecoverySource `json:"source"`

	// RecoveryTarget is the point to recover to; absent: the end of the
	// archive (every transaction it holds).
	// +optional
	RecoveryTarget *RecoveryTarget `json:"recoveryTarget,omitempty"`
}

// RecoverySource is an archive: a store and the name it was written under.
type RecoverySource struct {
	// ObjectStore is the store that holds the archive, as the source
	// Database's spec.backup.storage.objectStore named it (its
	// compression and archiveTimeout are not used here). The keys need
	// only read access.
	ObjectStore ObjectStore `json:"objectStore"`

	// ServerName is the name the archive was written under: the source
	// Database's metadata.name (its archive is
	// s3://<bucket>/<path>/<serverName>/). The source Database may be
	// gone.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",messageExpression="'recovery.source.serverName must be the name of the Database that wrote the archive (a DNS label: lower-case letters, digits and \\'-\\'), not \"' + self + '\"'"
	ServerName string `json:"serverName"`
}

// RecoveryTarget is where recovery stops, in CloudNativePG's vocabulary:
// at most one of targetTime, targetLSN, targetName, targetXID or
// targetImmediate.
// +kubebuilder:validation:XValidation:rule="(has(self.targetTime) ? 1 : 0) + (has(self.targetLSN) ? 1 : 0) + (has(self.targetName) ? 1 : 0) + (has(self.targetXID) ? 1 : 0) + ((has(self.targetImmediate) && self.targetImmediate) ? 1 : 0) <= 1",message="recovery.recoveryTarget takes at most one of targetTime, targetLSN, targetName, targetXID and targetImmediate (none: the end of the archive)"
// +kubebuilder:validation:XValidation:rule="!has(self.exclusive) || !self.exclusive || has(self.targetTime) || has(self.targetLSN) || has(self.targetXID)",message="recovery.recoveryTarget.exclusive needs targetTime, targetLSN or targetXID: it stops just before that point"
type RecoveryTarget struct {
	// TargetTime is a time, RFC 3339 with a zone
	// (2026-11-28T18:50:01Z, fractions of a second allowed). The base
	// backup is the newest that ended at least a second before it.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$')",messageExpression="'recovery.recoveryTarget.targetTime must be an RFC 3339 time with a zone, such as 2026-11-28T18:50:01Z, not \"' + self + '\"'"
	// +optional
	TargetTime string `json:"targetTime,omitempty"`

	// TargetLSN is a WAL position (0/3000060). The base backup is the
	// newest that ended at or before it.
	// +kubebuilder:validation:MaxLength=17
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$')",messageExpression="'recovery.recoveryTarget.targetLSN must be a WAL position such as 0/3000060, not \"' + self + '\"'"
	// +optional
	TargetLSN string `json:"targetLSN,omitempty"`

	// TargetName is a restore point (pg_create_restore_point); each base
	// backup makes one named as the backup.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="size(self) > 0 && !self.matches('[[:cntrl:]]')",message="recovery.recoveryTarget.targetName must be a restore point's name: not empty, no control characters"
	// +optional
	TargetName string `json:"targetName,omitempty"`

	// TargetXID is a transaction ID.
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:XValidation:rule="self.matches('^[1-9][0-9]*$')",messageExpression="'recovery.recoveryTarget.targetXID must be a transaction ID (a positive number), not \"' + self + '\"'"
	// +optional
	TargetXID string `json:"targetXID,omitempty"`

	// TargetImmediate stops as soon as the base backup is consistent.
	// +optional
	TargetImmediate *bool `json:"targetImmediate,omitempty"`

	// Exclusive stops just before the target (recovery_target_inclusive
	// off) rather than just after it.
	// +optional
	Exclusive *bool `json:"exclusive,omitempty"`

	// TargetTLI is the timeline to follow: latest (the default: across
	// every failover the archive recorded), current (the base backup's),
	// or a number.
	// +kubebuilder:validation:MaxLength=10
	// +kubebuilder:validation:XValidation:rule="self in ['latest', 'current'] || self.matches('^[1-9][0-9]*$')",messageExpression="'recovery.recoveryTarget.targetTLI must be latest, current or a timeline number, not \"' + self + '\"'"
	// +optional
	TargetTLI string `json:"targetTLI,omitempty"`

	// BackupID is the base backup to start from (its ID or name); empty:
	// chosen for the target.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9._-]+$')",messageExpression="'recovery.recoveryTarget.backupID must be a base backup\\'s ID or name (letters, digits, \\'.\\', \\'_\\' and \\'-\\'), not \"' + self + '\"'"
	// +optional
	BackupID string `json:"backupID,omitempty"`
}
