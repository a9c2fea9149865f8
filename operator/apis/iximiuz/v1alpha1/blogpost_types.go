package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BlogPostSpec is what the author wants published.
type BlogPostSpec struct {
	// Title of the post, as readers see it: at most 256 bytes, no
	// control characters (it is quoted in the Published Event, whose
	// message the API server limits to 1024 bytes).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="size(bytes(self)) <= 256",message="title must be at most 256 bytes long; characters beyond ASCII take 2 to 4 bytes each"
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]')",message="title must not contain control characters such as newlines or tabs"
	// +required
	Title string `json:"title"`

	// Author of the post: at most 128 bytes, no control characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="size(bytes(self)) <= 128",message="author must be at most 128 bytes long; characters beyond ASCII take 2 to 4 bytes each"
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]')",message="author must not contain control characters such as newlines or tabs"
	// +required
	Author string `json:"author"`
}

// BlogPostStatus is what the controller observed and did.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.publishedAt) || (has(self.publishedAt) && self.publishedAt == oldSelf.publishedAt)",message="publishedAt is set once and cannot be changed or removed"
type BlogPostStatus struct {
	// PublishedAt is when deckhand first saw the post. It is set once and
	// never moves afterwards, even when the spec changes.
	// +optional
	PublishedAt *metav1.Time `json:"publishedAt,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready is True once the post is published.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BlogPost is a custom resource exemplar: a blog post with a title and an
// author, published by the deckhand operator.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories=deckhand
// +kubebuilder:printcolumn:name="Title",type=string,JSONPath=`.spec.title`
// +kubebuilder:printcolumn:name="Author",type=string,JSONPath=`.spec.author`
// +kubebuilder:printcolumn:name="Published",type=date,JSONPath=`.status.publishedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BlogPost struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the post as written by its author.
	// +required
	Spec BlogPostSpec `json:"spec"`

	// Status is the post as published by deckhand.
	// +optional
	Status BlogPostStatus `json:"status,omitempty"`
}

// BlogPostList is a list of BlogPosts.
//
// +kubebuilder:object:root=true
type BlogPostList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BlogPost `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BlogPost{}, &BlogPostList{})
}
