package e2e

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// Profiles are served only when the chart's config asks for them, on the
// address it names; without it the rendered config leaves the flag at its
// default, "0" (off).
func TestPprofServesHeapProfilesOnlyWhenConfigured(t *testing.T) {
	c := testenv.Client(t)
	off := installChart(t, c, localValues(t, append(disableAll(), "controllers.blogPost.enabled=true")...))
	assert.NotContains(t, configOf(t, off.rendered), "pprof-bind-address", "profiles are off by default")

	addr := freeAddress(t)
	on := installChart(t, c, localValues(t, append(disableAll(), "controllers.blogPost.enabled=true", "config.pprof-bind-address="+addr)...))
	require.Equal(t, addr, configOf(t, on.rendered)["pprof-bind-address"])
	op := on.runOperator(t)
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "# HeapInuse = ", "a heap profile with the runtime's memory statistics")
	require.NoError(t, op.Stop(t), op.Logs())
}

// configOf is a release's operator config file, decoded.
func configOf(t testing.TB, r *Rendered) map[string]any {
	t.Helper()
	cm := Into[corev1.ConfigMap](t, r.Operator(t, "ConfigMap"))
	cfg := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg))
	return cfg
}
