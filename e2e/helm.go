// Package e2e proves the chart: rendered with the Helm SDK, sent to a real
// API server, installed, upgraded and uninstalled, and the operator run with
// the chart's ServiceAccount so its RBAC is exercised for real.
package e2e

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// kubeVersion is the local cluster's; render tests use it as Helm's
// capabilities so they match what an install there sees.
var kubeVersion = chartutil.KubeVersion{Version: "v1.36.3", Major: "1", Minor: "36"}

// ChartDir is charts/deckhand in this repository.
func ChartDir(t testing.TB) string { return filepath.Join(testenv.Root(t), "charts", "deckhand") }

// LoadChart loads a chart directory.
func LoadChart(t testing.TB, dir string) *chart.Chart {
	t.Helper()
	c, err := loader.Load(dir)
	require.NoError(t, err)
	return c
}

// Values merges values files and --set style assignments as the helm CLI does.
func Values(t testing.TB, files []string, sets ...string) map[string]any {
	t.Helper()
	opts := values.Options{ValueFiles: files, Values: sets}
	v, err := opts.MergeValues(getter.All(cli.New()))
	require.NoError(t, err)
	return v
}

// Rendered is a chart rendered for one set of values.
type Rendered struct {
	Objects []*unstructured.Unstructured
	Hooks   []*unstructured.Unstructured
	Notes   string
}

// Render renders the chart client-side, as `helm template` would.
func Render(t testing.TB, chartDir, namespace string, vals map[string]any) (*Rendered, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = "deckhand", namespace
	install.KubeVersion = &kubeVersion
	rel, err := install.Run(LoadChart(t, chartDir), vals)
	if err != nil {
		return nil, err
	}
	r := &Rendered{Objects: decodeManifests(t, rel.Manifest), Notes: rel.Info.Notes}
	for _, h := range rel.Hooks {
		r.Hooks = append(r.Hooks, decodeManifests(t, h.Manifest)...)
	}
	return r, nil
}

// MustRender is Render that fails the test on an error.
func MustRender(t testing.TB, namespace string, vals map[string]any) *Rendered {
	t.Helper()
	r, err := Render(t, ChartDir(t), namespace, vals)
	require.NoError(t, err)
	return r
}

func decodeManifests(t testing.TB, manifest string) []*unstructured.Unstructured {
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
// the operator, not to the demo (which has its own Deployment and ConfigMap).
func (r *Rendered) Operator(t testing.TB, kind string) *unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, o := range r.Kind(kind) {
		if o.GetLabels()["app.kubernetes.io/component"] != "demo" {
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

// Helm is the Helm SDK bound to one namespace of the test cluster.
type Helm struct {
	t         testing.TB
	cfg       *action.Configuration
	namespace string
}

// NewHelm returns Helm SDK actions for the test cluster.
func NewHelm(t testing.TB, namespace string) *Helm {
	t.Helper()
	kubeconfig := testenv.Kubeconfig(t)
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	cfg := &action.Configuration{}
	require.NoError(t, cfg.Init(flags, namespace, "secret", func(format string, v ...any) {
		t.Logf("helm: "+format, v...)
	}))
	return &Helm{t: t, cfg: cfg, namespace: namespace}
}

// Install installs a chart directory as release name, adopting resources a
// previous release or the tests left (Helm's --take-ownership).
func (h *Helm) Install(name, chartDir string, vals map[string]any) (*release.Release, error) {
	install := action.NewInstall(h.cfg)
	install.ReleaseName, install.Namespace = name, h.namespace
	install.TakeOwnership = true
	install.Timeout = 120e9
	return install.Run(LoadChart(h.t, chartDir), vals)
}

// Upgrade upgrades release name to the chart directory with these values.
func (h *Helm) Upgrade(name, chartDir string, vals map[string]any) (*release.Release, error) {
	upgrade := action.NewUpgrade(h.cfg)
	upgrade.Namespace = h.namespace
	upgrade.TakeOwnership = true
	upgrade.Timeout = 120e9
	return upgrade.Run(name, LoadChart(h.t, chartDir), vals)
}

// Uninstall removes release name.
func (h *Helm) Uninstall(name string) error {
	uninstall := action.NewUninstall(h.cfg)
	uninstall.Timeout = 120e9
	_, err := uninstall.Run(name)
	return err
}

// ciValuesFiles lists charts/deckhand/ci/*-values.yaml.
func ciValuesFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(ChartDir(t), "ci", "*-values.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

func shortName(file string) string {
	return strings.TrimSuffix(filepath.Base(file), "-values.yaml")
}

func mustf(t testing.TB, err error, format string, args ...any) {
	t.Helper()
	require.NoError(t, err, fmt.Sprintf(format, args...))
}
