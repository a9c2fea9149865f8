package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Container is the one container of the TDSet's pods.
type Container struct {
	// Image of the container.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self.trim() != ''",message="container.image must not be empty"
	// +required
	Image string `json:"image"`

	// Port the container listens on.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +required
	Port int32 `json:"port"`
}

// Service exposes the TDSet's pods.
type Service struct {
	// Port of the Service, forwarded to container.port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +required
	Port int32 `json:"port"`
}

// Weekday is a day a window applies on.
// +kubebuilder:validation:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
type Weekday string

// Scheduling is one window of the schedule.
//
// A window covers the local wall-clock times from startTime (inclusive) to
// endTime (exclusive). When endTime <= startTime the window wraps past
// midnight: 19 to 0 is 19:00-24:00, 22:00 to 06:00 runs through the night.
//
// +kubebuilder:validation:XValidation:rule="(type(self.startTime) == int ? self.startTime * 60 : int(self.startTime.substring(0, 2)) * 60 + int(self.startTime.substring(3, 5))) != (type(self.endTime) == int ? self.endTime * 60 : int(self.endTime.substring(0, 2)) * 60 + int(self.endTime.substring(3, 5)))",message="startTime and endTime must differ: a window from a time to the same time is empty (use 0 and \"24:00\" for a whole day)"
type Scheduling struct {
	// StartTime is an hour (0-23) or "HH:MM" (00:00-23:59), local time.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 0 && self <= 23) : self.matches('^([01][0-9]|2[0-3]):[0-5][0-9]$')",message="startTime must be an hour from 0 to 23 or a time \"HH:MM\" from 00:00 to 23:59"
	// +required
	StartTime intstr.IntOrString `json:"startTime"`

	// EndTime is an hour (0-23) or "HH:MM" (00:00-23:59, or "24:00" for
	// midnight at the end of the day), local time, exclusive.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 0 && self <= 23) : self.matches('^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$')",message="endTime must be an hour from 0 to 23 or a time \"HH:MM\" from 00:00 to 24:00"
	// +required
	EndTime intstr.IntOrString `json:"endTime"`

	// Replica is the Deployment's replica count during the window.
	// +kubebuilder:validation:Minimum=0
	// +required
	Replica int32 `json:"replica"`

	// Days the window starts on (Mon..Sun); empty means every day. A window
	// that wraps past midnight belongs to the day it starts.
	// +kubebuilder:validation:MaxItems=7
	// +listType=set
	// +optional
	Days []Weekday `json:"days,omitempty"`
}

// TDSetSpec is the Deployment to run and its schedule.
type TDSetSpec struct {
	// Container run by the Deployment.
	// +required
	Container Container `json:"container"`

	// Service, when set, exposes the pods on this port.
	// +optional
	Service *Service `json:"service,omitempty"`

	// SchedulingConfig lists the windows. Where windows overlap, the highest
	// replica count wins (and ScheduleValid reports the overlap); times no
	// window covers use defaultReplica.
	// +kubebuilder:validation:MaxItems=48
	// +listType=atomic
	// +optional
	SchedulingConfig []Scheduling `json:"schedulingConfig,omitempty"`

	// DefaultReplica is the replica count outside every window; it may be 0.
	// +kubebuilder:validation:Minimum=0
	// +required
	DefaultReplica int32 `json:"defaultReplica"`

	// IntervalMint is the longest time, in minutes, between two reconciles.
	// The replica count changes at each window boundary to the second, not
	// on this interval.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1440
	// +kubebuilder:default=5
	// +optional
	IntervalMint int32 `json:"intervalMint,omitempty"`

	// TimeZone of the window times, an IANA name such as Europe/Berlin.
	// Across a daylight-saving change the windows follow the wall clock: a
	// boundary inside the skipped hour takes effect when the clocks jump
	// forward, and in the repeated hour the wall-clock times occur twice.
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// Suspend stops all scaling; the Deployment keeps its replica count.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// TDSetStatus is what the controller observed and did.
type TDSetStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ActiveWindow is the index of the window in force, if any.
	// +optional
	ActiveWindow *int32 `json:"activeWindow,omitempty"`

	// DesiredReplicas is the replica count the schedule asks for now.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`

	// ReadyReplicas is the Deployment's ready replica count.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// NextTransitionTime is when the replica count changes next.
	// +optional
	NextTransitionTime *metav1.Time `json:"nextTransitionTime,omitempty"`

	// NextReplicas is the replica count from nextTransitionTime on.
	// +optional
	NextReplicas *int32 `json:"nextReplicas,omitempty"`

	// ScaleTarget is what the schedule sets: the Deployment's replicas, or
	// the minReplicas of the HorizontalPodAutoscaler that targets it.
	// +optional
	ScaleTarget string `json:"scaleTarget,omitempty"`

	// Conditions: Ready (the Deployment runs the desired replicas) and
	// ScheduleValid (time zone known, no overlapping windows).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TDSet runs a Deployment whose replica count follows a time-of-day schedule.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories=deckhand
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// A future date column would print as "<invalid>", so the time is a string.
// +kubebuilder:printcolumn:name="Next change",type=string,JSONPath=`.status.nextTransitionTime`
// +kubebuilder:printcolumn:name="Next",type=integer,JSONPath=`.status.nextReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: it is the value of the label that selects the TDSet's pods, and names its Deployment and Service"
type TDSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TDSetSpec `json:"spec"`
	// +optional
	Status TDSetStatus `json:"status,omitempty"`
}

// TDSetList is a list of TDSets.
//
// +kubebuilder:object:root=true
type TDSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TDSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TDSet{}, &TDSetList{})
}
