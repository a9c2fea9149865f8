// Package v1 holds the ConfigMonitor API (seed 000): restart the workloads
// whose pods use a ConfigMap (or Secret) when its data changes.
//
// +kubebuilder:object:generate=true
// +groupName=magalix.com
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of ConfigMonitor.
	GroupVersion = schema.GroupVersion{Group: "magalix.com", Version: "v1"}

	// SchemeBuilder registers the types of this group version with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
