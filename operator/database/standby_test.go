package database_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// setServerReady writes what the kubelet writes when a started server's
// readiness probe fails (a standby that stopped streaming) or passes again.
func setServerReady(t *testing.T, c client.Client, ns, name string, ready bool) {
	t.Helper()
	status := map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[ready]
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var pod corev1.Pod
		require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pod))
		require.NotEmpty(t, pod.Status.ContainerStatuses, "pod %s has not started", name)
		cs := &pod.Status.ContainerStatuses[0]
		cs.Ready, cs.Started = ready, ptr.To(true)
		testenv.SetPodReadyConditions(&pod, status)
		return c.Status().Update(context.Background(), &pod)
	}))
}

// A standby whose readiness fails while the primary serves (its probe
// needs an active WAL receiver) leaves the Database Degraded, with the
// pod's name, and a Warning; once it is ready again, so is the Database.
func TestAStandbyThatIsNotReadyWhileThePrimaryIsLeavesTheDatabaseDegraded(t *testing.T) {
	t.Parallel()
	c, ns, db := readyDatabase(t, "pair", 3)

	setServerReady(t, c, ns, "pair-2", false)
	// The count comes from the StatefulSet's status, which the
	// controller manager updates after the pod's: wait for both.
	got := waitFor(t, c, db, "Degraded", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, dbv1.PhaseDegraded, d.Status.Phase, "conditions: %+v", d.Status.Conditions)
		require.Contains(ct, condition(d, database.ConditionReady).Message,
			"2/3 replicas ready; the primary pair-0 serves, but standby pair-2 started and is not ready")
	})
	cond := condition(got, database.ConditionReady)
	assert.Equal(t, "StandbyNotReady", cond.Reason)
	assert.NotContains(t, cond.Message, "pair-1")
	assertEvent(t, c, ns, "pair", corev1.EventTypeWarning, "StandbyNotReady")

	setServerReady(t, c, ns, "pair-2", true)
	waitFor(t, c, db, "Ready again", ready)
}

// serveLog makes kwok serve the file as the log of the pod's server
// container ("postgres"), as a kubelet serves the container's log; lines
// are written with writeLog.
func serveLog(t *testing.T, c client.Client, ns, pod string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), pod+".log")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	logs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
		"metadata": map[string]any{"name": pod, "namespace": ns},
		"spec": map[string]any{"logs": []any{map[string]any{
			"containers": []any{"postgres"}, "logsFile": file,
		}}},
	}}
	require.NoError(t, c.Create(context.Background(), logs))
	return file
}

// writeLog appends lines to a container log file in the CRI format the
// kubelet reads (time, stream, tag, line).
func writeLog(t *testing.T, file string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	for _, l := range lines {
		_, err := fmt.Fprintf(f, "%s stderr F %s\n", time.Now().UTC().Format(time.RFC3339Nano), l)
		require.NoError(t, err)
	}
}

// A standby's first clone shows in the Database's status (status.clones
// and the Ready condition) and in Events while it runs, from the clone
// progress lines bootstrap.sh logs (their format is proven on a real clone
// by postgres' TestACloneLogsItsProgressForTheOperator); a cloning
// standby, whose startup probe passes while it progresses, is not reported
// as a standby that stopped streaming.
func TestAStandbyCloningThePrimaryShowsItsProgress(t *testing.T) {
	t.Parallel()
	c, ns, db := readyDatabase(t, "big", 2)
	log := serveLog(t, c, ns, "big-1")
	at := func(d time.Duration) string { return time.Now().UTC().Add(d).Format(time.RFC3339) }
	writeLog(t, log,
		at(0)+" bootstrap: empty volume on standby ordinal 1: cloning the primary into /var/lib/postgresql/data/pgdata",
		at(0)+" bootstrap: replication slot deckhand_standby_1 on the primary",
		at(0)+" bootstrap: clone progress: 262144 of 1048576 kB")
	// The kubelet's view while it clones: started (the startup probe
	// passes while the clone progresses), not ready.
	setServerReady(t, c, ns, "big-1", false)

	// The ready count comes from the StatefulSet's status, which the
	// controller manager updates after the pod's: wait for both.
	got := waitFor(t, c, db, "the clone in status", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Len(ct, d.Status.Clones, 1)
		require.Equal(ct, int64(256<<20), d.Status.Clones[0].CopiedBytes)
		require.Contains(ct, condition(d, database.ConditionReady).Message, "1/2 replicas ready")
	})
	clone := got.Status.Clones[0]
	assert.Equal(t, "big-1", clone.Pod)
	assert.Equal(t, int64(1<<30), clone.TotalBytes)
	require.NotNil(t, clone.LastProgressTime)
	cond := condition(got, database.ConditionReady)
	assert.NotEqual(t, "StandbyNotReady", cond.Reason, "a cloning standby has not stopped streaming: %s", cond.Message)
	assert.NotEqual(t, dbv1.PhaseDegraded, got.Status.Phase)
	assert.Contains(t, cond.Message, "standby big-1 is cloning the primary: 256 MiB of 1.0 GiB copied (25%)")
	assertEvent(t, c, ns, "big", corev1.EventTypeNormal, "CloneStarted")

	// More copied: the operator looks again by itself (nothing else about
	// the pod changes while it clones).
	writeLog(t, log, at(0)+" bootstrap: clone progress: 786432 of 1048576 kB")
	got = waitFor(t, c, db, "the clone's progress", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Len(ct, d.Status.Clones, 1)
		require.Equal(ct, int64(768<<20), d.Status.Clones[0].CopiedBytes)
	})
	assert.Contains(t, condition(got, database.ConditionReady).Message, "768 MiB of 1.0 GiB copied (75%)")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var notes []string
		for _, e := range listEvents(t, c, ns, "big") {
			if e.Reason == "CloneProgress" {
				notes = append(notes, e.Note)
			}
		}
		require.NotEmpty(ct, notes)
		require.Contains(ct, strings.Join(notes, "\n"), "(75%)")
	}, wait, 200*time.Millisecond, "a CloneProgress Event")

	// Done: the standby starts, catches up and is ready.
	writeLog(t, log, at(0)+" bootstrap: clone finished: the primary is copied; starting the standby",
		"2026-11-25 14:00:00.000 UTC [42] LOG:  database system is ready to accept read-only connections")
	setServerReady(t, c, ns, "big-1", true)
	got = waitFor(t, c, db, "Ready, no clone", func(ct *assert.CollectT, d *dbv1.Database) {
		ready(ct, d)
		require.Empty(ct, d.Status.Clones)
	})
	assertEvent(t, c, ns, "big", corev1.EventTypeNormal, "CloneFinished")
}
