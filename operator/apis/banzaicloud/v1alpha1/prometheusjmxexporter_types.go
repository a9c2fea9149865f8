package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ExporterConfig names the ConfigMap key holding the exporter's YAML
// configuration, copied into the container byte for byte.
type ExporterConfig struct {
	// ConfigMapName is a ConfigMap in the exporter's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'configMapName must be the name of a ConfigMap (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +required
	ConfigMapName string `json:"configMapName"`

	// ConfigMapKey is the key of the exporter's configuration in it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="configMapKey must be a ConfigMap key: letters, digits, '-', '_' and '.' only, e.g. config.yaml"
	// +required
	ConfigMapKey string `json:"configMapKey"`
}

// PrometheusJmxExporterSpec selects pods and says how their JVM exports
// metrics. The first four fields are the seed's.
type PrometheusJmxExporterSpec struct {
	// LabelSelector selects, by labels, the pods whose JVM gets the agent.
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="labelSelector must name at least one label, e.g. app: dummyapp"
	// +kubebuilder:validation:MaxProperties=32
	// +required
	LabelSelector map[string]string `json:"labelSelector"`

	// Config is the exporter's configuration.
	// +required
	Config ExporterConfig `json:"config"`

	// Port the agent serves metrics on, inside the pod's network namespace.
	// A running pod's container ports cannot be changed, so the port is not
	// added to the pod spec; Prometheus finds it through the pod's
	// prometheus.io/port annotation. Changing it later needs the containers
	// to restart: an agent, once loaded, cannot be moved or unloaded.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +required
	Port int32 `json:"port"`

	// JVMMatch is a substring of the Java command line (main class, jar
	// name, a -D marker) that picks the JVM when a pod runs several. Without
	// it a pod must run exactly one JVM: one port cannot serve two agents.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +optional
	JVMMatch string `json:"jvmMatch,omitempty"`

	// Containers limits the search for the JVM to these containers; empty
	// means every running container of the pod.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	// +optional
	Containers []string `json:"containers,omitempty"`

	// Path the metrics are served on, for the prometheus.io/path
	// annotation. Default /metrics (the agent's).
	// +kubebuilder:default="/metrics"
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.matches('^/[^\\\\s?#]*$')",message="path must start with / and contain no spaces, ? or #, e.g. /metrics"
	// +optional
	Path string `json:"path,omitempty"`

	// PodMonitor, when true, makes the operator keep a prometheus-operator
	// PodMonitor of the same name that scrapes the pods this exporter
	// serves (port and path above), for Prometheus installations that do
	// not read prometheus.io annotations. It needs the PodMonitor CRD
	// (monitoring.coreos.com) in the cluster and the right to write
	// PodMonitors (chart value controllers.jmxExporter.podMonitor);
	// without either, the PodMonitor condition says so and the rest works
	// on. Setting it back to false deletes the PodMonitor.
	// +optional
	PodMonitor bool `json:"podMonitor,omitempty"`
}

// MetricsEndpoint is a pod whose JVM serves metrics (the seed's pod and
// port) and what was attached there.
type MetricsEndpoint struct {
	// Pod is the pod's name.
	Pod string `json:"pod"`
	// Port the agent serves on.
	Port int32 `json:"port"`
	// Container the JVM runs in.
	// +optional
	Container string `json:"container,omitempty"`
	// PID of the JVM inside the container.
	// +optional
	PID int32 `json:"pid,omitempty"`
	// ContainerID the agent was attached in; a restarted container has a
	// new one and is attached again.
	// +optional
	ContainerID string `json:"containerID,omitempty"`
	// ConfigHash is the SHA-256 of the configuration copied there.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`
}

// PodProblem is a selected pod whose JVM does not (yet) serve metrics.
type PodProblem struct {
	// Pod is the pod's name.
	Pod string `json:"pod"`
	// Container, when known.
	// +optional
	Container string `json:"container,omitempty"`
	// Reason is a CamelCase word: NoJVM, AmbiguousJVM, AttachDisabled,
	// PortInUse, InvalidConfig, NoShell, ReadOnlyFilesystem, ...
	Reason string `json:"reason"`
	// Message says what happened and what to do.
	Message string `json:"message"`
	// Time of the last attempt.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// PrometheusJmxExporterStatus summarises the selected pods. Each pod's own
// state is on the pod (annotation jmxexporter.deckhand.dev/state), so the
// status stays small with thousands of pods.
type PrometheusJmxExporterStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Selector is spec.labelSelector as a label selector string.
	// +optional
	Selector string `json:"selector,omitempty"`

	// ConfigHash is the SHA-256 of the configuration.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`

	// SelectedPods counts the running pods the selector matches.
	// +optional
	SelectedPods int32 `json:"selectedPods"`
	// AttachedPods counts those whose JVM serves metrics.
	// +optional
	AttachedPods int32 `json:"attachedPods"`
	// Attached is "attachedPods/selectedPods", for kubectl get.
	// +optional
	Attached string `json:"attached,omitempty"`

	// MetricsEndpoints lists the pods serving metrics (at most 100, by pod
	// name; attachedPods counts them all).
	// +optional
	// +listType=atomic
	MetricsEndpoints []MetricsEndpoint `json:"metricsEndpoints,omitempty"`

	// Problems lists selected pods that do not serve metrics, with why (at
	// most 20, most recent first).
	// +optional
	// +listType=atomic
	Problems []PodProblem `json:"problems,omitempty"`

	// Conditions: Ready (every selected pod serves metrics), ConfigFound
	// (the ConfigMap and key exist) and, with spec.podMonitor, PodMonitor
	// (the PodMonitor is in place).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PrometheusJmxExporter attaches the Prometheus JMX exporter agent to the
// running JVM of each selected pod, without restarting it, and annotates
// the pod for scraping.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=jmxexp,categories=deckhand
// +kubebuilder:printcolumn:name="Selector",type=string,JSONPath=`.status.selector`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.port`
// +kubebuilder:printcolumn:name="Attached",type=string,JSONPath=`.status.attached`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PrometheusJmxExporter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec PrometheusJmxExporterSpec `json:"spec"`
	// +optional
	Status PrometheusJmxExporterStatus `json:"status,omitempty"`
}

// PrometheusJmxExporterList is a list of PrometheusJmxExporters.
//
// +kubebuilder:object:root=true
type PrometheusJmxExporterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PrometheusJmxExporter `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PrometheusJmxExporter{}, &PrometheusJmxExporterList{})
}
