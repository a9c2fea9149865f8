package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Strategy is how the selected workloads are restarted.
// +kubebuilder:validation:Enum=RollingRestart;DeletePods
type Strategy string

const (
	// RollingRestart patches the pod template of each owning Deployment,
	// StatefulSet or DaemonSet, as `kubectl rollout restart` does, so
	// maxUnavailable and maxSurge hold. Bare pods are left alone.
	RollingRestart Strategy = "RollingRestart"
	// DeletePods deletes the selected pods (the seed's behaviour), bare
	// pods included.
	DeletePods Strategy = "DeletePods"
)

// ConfigMonitorSpec names the configuration and the pods that use it.
//
// +kubebuilder:validation:XValidation:rule="has(self.configmap) != has(self.configMap)",message="set exactly one of configmap (the seed example's spelling) and configMap (the seed CRD's spelling): both name the ConfigMap to watch"
type ConfigMonitorSpec struct {
	// Configmap is the name of the ConfigMap to watch (the seed example's
	// spelling; configMap means the same).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'configmap must be the name of a ConfigMap (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +optional
	Configmap string `json:"configmap,omitempty"`

	// ConfigMap is the name of the ConfigMap to watch (the seed CRD's
	// spelling; configmap means the same).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'configMap must be the name of a ConfigMap (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +optional
	ConfigMap string `json:"configMap,omitempty"`

	// Secret, when set, is a Secret whose data is watched as well.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'secret must be the name of a Secret (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	// +optional
	Secret string `json:"secret,omitempty"`

	// PodSelector selects, by labels, the pods that use the configuration.
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="podSelector must name at least one label, e.g. app: frontend"
	// +required
	PodSelector map[string]string `json:"podSelector"`

	// Strategy is RollingRestart (default: patch the owners' pod templates)
	// or DeletePods (delete the selected pods, as the seed did).
	// +kubebuilder:default=RollingRestart
	// +optional
	Strategy Strategy `json:"strategy,omitempty"`

	// Debounce waits until the configuration has been unchanged this long
	// before restarting, so a burst of edits restarts once. Default 0s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="debounce must be a non-negative duration such as 0s, 30s or 1m30s"
	// +optional
	Debounce *metav1.Duration `json:"debounce,omitempty"`

	// Suspend stops restarts; changes made meanwhile are acted on when it
	// is lifted.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// WorkloadRef names a restarted workload.
type WorkloadRef struct {
	// Kind is Deployment, StatefulSet, DaemonSet or Pod.
	Kind string `json:"kind"`
	// Name of the workload, in the monitor's namespace.
	Name string `json:"name"`
}

// ConfigMonitorStatus is what the controller saw and did.
type ConfigMonitorStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ObservedHash is the SHA-256 of the configuration the selected
	// workloads run (the baseline, or the last change rolled out).
	// +optional
	ObservedHash string `json:"observedHash,omitempty"`

	// PendingHash and PendingSince describe a change waiting for its
	// debounce period.
	// +optional
	PendingHash string `json:"pendingHash,omitempty"`
	// +optional
	PendingSince *metav1.Time `json:"pendingSince,omitempty"`

	// LastRestartTime is when the last change was rolled out.
	// +optional
	LastRestartTime *metav1.Time `json:"lastRestartTime,omitempty"`

	// RestartedWorkloads are the workloads the last change was rolled out
	// to: restarted by this monitor, or by another monitor of the same
	// configuration (each workload rolls once per change).
	// +optional
	// +listType=atomic
	RestartedWorkloads []WorkloadRef `json:"restartedWorkloads,omitempty"`

	// PendingWorkloads are the workloads the current change has not reached
	// yet (paced by the restart rate limit, or a failed restart being
	// retried). The change is rolled out when this is empty.
	// +optional
	// +listType=atomic
	PendingWorkloads []WorkloadRef `json:"pendingWorkloads,omitempty"`

	// ConfigMap is the name of the watched ConfigMap, whichever spelling
	// the spec used.
	// +optional
	ConfigMap string `json:"configMap,omitempty"`

	// Selector is spec.podSelector as a label selector string.
	// +optional
	Selector string `json:"selector,omitempty"`

	// Conditions: Ready (the selected workloads run the current
	// configuration), ConfigFound (the ConfigMap and Secret exist) and
	// TargetsSupported (every selected pod belongs to a workload that can
	// be restarted; those that cannot are named, and do not hold Ready).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConfigMonitor restarts the workloads whose pods match podSelector when
// the named ConfigMap's (or Secret's) data changes.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=cmon,categories=deckhand
// +kubebuilder:printcolumn:name="ConfigMap",type=string,JSONPath=`.status.configMap`
// +kubebuilder:printcolumn:name="Selector",type=string,JSONPath=`.status.selector`
// +kubebuilder:printcolumn:name="Last restart",type=date,JSONPath=`.status.lastRestartTime`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ConfigMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ConfigMonitorSpec `json:"spec"`
	// +optional
	Status ConfigMonitorStatus `json:"status,omitempty"`
}

// ConfigMapName is the watched ConfigMap, whichever spelling was used.
func (s *ConfigMonitorSpec) ConfigMapName() string {
	if s.ConfigMap != "" {
		return s.ConfigMap
	}
	return s.Configmap
}

// ConfigMonitorList is a list of ConfigMonitors.
//
// +kubebuilder:object:root=true
type ConfigMonitorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConfigMonitor `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ConfigMonitor{}, &ConfigMonitorList{})
}
