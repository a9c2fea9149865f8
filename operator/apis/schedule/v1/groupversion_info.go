// Package v1 holds the TDSet API (seed 001): a Deployment whose replica
// count follows a time-of-day schedule.
//
// +kubebuilder:object:generate=true
// +groupName=schedule.rs
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of TDSet.
	GroupVersion = schema.GroupVersion{Group: "schedule.rs", Version: "v1"}

	// SchemeBuilder registers the types of this group version with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
