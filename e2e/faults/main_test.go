// Package faults is the fault campaign: what production does to an
// operator (its leader killed; the operator killed mid-rollout, mid-backup
// or mid-upgrade; the API server stopped, or refusing and slow; a
// configuration storm), done to the operator running as the chart runs it,
// and checked for what users would lose: a workload rolled twice or never,
// a backup or an upgrade run twice.
//
// These tests disrupt the cluster they run on, so they run on a second
// local cluster of their own (DECKHAND_CLUSTER=deckhand-faults), started
// here and deleted afterwards. The faults that disturb nothing but their
// own namespace run first, side by side (TestFaultsConfinedToTheirNamespace);
// the API-server stop and the storm (which times the API server) then run
// alone. Timings are logged (RESULT lines; docs/performance.md); the
// assertions are about what happened. docs/development/reliability.md
// describes the campaign.
package faults

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/deckhand-dev/deckhand/internal/testenv"
)

const clusterName = "deckhand-faults"

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	kubeconfig, err := cluster("up")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lines := strings.Split(strings.TrimSpace(kubeconfig), "\n")
	os.Setenv(testenv.KubeconfigEnv, strings.TrimPrefix(lines[len(lines)-1], "export KUBECONFIG="))
	code := m.Run()
	if _, err := cluster("down"); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// cluster runs hack/cluster.sh for the fault cluster.
func cluster(verb string) (string, error) {
	cmd := exec.Command("../../hack/cluster.sh", verb)
	cmd.Env = append(os.Environ(), "DECKHAND_CLUSTER="+clusterName)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/cluster.sh %s (%s): %w\n%s", verb, clusterName, err, stderr.String())
	}
	return string(out), nil
}
