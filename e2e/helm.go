// Package e2e proves the chart: rendered with the Helm SDK, sent to a real
// API server, installed, upgraded and uninstalled, and the operator run with
// the chart's ServiceAccount so its RBAC is exercised for real.
package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// ChartDir is charts/deckhand in this repository.
func ChartDir(t testing.TB) string { return testenv.ChartDir(t) }

// LoadChart loads a chart directory.
func LoadChart(t testing.TB, dir string) *chart.Chart { return testenv.LoadChart(t, dir) }

// Values merges values files and --set style assignments as the helm CLI does.
func Values(t testing.TB, files []string, sets ...string) map[string]any {
	t.Helper()
	opts := values.Options{ValueFiles: files, Values: sets}
	v, err := opts.MergeValues(getter.All(cli.New()))
	require.NoError(t, err)
	return v
}

// Rendered is a chart rendered for one set of values (testenv's, shared
// with the controller tests' chart RBAC).
type Rendered = testenv.Rendered

// releaseRendered is the name render tests give their release.
const releaseRendered = "deckhand"

// Render renders the chart client-side, as `helm template` would.
func Render(t testing.TB, chartDir, namespace string, vals map[string]any) (*Rendered, error) {
	t.Helper()
	return testenv.RenderChart(t, chartDir, releaseRendered, namespace, vals)
}

// MustRender is Render that fails the test on an error.
func MustRender(t testing.TB, namespace string, vals map[string]any) *Rendered {
	t.Helper()
	r, err := Render(t, ChartDir(t), namespace, vals)
	require.NoError(t, err)
	return r
}

func decodeManifests(t testing.TB, manifest string) []*unstructured.Unstructured {
	return testenv.DecodeManifests(t, manifest)
}

// Into converts an unstructured object into a typed one.
func Into[T any](t testing.TB, u *unstructured.Unstructured) *T { return testenv.Into[T](t, u) }

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
