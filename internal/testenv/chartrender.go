package testenv

import (
	"bytes"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
)

// KubeVersion is the local cluster's; chart renders use it as Helm's
// capabilities so they match what an install there sees.
var KubeVersion = chartutil.KubeVersion{Version: "v1.36.3", Major: "1", Minor: "36"}

// ChartDir is charts/deckhand in this repository.
func ChartDir(t testing.TB) string { return filepath.Join(Root(t), "charts", "deckhand") }

// LoadChart loads a chart directory.
func LoadChart(t testing.TB, dir string) *chart.Chart {
	t.Helper()
	c, err := loader.Load(dir)
	require.NoError(t, err)
	return c
}

// Rendered is a chart rendered for one set of values.
type Rendered struct {
	Objects []*unstructured.Unstructured
	// Hooks are the install and upgrade hooks (the demos' custom resources).
	Hooks []*unstructured.Unstructured
	// Tests are the `helm test` hooks.
	Tests []*unstructured.Unstructured
	Notes string
}

// RenderChart renders a chart directory client-side as release name in
// namespace, as `helm template` would.
func RenderChart(t testing.TB, chartDir, name, namespace string, vals map[string]any) (*Rendered, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = name, namespace
	install.KubeVersion = &KubeVersion
	rel, err := install.Run(LoadChart(t, chartDir), vals)
	if err != nil {
		return nil, err
	}
	r := &Rendered{Objects: DecodeManifests(t, rel.Manifest), Notes: rel.Info.Notes}
	for _, h := range rel.Hooks {
		objs := DecodeManifests(t, h.Manifest)
		if slices.Contains(h.Events, release.HookTest) {
			r.Tests = append(r.Tests, objs...)
		} else {
			r.Hooks = append(r.Hooks, objs...)
		}
	}
	return r, nil
}

// DecodeManifests decodes a release manifest in Helm's install order.
func DecodeManifests(t testing.TB, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	split := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(split))
	for k := range split {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	for _, k := range keys {
		dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(split[k]), 4096)
		for {
			obj := map[string]any{}
			err := dec.Decode(&obj)
			if err == io.EOF {
				break
			}
			require.NoError(t, err, split[k])
			if len(obj) > 0 {
				out = append(out, &unstructured.Unstructured{Object: obj})
			}
		}
	}
	return out
}

// All is every rendered object: the release's, its hooks and its tests.
func (r *Rendered) All() []*unstructured.Unstructured {
	return slices.Concat(r.Objects, r.Hooks, r.Tests)
}

// Kind returns the rendered objects of one kind.
func (r *Rendered) Kind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.Objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// One returns the single rendered object of a kind, failing otherwise.
func (r *Rendered) One(t testing.TB, kind string) *unstructured.Unstructured {
	t.Helper()
	objs := r.Kind(kind)
	require.Len(t, objs, 1, "rendered %s objects", kind)
	return objs[0]
}

// Operator returns the single rendered object of a kind that belongs to
// the operator, not to the demo (which has its own Deployment and ConfigMap)
// nor to the Grafana dashboard (a ConfigMap).
func (r *Rendered) Operator(t testing.TB, kind string) *unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, o := range r.Kind(kind) {
		if o.GetLabels()["app.kubernetes.io/component"] == "operator" {
			objs = append(objs, o)
		}
	}
	require.Len(t, objs, 1, "rendered operator %s objects", kind)
	return objs[0]
}

// Into converts an unstructured object into a typed one.
func Into[T any](t testing.TB, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out))
	return out
}
