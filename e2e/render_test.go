package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/deckhand-dev/deckhand/operator"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

const ns = "deckhand-system"

func operatorContainer(t *testing.T, r *Rendered) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	d := Into[appsv1.Deployment](t, r.Operator(t, "Deployment"))
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	return d, d.Spec.Template.Spec.Containers[0]
}

func controllersFlag(t *testing.T, r *Rendered) []string {
	t.Helper()
	_, c := operatorContainer(t, r)
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--controllers="); ok {
			return strings.Split(v, ",")
		}
	}
	t.Fatalf("no --controllers flag in %v", c.Args)
	return nil
}

func configFile(t *testing.T, r *Rendered) map[string]any {
	t.Helper()
	cm := Into[corev1.ConfigMap](t, r.Operator(t, "ConfigMap"))
	cfg := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg))
	return cfg
}

func ruleResources(t *testing.T, r *Rendered, kind string) []string {
	t.Helper()
	var out []string
	for _, o := range r.Kind(kind) {
		for _, rule := range Into[rbacv1.ClusterRole](t, o).Rules {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					out = append(out, g+"/"+res)
				}
			}
		}
	}
	return out
}

// groupsOf is the set of API groups a controller serves.
func groupsOf(t *testing.T, c registration.Controller) map[string]bool {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, c.AddToScheme(s))
	groups := map[string]bool{}
	for gvk := range s.AllKnownTypes() {
		if gvk.Group != "" {
			groups[gvk.Group] = true
		}
	}
	return groups
}

func crdGroups(t *testing.T, r *Rendered) map[string]bool {
	t.Helper()
	groups := map[string]bool{}
	for _, o := range r.Kind("CustomResourceDefinition") {
		groups[Into[apiextensionsv1.CustomResourceDefinition](t, o).Spec.Group] = true
	}
	return groups
}

// onlyController enables exactly one controller.
func onlyController(t *testing.T, only registration.Controller) []string {
	var sets []string
	for _, c := range operator.Controllers {
		sets = append(sets, "controllers."+c.ValuesKey+".enabled="+boolString(c.Name == only.Name))
	}
	// pods/exec in every namespace must be asked for (least privilege).
	return append(sets, "controllers.jmxExporter.allNamespaces=true")
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func TestEveryCIValuesFileRendersARestrictedOperator(t *testing.T) {
	for _, file := range ciValuesFiles(t) {
		t.Run(shortName(file), func(t *testing.T) {
			r := MustRender(t, ns, Values(t, []string{file}))
			for _, o := range r.All() {
				labels := o.GetLabels()
				for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of", "helm.sh/chart"} {
					assert.NotEmpty(t, labels[k], "%s %s lacks label %s", o.GetKind(), o.GetName(), k)
				}
			}

			d, c := operatorContainer(t, r)
			pod := d.Spec.Template.Spec
			require.NotNil(t, pod.SecurityContext)
			assert.True(t, *pod.SecurityContext.RunAsNonRoot)
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
			sc := c.SecurityContext
			require.NotNil(t, sc)
			assert.False(t, *sc.AllowPrivilegeEscalation)
			assert.True(t, *sc.ReadOnlyRootFilesystem)
			assert.True(t, *sc.RunAsNonRoot)
			assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
			assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
			assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
			assert.Contains(t, c.Args, "--config=/etc/deckhand/config.yaml")
			assert.NotEmpty(t, d.Spec.Template.Annotations["checksum/config"])
			assert.NotEmpty(t, controllersFlag(t, r))
		})
	}
}

func TestEachControllerAloneHasOnlyItsFlagRulesAndCRDs(t *testing.T) {
	for _, only := range operator.Controllers {
		t.Run(only.Name, func(t *testing.T) {
			r := MustRender(t, ns, Values(t, nil, onlyController(t, only)...))
			assert.Equal(t, []string{only.Name}, controllersFlag(t, r))
			assert.Equal(t, groupsOf(t, only), crdGroups(t, r), "CRDs of other controllers rendered")

			rules := ruleResources(t, r, "ClusterRole")
			for g := range groupsOf(t, only) {
				assert.True(t, hasGroup(rules, g), "no rule for %s in %v", g, rules)
			}
			for _, other := range operator.Controllers {
				if other.Name == only.Name {
					continue
				}
				for g := range groupsOf(t, other) {
					assert.False(t, hasGroup(rules, g), "disabled %s left a rule for %s: %v", other.Name, g, rules)
				}
			}
		})
	}
}

func hasGroup(rules []string, group string) bool {
	for _, r := range rules {
		if strings.HasPrefix(r, group+"/") {
			return true
		}
	}
	return false
}

func TestOnlyBlogPostCannotTouchSecretsConfigMapsOrPods(t *testing.T) {
	r := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/only-blogpost-values.yaml"}))
	assert.Equal(t, []string{"blogpost"}, controllersFlag(t, r))
	for _, res := range ruleResources(t, r, "ClusterRole") {
		assert.NotContains(t, []string{"/secrets", "/configmaps", "/pods", "*/*"}, res)
	}
}

