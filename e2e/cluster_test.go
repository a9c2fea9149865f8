package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	"github.com/deckhand-dev/deckhand/operator"
	blogv1alpha1 "github.com/deckhand-dev/deckhand/operator/apis/iximiuz/v1alpha1"
)

// releaseName is unique per test, so each test's release is its own.
func releaseName() string { return "dh-" + rand.String(5) }

// localValues are what the local cluster needs: it runs no containers, so
// the chart's Deployment is scaled to 0 and the operator runs on the host.
func localValues(t testing.TB, sets ...string) map[string]any {
	return Values(t, nil, append([]string{"replicaCount=0"}, sets...)...)
}

// installed is the chart installed into a test namespace of its own.
type installed struct {
	name, namespace string
	rendered        *Rendered
}

// installChart installs the chart with vals into a new namespace and
// uninstalls it when the test ends.
func installChart(t testing.TB, c client.Client, vals map[string]any) installed {
	t.Helper()
	return installChartIn(t, c, testenv.Namespace(t, c), vals)
}

// installChartIn is installChart into a namespace the caller made.
func installChartIn(t testing.TB, c client.Client, namespace string, vals map[string]any) installed {
	t.Helper()
	testenv.InstallCRDs(t)
	r := installed{name: releaseName(), namespace: namespace}
	helm := NewHelm(t, r.namespace)
	rel, err := helm.Install(r.name, ChartDir(t), vals)
	require.NoError(t, err)
	t.Cleanup(func() { _ = helm.Uninstall(r.name) })
	r.rendered = &Rendered{Objects: decodeManifests(t, rel.Manifest)}
	return r
}

// runOperator runs the operator as the release's Deployment would, with its
// ServiceAccount, and waits until it is ready.
func (r installed) runOperator(t testing.TB) *HostOperator {
	t.Helper()
	op := RunOperatorAsChart(t, r.rendered, r.namespace)
	op.WaitReady(t)
	return op
}

// serviceAccount is the release's ServiceAccount as an RBAC user name.
func (r installed) serviceAccount() string {
	return "system:serviceaccount:" + r.namespace + ":" + r.name + "-deckhand"
}

func TestEveryRenderedObjectIsAcceptedByTheAPIServer(t *testing.T) {
	testenv.InstallCRDs(t)
	// ServiceMonitor, PodMonitor and PrometheusRule, checked against the Prometheus
	// Operator's own CRD schemas.
	testenv.InstallMonitoringCRDs(t)
	c := testenv.Client(t)
	dyn, err := dynamic.NewForConfig(testenv.RESTConfig(t))
	require.NoError(t, err)

	type render struct {
		name string
		vals func(t *testing.T) map[string]any
	}
	var renders []render
	for _, file := range ciValuesFiles(t) {
		renders = append(renders, render{releaseRendered, func(t *testing.T) map[string]any { return Values(t, []string{file}) }})
	}
	// Helm's longest release name, with every optional object on.
	renders = append(renders, render{strings.Repeat("r", helmLimit), func(t *testing.T) map[string]any {
		return everythingOn(t, "controllers.jmxExporter.namespaces=null", "controllers.jmxExporter.allNamespaces=true")
	}})
	for i, rd := range renders {
		label := "everything-on-53-character-name"
		if i < len(renders)-1 {
			label = shortName(ciValuesFiles(t)[i])
		}
		t.Run(label, func(t *testing.T) {
			namespace := testenv.Namespace(t, c)
			r, err := testenv.RenderChart(t, ChartDir(t), rd.name, namespace, rd.vals(t))
			require.NoError(t, err)
			for _, o := range r.All() {
				mapping, err := c.RESTMapper().RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
				require.NoError(t, err, "%s is not served by the cluster", o.GroupVersionKind())
				var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
				if mapping.Scope.Name() == "namespace" {
					ri = dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
				}
				_, err = ri.Apply(context.Background(), o.GetName(), o, metav1.ApplyOptions{
					DryRun: []string{metav1.DryRunAll}, FieldManager: "deckhand-e2e", Force: true,
				})
				assert.NoError(t, err, "%s %s/%s rejected", o.GetKind(), o.GetNamespace(), o.GetName())
			}
		})
	}
}

