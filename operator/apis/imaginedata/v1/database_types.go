package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Engine is the database server a Database runs.
// +kubebuilder:validation:Enum=PostgreSQL
type Engine string

// Engines. A Database runs PostgreSQL; MySQL and MariaDB run behind the
// same engine interface under the MySQLCluster API (cr.mysqloperator.grtl.github.com).
const (
	EnginePostgreSQL Engine = "PostgreSQL"
)

// LabelValue is the value of a node label.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule="self.matches('^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$')",messageExpression="'podTemplate.nodeSelector: \"' + self + '\" is not a label value (at most 63 letters, digits, \\'-\\', \\'_\\' and \\'.\\', starting and ending with a letter or digit; may be empty)'"
type LabelValue string

// PodTemplate is what users of database operators most often need to say
// about where and how the database's pods run.
type PodTemplate struct {
	// NodeSelector restricts the pods to nodes with these labels.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && size(k) <= 317)",message="podTemplate.nodeSelector: each key must be a label key such as disktype or topology.kubernetes.io/zone (an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
	// +optional
	NodeSelector map[string]LabelValue `json:"nodeSelector,omitempty"`

	// Tolerations let the pods run on tainted nodes.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Affinity of the pods. The operator adds the anti-affinity that
	// spread says.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Spread is how the operator spreads the pods of one Database (its
	// servers) or one Pooler over the nodes; nil: each pod prefers a node
	// without another (type Preferred, topologyKey
	// kubernetes.io/hostname).
	// +optional
	Spread *Spread `json:"spread,omitempty"`

	// PriorityClassName of the pods.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// RunAsUser is the UID the image runs its server as, and so the owner
	// of the data directory: every container of the Database (servers and
	// Jobs) runs as it. Default 999 (the official postgres image on
	// Debian); the official Alpine image's postgres user is 70, other
	// images use others (26, 1001). It cannot be read from the image
	// reference, and a data directory owned by another UID cannot be used:
	// a server that finds one says so in the Ready condition (reason
	// DataDirectoryOwnerMismatch, with the expected and found owner).
	// +kubebuilder:validation:XValidation:rule="self > 0",message="podTemplate.runAsUser must be more than 0: the servers refuse to run as root"
	// +optional
	RunAsUser *int64 `json:"runAsUser,omitempty"`
}

// SpreadType is how strongly the pods are kept apart.
// +kubebuilder:validation:Enum=Preferred;Required;None
type SpreadType string

const (
	// SpreadPreferred: the scheduler places the pods in separate domains
	// when it can, and together when it cannot (fewer nodes than pods,
	// or the others full).
	SpreadPreferred SpreadType = "Preferred"
	// SpreadRequired: a pod that finds no domain free of the others
	// stays Pending.
	SpreadRequired SpreadType = "Required"
	// SpreadNone: the operator adds no anti-affinity.
	SpreadNone SpreadType = "None"
)

// Spread is the anti-affinity the operator adds between the pods of one
// Database's servers, or of one Pooler: CloudNativePG's
// podAntiAffinityType and topologyKey.
// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type != 'None' || !has(self.topologyKey)",message="podTemplate.spread: topologyKey has no use with type None (the operator adds no anti-affinity)"
type Spread struct {
	// Type: Preferred (default) places the pods in separate domains when
	// the scheduler can, together when it cannot; Required leaves a pod
	// that finds no domain free of the others Pending (so as many domains
	// as pods are needed, and a lost node's pod waits for it); None adds
	// nothing, and affinity alone places the pods.
	// +kubebuilder:default=Preferred
	// +optional
	Type SpreadType `json:"type,omitempty"`

	// TopologyKey is the node label whose values are the domains:
	// kubernetes.io/hostname (default: one node each) or
	// topology.kubernetes.io/zone (one zone each).
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')",message="podTemplate.spread.topologyKey must be a node label key such as kubernetes.io/hostname or topology.kubernetes.io/zone"
	// +optional
	TopologyKey string `json:"topologyKey,omitempty"`
}

// Place applies the node selection, tolerations, affinity (a copy) and
// priority to a pod's spec (nil: nothing). A kind that spreads its pods
// then calls SpreadApart.
func (t *PodTemplate) Place(spec *corev1.PodSpec) {
	if t == nil {
		return
	}
	if len(t.NodeSelector) > 0 {
		spec.NodeSelector = make(map[string]string, len(t.NodeSelector))
		for k, v := range t.NodeSelector {
			spec.NodeSelector[k] = string(v)
		}
	}
	spec.Tolerations = t.Tolerations
	spec.PriorityClassName = t.PriorityClassName
	spec.Affinity = t.Affinity.DeepCopy()
}

// SpreadApart adds to spec.Affinity (set by Place, or nil) the
// anti-affinity that t's spread says between the pods selector matches
// (t nil: the default, Preferred on kubernetes.io/hostname). The user's
// own affinity terms stay as they are.
func (t *PodTemplate) SpreadApart(spec *corev1.PodSpec, selector map[string]string) {
	kind, key := SpreadPreferred, corev1.LabelHostname
	if t != nil && t.Spread != nil {
		if t.Spread.Type != "" {
			kind = t.Spread.Type
		}
		if t.Spread.TopologyKey != "" {
			key = t.Spread.TopologyKey
		}
	}
	if kind == SpreadNone {
		return
	}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.PodAntiAffinity == nil {
		spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	anti := spec.Affinity.PodAntiAffinity
	term := corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: selector}}
	if kind == SpreadRequired {
		anti.RequiredDuringSchedulingIgnoredDuringExecution = append(anti.RequiredDuringSchedulingIgnoredDuringExecution, term)
		return
	}
	anti.PreferredDuringSchedulingIgnoredDuringExecution = append(anti.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.WeightedPodAffinityTerm{Weight: 100, PodAffinityTerm: term})
}

