package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// DeletionPolicy is what deleting a MySQLCluster does with its data (as
// for a Database).
// +kubebuilder:validation:Enum=Snapshot;Retain;Delete
type DeletionPolicy string

// Deletion policies.
const (
	// DeletionSnapshot takes a final MySQLBackupInstance, then removes the
	// StatefulSet and its volumes.
	DeletionSnapshot DeletionPolicy = "Snapshot"
	// DeletionRetain removes the StatefulSet and keeps the volumes and the
	// Secrets.
	DeletionRetain DeletionPolicy = "Retain"
	// DeletionDelete removes the StatefulSet, the volumes and the Secrets
	// the operator made, without a final backup.
	DeletionDelete DeletionPolicy = "Delete"
)

// MySQLClusterSpec is grtl's MySQLCluster (secret, fromBackup, port,
// replicas, storage, image, with their names and meaning kept) plus
// deletionPolicy.
//
// +kubebuilder:validation:XValidation:rule="has(self.fromBackup) == has(oldSelf.fromBackup) && (!has(self.fromBackup) || self.fromBackup == oldSelf.fromBackup)",message="fromBackup is set at creation only: the cluster was (or was not) restored from it when it was made"
type MySQLClusterSpec struct {
	// Secret is the name of a Secret in the same namespace holding root's
	// password under the key "password" (as grtl's operator read it).
	// When it does not exist, the operator creates it with a generated
	// password, and never deletes it while volumes with data exist.
	// Immutable: the data on the volumes answers to that password.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'secret must be the name of a Secret (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="secret is immutable: the data on the volumes answers to the password in that Secret (change the password inside the Secret instead)"
	// +required
	Secret string `json:"secret"`

	// FromBackup is the name of a MySQLBackupInstance in the same
	// namespace to restore into the new primary at creation. Until it
	// exists and has completed, the cluster is not Ready and a condition
	// says which backup it waits for: an empty cluster never pretends to
	// be restored. Set at creation only.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'fromBackup must be the name of a MySQLBackupInstance (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +optional
	FromBackup string `json:"fromBackup,omitempty"`

	// Port the servers listen on and the Services expose.
	// +kubebuilder:default=3306
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 65535",message="port must be between 1 and 65535"
	// +optional
	Port int32 `json:"port,omitempty"`

	// Replicas: the primary (ordinal 0) and replicas-1 read-only replicas,
	// each cloned from a consistent dump of the primary and replicating
	// with GTIDs. At most 32 (the operator looks at each server's pod and
	// volume on every reconcile).
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="replicas must be at least 1 (the primary)"
	// +kubebuilder:validation:XValidation:rule="self <= 32",message="replicas must be at most 32 (the primary and 31 replicas, each a server with a volume of its own)"
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Storage is the size of each server's volume, a quantity such as
	// 1Gi. It can grow (when the StorageClass allows volume expansion),
	// never shrink.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="isQuantity(self)",messageExpression="'storage must be a quantity such as 1Gi or 500M, not \"' + self + '\"'"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(self) || quantity(self).isGreaterThan(quantity('0'))",message="storage must be more than 0"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(self) || !isQuantity(oldSelf) || quantity(self).compareTo(quantity(oldSelf)) >= 0",messageExpression="'storage cannot shrink (from ' + oldSelf + ' to ' + self + '): volumes can only grow'"
	// +required
	Storage string `json:"storage"`

	// Image of the servers and of their Jobs; default mysql:8.4.8 (MySQL
	// 8.4 LTS, pinned). MariaDB images (mariadb:11.4, mariadb:10.11) are
	// recognised. An image whose tag names no version (the seed's
	// mysql:latest) is accepted and reported: nothing can tell what a
	// restart would run, so no upgrade can be checked.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// DeletionPolicy says what deleting the cluster does with its data:
	// Snapshot (default) takes a final MySQLBackupInstance, then removes
	// the StatefulSet and its volumes; Retain keeps the volumes and the
	// Secrets; Delete removes them without a final backup. Earlier
	// backups are kept under every policy.
	// +kubebuilder:default=Snapshot
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// RunAsUser is the UID the image runs its server as, and so the owner
	// of the data directory: every container of the cluster (servers and
	// Jobs) runs as it. Default 999 (the mysql user of the official MySQL
	// and MariaDB images); other images use others. A data directory owned
	// by another UID cannot be used: a server that finds one says so in the
	// Ready condition (reason DataDirectoryOwnerMismatch, with the expected
	// and found owner).
	// +kubebuilder:validation:XValidation:rule="self > 0",message="runAsUser must be more than 0: the servers refuse to run as root"
	// +optional
	RunAsUser *int64 `json:"runAsUser,omitempty"`

	// NodeSelector restricts the cluster's pods (its servers and every Job
	// it runs: init, backup, restore, upgrade, verification and the one
	// that deletes a backup's file) to nodes with these labels, as a
	// Database's spec.podTemplate.nodeSelector.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && size(k) <= 317)",message="nodeSelector: each key must be a label key such as disktype or topology.kubernetes.io/zone (an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
	// +optional
	NodeSelector map[string]NodeLabelValue `json:"nodeSelector,omitempty"`

	// Tolerations let the cluster's pods (servers and Jobs) run on tainted
	// nodes, as a Database's spec.podTemplate.tolerations.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Backup: how the cluster's MySQLBackupInstances are verified (the
	// schedules themselves are MySQLBackupSchedules).
	// +optional
	Backup *ClusterBackup `json:"backup,omitempty"`

	// TLS: encrypted connections to the servers
	// (docs/guides/mysqlcluster.md, Connecting with TLS), as a Database's
	// spec.tls: a server CA and a certificate for every name a client uses,
	// or the user's serverCertSecret; the servers then refuse connections
	// from other hosts without TLS (require_secure_transport), replicas
	// replicate over TLS and verify the primary, and the ConfigMap
	// <name>-ca holds the CA bundle (ca.crt) clients verify the servers
	// with. Unset enabled: the default the operator recorded on the
	// cluster when it first saw it (annotation
	// cr.mysqloperator.grtl.github.com/tls-default): on (unless the
	// chart's controllers.mysqlCluster.tlsByDefault is false) for a new
	// cluster, off for one an older operator already ran. Turning it on or
	// off restarts every pod once.
	// +optional
	TLS *dbv1.TLSSpec `json:"tls,omitempty"`
}