func TestOperatorPodIsAdmittedUnderRestrictedPodSecurity(t *testing.T) {
	c := testenv.Client(t)
	restricted := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   "psa-restricted-" + rand.String(5),
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "deckhand.dev/test": "true"},
	}}
	require.NoError(t, c.Create(context.Background(), restricted))
	t.Cleanup(func() { _ = c.Delete(context.Background(), restricted) })

	d := Into[appsv1.Deployment](t, MustRender(t, restricted.Name, Values(t, nil)).Operator(t, "Deployment"))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "deckhand-operator", Namespace: restricted.Name, Labels: d.Spec.Template.Labels},
		Spec:       d.Spec.Template.Spec,
	}
	pod.Spec.ServiceAccountName = "default" // admission checks the pod, not its account
	require.NoError(t, c.Create(context.Background(), pod.DeepCopy(), client.DryRunAll),
		"the chart's operator pod must pass the restricted profile")

	// So must the helm test Job's pod.
	rendered := MustRender(t, restricted.Name, Values(t, nil))
	require.Len(t, rendered.Tests, 1)
	job := Into[batchv1.Job](t, rendered.Tests[0])
	testPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "deckhand-test", Namespace: restricted.Name}, Spec: job.Spec.Template.Spec}
	require.NoError(t, c.Create(context.Background(), testPod, client.DryRunAll), "the helm test pod must pass the restricted profile")

	// So must the demo's Flask pod.
	var demo *appsv1.Deployment
	for _, o := range MustRender(t, restricted.Name, Values(t, []string{ChartDir(t) + "/ci/demo-values.yaml"})).Kind("Deployment") {
		if o.GetName() == "frontend" {
			demo = Into[appsv1.Deployment](t, o)
		}
	}
	require.NotNil(t, demo, "the demo renders no frontend Deployment")
	demoPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "frontend", Namespace: restricted.Name}, Spec: demo.Spec.Template.Spec}
	require.NoError(t, c.Create(context.Background(), demoPod, client.DryRunAll), "the demo's Flask pod must pass the restricted profile")

	// The check can fail: the same pod without its container securityContext is refused.
	pod.Spec.Containers[0].SecurityContext = nil
	err := c.Create(context.Background(), pod, client.DryRunAll)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `violates PodSecurity "restricted`)
}

func TestChartInstallRunsTheOperatorWithItsOwnRBAC(t *testing.T) {
	c := testenv.Client(t)
	rel := installChart(t, c, Values(t, []string{ChartDir(t) + "/ci/only-blogpost-values.yaml"}, "replicaCount=0"))
	namespace, name := rel.namespace, rel.name
	op := rel.runOperator(t)

	// It took the leader Lease in its own namespace.
	leaseName := name + "-deckhand.deckhand.dev"
	var lease coordinationv1.Lease
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: leaseName}, &lease))
		require.NotEmpty(ct, ptrString(lease.Spec.HolderIdentity))
	}, 30*time.Second, 200*time.Millisecond)

	// It reconciles a BlogPost with nothing but the chart's RBAC.
	post := &blogv1alpha1.BlogPost{
		ObjectMeta: metav1.ObjectMeta{Name: "blog-post-1", Namespace: namespace},
		Spec:       blogv1alpha1.BlogPostSpec{Title: "Kubernetes makes me scream at night", Author: "Ivan Velichko"},
	}
	require.NoError(t, c.Create(context.Background(), post))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(post), post))
		require.NotNil(ct, post.Status.PublishedAt)
	}, 15*time.Second, 100*time.Millisecond)
	assert.Empty(t, op.Failures(), "the chart's RBAC is missing a rule")

	// Least privilege: BlogPosts yes; Secrets, ConfigMaps and Pods no.
	sa := rel.serviceAccount()
	assert.True(t, canI(t, c, sa, "iximiuz.com", "blogposts", "watch"))
	assert.True(t, canI(t, c, sa, "iximiuz.com", "blogposts/status", "patch"))
	for _, res := range []string{"secrets", "configmaps", "pods"} {
		assert.False(t, canI(t, c, sa, "", res, "get"), "blogPost alone must not read %s", res)
		assert.False(t, canI(t, c, sa, "", res, "list"), "blogPost alone must not list %s", res)
	}

	// SIGTERM: a clean exit that hands the Lease back.
	require.NoError(t, op.Stop(t), op.Logs())
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: leaseName}, &lease))
	assert.Empty(t, ptrString(lease.Spec.HolderIdentity), "lease not released on shutdown")
}