// DatabaseSpec is the seed's SampleDB (name, port, storage-size, image,
// replicas, with their names and meaning kept) plus optional settings with
// safe defaults.
//
// The lifecycle work adds backup, fromBackup and deletionPolicy here.
//
// +kubebuilder:validation:XValidation:rule="self.engine != 'PostgreSQL' || !(self.name in ['postgres', 'template0', 'template1'] || self.name.startsWith('pg_'))",message="name: postgres, template0, template1 and names starting with pg_ are reserved by PostgreSQL (the app role is named after the database, and pg_ role names are reserved)"
// +kubebuilder:validation:XValidation:rule="self.engine != 'PostgreSQL' || !has(self.parameters) || !self.parameters.exists(k, k.lowerAscii() in ['port', 'listen_addresses', 'data_directory', 'hba_file', 'ident_file', 'config_file', 'unix_socket_directories'])",message="parameters: port, listen_addresses, data_directory, hba_file, ident_file, config_file and unix_socket_directories are set by the operator (use spec.port for the port)"
// +kubebuilder:validation:XValidation:rule="!has(self.backup) || !has(self.backup.storage) || !has(self.backup.storage.objectStore) || (self.engine == 'PostgreSQL' && (!has(self.parameters) || !self.parameters.exists(k, k.lowerAscii() in ['archive_mode', 'archive_command', 'archive_library', 'archive_timeout'])))",message="backup.storage.objectStore: the operator sets archive_mode, archive_command, archive_library and archive_timeout for it (use backup.storage.objectStore.archiveTimeout), and it archives PostgreSQL only"
// +kubebuilder:validation:XValidation:rule="has(self.fromBackup) == has(oldSelf.fromBackup) && (!has(self.fromBackup) || self.fromBackup == oldSelf.fromBackup)",message="fromBackup is set at creation only: the Database was (or was not) restored from it when it was made"
// +kubebuilder:validation:XValidation:rule="has(self.recovery) == has(oldSelf.recovery) && (!has(self.recovery) || self.recovery == oldSelf.recovery)",message="recovery is set at creation only: the Database was (or was not) recovered from that archive when it was made"
// +kubebuilder:validation:XValidation:rule="!has(self.recovery) || (self.engine == 'PostgreSQL' && !has(self.fromBackup))",message="recovery needs engine PostgreSQL, and excludes fromBackup: a new Database starts from one source"
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storageClassName cannot change: the existing volumes keep their StorageClass (make a new Database to move the data)"
type DatabaseSpec struct {
	// Name is the database to create (the app role that owns it has the
	// same name). Up to 63 bytes; hyphens and other characters are fine,
	// the operator quotes it everywhere.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="name must not be empty: it is the database to create"
	// +kubebuilder:validation:XValidation:rule="size(bytes(self)) <= 63",message="name must be at most 63 bytes long (PostgreSQL's limit on names); characters beyond ASCII take 2 to 4 bytes each"
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]')",message="name must not contain control characters"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="name is immutable: the operator created that database; make a new Database for another one"
	// +required
	Name string `json:"name"`

	// Port the server listens on and its Services expose; default: the
	// engine's (5432 for PostgreSQL).
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 65535",message="port must be between 1 and 65535"
	// +optional
	Port int32 `json:"port,omitempty"`

	// StorageSize is the size of each replica's volume, a quantity such as
	// 50G or 10Gi. It can grow (when the StorageClass allows volume
	// expansion), never shrink.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="isQuantity(self)",messageExpression="'storage-size must be a quantity such as 50G or 10Gi, not \"' + self + '\"'"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(self) || quantity(self).isGreaterThan(quantity('0'))",message="storage-size must be more than 0"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(self) || !isQuantity(oldSelf) || quantity(self).compareTo(quantity(oldSelf)) >= 0",messageExpression="'storage-size cannot shrink (from ' + oldSelf + ' to ' + self + '): volumes can only grow'"
	// +required
	StorageSize string `json:"storage-size"`

	// Image of the database server; default: the engine's, pinned to a
	// minor version (PostgreSQL: postgres:17.6). An image whose tag holds no
	// version is accepted and reported (status.currentVersion stays empty).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Replicas: the primary (status.currentPrimary, ordinal 0 at
	// creation) and replicas-1 streaming standbys,
	// at most 32 (the operator looks at each replica's pod and volume on
	// every reconcile).
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="replicas must be at least 1 (the primary)"
	// +kubebuilder:validation:XValidation:rule="self <= 32",message="replicas must be at most 32 (the primary and 31 standbys, each a server with a volume of its own)"
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Engine is the database server; immutable.
	// +kubebuilder:default=PostgreSQL
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="engine is immutable: the data on the volumes belongs to its engine"
	// +optional
	Engine Engine `json:"engine,omitempty"`

	// StorageClassName of the volumes; default: the cluster's default
	// StorageClass. Immutable.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'storageClassName must be the name of a StorageClass (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Resources of the database container. Default: requests 50m CPU and
	// 256Mi memory, no limits (not BestEffort: a busy node starves those);
	// {} asks for BestEffort pods.
	// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || ['cpu', 'memory', 'ephemeral-storage'].all(r, !(r in self.requests) || !(r in self.limits) || !isQuantity(string(self.requests[r])) || !isQuantity(string(self.limits[r])) || quantity(string(self.requests[r])).compareTo(quantity(string(self.limits[r]))) <= 0)",message="resources: a request (cpu, memory or ephemeral-storage) must not be more than its limit"
	// +kubebuilder:validation:XValidation:rule="['cpu', 'memory', 'ephemeral-storage'].all(r, (!has(self.requests) || !(r in self.requests) || !isQuantity(string(self.requests[r])) || !quantity(string(self.requests[r])).isLessThan(quantity('0'))) && (!has(self.limits) || !(r in self.limits) || !isQuantity(string(self.limits[r])) || !quantity(string(self.limits[r])).isLessThan(quantity('0'))))",message="resources: cpu, memory and ephemeral-storage requests and limits must not be negative"
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Parameters are engine settings (PostgreSQL: postgresql.conf names and
	// values, passed to the server as -c name=value). A change rolls the
	// replicas.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 63 && k.matches('^[A-Za-z_][A-Za-z0-9_.]*$'))",message="parameters: each key is a setting name of letters, digits, '_' and '.' (at most 63 characters), such as max_connections or shared_buffers"
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(self[k]) <= 1024)",message="parameters: each value is at most 1024 characters"
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`

	// PodTemplate: node selection, tolerations, affinity and priority of
	// the database's pods.
	// +optional
	PodTemplate *PodTemplate `json:"podTemplate,omitempty"`

	// Suspend stops the operator from changing anything of this Database;
	// what runs keeps running. Deleting a suspended Database still follows
	// its deletionPolicy.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Backup: scheduled backups, their retention and where they are kept.
	// A Database without it still gets a backup volume the first time a
	// backup is needed (a DatabaseBackup made by hand, the final backup
	// on delete).
	// +optional
	Backup *BackupSpec `json:"backup,omitempty"`

	// FromBackup is the name of a DatabaseBackup in the same namespace to
	// restore into the new primary before the database is initialised and
	// reported Ready. Set at creation only.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'fromBackup must be the name of a DatabaseBackup (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +optional
	FromBackup string `json:"fromBackup,omitempty"`

	// Recovery makes this new Database from an archive in an object
	// store, replayed to a point in time (PostgreSQL only;
	// docs/guides/database-backup.md, Point-in-time recovery). Set at
	// creation only.
	// +optional
	Recovery *Recovery `json:"recovery,omitempty"`

	// DeletionPolicy says what deleting the Database does with its data:
	// Snapshot (default) takes a final DatabaseBackup, then removes the
	// StatefulSet and its volumes; Retain removes the StatefulSet and keeps
	// the volumes and the Secrets; Delete removes the StatefulSet, the
	// volumes and the Secrets without a final backup. Earlier
	// DatabaseBackups and the backup volume are kept under every policy.
	// +kubebuilder:default=Snapshot
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// DeletionTimeout is how long the final backup of a Snapshot deletion
	// may take before the deletion is reported blocked (condition
	// DeletionBlocked); default 10m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="deletionTimeout must not be negative"
	// +optional
	DeletionTimeout *metav1.Duration `json:"deletionTimeout,omitempty"`

	// UpgradeTimeout is how long the primary may take to become ready on
	// a new major version, after the upgrade Job, before the upgrade is
	// rolled back to the old image and the old data directory (condition
	// UpgradeFailed); default 15m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="upgradeTimeout must not be negative"
	// +optional
	UpgradeTimeout *metav1.Duration `json:"upgradeTimeout,omitempty"`

	// Failover: automatic failover of a PostgreSQL primary that is gone
	// (docs/guides/database-failover.md). On by default for a Database created
	// under this operator (failover.enabled).
	// +optional
	Failover *FailoverSpec `json:"failover,omitempty"`

	// Monitoring: every instance serves PostgreSQL's own metrics for
	// Prometheus (docs/guides/database-monitoring.md). On by default for a
	// Database created under this operator (monitoring.enabled).
	// +optional
	Monitoring *MonitoringSpec `json:"monitoring,omitempty"`

	// Replication: how the standbys replicate (docs/guides/database-failover.md,
	// Synchronous replication).
	// +optional
	Replication *ReplicationSpec `json:"replication,omitempty"`

	// TLS: encrypted connections to the servers (docs/guides/database.md,
	// Connecting with TLS). On by default for a Database created under
	// this operator (tls.enabled).
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`
}

