package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/util/retry"
)

var monitoringOnce sync.Once

// InstallMonitoringCRDs installs the Prometheus Operator's ServiceMonitor,
// PodMonitor and PrometheusRule CRDs, the real ones, from the module at the version
// in hack/prometheus-operator.version (through the Go module proxy, cached
// in the module cache), so the API server validates the chart's monitoring
// objects against their schemas.
func InstallMonitoringCRDs(t testing.TB) {
	t.Helper()
	c := Client(t)
	monitoringOnce.Do(func() {
		dir := prometheusOperatorModule(t)
		for _, name := range []string{"servicemonitors", "podmonitors", "prometheusrules"} {
			crd := ReadCRD(t, filepath.Join(dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+name+".yaml"))
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return createOrReplace(c, crd.DeepCopy()) })
			require.NoError(t, err, crd.Name)
			WaitEstablished(t, c, crd.Name)
		}
	})
}

// prometheusOperatorModule is the directory of the pinned
// github.com/prometheus-operator/prometheus-operator module.
func prometheusOperatorModule(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(t), "hack", "prometheus-operator.version"))
	require.NoError(t, err)
	mod := "github.com/prometheus-operator/prometheus-operator@" + strings.TrimSpace(string(b))
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = t.TempDir() // outside the repository: not a dependency of go.mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	out, err := cmd.Output()
	require.NoError(t, err, "go mod download %s", mod)
	var info struct{ Dir, Error string }
	require.NoError(t, json.Unmarshal(out, &info))
	require.Empty(t, info.Error, mod)
	return info.Dir
}
