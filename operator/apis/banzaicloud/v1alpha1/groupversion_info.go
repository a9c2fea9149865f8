// Package v1alpha1 holds the PrometheusJmxExporter API (seed 003): attach
// the Prometheus JMX exporter agent to the running JVMs of selected pods.
//
// +kubebuilder:object:generate=true
// +groupName=banzaicloud.com
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of PrometheusJmxExporter.
	GroupVersion = schema.GroupVersion{Group: "banzaicloud.com", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this group version with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
