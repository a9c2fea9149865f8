package blogpost

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	blogv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/iximiuz/v1alpha1"
)

var t0 = time.Date(2021, 1, 25, 21, 32, 38, 500_000_000, time.UTC)

func newPost() *blogv1alpha1.BlogPost {
	return &blogv1alpha1.BlogPost{
		ObjectMeta: metav1.ObjectMeta{Name: "blog-post-1", Namespace: "default", Generation: 1},
		Spec:       blogv1alpha1.BlogPostSpec{Title: "Kubernetes makes me scream at night", Author: "Ivan Velichko"},
	}
}

func TestPublishStampsOnceAndNeverMoves(t *testing.T) {
	post := newPost()
	publish(post, t0)
	require.NotNil(t, post.Status.PublishedAt)
	assert.Equal(t, t0.Truncate(time.Second), post.Status.PublishedAt.Time, "RFC 3339 has second precision")

	post.Generation = 2
	publish(post, t0.Add(time.Hour))
	assert.Equal(t, t0.Truncate(time.Second), post.Status.PublishedAt.Time, "publishedAt moved")
	assert.EqualValues(t, 2, post.Status.ObservedGeneration)

	ready := meta.FindStatusCondition(post.Status.Conditions, ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Equal(t, "Published", ready.Reason)
	assert.EqualValues(t, 2, ready.ObservedGeneration)
	assert.Equal(t, "Published at 2021-01-25T21:32:38Z", ready.Message)
}

type reconcileFixture struct {
	r      *Reconciler
	c      client.Client
	events *events.FakeRecorder
	now    time.Time
}

func newFixture(t *testing.T, objs ...client.Object) *reconcileFixture {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, blogv1alpha1.AddToScheme(s))
	c := fake.NewClientBuilder().WithScheme(s).
		WithStatusSubresource(&blogv1alpha1.BlogPost{}).WithObjects(objs...).Build()
	f := &reconcileFixture{c: c, events: events.NewFakeRecorder(10), now: t0}
	f.r = &Reconciler{Client: c, Recorder: f.events, Now: func() time.Time { return f.now }}
	return f
}

func (f *reconcileFixture) reconcile(t *testing.T) *blogv1alpha1.BlogPost {
	t.Helper()
	key := types.NamespacedName{Namespace: "default", Name: "blog-post-1"}
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
	require.NoError(t, err)
	var got blogv1alpha1.BlogPost
	require.NoError(t, f.c.Get(context.Background(), key, &got))
	return &got
}

func TestReconcilePublishesWithOneEvent(t *testing.T) {
	f := newFixture(t, newPost())
	got := f.reconcile(t)
	require.NotNil(t, got.Status.PublishedAt)
	assert.Equal(t, t0.Truncate(time.Second), got.Status.PublishedAt.UTC())
	assert.True(t, meta.IsStatusConditionTrue(got.Status.Conditions, ConditionReady))
	require.Len(t, f.events.Events, 1)
	assert.Equal(t, `Normal Published Published "Kubernetes makes me scream at night" by Ivan Velichko`, <-f.events.Events)

	// A later reconcile, an hour on, changes nothing and says nothing.
	f.now = t0.Add(time.Hour)
	again := f.reconcile(t)
	assert.Equal(t, got.Status, again.Status)
	assert.Equal(t, got.ResourceVersion, again.ResourceVersion, "a no-op reconcile wrote to the API")
	assert.Empty(t, f.events.Events)
}

func TestReconcileMissingPostIsNotAnError(t *testing.T) {
	f := newFixture(t)
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "gone"}})
	assert.NoError(t, err)
}
