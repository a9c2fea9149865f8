package tdset

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// A TDSet wakes for what it acts on or reports, not for every status
// update the Deployment controller makes while it scales.
func TestDeploymentChangesThatWakeATDSet(t *testing.T) {
	base := appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d", Generation: 2, Labels: map[string]string{"a": "b"}},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, ReadyReplicas: 1},
	}
	for name, tc := range map[string]struct {
		change func(*appsv1.Deployment)
		wakes  bool
	}{
		"spec changed (generation)":        {func(d *appsv1.Deployment) { d.Generation = 3 }, true},
		"a replica became ready":           {func(d *appsv1.Deployment) { d.Status.ReadyReplicas = 2 }, true},
		"the controller observed the spec": {func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 3 }, true},
		"labels changed":                   {func(d *appsv1.Deployment) { d.Labels = map[string]string{"a": "c"} }, true},
		"annotations changed":              {func(d *appsv1.Deployment) { d.Annotations = map[string]string{"x": "y"} }, true},
		"owner removed":                    {func(d *appsv1.Deployment) { d.OwnerReferences = []metav1.OwnerReference{{Name: "other"}} }, true},
		"being deleted":                    {func(d *appsv1.Deployment) { now := metav1.Now(); d.DeletionTimestamp = &now }, true},
		"updated replicas counted":         {func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 2 }, false},
		"available replicas counted":       {func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 1 }, false},
		"a condition changed":              {func(d *appsv1.Deployment) { d.Status.Conditions = []appsv1.DeploymentCondition{{Type: "Progressing"}} }, false},
		"resourceVersion only (a resync)":  {func(d *appsv1.Deployment) { d.ResourceVersion = "9" }, false},
	} {
		t.Run(name, func(t *testing.T) {
			cur := base.DeepCopy()
			tc.change(cur)
			assert.Equal(t, tc.wakes, deploymentChangesTDSetReads.Update(event.UpdateEvent{ObjectOld: base.DeepCopy(), ObjectNew: cur}))
		})
	}
}
