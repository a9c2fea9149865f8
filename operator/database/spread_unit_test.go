package database

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// A Database's servers prefer nodes apart by default; spec.podTemplate.spread
// makes that a requirement, changes the domain (zones), or leaves
// placement to the user's affinity alone; the user's own terms are kept.
func TestServersSpreadAsThePodTemplateSays(t *testing.T) {
	eng := DatabaseKind.Engines[dbv1.EnginePostgreSQL]
	servers := func(tpl *dbv1.PodTemplate) *corev1.Affinity {
		db := &Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "db-uid"},
			Kind:       DatabaseKind,
			Spec: dbv1.DatabaseSpec{Name: "app", Port: 5432, StorageSize: "1Gi", Replicas: 3, Image: "postgres:15.4",
				Engine: dbv1.EnginePostgreSQL, PodTemplate: tpl},
		}
		return statefulSet(db, eng, nil).Spec.Template.Spec.Affinity
	}
	own := map[string]string{"app.kubernetes.io/instance": "db"}
	mine := func(key string) corev1.PodAffinityTerm {
		sel := selectorLabels(&Cluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Kind: DatabaseKind}, componentServer)
		return corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: sel}}
	}

	a := servers(nil)
	require.NotNil(t, a)
	assert.Equal(t, []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: mine(corev1.LabelHostname)}},
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, "the default: one node each, preferred")
	assert.Empty(t, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)

	a = servers(&dbv1.PodTemplate{Spread: &dbv1.Spread{Type: dbv1.SpreadRequired, TopologyKey: "topology.kubernetes.io/zone"}})
	assert.Equal(t, []corev1.PodAffinityTerm{mine("topology.kubernetes.io/zone")},
		a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, "required, one zone each")
	assert.Empty(t, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)

	// The user's anti-affinity term stays beside the operator's.
	users := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: own},
	}}}}
	a = servers(&dbv1.PodTemplate{Affinity: users, Spread: &dbv1.Spread{TopologyKey: "topology.kubernetes.io/zone"}})
	assert.Equal(t, users.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
	assert.Equal(t, []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: mine("topology.kubernetes.io/zone")}},
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, "type defaults to Preferred")
	assert.Len(t, users.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, 1, "the spec's own affinity is not changed")

	a = servers(&dbv1.PodTemplate{Affinity: users, Spread: &dbv1.Spread{Type: dbv1.SpreadNone}})
	assert.Equal(t, users, a, "None: the user's affinity alone")
	assert.Nil(t, servers(&dbv1.PodTemplate{Spread: &dbv1.Spread{Type: dbv1.SpreadNone}}), "None and no affinity: none")
}

// A server the scheduler cannot place (here: spread Required with more
// replicas than nodes) is named in the Ready message with the
// scheduler's reason; one not tried yet, or placed, is not.
func TestAServerTheSchedulerCannotPlaceIsNamedWithItsReason(t *testing.T) {
	why := "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
	pods := map[string]*corev1.Pod{
		"db-0": {Spec: corev1.PodSpec{NodeName: "node-a"}},
		"db-1": {Status: corev1.PodStatus{Phase: corev1.PodPending}},
		"db-2": {Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: why,
		}}}},
	}
	assert.Equal(t, []string{"pod db-2: cannot be scheduled (" + why + ")"}, podProblems(pods))
}