func TestChartUpgradeAndUninstallKeepUsersData(t *testing.T) {
	require.GreaterOrEqual(t, len(operator.Controllers), 2, "switching one controller off needs a second one to keep")
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	namespace := testenv.Namespace(t, c)
	name := releaseName()
	helm := NewHelm(t, namespace)
	_, err := helm.Install(name, ChartDir(t), localValues(t, allControllers()...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = helm.Uninstall(name) })

	// Switching a controller off removes its flag and its rules.
	off := operator.Controllers[0]
	rel, err := helm.Upgrade(name, ChartDir(t), localValues(t, append(allControllers(), "controllers."+off.ValuesKey+".enabled=false")...))
	require.NoError(t, err)
	r := &Rendered{Objects: decodeManifests(t, rel.Manifest)}
	assert.NotContains(t, controllersFlag(t, r), off.Name)
	var role unstructured.Unstructured
	rendered := r.One(t, "ClusterRole")
	role.SetGroupVersionKind(rendered.GroupVersionKind())
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: rendered.GetName()}, &role))
	rules := ruleResources(t, &Rendered{Objects: []*unstructured.Unstructured{&role}}, "ClusterRole")
	for g := range groupsOf(t, off) {
		assert.False(t, hasGroup(rules, g), "the cluster still grants %s after switching %s off: %v", g, off.Name, rules)
	}

	// A changed CRD schema in the chart reaches the cluster on upgrade.
	changed := chartWithExtraBlogPostField(t, "subtitle")
	_, err = helm.Upgrade(name, changed, localValues(t, allControllers()...))
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "blogposts.iximiuz.com"}, &crd))
	assert.Contains(t, crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "subtitle")
	_, err = helm.Upgrade(name, ChartDir(t), localValues(t, allControllers()...))
	require.NoError(t, err)

	// Uninstall keeps the CRDs and every custom resource.
	for i := range 3 {
		require.NoError(t, c.Create(context.Background(), &blogv1alpha1.BlogPost{
			ObjectMeta: metav1.ObjectMeta{Name: "post-" + string(rune('a'+i)), Namespace: namespace},
			Spec:       blogv1alpha1.BlogPostSpec{Title: "t", Author: "a"},
		}))
	}
	before := countBlogPosts(t, c, namespace)
	require.Equal(t, 3, before)
	require.NoError(t, helm.Uninstall(name))
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "blogposts.iximiuz.com"}, &crd), "uninstall deleted the CRD")
	assert.Equal(t, before, countBlogPosts(t, c, namespace), "uninstall lost custom resources")

	// A new release adopts the kept CRDs (Helm's --take-ownership).
	again := releaseName()
	_, err = helm.Install(again, ChartDir(t), localValues(t, allControllers()...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = helm.Uninstall(again) })
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "blogposts.iximiuz.com"}, &crd))
	assert.Equal(t, again, crd.Annotations["meta.helm.sh/release-name"])
	assert.Equal(t, before, countBlogPosts(t, c, namespace))
}

func allControllers() []string {
	var sets []string
	for _, c := range operator.Controllers {
		sets = append(sets, "controllers."+c.ValuesKey+".enabled=true")
	}
	// pods/exec in every namespace must be asked for (least privilege).
	return append(sets, "controllers.jmxExporter.allNamespaces=true")
}

// chartWithExtraBlogPostField copies the chart and adds an optional string
// field to the BlogPost spec schema, as a new chart version would.
func chartWithExtraBlogPostField(t *testing.T, field string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "deckhand")
	require.NoError(t, os.CopyFS(dst, os.DirFS(ChartDir(t))))
	crdFile := filepath.Join(dst, "templates", "crds", "iximiuz.com_blogposts.yaml")
	b, err := os.ReadFile(crdFile)
	require.NoError(t, err)
	const anchor = "            properties:\n              author:\n"
	require.Contains(t, string(b), anchor)
	patched := strings.Replace(string(b), anchor, "            properties:\n              "+field+":\n                type: string\n              author:\n", 1)
	require.NoError(t, os.WriteFile(crdFile, []byte(patched), 0o644))
	return dst
}

func countBlogPosts(t *testing.T, c client.Client, namespace string) int {
	t.Helper()
	var list blogv1alpha1.BlogPostList
	require.NoError(t, c.List(context.Background(), &list, client.InNamespace(namespace)))
	return len(list.Items)
}

func canI(t *testing.T, c client.Client, user, group, resource, verb string) bool {
	t.Helper()
	return canIIn(t, c, "", user, group, resource, verb)
}

// canIIn asks whether user may do verb on resource in namespace ("" for
// every namespace).
func canIIn(t *testing.T, c client.Client, namespace, user, group, resource, verb string) bool {
	t.Helper()
	res, sub, _ := strings.Cut(resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Group: group, Resource: res, Subresource: sub, Verb: verb,
		},
	}}
	require.NoError(t, c.Create(context.Background(), sar))
	return sar.Status.Allowed
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
