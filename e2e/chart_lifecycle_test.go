package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	blogv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/iximiuz/v1alpha1"
	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
)

// TestUpgradeKeepsTheDemoAndRollsAChangeMadeWhileTheOperatorWasDown
// installs the demo, stops the operator, changes demo.flask.message with
// helm upgrade and starts the operator again: the demo's ConfigMonitor and
// BlogPost are the same objects as before (not re-created, the post not
// published again) and the monitor, which kept its baseline, rolls the app.
func TestUpgradeKeepsTheDemoAndRollsAChangeMadeWhileTheOperatorWasDown(t *testing.T) {
	c := testenv.Client(t)
	demo := func(message string) map[string]any {
		return localValues(t, append(disableAll(), "controllers.configMonitor.enabled=true",
			"controllers.blogPost.enabled=true", "demo.enabled=true", "demo.flask.message="+message)...)
	}
	rel := installChart(t, c, demo("Welcome to Kubernetes!"))
	namespace := rel.namespace
	op := rel.runOperator(t)

	frontend := waitSeedLabReady(t, c, namespace)
	require.EqualValues(t, 1, frontend.Generation)
	post := &blogv1alpha1.BlogPost{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "blog-post-1"}, post))
		require.NotNil(ct, post.Status.PublishedAt)
	}, 30*time.Second, 100*time.Millisecond)
	monitor := &magalixv1.ConfigMonitor{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "flakapp-config-monitor"}, monitor))
	require.Empty(t, op.Failures())
	require.NoError(t, op.Stop(t), op.Logs())

	upgraded, err := NewHelm(t, namespace).Upgrade(rel.name, ChartDir(t), demo("Welcome to Operators!"))
	require.NoError(t, err)

	afterPost, afterMonitor := &blogv1alpha1.BlogPost{}, &magalixv1.ConfigMonitor{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(post), afterPost))
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(monitor), afterMonitor))
	assert.Equal(t, post.UID, afterPost.UID, "helm upgrade re-created the demo BlogPost")
	require.NotNil(t, afterPost.Status.PublishedAt, "helm upgrade reset the BlogPost's status")
	assert.True(t, post.Status.PublishedAt.Equal(afterPost.Status.PublishedAt), "the BlogPost was published again")
	assert.Equal(t, monitor.UID, afterMonitor.UID, "helm upgrade re-created the demo ConfigMonitor")
	assert.Equal(t, monitor.Status.ObservedHash, afterMonitor.Status.ObservedHash, "the monitor lost its baseline")

	// The operator comes back and rolls the app once, to the new message.
	again := installed{name: rel.name, namespace: namespace, rendered: &Rendered{Objects: decodeManifests(t, upgraded.Manifest)}}
	op = again.runOperator(t)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(frontend), frontend))
		require.EqualValues(ct, 2, frontend.Generation, "the change made while the operator was down was not rolled")
		require.EqualValues(ct, 2, frontend.Status.ObservedGeneration)
		require.EqualValues(ct, 1, frontend.Status.UpdatedReplicas)
	}, 60*time.Second, 200*time.Millisecond)
	// Once: a moment later it has not rolled again.
	time.Sleep(2 * time.Second)
	var still appsv1.Deployment
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(frontend), &still))
	assert.EqualValues(t, 2, still.Generation, "the app rolled more than once for one change")
	assert.Empty(t, op.Failures())
}

