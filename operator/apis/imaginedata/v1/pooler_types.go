package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolerType is which servers of the Database a Pooler fronts.
// +kubebuilder:validation:Enum=rw;ro
type PoolerType string

const (
	// PoolerReadWrite fronts the primary, through the Database's -rw
	// Service.
	PoolerReadWrite PoolerType = "rw"
	// PoolerReadOnly fronts the standbys, through the Database's -ro
	// Service.
	PoolerReadOnly PoolerType = "ro"
)

// PoolMode is when PgBouncer gives a server connection back to its pool.
// +kubebuilder:validation:Enum=session;transaction
type PoolMode string

const (
	// PoolModeSession keeps a server connection for the client's whole
	// session: every PostgreSQL feature works, and the pool saves only
	// the cost of connecting.
	PoolModeSession PoolMode = "session"
	// PoolModeTransaction lends a server connection for one transaction:
	// hundreds of clients share a few server connections, but session
	// state (SET, advisory locks, LISTEN, prepared statements by name
	// before PgBouncer 1.21) does not carry over between transactions.
	PoolModeTransaction PoolMode = "transaction"
)

// PoolerSpec is a PgBouncer Deployment in front of one Database.
type PoolerSpec struct {
	// Database names the PostgreSQL Database, in the Pooler's namespace,
	// whose servers the pooler fronts. It cannot change: create another
	// Pooler for another Database.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=52
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",messageExpression="'spec.database must be the name of a Database (a DNS label), not \"' + self + '\"'"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.database cannot change: create another Pooler for another Database"
	Database string `json:"database"`

	// Type is rw (the primary, through the Database's -rw Service:
	// reads and writes) or ro (the standbys, through -ro: reads only).
	// Default rw.
	// +kubebuilder:default=rw
	// +optional
	Type PoolerType `json:"type,omitempty"`

	// Instances is the number of PgBouncer pods behind the Pooler's
	// Service. Default 2, so that one pod's restart or eviction leaves
	// the other serving.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	// +optional
	Instances *int32 `json:"instances,omitempty"`

	// Image of PgBouncer; default the operator's (flag
	// --database-pooler-image, chart value
	// controllers.database.poolerImage). The image runs `pgbouncer <ini>`;
	// the pods run it as UID 65532.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// PodTemplate: node selection, tolerations, affinity and priority of
	// the PgBouncer pods and of the setup Job's pod. The operator adds a
	// preferred anti-affinity that spreads the PgBouncer pods across
	// nodes. runAsUser does not apply: PgBouncer runs as UID 65532.
	// +kubebuilder:validation:XValidation:rule="!has(self.runAsUser)",message="podTemplate.runAsUser does not apply to a Pooler: PgBouncer runs as UID 65532 whatever the image"
	// +optional
	PodTemplate *PodTemplate `json:"podTemplate,omitempty"`

	// Resources of the PgBouncer container. Default: requests 50m CPU and
	// 64Mi memory, no limits (not BestEffort: a busy node starves those);
	// {} asks for BestEffort pods.
	// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || ['cpu', 'memory', 'ephemeral-storage'].all(r, !(r in self.requests) || !(r in self.limits) || !isQuantity(string(self.requests[r])) || !isQuantity(string(self.limits[r])) || quantity(string(self.requests[r])).compareTo(quantity(string(self.limits[r]))) <= 0)",message="resources: a request (cpu, memory or ephemeral-storage) must not be more than its limit"
	// +kubebuilder:validation:XValidation:rule="['cpu', 'memory', 'ephemeral-storage'].all(r, (!has(self.requests) || !(r in self.requests) || !isQuantity(string(self.requests[r])) || !quantity(string(self.requests[r])).isLessThan(quantity('0'))) && (!has(self.limits) || !(r in self.limits) || !isQuantity(string(self.limits[r])) || !quantity(string(self.limits[r])).isLessThan(quantity('0'))))",message="resources: cpu, memory and ephemeral-storage requests and limits must not be negative"
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// PgBouncer settings.
	// +optional
	PgBouncer PgBouncerSpec `json:"pgbouncer,omitempty"`
}

// PgBouncerSpec is the part of PgBouncer's configuration a user chooses;
// the operator writes the rest (listening, authentication, TLS).
type PgBouncerSpec struct {
	// PoolMode is session (default) or transaction; see
	// docs/guides/database-pooler.md for what transaction mode asks of
	// the application's driver.
	// +kubebuilder:default=session
	// +optional
	PoolMode PoolMode `json:"poolMode,omitempty"`

	// DefaultPoolSize is the number of server connections each PgBouncer
	// pod opens per user and database. Keep instances times this below
	// the server's max_connections, less what other clients need.
	// Default 20.
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	DefaultPoolSize int32 `json:"defaultPoolSize,omitempty"`

	// MaxClientConnections is the number of client connections each
	// PgBouncer pod accepts. Default 1000.
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxClientConnections int32 `json:"maxClientConnections,omitempty"`
}

// Reasons of a Pooler's Ready condition.
const (
	PoolerReasonReady           = "Ready"
	PoolerReasonDatabaseMissing = "DatabaseNotFound"
	PoolerReasonNotPostgres     = "NotPostgreSQL"
	PoolerReasonDatabaseNotYet  = "DatabaseNotReady"
	PoolerReasonSetup           = "SettingUp"
	PoolerReasonSetupFailed     = "SetupFailed"
	PoolerReasonPodsNotReady    = "PodsNotReady"
	PoolerReasonNameTaken       = "NameTaken"
	PoolerReasonApplyFailed     = "ApplyFailed"
)

// PoolerStatus is what the operator last saw of the Pooler.
type PoolerStatus struct {
	// ObservedGeneration is the spec's generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Instances is the number of PgBouncer pods that exist, and
	// ReadyInstances those that accept connections.
	// +optional
	Instances int32 `json:"instances,omitempty"`
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`
	// Secret names the Secret with the keys to connect through the
	// pooler: the app Secret's keys with the pooler's host.
	// +optional
	Secret string `json:"secret,omitempty"`
	// Paused is set while the operator holds PgBouncer paused around a
	// switchover of the Database: new queries wait in PgBouncer instead
	// of failing.
	// +optional
	Paused *PoolerPause `json:"paused,omitempty"`
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PoolerPause is a pause of a Pooler's PgBouncer pods.
type PoolerPause struct {
	// Since is when the pause began.
	Since metav1.Time `json:"since"`
	// Reason says what the pause is for.
	Reason string `json:"reason"`
}

// Pooler is a PgBouncer connection pooler in front of a Database's
// primary (type rw) or standbys (type ro): a Deployment, a Service and a
// Secret with its connection keys. Clients authenticate as the Database's
// roles; PgBouncer looks their password verifiers up in the database.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,singular=pooler,categories=deckhand
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.pgbouncer.poolMode`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Instances",type=integer,JSONPath=`.status.readyInstances`
// +kubebuilder:printcolumn:name="Paused Since",type=date,JSONPath=`.status.paused.since`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (lower-case letters, digits and '-', starting with a letter): it names the Pooler's Service"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 47",message="metadata.name must be at most 47 characters: it names the pooler's role in PostgreSQL (deckhand_pooler_<name>), which must stay within 63"
type Pooler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec PoolerSpec `json:"spec"`
	// +optional
	Status PoolerStatus `json:"status,omitempty"`
}

// PoolerList is a list of Poolers.
//
// +kubebuilder:object:root=true
type PoolerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Pooler `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Pooler{}, &PoolerList{})
}
