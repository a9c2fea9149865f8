// Package v1 holds the Database API (seed 004): the Kubernetes docs'
// "SampleDB", a database server run by a StatefulSet with its volumes,
// Services, credentials and an initial-configuration Job.
//
// The seed's CRD text says stable.imaginedata.com, but its sample object
// (and the article's code) use stable.imaginedata.co; deckhand serves the
// latter so the sample applies unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=stable.imaginedata.co
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of Database.
	GroupVersion = schema.GroupVersion{Group: "stable.imaginedata.co", Version: "v1"}

	// SchemeBuilder registers the types of this group version with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
