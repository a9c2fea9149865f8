package database

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

func sample() *Cluster { return sampleNamed("my-first-crd-database") }

func sampleNamed(name string) *Cluster {
	return DatabaseKind.Clusters.View(&dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("u1")},
		Spec:       dbv1.DatabaseSpec{Name: "name-of-database", Port: 5432, StorageSize: "50G", Image: "super-great-docker-image", Replicas: 3},
	})
}

// live is what the API server returns for desired: the same JSON plus
// defaults, status and metadata of its own.
func liveOf(t *testing.T, desired *appsv1.StatefulSet) *appsv1.StatefulSet {
	t.Helper()
	b, err := json.Marshal(desired)
	require.NoError(t, err)
	var live appsv1.StatefulSet
	require.NoError(t, json.Unmarshal(b, &live))
	live.TypeMeta = metav1.TypeMeta{}
	live.ResourceVersion, live.Generation = "42", 3
	live.Spec.RevisionHistoryLimit = ptr.To(int32(10))
	live.Spec.Template.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
	live.Spec.Template.Spec.Containers[0].LivenessProbe.SuccessThreshold = 1
	live.Status.Replicas, live.Status.ReadyReplicas = 3, 3
	return &live
}

func TestUpToDateIgnoresWhatTheServerAddsAndSeesWhatChanged(t *testing.T) {
	eng := postgres.Engine{}
	db := sample()
	desired := statefulSet(db, eng, nil)
	state, err := desiredState(desired)
	require.NoError(t, err)
	assert.NotContains(t, state, "status")

	live := liveOf(t, desired)
	same, err := upToDate(state, live)
	require.NoError(t, err)
	assert.True(t, same, "defaults and status added by the server are not a change")

	live.Spec.Replicas = ptr.To(int32(1))
	same, err = upToDate(state, live)
	require.NoError(t, err)
	assert.False(t, same, "someone scaled the StatefulSet: it is applied again")

	live = liveOf(t, desired)
	live.Spec.Template.Spec.Containers[0].Args = append(live.Spec.Template.Spec.Containers[0].Args, "-c", "x=y")
	same, _ = upToDate(state, live)
	assert.False(t, same, "a list of another length differs")

	db.Spec.Parameters = map[string]string{"max_connections": "50"}
	state, err = desiredState(statefulSet(db, eng, nil))
	require.NoError(t, err)
	same, _ = upToDate(state, liveOf(t, desired))
	assert.False(t, same, "new parameters roll the StatefulSet")
}

func TestTheStatefulSetKeepsItsClaimTemplates(t *testing.T) {
	db := sample()
	first := statefulSet(db, postgres.Engine{}, nil)
	db.Spec.StorageSize = "80G"
	again := statefulSet(db, postgres.Engine{}, first.Spec.VolumeClaimTemplates)
	assert.Equal(t, first.Spec.VolumeClaimTemplates, again.Spec.VolumeClaimTemplates, "claim templates are immutable; PVCs grow instead")
	assert.Equal(t, "50G", ptr.To(again.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests["storage"]).String())
}

func TestObjectNamesFitInALabel(t *testing.T) {
	db := sampleNamed("a234567890123456789012345678901234567890123456789012") // 52, the CRD's limit
	n := namesOf(db)
	for _, name := range []string{n.StatefulSet + "-" + "0123456789", n.Headless, n.ReadWrite, n.ReadOnly, n.Superuser, n.App, n.Scripts, n.InitJob, claimName(db, 99)} {
		assert.LessOrEqual(t, len(name), 63, name)
	}
	// Secret names need not fit in a label (they never become a label's
	// value), only be DNS subdomains: "-replication" makes 64 characters.
	assert.Empty(t, validation.IsDNS1123Subdomain(n.Replication), n.Replication)
	assert.Equal(t, db.Name+"-replication", n.Replication)
}

func TestConnectionHashChangesWithThePortAndTheReplicas(t *testing.T) {
	db := sample()
	a := connectionOf(db, postgres.Engine{}, "")
	db.Spec.Image = "another-image"
	assert.Equal(t, a.hash(), connectionOf(db, postgres.Engine{}, "").hash())
	db.Spec.Replicas = 5
	assert.NotEqual(t, a.hash(), connectionOf(db, postgres.Engine{}, "").hash(), "the multi-host keys name every instance")
	db.Spec.Replicas = 3
	db.Spec.Port = 6543
	assert.NotEqual(t, a.hash(), connectionOf(db, postgres.Engine{}, "").hash())
}

// A Database without resources gets servers that request a little CPU and
// memory, and no limits: not BestEffort pods, which a busy node starves.
// `resources: {}` is BestEffort on purpose.
func TestServersWithoutResourcesRequestALittleAndAreNotBestEffort(t *testing.T) {
	eng := DatabaseKind.Engines[dbv1.EnginePostgreSQL]
	db := sample()
	server := statefulSet(db, eng, nil).Spec.Template.Spec
	assert.Equal(t, corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("256Mi"),
	}}, server.Containers[0].Resources)
	assert.False(t, bestEffort(server))

	db.Spec.Resources = &corev1.ResourceRequirements{}
	assert.True(t, bestEffort(statefulSet(db, eng, nil).Spec.Template.Spec), "resources: {} asks for BestEffort pods")
}
