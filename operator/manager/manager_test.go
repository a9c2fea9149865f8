package manager

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSlimCachedObjectsDropsWhatNoControllerReads(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	lastApplied := map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"big":"..."}}`}

	// A metadata-only ConfigMap keeps its name and labels, not kubectl's
	// copy of its data.
	cm := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "flaskapp-config", Labels: map[string]string{"app": "frontend"}, Annotations: lastApplied, ManagedFields: managed,
	}}
	out, err := SlimCachedObjects(cm)
	require.NoError(t, err)
	slim := out.(*metav1.PartialObjectMetadata)
	assert.Equal(t, "flaskapp-config", slim.Name)
	assert.Equal(t, map[string]string{"app": "frontend"}, slim.Labels)
	assert.Nil(t, slim.Annotations)
	assert.Nil(t, slim.ManagedFields)

	// A full object keeps its annotations (controllers may read them).
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: lastApplied, ManagedFields: managed}}
	out, err = SlimCachedObjects(d)
	require.NoError(t, err)
	assert.Equal(t, lastApplied, out.(*appsv1.Deployment).Annotations)
	assert.Nil(t, out.(*appsv1.Deployment).ManagedFields)
}
