package node

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chart-testing on the real node: ct install of every ci/*-values.yaml of
// the chart (hack/node/ct-install.sh), each its own release whose operator
// runs from its image and whose `helm test` must pass, in a namespace that
// enforces the restricted Pod Security Standard.
func TestRealNodeChartTestingInstallsEveryCIValuesFile(t *testing.T) {
	parallel(t, 150*time.Second)
	_, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// The cluster's release keeps the CRDs (and the operator image
	// imported); ct's releases install none of their own beside it. Its
	// operator leaves ct's namespace alone, so it keeps serving the other
	// tests while ct runs (a release installed before these values were
	// set gets them here).
	operatorDeployment(ctx, t, cs)
	helmUpgrade(ctx, t, clusterReleaseValues...)

	out, err := exec.CommandContext(ctx, "../../hack/node/ct-install.sh").CombinedOutput()
	require.NoError(t, err, "hack/node/ct-install.sh:\n%s", out)
	files, err := filepath.Glob("../../charts/deckhand/ci/*-values.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		assert.Contains(t, string(out), "ci/"+filepath.Base(f), "ct installed %s", filepath.Base(f))
	}
	assert.Contains(t, string(out), "All charts installed successfully")
	t.Logf("%s", lastLines(string(out), 3))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