// TLSSpec says how the servers encrypt their connections.
// +kubebuilder:validation:XValidation:rule="!has(self.serverCertSecret) || !has(self.enabled) || self.enabled",message="tls.serverCertSecret needs TLS on: remove tls.enabled: false, or remove tls.serverCertSecret"
type TLSSpec struct {
	// Enabled: every server presents a certificate for every name a client
	// uses and admits connections from other hosts over TLS only
	// (PostgreSQL: ssl=on and hostssl lines in pg_hba.conf; a
	// MySQLCluster's MySQL or MariaDB: require_secure_transport),
	// replication and backups included. Unset: the default the operator
	// recorded on the cluster when it first saw it (annotation
	// stable.imaginedata.co/tls-default on a Database): the
	// operator's (on, unless the chart's tlsByDefault of the controller is
	// false) for a new cluster, off for one an older operator already ran.
	// Turning it on or off changes the pod template (every pod restarts
	// once).
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// ServerCertSecret names a Secret of type kubernetes.io/tls in the
	// cluster's namespace (tls.crt, tls.key and ca.crt, as cert-manager
	// writes it) whose certificate the servers present instead of the one
	// the operator issues. It must name <name>-rw.<namespace>.svc, <name>-rw
	// and each pod under the headless Service
	// (<name>-<n>.<name>-headless), which standbys, replicas and backups
	// verify. The operator reads it every minute; a
	// renewed certificate is picked up without a restart.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'tls.serverCertSecret must be the name of a Secret (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +optional
	ServerCertSecret string `json:"serverCertSecret,omitempty"`
}