func TestConfigMonitorWithoutSecretsHasNoSecretRBAC(t *testing.T) {
	r := MustRender(t, ns, Values(t, nil))
	assert.Contains(t, ruleResources(t, r, "ClusterRole"), "/secrets", "by default monitors may watch a Secret")
	assert.NotContains(t, configFile(t, r), "configmonitor-ignore-secrets")

	for _, sets := range [][]string{
		{"controllers.configMonitor.secrets=false"},
		{"controllers.configMonitor.secrets=false", "rbac.namespaced=true", "watchNamespaces={team-a,team-b}"},
	} {
		r := MustRender(t, ns, Values(t, nil, sets...))
		rules := append(ruleResources(t, r, "ClusterRole"), ruleResources(t, r, "Role")...)
		assert.Contains(t, rules, "/configmaps", sets)
		assert.NotContains(t, rules, "/secrets", sets)
		assert.Equal(t, true, configFile(t, r)["configmonitor-ignore-secrets"], sets)
	}
}

func TestCRDToggles(t *testing.T) {
	r := MustRender(t, ns, Values(t, nil))
	crds := r.Kind("CustomResourceDefinition")
	require.NotEmpty(t, crds)
	for _, crd := range crds {
		assert.Equal(t, "keep", crd.GetAnnotations()["helm.sh/resource-policy"], crd.GetName())
	}

	r = MustRender(t, ns, Values(t, nil, "crds.keep=false"))
	for _, crd := range r.Kind("CustomResourceDefinition") {
		assert.NotContains(t, crd.GetAnnotations(), "helm.sh/resource-policy")
	}

	r = MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/crds-off-values.yaml"}))
	assert.Empty(t, r.Kind("CustomResourceDefinition"))
	assert.NotEmpty(t, r.Kind("Deployment"), "crds.enabled=false still installs the operator")

	// installAll keeps the CRD of a disabled controller.
	first := operator.Controllers[0]
	sets := append(onlyController(t, first), "crds.installAll=true")
	all := map[string]bool{}
	for _, c := range operator.Controllers {
		for g := range groupsOf(t, c) {
			all[g] = true
		}
	}
	assert.Equal(t, all, crdGroups(t, MustRender(t, ns, Values(t, nil, sets...))))
}

func TestReplicasTwoAddsLeaderElectionAndPDB(t *testing.T) {
	r := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/replicas-2-values.yaml"}))
	d, _ := operatorContainer(t, r)
	assert.EqualValues(t, 2, *d.Spec.Replicas)
	assert.Len(t, r.Kind("PodDisruptionBudget"), 1)
	assert.Equal(t, true, configFile(t, r)["leader-elect"])

	assert.Empty(t, MustRender(t, ns, Values(t, nil)).Kind("PodDisruptionBudget"), "no PDB for one replica")

	_, err := Render(t, ChartDir(t), ns, Values(t, nil, "replicaCount=2", "leaderElection.enabled=false"))
	require.ErrorContains(t, err, "replicaCount > 1 needs leaderElection.enabled=true")
}

func TestConfigChangeRollsTheOperator(t *testing.T) {
	a, _ := operatorContainer(t, MustRender(t, ns, Values(t, nil)))
	b, _ := operatorContainer(t, MustRender(t, ns, Values(t, nil, "logLevel=debug")))
	assert.NotEqual(t, a.Spec.Template.Annotations["checksum/config"], b.Spec.Template.Annotations["checksum/config"])
	assert.Equal(t, "debug", configFile(t, MustRender(t, ns, Values(t, nil, "logLevel=debug")))["log-level"])
}

func TestNamespacedRBAC(t *testing.T) {
	r := MustRender(t, ns, Values(t, nil, "rbac.namespaced=true", "watchNamespaces={team-a,team-b}"))
	assert.Empty(t, r.Kind("ClusterRole"))
	assert.Empty(t, r.Kind("ClusterRoleBinding"))
	var roleNamespaces []string
	for _, role := range r.Kind("Role") {
		roleNamespaces = append(roleNamespaces, role.GetNamespace())
	}
	assert.ElementsMatch(t, []string{"team-a", "team-b", ns}, roleNamespaces, "a Role per watched namespace plus leader election")
	assert.Equal(t, []any{"team-a", "team-b"}, configFile(t, r)["watch-namespaces"])

	_, err := Render(t, ChartDir(t), ns, Values(t, nil, "rbac.namespaced=true"))
	require.ErrorContains(t, err, "rbac.namespaced=true needs watchNamespaces")
}

