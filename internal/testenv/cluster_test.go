package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// The controller tests run as the chart's ServiceAccount so that RBAC a
// stricter cluster (OpenShift) asks for is tested: this holds only while
// the local cluster enforces OwnerReferencesPermissionEnforcement
// (hack/kwok.yaml). Setting blockOwnerDeletion then needs update on the
// owner's finalizers, as it did for TDSet's Deployments.
func TestTheClusterEnforcesOwnerReferencesPermissions(t *testing.T) {
	admin := testenv.Client(t)
	ctx := context.Background()
	ns := testenv.Namespace(t, admin)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: ns}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}}}
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: ns}}
	for _, o := range []client.Object{sa, role, binding, owner} {
		require.NoError(t, admin.Create(ctx, o))
	}
	cfg := rest.AnonymousClientConfig(testenv.RESTConfig(t))
	cfg.BearerToken = testenv.ServiceAccountToken(t, ns, sa.Name)
	asSA, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	child := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "child-", Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}}}
	}

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := asSA.Create(ctx, child())
		require.True(ct, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
		require.ErrorContains(ct, err, "blockOwnerDeletion")
	}, 10*time.Second, 100*time.Millisecond, "blockOwnerDeletion was set without update on configmaps/finalizers: is OwnerReferencesPermissionEnforcement on in hack/kwok.yaml?")

	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps/finalizers"}, Verbs: []string{"update"}})
	require.NoError(t, admin.Update(ctx, role))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, asSA.Create(ctx, child()))
	}, 10*time.Second, 100*time.Millisecond, "update on configmaps/finalizers did not allow blockOwnerDeletion")
}