// ReplicationSpec says how the standbys replicate.
type ReplicationSpec struct {
	// Synchronous: a commit returns only once standbys have it.
	// +optional
	Synchronous *SynchronousSpec `json:"synchronous,omitempty"`
}

// SynchronousSpec turns on synchronous replication.
type SynchronousSpec struct {
	// MinStandbys is how many standbys must have flushed a commit's WAL
	// before the commit returns (synchronous_standby_names = 'ANY n
	// (<the streaming standbys>)'); 0 (default): asynchronous. While
	// fewer standbys stream, the operator lowers it to those that do
	// (writes stay available; the docs say what that risks). Needs
	// failover.enabled (the instance agent sets it on the primary).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=31
	// +optional
	MinStandbys int32 `json:"minStandbys,omitempty"`
}

// FailoverSpec turns on automatic failover.
type FailoverSpec struct {
	// Enabled: each server pod runs the instance agent
	// (deckhand-instance), the operator asks it for its server's status
	// every second, and a primary gone longer than primaryGoneAfter is
	// fenced and its most advanced healthy standby promoted. Unset: the
	// default the operator recorded on the Database when it first saw it
	// (annotation stable.imaginedata.co/failover-default): the operator's
	// (on, unless the chart's controllers.database.failoverByDefault is
	// false) for a new Database, off for one an older operator already
	// ran, which an upgrade of the operator must not restart. Turning it
	// on or off changes the pod template (every pod restarts once).
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// PrimaryGoneAfter is how long the primary may be unhealthy before it
	// is failed over; default 10s: a container killed once restarts and
	// recovers within it, and it leaves most of a 30 s write outage for
	// the fence, the promotion and the Service.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="failover.primaryGoneAfter must be at least 1s: the operator asks each instance's status once a second"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="failover.primaryGoneAfter must be at most 1h"
	// +optional
	PrimaryGoneAfter *metav1.Duration `json:"primaryGoneAfter,omitempty"`

	// SwitchoverTo names the instance (a pod of this Database,
	// <name>-<ordinal>) to be the primary: when it is a healthy standby
	// streaming from the primary and another instance is the primary, the
	// operator hands over cleanly (the primary stopped and fenced, the
	// standby replays up to its last record, then is promoted: no
	// committed row lost) and records it in status.failovers (kind
	// switchover). Kept after the handover: it names the wanted primary,
	// so a later failover away from it is switched back once it is a
	// streaming standby again. Empty (default): no switchover. Needs
	// enabled.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	SwitchoverTo string `json:"switchoverTo,omitempty"`

	// SwitchoverTimeout bounds a switchover's handover, counted from its
	// start: a switchover whose old primary cannot be fenced, or whose
	// target has not replayed the old primary's last record within it, is
	// aborted: the old primary's fence is lifted (it serves again as the
	// primary), the record says Aborted and why (condition Failover
	// SwitchoverAborted, Warning Event SwitchoverAborted), and it is not
	// tried again until the Database is annotated
	// stable.imaginedata.co/retry-switchover. Default 30s: a clean
	// handover takes a few seconds (the fence, a catch-up of WAL the
	// target already received, the promotion), and writes are stopped
	// for all of it; past the 30 s write-outage target, lifting
	// the fence gives writes back sooner than waiting on. A promotion
	// already begun (phase Promoting) is never aborted.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s')",message="failover.switchoverTimeout must be at least 5s: the old primary's clean shutdown and the target's catch-up take seconds"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="failover.switchoverTimeout must be at most 1h: writes are stopped while a switchover waits"
	// +optional
	SwitchoverTimeout *metav1.Duration `json:"switchoverTimeout,omitempty"`
}

// FailoverKind says why a primary changed.
// +kubebuilder:validation:Enum=failover;switchover
type FailoverKind string

// Failover kinds: an automatic failover of a primary that is gone, or a
// switchover asked for by spec.failover.switchoverTo.
const (
	KindFailover   FailoverKind = "failover"
	KindSwitchover FailoverKind = "switchover"
)

// FailoverPhase is where a failover is.
// +kubebuilder:validation:Enum=Fencing;Promoting;Completed;Aborted
type FailoverPhase string

// Failover phases: the record is written before each step is taken, so an
// operator that restarts resumes it and never promotes a second standby.
// Completed and Aborted (a switchover given up before any promotion,
// spec.failover.switchoverTimeout) are final.
const (
	FailoverFencing   FailoverPhase = "Fencing"
	FailoverPromoting FailoverPhase = "Promoting"
	FailoverCompleted FailoverPhase = "Completed"
	FailoverAborted   FailoverPhase = "Aborted"
)

// Finished: the record is final (Completed or Aborted).
func (p FailoverPhase) Finished() bool {
	return p == FailoverCompleted || p == FailoverAborted
}

