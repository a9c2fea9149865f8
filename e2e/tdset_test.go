package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
)

// TestTDSetWithTheChartsNamespacedRBAC runs the TDSet controller as users
// get it from the chart, limited to one namespace by a Role, and checks it
// can do all its work with nothing more.
func TestTDSetWithTheChartsNamespacedRBAC(t *testing.T) {
	c := testenv.Client(t)
	// The namespace is made first: the values name it.
	namespace := testenv.Namespace(t, c)
	rel := installChartIn(t, c, namespace, localValues(t, append(disableAll(),
		"controllers.tdset.enabled=true", "rbac.namespaced=true", "watchNamespaces={"+namespace+"}")...))
	op := rel.runOperator(t)

	td := &schedulev1.TDSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec: schedulev1.TDSetSpec{
			Container:        schedulev1.Container{Image: "crccheck/hello-world", Port: 8000},
			Service:          &schedulev1.Service{Port: 80},
			SchedulingConfig: []schedulev1.Scheduling{{StartTime: intstr.FromInt32(0), EndTime: intstr.FromString("24:00"), Replica: 3}},
		},
	}
	require.NoError(t, c.Create(context.Background(), td))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var d appsv1.Deployment
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), &d))
		require.EqualValues(ct, 3, ptr.Deref(d.Spec.Replicas, 0))
		var svc corev1.Service
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), &svc))
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(td), td))
		require.True(ct, meta.IsStatusConditionTrue(td.Status.Conditions, "Ready"), "%+v", td.Status.Conditions)
	}, 60*time.Second, 200*time.Millisecond)

	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MaxReplicas:    10,
		},
	}
	require.NoError(t, c.Create(context.Background(), hpa))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(hpa), hpa))
		require.EqualValues(ct, 3, ptr.Deref(hpa.Spec.MinReplicas, 0))
	}, 30*time.Second, 200*time.Millisecond)
	assert.Empty(t, op.Failures(), "the chart's RBAC is missing a rule")

	// Least privilege: its namespace's Deployments yes; Secrets, ConfigMaps
	// and other namespaces no.
	sa := rel.serviceAccount()
	assert.True(t, canIIn(t, c, namespace, sa, "apps", "deployments", "patch"))
	assert.True(t, canIIn(t, c, namespace, sa, "autoscaling", "horizontalpodautoscalers", "patch"))
	assert.False(t, canIIn(t, c, "default", sa, "apps", "deployments", "patch"), "a namespaced install reaches other namespaces")
	for _, res := range []string{"secrets", "configmaps", "pods"} {
		assert.False(t, canIIn(t, c, namespace, sa, "", res, "get"), "TDSet must not read %s", res)
	}
}
