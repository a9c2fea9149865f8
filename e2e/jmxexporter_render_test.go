package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// PodMonitor rights come only with controllers.jmxExporter.podMonitor, in
// the ClusterRole or, for a namespace-limited JMX exporter, in its Roles.
func TestJMXExporterGetsPodMonitorsOnlyWhenAskedFor(t *testing.T) {
	on := MustRender(t, ns, Values(t, nil, "controllers.jmxExporter.enabled=true", "controllers.jmxExporter.allNamespaces=true"))
	assert.NotContains(t, ruleResources(t, on, "ClusterRole"), "monitoring.coreos.com/podmonitors")

	pm := MustRender(t, ns, Values(t, nil, "controllers.jmxExporter.enabled=true", "controllers.jmxExporter.allNamespaces=true", "controllers.jmxExporter.podMonitor=true"))
	assert.Contains(t, ruleResources(t, pm, "ClusterRole"), "monitoring.coreos.com/podmonitors")

	off := MustRender(t, ns, Values(t, nil, "controllers.jmxExporter.podMonitor=true"))
	assert.NotContains(t, ruleResources(t, off, "ClusterRole"), "monitoring.coreos.com/podmonitors", "no rights without the controller")

	limited := MustRender(t, ns, Values(t, nil, "controllers.jmxExporter.enabled=true", "controllers.jmxExporter.podMonitor=true",
		"controllers.jmxExporter.namespaces={team-a}"))
	assert.NotContains(t, ruleResources(t, limited, "ClusterRole"), "monitoring.coreos.com/podmonitors")
	found := false
	for _, o := range limited.Kind("Role") {
		if strings.HasSuffix(o.GetName(), "-jmxexporter") {
			found = true
			assert.Contains(t, ruleResources(t, &Rendered{Objects: []*unstructured.Unstructured{o}}, "Role"), "monitoring.coreos.com/podmonitors")
		}
	}
	assert.True(t, found, "no Role for the namespace-limited JMX exporter")
}