// FailoverRecord is one failover: what was decided, and what it may have
// cost.
type FailoverRecord struct {
	// Kind: failover (absent in records made before the field) or
	// switchover.
	// +optional
	Kind FailoverKind `json:"kind,omitempty"`
	// Started is when the primary was declared gone (a switchover: when
	// it began).
	Started metav1.Time `json:"started"`
	// Finished is when the standby was promoted (an aborted switchover:
	// when it was given up); absent while under way.
	// +optional
	Finished *metav1.Time  `json:"finished,omitempty"`
	Phase    FailoverPhase `json:"phase"`
	// From is the primary that was gone; To the standby promoted (set
	// before it is promoted, and never changed after).
	From string `json:"from"`
	// +optional
	To string `json:"to,omitempty"`
	// Fenced: the old primary's agent stopped its server and keeps it
	// stopped. False: it was not reached (FenceMessage says why); its
	// readiness probe and the primary ConfigMap key keep the Services off
	// it.
	// +optional
	Fenced bool `json:"fenced"`
	// +optional
	FenceMessage string `json:"fenceMessage,omitempty"`
	// NamedFirst is when the scripts ConfigMap and the role labels first
	// named To the primary, before its promotion: the fence did not reach
	// From while its pod showed its server running, so From's own agent
	// fences it once its pod reads the new name (the agent's guard), and
	// To is promoted only after that had time to happen
	// (docs/design/database-failover.md, "Naming the new primary first").
	// Absent when the fence reached From or its pod showed its server
	// stopped.
	// +optional
	NamedFirst *metav1.Time `json:"namedFirst,omitempty"`
	// StandbysDetached is when the name-first wait ended with From's pod
	// still showing its server running: the standbys still streaming
	// from it were told to stop (DetachedStandbys), so that From, if its
	// node cannot reach the API server either, sees them stop replying
	// and fences itself before the promotion.
	// +optional
	StandbysDetached *metav1.Time `json:"standbysDetached,omitempty"`
	// DetachedStandbys are the standbys detached then. They stream again,
	// from the new primary, once it is promoted; those not reached then
	// stay listed until they are.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	DetachedStandbys []string `json:"detachedStandbys,omitempty"`
	// FromLSN is the last write position the operator saw the old primary
	// report; empty when it never saw one (an operator that started after
	// the primary was gone).
	// +optional
	FromLSN string `json:"fromLSN,omitempty"`
	// ToLSN is the replayed position of the standby chosen.
	// +optional
	ToLSN string `json:"toLSN,omitempty"`
	// BytesPossiblyLost is fromLSN - toLSN: WAL the old primary had
	// written that the new one never replayed (with asynchronous
	// replication, committed transactions may be among it). Absent when
	// fromLSN is unknown.
	// +optional
	BytesPossiblyLost *int64 `json:"bytesPossiblyLost,omitempty"`
	// SynchronousStandbys are the standbys in the old primary's
	// synchronous_standby_names when it was last seen healthy: with
	// synchronous replication only one of them is promoted (the others
	// may lack acknowledged commits). Empty: asynchronous, any standby.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	SynchronousStandbys []string `json:"synchronousStandbys,omitempty"`
	// SynchronousQuorum is the k of that setting's ANY k: an
	// acknowledged commit was on k of synchronousStandbys, so a standby
	// is promoted only while at least len(synchronousStandbys) - k + 1 of
	// them answer (one of those has every acknowledged commit), unless
	// the failover is forced (docs/guides/database-failover.md).
	// +optional
	SynchronousQuorum int32 `json:"synchronousQuorum,omitempty"`
	// Reason says why the standby was chosen.
	// +optional
	Reason string `json:"reason,omitempty"`
	// AbortReason says why a switchover was aborted (phase Aborted).
	// +optional
	AbortReason string `json:"abortReason,omitempty"`
	// FenceLifted is when the operator lifted the old primary's fence:
	// once its pod read the new primary's name, so its server starts as
	// a standby (rewound by pg_rewind), never as a primary. Absent while
	// it stays fenced.
	// +optional
	FenceLifted *metav1.Time `json:"fenceLifted,omitempty"`
	// SelfFenced is when the operator first saw the old primary, which
	// the failover's fence had not reached, fenced by its own agent: it
	// ran as a primary while its pod named the new one.
	// +optional
	SelfFenced *metav1.Time `json:"selfFenced,omitempty"`
	// Rejoined is when the old primary was first seen streaming as a
	// standby of the new one.
	// +optional
	Rejoined *metav1.Time `json:"rejoined,omitempty"`
}

// DeletionPolicy is what deleting a Database does with its data.
// +kubebuilder:validation:Enum=Snapshot;Retain;Delete
type DeletionPolicy string

// Deletion policies.
const (
	DeletionSnapshot DeletionPolicy = "Snapshot"
	DeletionRetain   DeletionPolicy = "Retain"
	DeletionDelete   DeletionPolicy = "Delete"
)

// BackupSpec: when backups are taken, how many are kept, and where.
type BackupSpec struct {
	// Schedule in cron format: five fields (minute hour day-of-month month
	// day-of-week, as a Kubernetes CronJob's) or @hourly, @daily,
	// @weekly, @monthly, @yearly. Empty: backups only on demand.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$') || self.matches('^[^ ]+( +[^ ]+){4}$')",message="schedule must be five cron fields (minute hour day-of-month month day-of-week, e.g. '0 3 * * *') or one of @hourly, @daily, @weekly, @monthly, @yearly"
	// +optional
	Schedule string `json:"schedule,omitempty"`

	// TimeZone of the schedule, an IANA name such as Europe/Paris;
	// default UTC.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z][A-Za-z0-9_+/-]*$')",message="timeZone must be an IANA time zone name such as Europe/Paris or UTC"
	// +optional
	TimeZone *string `json:"timeZone,omitempty"`

	// Retention deletes old DatabaseBackups of this Database, and their
	// files. Without it, every backup is kept.
	// +optional
	Retention *Retention `json:"retention,omitempty"`

	// Storage is where the backups are written.
	// +optional
	Storage *BackupStorage `json:"storage,omitempty"`

	// Suspend stops scheduled backups; backups made by hand still run.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// MaxStandbyLag is how far (in bytes of WAL) a standby's replay may
	// be behind the primary for a backup to read from it instead of the
	// primary. The backup Job measures it before the dump starts; a
	// standby further behind, or not streaming, is not used. Default 16Mi:
	// one WAL segment, so a standby that keeps up (a second or two behind
	// under load) qualifies and one that stopped replaying does not. 0:
	// backups always read from the primary. The final backup before a
	// deletion and the backup before an image change always read from the
	// primary.
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="backup.maxStandbyLag must be 0 or more (e.g. 16Mi)"
	// +optional
	MaxStandbyLag *resource.Quantity `json:"maxStandbyLag,omitempty"`

	// Verify: how backups are proven by restoring them (absent: each
	// backup is verified, as mode EachBackup with its defaults).
	// +optional
	Verify *BackupVerify `json:"verify,omitempty"`
}

