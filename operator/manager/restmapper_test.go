package manager

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper counts the questions that reach the discovery mapper.
type countingMapper struct {
	meta.RESTMapper
	asked int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.asked++
	return c.RESTMapper.RESTMapping(gk, versions...)
}

func TestFoundMappingsAreAnsweredFromMemoryUntilALookupFails(t *testing.T) {
	pods := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	podMonitors := schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PodMonitor"}
	discovery := meta.NewDefaultRESTMapper(nil)
	discovery.Add(pods, meta.RESTScopeNamespace)
	counting := &countingMapper{RESTMapper: discovery}
	m := rememberFoundMappings(counting)

	for range 3 {
		mapping, err := m.RESTMapping(pods.GroupKind(), pods.Version)
		require.NoError(t, err)
		assert.Equal(t, "pods", mapping.Resource.Resource)
		assert.Equal(t, meta.RESTScopeNameNamespace, mapping.Scope.Name())
	}
	assert.Equal(t, 1, counting.asked, "the second and third answers come from memory")

	// A caller changing its answer does not change the next one.
	mapping, _ := m.RESTMapping(pods.GroupKind(), pods.Version)
	mapping.Resource.Resource = "changed"
	mapping, _ = m.RESTMapping(pods.GroupKind(), pods.Version)
	assert.Equal(t, "pods", mapping.Resource.Resource)

	// A kind the cluster lacks is asked every time (the CRD may come), and
	// the miss, after which discovery may have reloaded, forgets the pods.
	_, err := m.RESTMapping(podMonitors.GroupKind(), podMonitors.Version)
	assert.True(t, meta.IsNoMatchError(err), "got %v", err)
	_, err = m.RESTMapping(podMonitors.GroupKind(), podMonitors.Version)
	assert.True(t, meta.IsNoMatchError(err), "got %v", err)
	asked := counting.asked
	_, err = m.RESTMapping(pods.GroupKind(), pods.Version)
	require.NoError(t, err)
	assert.Equal(t, asked+1, counting.asked, "pods asked again after the failed lookup")

	// Once the CRD is installed, it is found.
	discovery.Add(podMonitors, meta.RESTScopeNamespace)
	mapping, err = m.RESTMapping(podMonitors.GroupKind(), podMonitors.Version)
	require.NoError(t, err)
	assert.Equal(t, "podmonitors", mapping.Resource.Resource)
}
