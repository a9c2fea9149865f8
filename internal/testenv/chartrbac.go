package testenv

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/operator"
)

// operatorNamespace holds the ServiceAccounts test operators run as. It
// outlives every test namespace, as the chart's release namespace outlives
// the namespaces it watches: an account inside a watched namespace would be
// deleted with it, and its operator could no longer remove the finalizers
// that hold that namespace in Terminating.
const operatorNamespace = "deckhand-test-operators"

// ChartRBACConfig is a client configuration that authenticates as a
// ServiceAccount (in operatorNamespace) holding exactly the ClusterRole the chart
// renders with only these controllers enabled. Controller tests run their
// operator with it, so a missing RBAC marker fails a test instead of an
// install (the local cluster also enforces OwnerReferencesPermissionEnforcement).
func ChartRBACConfig(t testing.TB, namespace string, controllers ...string) *rest.Config {
	t.Helper()
	return ChartRBACConfigWithValues(t, namespace, nil, controllers...)
}

// ChartRBACConfigWithValues is ChartRBACConfig with more chart values under
// controllers.<valuesKey> (for example jmxExporter: {podMonitor: true,
// namespaces: [...]}). The Roles the chart then renders in namespaces are
// created there too, bound to the same ServiceAccount.
func ChartRBACConfigWithValues(t testing.TB, namespace string, values map[string]map[string]any, controllers ...string) *rest.Config {
	t.Helper()
	rules, roles := chartOperatorRules(t, controllers, values)
	c := Client(t)
	ctx := context.Background()
	// A test may start its operator twice: each start gets its own account.
	suffix := rand.String(5)
	name := "deckhand-test-" + namespace + "-" + suffix
	ensureNamespace(t, c, operatorNamespace)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deckhand-" + suffix, Namespace: operatorNamespace}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"deckhand.dev/test": "true"}}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"deckhand.dev/test": "true"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: operatorNamespace}},
	}
	objs := []client.Object{sa, role, binding}
	for _, r := range roles {
		r.Name = name
		objs = append(objs, r, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: operatorNamespace}},
		})
	}
	for _, o := range objs {
		require.NoError(t, c.Create(ctx, o))
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), binding)
		_ = c.Delete(context.Background(), role)
		_ = c.Delete(context.Background(), sa)
	})

	admin := RESTConfig(t)
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = ServiceAccountToken(t, operatorNamespace, sa.Name)
	cfg.QPS, cfg.Burst = admin.QPS, admin.Burst
	if len(rules) > 0 {
		waitUntilAllowed(t, cfg, namespace, rules[0])
	}
	for _, r := range roles {
		waitUntilAllowed(t, cfg, r.Namespace, r.Rules[0])
	}
	return cfg
}

// ensureNamespace creates a namespace that no test deletes.
func ensureNamespace(t testing.TB, c client.Client, name string) {
	t.Helper()
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err, "creating namespace %s", name)
	}
}

// ServiceAccountToken is a one-hour token of a ServiceAccount, from the
// TokenRequest API.
func ServiceAccountToken(t testing.TB, namespace, name string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(RESTConfig(t))
	require.NoError(t, err)
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	require.NoError(t, err, "TokenRequest for %s/%s", namespace, name)
	return tok.Status.Token
}

// chartOperatorRules renders the chart, as `helm template` would, with
// only the given controllers on (and their extra values), and returns the
// rules of the ClusterRole bound to its ServiceAccount and the Roles bound
// to it in other namespaces.
func chartOperatorRules(t testing.TB, controllers []string, values map[string]map[string]any) ([]rbacv1.PolicyRule, []*rbacv1.Role) {
	t.Helper()
	toggles := map[string]any{}
	for _, c := range operator.Controllers {
		v := map[string]any{"enabled": slices.Contains(controllers, c.Name)}
		for k, val := range values[c.ValuesKey] {
			v[k] = val
		}
		toggles[c.ValuesKey] = v
	}
	vals := map[string]any{"controllers": toggles, "replicaCount": 0, "crds": map[string]any{"enabled": false}}
	r, err := RenderChart(t, ChartDir(t), "rbac", renderNamespace, vals)
	require.NoError(t, err, "rendering the chart for %v", controllers)

	roles := map[string][]rbacv1.PolicyRule{}
	var bound []string
	nsRoles := map[string]*rbacv1.Role{}
	var nsBound []string
	for _, o := range r.Kind("Role") {
		role := Into[rbacv1.Role](t, o)
		nsRoles[role.Namespace+"/"+role.Name] = &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: role.Namespace}, Rules: role.Rules}
	}
	for _, o := range r.Kind("RoleBinding") {
		b := Into[rbacv1.RoleBinding](t, o)
		if len(b.Subjects) > 0 && b.Subjects[0].Kind == rbacv1.ServiceAccountKind && b.RoleRef.Kind == "Role" {
			nsBound = append(nsBound, b.Namespace+"/"+b.RoleRef.Name)
		}
	}
	for _, o := range r.Kind("ClusterRole") {
		role := Into[rbacv1.ClusterRole](t, o)
		roles[role.Name] = role.Rules
	}
	for _, o := range r.Kind("ClusterRoleBinding") {
		b := Into[rbacv1.ClusterRoleBinding](t, o)
		if len(b.Subjects) > 0 && b.Subjects[0].Kind == rbacv1.ServiceAccountKind {
			bound = append(bound, b.RoleRef.Name)
		}
	}
	require.Len(t, bound, 1, "the chart binds one ClusterRole to its ServiceAccount")
	rules := roles[bound[0]]
	var out []*rbacv1.Role
	for _, key := range nsBound {
		if r := nsRoles[key]; r != nil && r.Namespace != renderNamespace {
			out = append(out, r)
		}
	}
	require.True(t, len(rules) > 0 || len(out) > 0, "ClusterRole %s", bound[0])
	return rules, out
}

// renderNamespace is the release namespace of the chart rendered for a
// test's rules: Roles in it are the chart's own (leader election), not a
// controller's.
const renderNamespace = "deckhand-test"

// waitUntilAllowed waits until the API server's authorizer has seen the
// new binding (an informer, so a few milliseconds).
func waitUntilAllowed(t testing.TB, cfg *rest.Config, namespace string, rule rbacv1.PolicyRule) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	resource, subresource, _ := strings.Cut(rule.Resources[0], "/")
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: rule.Verbs[0], Group: rule.APIGroups[0], Resource: resource, Subresource: subresource,
		},
	}}
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		return err == nil && got.Status.Allowed, nil
	})
	require.NoError(t, err, "the chart's rules were not in force for the test's ServiceAccount")
}
