package pooler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

func TestPgBouncerPodsRequestALittleUnlessTold(t *testing.T) {
	p := &dbv1.Pooler{ObjectMeta: metav1.ObjectMeta{Name: "app-pool", Namespace: "ns"}, Spec: dbv1.PoolerSpec{Database: "app"}}
	got := deployment(p, Target{}, "img", "hash").Spec.Template.Spec.Containers[0].Resources
	assert.Equal(t, "50m", got.Requests.Cpu().String())
	assert.Equal(t, "64Mi", got.Requests.Memory().String())
	assert.Empty(t, got.Limits, "no limits by default")

	mine := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}
	p.Spec.Resources = &mine
	assert.Equal(t, mine, deployment(p, Target{}, "img", "hash").Spec.Template.Spec.Containers[0].Resources)

	p.Spec.Resources = &corev1.ResourceRequirements{}
	assert.Equal(t, corev1.ResourceRequirements{}, deployment(p, Target{}, "img", "hash").Spec.Template.Spec.Containers[0].Resources,
		"{} asks for BestEffort pods")
}

func TestPgBouncerAndSetupPodsGoWhereThePodTemplateSays(t *testing.T) {
	users := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}},
		}}},
	}}}
	toleration := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}
	p := &dbv1.Pooler{
		ObjectMeta: metav1.ObjectMeta{Name: "app-pool", Namespace: "ns"},
		Spec: dbv1.PoolerSpec{Database: "app", PodTemplate: &dbv1.PodTemplate{
			NodeSelector: map[string]dbv1.LabelValue{"disktype": "ssd"}, Tolerations: []corev1.Toleration{toleration},
			Affinity: users, PriorityClassName: "databases",
		}},
	}
	for name, spec := range map[string]corev1.PodSpec{
		"PgBouncer": deployment(p, Target{}, "img", "hash").Spec.Template.Spec,
		"setup":     setupJob(p, Target{}, "0123456789").Spec.Template.Spec,
	} {
		assert.Equal(t, map[string]string{"disktype": "ssd"}, spec.NodeSelector, name)
		assert.Equal(t, []corev1.Toleration{toleration}, spec.Tolerations, name)
		assert.Equal(t, "databases", spec.PriorityClassName, name)
		assert.Equal(t, users.NodeAffinity, spec.Affinity.NodeAffinity, name)
	}

	// The PgBouncer pods also prefer different nodes; the user's affinity
	// object is not changed by that.
	spec := deployment(p, Target{}, "img", "hash").Spec.Template.Spec
	terms := spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if assert.Len(t, terms, 1) {
		assert.Equal(t, corev1.LabelHostname, terms[0].PodAffinityTerm.TopologyKey)
		assert.Equal(t, selectorOf(p), terms[0].PodAffinityTerm.LabelSelector.MatchLabels)
	}
	assert.Nil(t, users.PodAntiAffinity)

	// Without a pod template the pods go anywhere, spread.
	p.Spec.PodTemplate = nil
	spec = deployment(p, Target{}, "img", "hash").Spec.Template.Spec
	assert.Empty(t, spec.NodeSelector)
	assert.Empty(t, spec.Tolerations)
	assert.Nil(t, spec.Affinity.NodeAffinity)
	assert.Len(t, spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, 1)

	// spread Required: a pod that finds no node free of the others waits.
	p.Spec.PodTemplate = &dbv1.PodTemplate{Spread: &dbv1.Spread{Type: dbv1.SpreadRequired}}
	spec = deployment(p, Target{}, "img", "hash").Spec.Template.Spec
	assert.Empty(t, spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	assert.Equal(t, []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: selectorOf(p)}}},
		spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
}

func TestPgBouncerPodsServeMetricsFromTheOperatorImage(t *testing.T) {
	p := &dbv1.Pooler{ObjectMeta: metav1.ObjectMeta{Name: "app-pool", Namespace: "ns"}, Spec: dbv1.PoolerSpec{Database: "app"}}
	d := deployment(p, Target{}, "img", "hash")
	addMetrics(p, d, "ghcr.io/deckhand-dev/deckhand:1.2.3")
	cs := d.Spec.Template.Spec.Containers
	if !assert.Len(t, cs, 2) {
		return
	}
	m := cs[1]
	assert.Equal(t, "ghcr.io/deckhand-dev/deckhand:1.2.3", m.Image)
	assert.Equal(t, []string{"pooler-metrics", "--listen", ":9127"}, m.Args)
	assert.Equal(t, []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9127, Protocol: corev1.ProtocolTCP}}, m.Ports)
	assert.Nil(t, m.ReadinessProbe, "metrics must not take a pod out of the Service")
	for _, e := range m.Env {
		if e.Name == "PGBOUNCER_PASSWORD" {
			assert.Empty(t, e.Value, "the password comes from the Secret, never literally")
			assert.Equal(t, "app-pool-auth", e.ValueFrom.SecretKeyRef.Name)
		}
		if e.Name == "PGBOUNCER_USER" {
			assert.Equal(t, "deckhand_pooler_app-pool", e.Value)
		}
	}
	assert.True(t, *m.SecurityContext.ReadOnlyRootFilesystem)

	d = deployment(p, Target{}, "img", "hash")
	addMetrics(p, d, "")
	assert.Len(t, d.Spec.Template.Spec.Containers, 1, "without the operator's image, no metrics")
}