// Retention of a Database's backups. The newest completed backup is
// always kept, and so is a backup that a restore is using.
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

// BackupStorage is where backups go: logical dumps to a volume, and,
// with objectStore, continuous WAL archiving to an object store.
type BackupStorage struct {
	// Volume: a PersistentVolumeClaim <name>-backup, one per Database,
	// not owned by it (it outlives the Database).
	// +optional
	Volume *BackupVolume `json:"volume,omitempty"`

	// ObjectStore: the primary archives every WAL segment to this
	// S3-compatible store (PostgreSQL only). Logical dumps keep going to
	// the volume.
	// +optional
	ObjectStore *ObjectStore `json:"objectStore,omitempty"`
}

// BackupVolume is the backup PersistentVolumeClaim's shape, used when it
// is created.
type BackupVolume struct {
	// Size of the volume; default: the Database's storage-size.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",messageExpression="'backup.storage.volume.size must be a quantity such as 100Gi, not \"' + self + '\"'"
	// +optional
	Size string `json:"size,omitempty"`

	// StorageClassName of the volume; default: the cluster's default.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'backup.storage.volume.storageClassName must be the name of a StorageClass (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// Phase sums up a Database's state.
// +kubebuilder:validation:Enum=Provisioning;Initializing;Ready;Degraded;Deleting
type Phase string

// Phases.
const (
	// PhaseProvisioning: objects are being created, volumes bound, the
	// primary is not ready yet.
	PhaseProvisioning Phase = "Provisioning"
	// PhaseInitializing: the primary is ready; the init Job has not
	// succeeded yet.
	PhaseInitializing Phase = "Initializing"
	// PhaseReady: initialised and every replica ready.
	PhaseReady Phase = "Ready"
	// PhaseDegraded: something is wrong (see the conditions): replicas not
	// ready after initialisation, a failed init Job, an object of another
	// owner in the way.
	PhaseDegraded Phase = "Degraded"
	// PhaseDeleting: the Database is being deleted.
	PhaseDeleting Phase = "Deleting"
)

// StandbyClone is one standby's clone of the primary under way.
type StandbyClone struct {
	// Pod is the standby's pod.
	Pod string `json:"pod"`
	// CopiedBytes of TotalBytes (pg_basebackup's estimate of the
	// primary's size, which grows if the primary does): 0 until the
	// standby logged its first progress line.
	// +optional
	CopiedBytes int64 `json:"copiedBytes,omitempty"`
	// +optional
	TotalBytes int64 `json:"totalBytes,omitempty"`
	// LastProgressTime is when the standby logged that progress.
	// +optional
	LastProgressTime *metav1.Time `json:"lastProgressTime,omitempty"`
}

// SynchronousStatus is a primary's synchronous_standby_names,
// 'ANY quorum (standbys...)'.
type SynchronousStatus struct {
	// Primary is the instance whose setting this is.
	Primary string `json:"primary"`
	// Standbys are the standbys the setting names.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Standbys []string `json:"standbys"`
	// Quorum is how many of them confirm each commit (ANY k).
	Quorum int32 `json:"quorum"`
}

// DatabaseStatus is what the operator observed.
type DatabaseStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase sums up the state; the conditions say why.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Replicas is the number of replicas asked for.
	// +optional
	Replicas int32 `json:"replicas"`

	// ReadyReplicas is the number of database pods that pass their
	// readiness probe.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// Ready is readyReplicas/replicas, for kubectl get.
	// +optional
	Ready string `json:"ready,omitempty"`

	// Primary is the name of the pod running the primary.
	// +optional
	Primary string `json:"primary,omitempty"`

	// CurrentPrimary is the pod the operator names the primary: the
	// read-write Service routes to it, and every server takes its role
	// from it (the scripts ConfigMap's "primary" key), never from its
	// ordinal. Set to ordinal 0 when the Database is created; only a
	// failover changes it.
	// +optional
	CurrentPrimary string `json:"currentPrimary,omitempty"`

	// Failovers are the automatic failovers, oldest first, the last ten;
	// one whose phase is not Completed is under way.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	// +optional
	Failovers []FailoverRecord `json:"failovers,omitempty"`

	// Synchronous is the synchronous replication the primary was last
	// seen using (its synchronous_standby_names), recorded before the
	// operator adds a standby to it and after the primary drops one: a
	// failover promotes only one of these standbys, also after an
	// operator restart. Absent: asynchronous.
	// +optional
	Synchronous *SynchronousStatus `json:"synchronous,omitempty"`

	// CurrentImage is the image every replica runs (once a rollout is done).
	// +optional
	CurrentImage string `json:"currentImage,omitempty"`

	// CurrentVersion is the server version: as reported by the server to
	// the init Job, else read from the image tag; empty when neither says.
	// +optional
	CurrentVersion string `json:"currentVersion,omitempty"`

	// Backup: the backups' bookkeeping.
	// +optional
	Backup *BackupStatus `json:"backup,omitempty"`

	// Upgrade is the newest major-version upgrade: its step, so a
	// reconcile that runs twice does each step once.
	// +optional
	Upgrade *UpgradeStatus `json:"upgrade,omitempty"`

	// Clones are the standbys cloning the primary now (their first copy,
	// pg_basebackup, which cannot resume), with how far each has got, as
	// the standby's log says; absent when none is cloning.
	// +listType=map
	// +listMapKey=pod
	// +optional
	Clones []StandbyClone `json:"clones,omitempty"`

	// RecoverableFrom is the earliest moment a Database recovered from this
	// one's archive can reach: the end of the archive's oldest base backup
	// (spec.backup.storage.objectStore; the primary's instance agent
	// reports it, so with failover on).
	// +optional
	RecoverableFrom *metav1.Time `json:"recoverableFrom,omitempty"`

	// RecoverableUntil is when the primary last archived a WAL segment
	// with at most one more waiting: what was committed before that
	// segment was switched is in the archive. While more wait (archiving
	// failing, or behind a burst of writes) it stays where the archive
	// last caught up. Updated at most every 30 s.
	// +optional
	RecoverableUntil *metav1.Time `json:"recoverableUntil,omitempty"`

	// BaseBackups is what the primary's archiver last found in the
	// archive.
	// +optional
	BaseBackups *BaseBackupsStatus `json:"baseBackups,omitempty"`

	// Conditions: Ready, Initialized (the init Job created the database
	// and its role), StorageBound (every replica's volume is bound),
	// StorageResized (volumes request storage-size), VersionKnown,
	// LastBackupSucceeded, BackupVerified (the newest verified backup is
	// within backup.verify.maxAge), Restored (with fromBackup), DeletionBlocked, Upgrading, UpgradeBlocked, UpgradeFailed.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// UpgradeStep is where a major-version upgrade is.
// +kubebuilder:validation:Enum=BackingUp;ScalingDown;RunningUpgradeJob;StartingNewVersion;OldDataKept;RemovingOldData;Completed;RollingBack;RestoringOldData;Failed
type UpgradeStep string

// Upgrade steps, in order; a failure goes from RunningUpgradeJob or
// StartingNewVersion to RollingBack, RestoringOldData and Failed.
const (
	UpgradeBackingUp          UpgradeStep = "BackingUp"
	UpgradeScalingDown        UpgradeStep = "ScalingDown"
	UpgradeRunningJob         UpgradeStep = "RunningUpgradeJob"
	UpgradeStartingNewVersion UpgradeStep = "StartingNewVersion"
	// UpgradeOldDataKept: the new version serves; the old data directory
	// is kept until the user annotates the Database
	// stable.imaginedata.co/remove-old-data=true.
	UpgradeOldDataKept      UpgradeStep = "OldDataKept"
	UpgradeRemovingOldData  UpgradeStep = "RemovingOldData"
	UpgradeCompleted        UpgradeStep = "Completed"
	UpgradeRollingBack      UpgradeStep = "RollingBack"
	UpgradeRestoringOldData UpgradeStep = "RestoringOldData"
	UpgradeFailed           UpgradeStep = "Failed"
)

// UpgradeStatus records one major-version upgrade.
type UpgradeStatus struct {
	// Step is the step the upgrade is at.
	Step UpgradeStep `json:"step"`
	// StepStartTime is when Step began.
	// +optional
	StepStartTime *metav1.Time `json:"stepStartTime,omitempty"`
	// Attempt names this attempt's objects (its backup and Jobs).
	Attempt string `json:"attempt"`
	// FromImage and FromVersion ran before; ToImage and ToVersion are the
	// upgrade's.
	FromImage   string `json:"fromImage"`
	FromVersion string `json:"fromVersion"`
	ToImage     string `json:"toImage"`
	ToVersion   string `json:"toVersion"`
	// Backup is the DatabaseBackup the upgrade restores.
	// +optional
	Backup string `json:"backup,omitempty"`
	// FailureReason says why an upgrade was rolled back.
	// +optional
	FailureReason string `json:"failureReason,omitempty"`
}

// BaseBackupsStatus is an archive's finished base backups.
type BaseBackupsStatus struct {
	// Count of finished base backups.
	Count int32 `json:"count"`
	// Oldest and Newest of them.
	// +optional
	Oldest *BaseBackupRecord `json:"oldest,omitempty"`
	// +optional
	Newest *BaseBackupRecord `json:"newest,omitempty"`
	// LastError is why the last base backup failed; empty once one
	// succeeds.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// CheckedTime is when the archiver last looked.
	// +optional
	CheckedTime *metav1.Time `json:"checkedTime,omitempty"`
	// Verification is the last verification by restore of a base backup:
	// the newest's, or, while the newest's runs, the one before.
	// +optional
	Verification *BaseBackupVerification `json:"verification,omitempty"`
	// LastVerified is the newest base backup whose verification passed.
	// The operator holds it: retention never deletes it, nor the WAL a
	// recovery from it needs, until a newer one is verified.
	// +optional
	LastVerified *BaseBackupRef `json:"lastVerified,omitempty"`
	// Held are the base backups the operator's holds keep in the archive
	// (Barman's keep annotation), as the archiver last found them.
	// +optional
	// +listType=atomic
	Held []HeldBaseBackup `json:"held,omitempty"`
}

// BaseBackupRef names a base backup.
type BaseBackupRef struct {
	// Name (base-<UTC time> for those the primary takes) and ID
	// (Barman's).
	Name string `json:"name"`
	ID   string `json:"id"`
}

// HeldBaseBackup is a base backup an operator's hold keeps, and why.
type HeldBaseBackup struct {
	BaseBackupRef `json:",inline"`
	// Reason says who holds it and what for.
	Reason string `json:"reason"`
}

// BaseBackupVerification is a base backup's verification: restored into
// a scratch server in a Job, recovered to the restore point made right
// after it, and checked (checks archive, restore, recovery, marker,
// amcheck, writable).
type BaseBackupVerification struct {
	// BackupName and BackupID name the base backup verified.
	BackupName string `json:"backupName"`
	BackupID   string `json:"backupID"`
	// The verification's times, outcome and checks, as a
	// DatabaseBackup's.
	BackupVerification `json:",inline"`
}

// BaseBackupRecord is one base backup in an archive.
type BaseBackupRecord struct {
	// Name (base-<UTC time> for those the primary takes) and ID
	// (Barman's).
	Name string `json:"name"`
	ID   string `json:"id"`
	// BeginTime and EndTime; a recovery from it can reach any moment
	// after EndTime.
	BeginTime metav1.Time `json:"beginTime"`
	EndTime   metav1.Time `json:"endTime"`
	// BeginLSN and EndLSN are its WAL positions.
	BeginLSN string `json:"beginLSN"`
	EndLSN   string `json:"endLSN"`
	// Timeline it was taken on.
	Timeline int64 `json:"timeline"`
}

// BackupStatus is what the operator knows of a Database's backups.
type BackupStatus struct {
	// LastScheduleTime is the last schedule time a backup was made for,
	// so schedules missed while the operator was down are made up once.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// NextScheduleTime is when the next scheduled backup is due.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// LastBackup is the newest finished DatabaseBackup.
	// +optional
	LastBackup string `json:"lastBackup,omitempty"`
	// LastSuccessfulBackup is the newest completed DatabaseBackup.
	// +optional
	LastSuccessfulBackup string `json:"lastSuccessfulBackup,omitempty"`
	// LastSuccessTime is when it completed.
	// +optional
	LastSuccessTime *metav1.Time `json:"lastSuccessTime,omitempty"`
	// ClaimName is the backup PersistentVolumeClaim, once it exists.
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// MissedSchedules counts the schedule times for which no backup was
	// made because the previous scheduled backup was still pending or
	// running (the database down, say): at most one scheduled backup
	// waits at a time, and it stands for every time missed meanwhile.
	// +optional
	MissedSchedules int64 `json:"missedSchedules,omitempty"`
	// PreUpgradeBackup is the DatabaseBackup taken before the image
	// change in progress (same major version); only it lets the servers
	// roll. Empty when no image change is in progress.
	// +optional
	PreUpgradeBackup string `json:"preUpgradeBackup,omitempty"`
	// LastVerifiedBackup is the newest completed DatabaseBackup whose
	// newest verification passed; retention never deletes it.
	// +optional
	LastVerifiedBackup string `json:"lastVerifiedBackup,omitempty"`
	// LastVerifiedBackupTime is when that backup completed (its data's
	// age, not the verification's).
	// +optional
	LastVerifiedBackupTime *metav1.Time `json:"lastVerifiedBackupTime,omitempty"`
}

// Database is a database server (seed 004's SampleDB): a StatefulSet of a
// primary and streaming standbys with a volume each, Services, generated
// credentials and an init Job that creates the database and its owner.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=db,singular=database,categories=deckhand
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Storage",type=string,JSONPath=`.spec.storage-size`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.currentVersion`,priority=1
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.primary`,priority=1
// +kubebuilder:printcolumn:name="Archiving",type=string,JSONPath=`.status.conditions[?(@.type=="WALArchiving")].reason`,priority=1
// +kubebuilder:printcolumn:name="Recoverable From",type=string,JSONPath=`.status.recoverableFrom`,priority=1
// +kubebuilder:printcolumn:name="Recoverable Until",type=string,JSONPath=`.status.recoverableUntil`,priority=1
// +kubebuilder:printcolumn:name="Base Backup Verified",type=string,JSONPath=`.status.baseBackups.verification.outcome`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (lower-case letters, digits and '-', starting with a letter): it names the Database's Services"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: the StatefulSet's pods and Services add suffixes to it and must stay within 63"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.failover) || !has(self.spec.failover.switchoverTo) || size(self.spec.failover.switchoverTo) == 0 || (self.spec.failover.switchoverTo.startsWith(self.metadata.name + '-') && self.spec.failover.switchoverTo.substring(size(self.metadata.name) + 1).matches('^(0|[1-9][0-9]?)$') && int(self.spec.failover.switchoverTo.substring(size(self.metadata.name) + 1)) < (has(self.spec.replicas) ? self.spec.replicas : 1))",messageExpression="'spec.failover.switchoverTo must name an instance of this Database, ' + self.metadata.name + '-<ordinal> with an ordinal below spec.replicas, not \"' + self.spec.failover.switchoverTo + '\"'"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.failover) || !has(self.spec.failover.switchoverTo) || size(self.spec.failover.switchoverTo) == 0 || (has(self.spec.failover.enabled) && self.spec.failover.enabled)",message="spec.failover.switchoverTo needs spec.failover.enabled: true (the switchover runs through the instance agent)"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.replication) || !has(self.spec.replication.synchronous) || !has(self.spec.replication.synchronous.minStandbys) || self.spec.replication.synchronous.minStandbys == 0 || self.spec.replication.synchronous.minStandbys < (has(self.spec.replicas) ? self.spec.replicas : 1)",message="spec.replication.synchronous.minStandbys must be below spec.replicas: there are replicas - 1 standbys"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.replication) || !has(self.spec.replication.synchronous) || !has(self.spec.replication.synchronous.minStandbys) || self.spec.replication.synchronous.minStandbys == 0 || (has(self.spec.failover) && has(self.spec.failover.enabled) && self.spec.failover.enabled)",message="spec.replication.synchronous.minStandbys needs spec.failover.enabled: true (the instance agent sets synchronous_standby_names on the primary)"
type Database struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec DatabaseSpec `json:"spec"`
	// +optional
	Status DatabaseStatus `json:"status,omitempty"`
}

// DatabaseList is a list of Databases.
//
// +kubebuilder:object:root=true
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Database `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Database{}, &DatabaseList{})
}
