package blogpost_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	blogv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/iximiuz/v1alpha1"
	"github.com/deckhand-dev/deckhand/operator/blogpost"
)

// seedPost is seed 002's blog-post-1, read from the file users apply.
func seedPost(t *testing.T, ns string) *blogv1alpha1.BlogPost {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.Root(t), "examples", "blogpost.yaml"))
	require.NoError(t, err)
	post := &blogv1alpha1.BlogPost{}
	require.NoError(t, yaml.UnmarshalStrict(b, post))
	post.Namespace = ns
	return post
}

func published(t *testing.T, c client.Client, key client.ObjectKey) *blogv1alpha1.BlogPost {
	t.Helper()
	var post blogv1alpha1.BlogPost
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), key, &post))
		require.NotNil(ct, post.Status.PublishedAt)
		require.Equal(ct, post.Generation, post.Status.ObservedGeneration)
	}, 10*time.Second, 50*time.Millisecond)
	return &post
}

func TestSeedBlogPostIsPublished(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	testenv.StartOperator(t, []string{blogpost.Name}, ns)

	post := seedPost(t, ns)
	applied := time.Now()
	require.NoError(t, c.Create(context.Background(), post))
	got := published(t, c, client.ObjectKeyFromObject(post))

	assert.WithinDuration(t, applied, got.Status.PublishedAt.Time, 3*time.Second)
	ready := meta.FindStatusCondition(got.Status.Conditions, blogpost.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Equal(t, got.Generation, ready.ObservedGeneration)

	// The Published event is there for kubectl describe.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var evs eventsv1.EventList
		require.NoError(ct, c.List(context.Background(), &evs, client.InNamespace(ns)))
		var reasons []string
		for _, e := range evs.Items {
			if e.Regarding.Name == post.Name {
				reasons = append(reasons, e.Reason)
			}
		}
		require.Contains(ct, reasons, "Published")
	}, 10*time.Second, 100*time.Millisecond)

	// kubectl shows the printer columns the CRD declares.
	out, err := testenv.Kubectl(t, "get", "blogposts", "-n", ns)
	require.NoError(t, err, out)
	assert.Regexp(t, `NAME\s+TITLE\s+AUTHOR\s+PUBLISHED\s+AGE`, out)
	assert.Regexp(t, `blog-post-1\s+Kubernetes makes me scream at night\s+Ivan Velichko\s+\d+s`, out)
}

func TestEditingASpecKeepsPublishedAt(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	testenv.StartOperator(t, []string{blogpost.Name}, ns)

	post := seedPost(t, ns)
	require.NoError(t, c.Create(context.Background(), post))
	first := published(t, c, client.ObjectKeyFromObject(post))

	time.Sleep(1100 * time.Millisecond) // a move would show at second precision
	first.Spec.Title = "Kubernetes lets me sleep now"
	require.NoError(t, c.Update(context.Background(), first))
	second := published(t, c, client.ObjectKeyFromObject(post))
	assert.EqualValues(t, 2, second.Status.ObservedGeneration)
	assert.True(t, first.Status.PublishedAt.Equal(second.Status.PublishedAt), "publishedAt moved on a spec edit")
}

func TestPublishedAtCannotBeRewritten(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	testenv.StartOperator(t, []string{blogpost.Name}, ns)

	post := seedPost(t, ns)
	require.NoError(t, c.Create(context.Background(), post))
	got := published(t, c, client.ObjectKeyFromObject(post))

	got.Status.PublishedAt = &metav1.Time{Time: got.Status.PublishedAt.Add(-24 * time.Hour)}
	err := c.Status().Update(context.Background(), got)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "publishedAt is set once and cannot be changed or removed")
}

func TestInvalidPostsAreRejectedAtAdmission(t *testing.T) {
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)

	for name, tc := range map[string]struct {
		spec blogv1alpha1.BlogPostSpec
		want string
	}{
		"empty title":    {blogv1alpha1.BlogPostSpec{Author: "Ivan"}, "spec.title: Invalid value: \"\": spec.title in body should be at least 1 chars long"},
		"missing author": {blogv1alpha1.BlogPostSpec{Title: "t"}, "spec.author"},
	} {
		t.Run(name, func(t *testing.T) {
			post := &blogv1alpha1.BlogPost{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns}, Spec: tc.spec}
			err := c.Create(context.Background(), post)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestKubectlExplainReadsWell(t *testing.T) {
	testenv.InstallCRDs(t)
	out, err := testenv.Kubectl(t, "explain", "blogpost.spec")
	require.NoError(t, err, out)
	assert.Contains(t, out, "Title of the post, as readers see it: at most 256 bytes")
	assert.Contains(t, out, "Author of the post: at most 128 bytes")
	assert.Regexp(t, `title\s+<string> -required-`, out)
}
