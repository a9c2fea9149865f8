// Package v1alpha1 holds the BlogPost API (seed 002): the article's CRD-only
// example, served by deckhand with a controller that stamps publishedAt.
//
// +kubebuilder:object:generate=true
// +groupName=iximiuz.com
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of BlogPost.
	GroupVersion = schema.GroupVersion{Group: "iximiuz.com", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this group version with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
