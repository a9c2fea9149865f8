package manager

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// rememberingRESTMapper is controller-runtime's discovery-backed mapper
// with its found mappings kept. When the operator watches chosen
// namespaces, the cache asks the mapper on every List whether the kind is
// namespaced, and handlers List on every pod and ConfigMap event (is there
// an exporter or monitor for it?). The discovery mapper builds each answer
// afresh, walking every API group and making a no-match error for each one
// that lacks the kind: about 6 KiB of garbage per call, 70% of all the
// operator allocated while its caches filled (heap profile of
// BenchmarkOperatorMemory), which the collector had to keep up with and
// the heap grew for.
//
// Only found mappings are kept. A failed lookup, which may make the
// discovery mapper reload (and drop) a group, forgets them all, so a CRD
// installed or removed later is seen as the discovery mapper sees it.
type rememberingRESTMapper struct {
	meta.RESTMapper
	mu    sync.RWMutex
	found map[mappingKey]*meta.RESTMapping
}

type mappingKey struct {
	gk       schema.GroupKind
	versions string
}

// newRememberingRESTMapper is a MapperProvider: controller-runtime's
// dynamic mapper, remembering what it found.
func newRememberingRESTMapper(c *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	m, err := apiutil.NewDynamicRESTMapper(c, httpClient)
	if err != nil {
		return nil, err
	}
	return rememberFoundMappings(m), nil
}

func rememberFoundMappings(m meta.RESTMapper) *rememberingRESTMapper {
	return &rememberingRESTMapper{RESTMapper: m, found: map[mappingKey]*meta.RESTMapping{}}
}

// RESTMapping is the remembered mapping, else the discovery mapper's.
func (m *rememberingRESTMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	key := mappingKey{gk, strings.Join(versions, ",")}
	m.mu.RLock()
	mapping, ok := m.found[key]
	m.mu.RUnlock()
	if ok {
		copied := *mapping
		return &copied, nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		clear(m.found)
		return nil, err
	}
	copied := *mapping
	m.found[key] = &copied
	return mapping, nil
}

// RESTMappings is the discovery mapper's; a failure forgets what was found.
func (m *rememberingRESTMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	mappings, err := m.RESTMapper.RESTMappings(gk, versions...)
	if err != nil {
		m.forget()
	}
	return mappings, err
}

// KindFor is the discovery mapper's; a failure forgets what was found.
func (m *rememberingRESTMapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	gvk, err := m.RESTMapper.KindFor(resource)
	if err != nil {
		m.forget()
	}
	return gvk, err
}

func (m *rememberingRESTMapper) forget() {
	m.mu.Lock()
	clear(m.found)
	m.mu.Unlock()
}