func TestExcludedNamespacesReachTheOperatorsConfig(t *testing.T) {
	r := MustRender(t, ns, Values(t, nil, "excludeNamespaces={team-a,team-b}"))
	assert.Equal(t, []any{"team-a", "team-b"}, configFile(t, r)["exclude-namespaces"])
	assert.NotEmpty(t, r.Kind("ClusterRole"), "the operator still watches the other namespaces")
	assert.NotContains(t, configFile(t, MustRender(t, ns, Values(t, nil))), "exclude-namespaces")
}

func TestBadValuesAreRejectedReadably(t *testing.T) {
	for name, tc := range map[string]struct {
		sets []string
		want string
	}{
		"unknown key":        {[]string{"replicas=2"}, "additional properties 'replicas' not allowed"},
		"unknown controller": {[]string{"controllers.blogpost.enabled=true"}, "additional properties 'blogpost' not allowed"},
		"wrong type":         {[]string{"replicaCount=two"}, "got string, want integer"},
		"bad log level":      {[]string{"logLevel=loud"}, "logLevel"},
		"no controller":      {disableAll(), "enable at least one controller"},
		"watched and excluded namespaces": {[]string{"watchNamespaces={a}", "excludeNamespaces={b}"},
			"watchNamespaces and excludeNamespaces cannot both be set"},
		"bad excluded namespace": {[]string{"excludeNamespaces={Team_A}"}, "/excludeNamespaces/0': 'Team_A' does not match"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render(t, ChartDir(t), ns, Values(t, nil, tc.sets...))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func disableAll() []string {
	var sets []string
	for _, c := range operator.Controllers {
		sets = append(sets, "controllers."+c.ValuesKey+".enabled=false")
	}
	return sets
}

func TestDemoIsAHook(t *testing.T) {
	assert.Empty(t, MustRender(t, ns, Values(t, nil)).Hooks, "demo off by default")
	r := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/demo-values.yaml"}))
	require.NotEmpty(t, r.Hooks)
	for _, h := range r.Hooks {
		assert.Equal(t, "post-install,post-upgrade", h.GetAnnotations()["helm.sh/hook"], h.GetName())
	}
	assert.Contains(t, r.Notes, "get blogposts")

	// Seed 000's lab: the ConfigMonitor is a hook; its ConfigMap and app are not.
	var hooks []string
	for _, h := range r.Hooks {
		hooks = append(hooks, h.GetKind()+"/"+h.GetName())
	}
	assert.Contains(t, hooks, "ConfigMonitor/flakapp-config-monitor")
	var cm *corev1.ConfigMap
	for _, o := range r.Kind("ConfigMap") {
		if o.GetName() == "flaskapp-config" {
			cm = Into[corev1.ConfigMap](t, o)
		}
	}
	require.NotNil(t, cm, "no flaskapp-config ConfigMap")
	assert.Equal(t, "MSG=\"Welcome to Kubernetes!\"\n", cm.Data["config.cfg"])
	assert.Contains(t, r.Notes, "get cmon flakapp-config-monitor")

	// Without the ConfigMonitor controller there is no lab to show.
	off := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/demo-values.yaml"}, "controllers.configMonitor.enabled=false"))
	for _, o := range append(off.Objects, off.Hooks...) {
		assert.NotEqual(t, "frontend", o.GetName(), "the demo app without its controller")
	}
}

func TestJMXExporterGetsPodsExecOnlyWhereItRuns(t *testing.T) {
	off := MustRender(t, ns, Values(t, nil))
	assert.NotContains(t, ruleResources(t, off, "ClusterRole"), "/pods/exec", "pods/exec without the controller")

	on := MustRender(t, ns, Values(t, nil, "controllers.jmxExporter.enabled=true", "controllers.jmxExporter.allNamespaces=true"))
	assert.Contains(t, controllersFlag(t, on), "jmxexporter")
	assert.Contains(t, ruleResources(t, on, "ClusterRole"), "/pods/exec")
	assert.Equal(t, "/usr/local/lib/deckhand/jmx_prometheus_javaagent.jar", configFile(t, on)["jmxexporter-agent-jar"])

	limited := MustRender(t, ns, Values(t, nil, "controllers.jmxExporter.enabled=true", "controllers.jmxExporter.namespaces={team-a,team-b}"))
	assert.NotContains(t, ruleResources(t, limited, "ClusterRole"), "/pods/exec", "the ClusterRole keeps the other controllers' rules only")
	assert.Contains(t, ruleResources(t, limited, "ClusterRole"), "magalix.com/configmonitors")
	assert.Equal(t, []any{"team-a", "team-b"}, configFile(t, limited)["jmxexporter-namespaces"])
	var where []string
	for _, o := range limited.Kind("Role") {
		if strings.HasSuffix(o.GetName(), "-jmxexporter") {
			where = append(where, o.GetNamespace())
			assert.Contains(t, ruleResources(t, &Rendered{Objects: []*unstructured.Unstructured{o}}, "Role"), "/pods/exec")
		}
	}
	assert.ElementsMatch(t, []string{"team-a", "team-b"}, where)
}