// TestSwitchingOffAControllerWhoseCRDIsNotKeptRefusesWhileItsObjectsExist
// installs with crds.keep=false, creates a TDSet, and switches TDSet off:
// Helm would delete the CRD and every TDSet with it, so the upgrade fails
// with a message and nothing changes.
func TestSwitchingOffAControllerWhoseCRDIsNotKeptRefusesWhileItsObjectsExist(t *testing.T) {
	c := testenv.Client(t)
	namespace := testenv.Namespace(t, c)
	testenv.InstallCRDs(t)
	name := releaseName()
	helm := NewHelm(t, namespace)
	_, err := helm.Install(name, ChartDir(t), localValues(t, allControllers()...))
	require.NoError(t, err)
	// The CRDs are shared with every other test: before uninstalling, put
	// the keep annotation back so the uninstall leaves them.
	t.Cleanup(func() { _ = helm.Uninstall(name) })
	t.Cleanup(func() {
		_, err := helm.Upgrade(name, ChartDir(t), localValues(t, allControllers()...))
		assert.NoError(t, err, "restoring crds.keep=true")
	})
	// crds.keep=false takes the annotation off the CRDs in the cluster, as
	// on a first install with crds.keep=false. (The CRDs exist before this
	// test, so its install adopted them with the annotation other releases
	// left.)
	_, err = helm.Upgrade(name, ChartDir(t), localValues(t, append(allControllers(), "crds.keep=false")...))
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "tdsets.schedule.rs"}, &crd))
	require.NotContains(t, crd.Annotations, "helm.sh/resource-policy", "crds.keep=false left the CRD kept")

	td := &schedulev1.TDSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec: schedulev1.TDSetSpec{
			Container:        schedulev1.Container{Image: "crccheck/hello-world", Port: 8000},
			SchedulingConfig: []schedulev1.Scheduling{{StartTime: intstr.FromInt32(0), EndTime: intstr.FromString("24:00"), Replica: 1}},
		},
	}
	require.NoError(t, c.Create(context.Background(), td))

	tdsetOff := append(allControllers(), "controllers.tdset.enabled=false", "crds.keep=false")
	_, err = helm.Upgrade(name, ChartDir(t), localValues(t, tdsetOff...))
	require.Error(t, err, "the upgrade deleted the TDSet CRD and its objects")
	t.Logf("helm upgrade refused: %v", err)
	assert.Contains(t, err.Error(), "this upgrade would delete CustomResourceDefinition tdsets.schedule.rs")
	assert.Contains(t, err.Error(), "TDSet object(s)")
	assert.Contains(t, err.Error(), "crds.installAll=true")

	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "tdsets.schedule.rs"}, &crd))
	assert.Nil(t, crd.DeletionTimestamp)
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(td), td), "the TDSet is gone")

	// The way out the message names: keep the CRD with installAll.
	_, err = helm.Upgrade(name, ChartDir(t), localValues(t, append(tdsetOff, "crds.installAll=true")...))
	require.NoError(t, err)
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "tdsets.schedule.rs"}, &crd))
	assert.Nil(t, crd.DeletionTimestamp)
}

// TestSameReleaseNameInTwoNamespaces installs one release name twice (the
// second without CRDs, which the first manages): each release's operator
// keeps its own ClusterRole and binding, before and after the other goes.
func TestSameReleaseNameInTwoNamespaces(t *testing.T) {
	c := testenv.Client(t)
	testenv.InstallCRDs(t)
	name := releaseName()
	first, second := testenv.Namespace(t, c), testenv.Namespace(t, c)
	only := []string{ChartDir(t) + "/ci/only-blogpost-values.yaml"}

	h1, h2 := NewHelm(t, first), NewHelm(t, second)
	_, err := h1.Install(name, ChartDir(t), Values(t, only, "replicaCount=0"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = h1.Uninstall(name) })
	_, err = h2.Install(name, ChartDir(t), Values(t, only, "replicaCount=0", "crds.enabled=false"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = h2.Uninstall(name) })

	sa := func(namespace string) string { return "system:serviceaccount:" + namespace + ":" + name + "-deckhand" }
	assert.True(t, canI(t, c, sa(first), "iximiuz.com", "blogposts", "watch"), "the second release took the first one's RBAC")
	assert.True(t, canI(t, c, sa(second), "iximiuz.com", "blogposts", "watch"))

	require.NoError(t, h2.Uninstall(name))
	assert.True(t, canI(t, c, sa(first), "iximiuz.com", "blogposts", "watch"), "uninstalling the second release removed the first one's RBAC")
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "blogposts.iximiuz.com"}, &crd))
}
