// Package blogpost is the BlogPost controller (seed 002): it publishes a post
// by stamping status.publishedAt once and keeps a Ready condition.
package blogpost

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	blogv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/iximiuz/v1alpha1"
)

// Name is the controller's name in --controllers and in chart values.
const Name = "blogpost"

// ConditionReady is True once the post is published.
const ConditionReady = "Ready"

// +kubebuilder:rbac:groups=iximiuz.com,resources=blogposts,verbs=get;list;watch
// +kubebuilder:rbac:groups=iximiuz.com,resources=blogposts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler publishes BlogPosts.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Now is the clock; tests replace it.
	Now func() time.Time
}

// Setup registers the BlogPost controller with the manager.
func Setup(mgr ctrl.Manager) error {
	r := &Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("deckhand-" + Name),
		Now:      time.Now,
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		// Status writes bump no generation: reacting to them would only
		// reconcile our own patch again.
		For(&blogv1alpha1.BlogPost{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconcile stamps publishedAt on first sight and keeps Ready current.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var post blogv1alpha1.BlogPost
	if err := r.Client.Get(ctx, req.NamespacedName, &post); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !post.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}

	before := post.DeepCopy()
	firstPublish := post.Status.PublishedAt == nil
	publish(&post, r.Now())
	if equality.Semantic.DeepEqual(before.Status, post.Status) {
		return ctrl.Result{}, nil
	}

	// The optimistic lock makes a racing second writer fail instead of
	// moving publishedAt: it is set once.
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, &post, patch); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return ctrl.Result{}, nil // deleted meanwhile
		case apierrors.IsConflict(err):
			// A newer version is on its way to the cache; read it then.
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, fmt.Errorf("publishing BlogPost %s: %w", req.NamespacedName, err)
	}
	if firstPublish {
		r.Recorder.Eventf(&post, nil, "Normal", "Published", "Publish",
			"Published %q by %s", post.Spec.Title, post.Spec.Author)
	}
	return ctrl.Result{}, nil
}

// conflictRetry is how soon a post whose status write lost a race is read
// again: its newer version reaches the cache within milliseconds.
const conflictRetry = 100 * time.Millisecond

// publish sets the status a published post has at instant now: publishedAt
// is kept when already set.
func publish(post *blogv1alpha1.BlogPost, now time.Time) {
	if post.Status.PublishedAt == nil {
		t := metav1.NewTime(now.UTC().Truncate(time.Second))
		post.Status.PublishedAt = &t
	}
	post.Status.ObservedGeneration = post.Generation
	meta.SetStatusCondition(&post.Status.Conditions, metav1.Condition{
		Type:               ConditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             "Published",
		Message:            "Published at " + post.Status.PublishedAt.UTC().Format(time.RFC3339),
		ObservedGeneration: post.Generation,
	})
}