// NodeLabelValue is the value of a node label (a Database's
// podTemplate.nodeSelector value, with this spec's field name in the
// message).
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule="self.matches('^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$')",messageExpression="'nodeSelector: \"' + self + '\" is not a label value (at most 63 letters, digits, \\'-\\', \\'_\\' and \\'.\\', starting and ending with a letter or digit; may be empty)'"
type NodeLabelValue string

// ClusterBackup is what a MySQLCluster says about its backups.
type ClusterBackup struct {
	// Verify: how backups are proven by restoring them, as a Database's
	// spec.backup.verify (the same type). Absent: each backup is verified.
	// +optional
	Verify *dbv1.BackupVerify `json:"verify,omitempty"`
}

// Phase sums up a MySQLCluster's state (the phases of a Database).
// +kubebuilder:validation:Enum=Provisioning;Initializing;Ready;Degraded;Deleting
type Phase string

// Phases.
const (
	PhaseProvisioning Phase = "Provisioning"
	PhaseInitializing Phase = "Initializing"
	PhaseReady        Phase = "Ready"
	PhaseDegraded     Phase = "Degraded"
	PhaseDeleting     Phase = "Deleting"
)

// MySQLClusterStatus is what the operator observed.
type MySQLClusterStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase sums up the state; the conditions say why.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Replicas is the number of servers asked for.
	// +optional
	Replicas int32 `json:"replicas"`

	// ReadyReplicas is the number of servers that pass their readiness
	// probe (a query as root; on a replica, replication running).
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// Ready is readyReplicas/replicas, for kubectl get.
	// +optional
	Ready string `json:"ready,omitempty"`

	// Primary is the name of the pod running the primary.
	// +optional
	Primary string `json:"primary,omitempty"`

	// Flavor is MySQL or MariaDB, from the image.
	// +optional
	Flavor string `json:"flavor,omitempty"`

	// CurrentImage is the image every server runs (once a rollout is done).
	// +optional
	CurrentImage string `json:"currentImage,omitempty"`

	// CurrentVersion is the server version: as reported by the server to
	// a Job, else read from the image tag; empty when neither says.
	// +optional
	CurrentVersion string `json:"currentVersion,omitempty"`

	// PreUpgradeBackup is the MySQLBackupInstance taken before the image
	// change in progress; only it lets the servers roll. Empty when no
	// image change is in progress.
	// +optional
	PreUpgradeBackup string `json:"preUpgradeBackup,omitempty"`

	// LastVerifiedBackup is the newest completed MySQLBackupInstance whose
	// newest verification passed; retention never deletes it.
	// +optional
	LastVerifiedBackup string `json:"lastVerifiedBackup,omitempty"`
	// LastVerifiedBackupTime is when that backup completed.
	// +optional
	LastVerifiedBackupTime *metav1.Time `json:"lastVerifiedBackupTime,omitempty"`

	// Conditions: Ready, Initialized, Restored (fromBackup), StorageBound,
	// VersionKnown (False for an unpinned image such as mysql:latest),
	// LastBackupSucceeded, BackupVerified, DeletionBlocked, ServerCertificate
	// (with TLS: whether the servers have a certificate to present).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MySQLCluster is a MySQL or MariaDB primary with read-only replicas (seed
// 000, grtl's mysql-operator): a StatefulSet with a volume per server,
// read-write and read-only Services, probes that query the server, and
// backups with the server's own dump tool.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName={mc,mcs},singular=mysqlcluster,categories=deckhand
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Storage",type=string,JSONPath=`.spec.storage`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.currentVersion`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.primary`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (lower-case letters, digits and '-', starting with a letter): it names the cluster's Services"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: the StatefulSet's pods and Services add suffixes to it and must stay within 63"
type MySQLCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MySQLClusterSpec `json:"spec"`
	// +optional
	Status MySQLClusterStatus `json:"status,omitempty"`
}

// MySQLClusterList is a list of MySQLClusters.
//
// +kubebuilder:object:root=true
type MySQLClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MySQLCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MySQLCluster{}, &MySQLClusterList{})
}
