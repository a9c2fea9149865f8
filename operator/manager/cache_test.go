package manager_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
	"github.com/deckhand-dev/deckhand/operator/manager"
	"github.com/deckhand-dev/deckhand/operator/registration"
	"github.com/deckhand-dev/deckhand/operator/tdset"
)

// The operator caches the Deployments and Services it creates, not the
// cluster's others: 3,000 Deployments no TDSet owns once cost it 35 MiB
// under the chart's 256Mi limit.
func TestTheCacheHoldsDeckhandsDeploymentsAndServicesOnly(t *testing.T) {
	c := testenv.Client(t)
	testenv.InstallCRDs(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	labels := map[string]string{"app": "theirs"}
	theirs := []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}}},
		}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: ns}, Spec: corev1.ServiceSpec{
			Selector: labels, Ports: []corev1.ServicePort{{Port: 80}},
		}},
	}
	for _, o := range theirs {
		require.NoError(t, c.Create(ctx, o))
	}

	mgr, _, err := manager.New(manager.Config{
		Controllers: []string{tdset.Name}, WatchNamespaces: []string{ns},
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", KubeAPIQPS: 50, KubeAPIBurst: 100,
		GracefulShutdownTimeout: 5 * time.Second, ManyPerProcess: true,
	}, testenv.ChartRBACConfig(t, ns, tdset.Name))
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	ours := &schedulev1.TDSet{ObjectMeta: metav1.ObjectMeta{Name: "ours", Namespace: ns}, Spec: schedulev1.TDSetSpec{
		Container: schedulev1.Container{Image: "crccheck/hello-world", Port: 8000}, Service: &schedulev1.Service{Port: 80}, DefaultReplica: 1,
	}}
	require.NoError(t, c.Create(ctx, ours))

	cached := mgr.GetClient()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, cached.Get(ctx, client.ObjectKeyFromObject(ours), &appsv1.Deployment{}))
		require.NoError(ct, cached.Get(ctx, client.ObjectKeyFromObject(ours), &corev1.Service{}))
	}, 30*time.Second, 100*time.Millisecond, "the TDSet's Deployment and Service never reached the operator's cache")

	var deployments appsv1.DeploymentList
	require.NoError(t, cached.List(ctx, &deployments, client.InNamespace(ns)))
	var services corev1.ServiceList
	require.NoError(t, cached.List(ctx, &services, client.InNamespace(ns)))
	assert.Equal(t, []string{"ours"}, names(deployments.Items), "Deployments in the operator's cache")
	assert.Equal(t, []string{"ours"}, names(services.Items), "Services in the operator's cache")
}

func names[T any, P interface {
	*T
	client.Object
}](items []T) []string {
	out := []string{}
	for i := range items {
		out = append(out, P(&items[i]).GetName())
	}
	return out
}

// exclude-namespaces leaves a namespace's objects out of a cache that
// covers every other namespace: the API server applies the field
// selector, so they never reach the operator.
func TestAnExcludedNamespaceIsLeftOutOfTheCaches(t *testing.T) {
	c := testenv.Client(t)
	ctx := context.Background()
	excluded, watched := testenv.Namespace(t, c), testenv.Namespace(t, c)
	// A label of this test's own: the cache covers every namespace of a
	// cluster other tests use at the same time.
	mark := map[string]string{"deckhand-test-exclude": excluded}
	for _, ns := range []string{excluded, watched} {
		require.NoError(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: ns, Labels: mark}}))
	}

	cc, err := cache.New(testenv.RESTConfig(t), cache.Options{
		Scheme:               c.Scheme(),
		DefaultLabelSelector: labels.SelectorFromSet(mark),
		DefaultNamespaces:    registration.CacheNamespaces(nil, []string{excluded}),
	})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = cc.Start(runCtx) }()
	require.True(t, cc.WaitForCacheSync(ctx))

	var got corev1.ConfigMapList
	require.NoError(t, cc.List(ctx, &got))
	seen := []string{}
	for _, cm := range got.Items {
		seen = append(seen, cm.Namespace)
	}
	assert.Equal(t, []string{watched}, seen, "namespaces of the cached ConfigMaps (%s excluded)", excluded)
}

func TestCacheNamespacesListsWatchedOnesOrExcludesByFieldSelector(t *testing.T) {
	assert.Nil(t, registration.CacheNamespaces(nil, nil), "every namespace")
	assert.Equal(t, []string{"a", "b"}, slices.Sorted(maps.Keys(registration.CacheNamespaces([]string{"a", "b"}, nil))))
	all := registration.CacheNamespaces(nil, []string{"x", "y"})
	require.Len(t, all, 1)
	require.Contains(t, all, cache.AllNamespaces)
	assert.Equal(t, "metadata.namespace!=x,metadata.namespace!=y", all[cache.AllNamespaces].FieldSelector.String())
}
