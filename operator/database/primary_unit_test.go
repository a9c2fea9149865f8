package database

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// Every question about the primary goes to status.currentPrimary: where a
// backup reads, which pod stands behind the read-write Service, which
// volume a major upgrade converts, which pods are standbys and how they
// fare. A cluster that names none has its primary at ordinal 0.
func TestWhoIsPrimaryIsTheStatusNotAnOrdinal(t *testing.T) {
	db := &Cluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Kind: DatabaseKind}
	assert.Equal(t, "db-0", currentPrimary(db), "none named: ordinal 0")
	recordCurrentPrimary(db)
	assert.Equal(t, "db-0", db.Status.CurrentPrimary, "a new cluster names ordinal 0")

	db.Status.CurrentPrimary = "db-2"
	recordCurrentPrimary(db)
	assert.Equal(t, "db-2", db.Status.CurrentPrimary, "a named primary is kept")
	assert.Equal(t, "data-db-2", primaryClaim(db))
	assert.Equal(t, "db-2", sourcePod(db, "db-rw"))
	assert.Equal(t, rolePrimary, roleOf(db, "db-2"))
	assert.Equal(t, roleStandby, roleOf(db, "db-0"))
	assert.Equal(t, "db-2", scriptsConfigMap(db, DatabaseKind.Engines[dbv1.EnginePostgreSQL], "", "").Data[engine.ScriptsPrimaryKey])

	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"db-0", "db-1", "db-2"} {
		pods[name] = readyPod(name)
	}
	src, ok := backupSource(db, pods, false, 16<<20)
	require.True(t, ok)
	assert.Equal(t, "db-2", src.Primary)
	assert.Equal(t, "db-1", src.Standby, "the highest ordinal that is not the primary")

	// db-1 started and stopped streaming: not healthy, and no backup
	// source; db-0 is.
	pods["db-1"].Status.Conditions[0].Status = corev1.ConditionFalse
	pods["db-1"].Status.ContainerStatuses = []corev1.ContainerStatus{{Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	health := standbysOf(db, pods)
	require.Len(t, health, 2)
	assert.Equal(t, standbyHealth{Pod: "db-0", Ordinal: 0, Healthy: true}, health[0])
	assert.Equal(t, "db-1", health[1].Pod)
	assert.False(t, health[1].Healthy)
	assert.True(t, health[1].Started)
	assert.Contains(t, health[1].Why, "not streaming from the primary db-2")
	assert.Nil(t, health[1].LagBytes, "the operator measures no lag yet")
	assert.Equal(t, []string{"db-1"}, standbysNotReady(db, pods))
	src, _ = backupSource(db, pods, false, 16<<20)
	assert.Equal(t, "db-0", src.Standby)

	// The named primary not ready: nothing reads, though ordinal 0 is.
	pods["db-2"].Status.Conditions[0].Status = corev1.ConditionFalse
	_, ok = backupSource(db, pods, false, 16<<20)
	assert.False(t, ok)
	assert.Nil(t, primaryPod(db, map[string]*corev1.Pod{"db-0": pods["db-0"]}))
}
