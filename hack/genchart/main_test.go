package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdSource is a CRD as controller-gen writes it.
func crdSource(group, kind string) string {
	plural := strings.ToLower(kind) + "s"
	return `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  annotations:
    controller-gen.kubebuilder.io/version: v0.23.0
  name: ` + plural + `.` + group + `
spec:
  group: ` + group + `
  names:
    kind: ` + kind + `
    plural: ` + plural + `
  scope: Namespaced
  versions:
  - name: v1
    schema:
      openAPIV3Schema:
        type: object
    served: true
    storage: true
`
}

// renderCRD renders the template genchart writes for a CRD with the real
// chart's helpers and values, plus sets.
func renderCRD(t *testing.T, group, kind, valuesKey string, vals map[string]any) map[string]any {
	t.Helper()
	src := crdSource(group, kind)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(src), crd))
	tpl, err := crdTemplate(src, crd, valuesKey)
	require.NoError(t, err)

	c, err := loader.Load(filepath.Join("..", "..", "charts", "deckhand"))
	require.NoError(t, err)
	var helpers []*chart.File
	for _, f := range c.Templates {
		if strings.HasPrefix(filepath.Base(f.Name), "_") {
			helpers = append(helpers, f)
		}
	}
	c.Templates = append(helpers, &chart.File{Name: "templates/crds/test.yaml", Data: []byte(tpl)})
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: "deckhand", Namespace: "deckhand-system", IsInstall: true}, nil)
	require.NoError(t, err)
	out, err := engine.Render(c, rv)
	require.NoError(t, err)
	obj := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(out["deckhand/templates/crds/test.yaml"]), &obj))
	return obj
}

func resourcePolicy(obj map[string]any) any {
	meta, _ := obj["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	return ann["helm.sh/resource-policy"]
}

func TestCRDsOfDatabaseKindsAreKeptWhateverCrdsKeepSays(t *testing.T) {
	for _, group := range []string{"stable.imaginedata.co", "cr.mysqloperator.grtl.github.com"} {
		for _, keep := range []bool{true, false} {
			obj := renderCRD(t, group, "Database", "database", map[string]any{
				"crds":        map[string]any{"keep": keep},
				"controllers": map[string]any{"database": map[string]any{"enabled": true}},
			})
			assert.Equal(t, "keep", resourcePolicy(obj), "%s with crds.keep=%v", group, keep)
		}
	}
	// Other groups follow crds.keep.
	on := renderCRD(t, "schedule.rs", "TDSet", "tdset", map[string]any{"crds": map[string]any{"keep": true}})
	assert.Equal(t, "keep", resourcePolicy(on))
	off := renderCRD(t, "schedule.rs", "TDSet", "tdset", map[string]any{"crds": map[string]any{"keep": false}})
	assert.Nil(t, resourcePolicy(off))
	assert.Equal(t, "tdsets.schedule.rs", off["metadata"].(map[string]any)["name"])
}
