package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/operator/manager"
)

// renderErr renders the default chart with sets and returns the error.
func renderErr(t *testing.T, sets ...string) error {
	t.Helper()
	_, err := Render(t, ChartDir(t), ns, Values(t, nil, sets...))
	return err
}

func TestServiceAccountCreateFalseNeverBindsTheDefaultAccount(t *testing.T) {
	for name, tc := range map[string]struct {
		sets []string
		want string
	}{
		"no name: the release's full name": {[]string{"serviceAccount.create=false"}, "deckhand"},
		"a name":                           {[]string{"serviceAccount.create=false", "serviceAccount.name=ops"}, "ops"},
		"namespaced RBAC": {
			[]string{"serviceAccount.create=false", "rbac.namespaced=true", "watchNamespaces={team-a}"}, "deckhand",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := MustRender(t, ns, Values(t, nil, tc.sets...))
			assert.Empty(t, r.Kind("ServiceAccount"), "serviceAccount.create=false created one")
			d, _ := operatorContainer(t, r)
			assert.Equal(t, tc.want, d.Spec.Template.Spec.ServiceAccountName)
			bindings := append(r.Kind("ClusterRoleBinding"), r.Kind("RoleBinding")...)
			require.NotEmpty(t, bindings)
			for _, b := range bindings {
				for _, s := range Into[rbacv1.ClusterRoleBinding](t, b).Subjects {
					assert.Equal(t, tc.want, s.Name, "%s %s binds %s/%s", b.GetKind(), b.GetName(), s.Namespace, s.Name)
				}
			}
		})
	}
}

// chartManagedConfigKeys are the config-file keys the chart writes from its
// own values, over renders that set each of them.
func chartManagedConfigKeys(t *testing.T) []string {
	t.Helper()
	keys := map[string]bool{}
	for _, sets := range [][]string{
		nil,
		{"excludeNamespaces={b}"}, // not with watchNamespaces
		{"watchNamespaces={a}", "controllers.configMonitor.secrets=false",
			"controllers.jmxExporter.enabled=true", "controllers.jmxExporter.namespaces={a}",
			"controllers.database.enabled=true", "controllers.database.failoverByDefault=false", "controllers.database.tlsByDefault=false",
			"controllers.database.monitoringByDefault=false",
			"controllers.mysqlCluster.enabled=true", "controllers.mysqlCluster.tlsByDefault=false",
			"controllers.database.archiverImage=example.org/archiver:1", "controllers.database.poolerImage=example.org/pgbouncer:1"},
	} {
		for k := range configFile(t, MustRender(t, ns, Values(t, nil, sets...))) {
			keys[k] = true
		}
	}
	return slices.Sorted(maps.Keys(keys))
}

// sampleValue is a valid --set value for a flag of the operator.
func sampleValue(t *testing.T, f *pflag.Flag) string {
	switch f.Value.Type() {
	case "bool":
		return "true"
	case "int", "float32", "float64":
		return "7"
	case "duration":
		return "35s"
	case "stringSlice":
		return "{a,b}"
	case "string":
		return "x"
	}
	t.Fatalf("no sample value for flag --%s of type %s", f.Name, f.Value.Type())
	return ""
}

func TestConfigTakesTheOperatorsFlagsButNotTheOnesTheChartSets(t *testing.T) {
	managed := chartManagedConfigKeys(t)
	require.Contains(t, managed, "leader-elect")
	require.Contains(t, managed, "watch-namespaces")
	require.Contains(t, managed, "exclude-namespaces")
	require.Contains(t, managed, "configmonitor-ignore-secrets")
	require.Contains(t, managed, "database-failover-default")
	require.Contains(t, managed, "database-tls-default")
	require.Contains(t, managed, "database-monitoring-default")
	refused := append(managed, "kubeconfig", "config", "leader-election-namespace", "controllers")

	manager.Flags().VisitAll(func(f *pflag.Flag) {
		set := "config." + f.Name + "=" + sampleValue(t, f)
		err := renderErr(t, set)
		if slices.Contains(refused, f.Name) {
			require.Error(t, err, set)
			assert.Contains(t, err.Error(), "config."+f.Name+" is set by the chart: use ", set)
			return
		}
		require.NoError(t, err, "%s: every operator flag the chart does not set is a config key", set)
		assert.NotNil(t, configFile(t, MustRender(t, ns, Values(t, nil, set)))[f.Name], set)
	})

	for set, want := range map[string]string{
		"config.kube-api-qsp=100":                  "additional properties 'kube-api-qsp' not allowed",
		"config.kube-api-burst=lots":               "got string, want integer",
		"config.graceful-shutdown-timeout=forever": "graceful-shutdown-timeout",
		"config.leader-elect=false":                "use leaderElection.enabled",
		"config.metrics-bind-address=:9090":        "use metrics.port",
		"config.log-level=trace":                   "use logLevel",
	} {
		err := renderErr(t, "replicaCount=2", set)
		require.Error(t, err, set)
		assert.Contains(t, err.Error(), want, set)
	}
}

func TestListItemsAreTypedWithKubernetesFields(t *testing.T) {
	for _, set := range []string{
		"tolerations[0].keyy=dedicated",
		"tolerations[0].operator=Exist",
		"imagePullSecrets[0].nmae=registry",
		"extraEnv[0].name=A,extraEnv[0].valu=1",
		"extraEnv[0].name=A,extraEnv[0].valueFrom.secretKeyRef.nmae=s",
		"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].kye=zone",
		"resources.limit.memory=1Gi",
	} {
		err := renderErr(t, strings.Split(set, ",")...)
		require.Error(t, err, "%s was accepted", set)
		assert.Contains(t, err.Error(), "values don't meet the specifications of the schema", set)
	}

	r := MustRender(t, ns, Values(t, nil,
		"tolerations[0].key=dedicated", "tolerations[0].operator=Exists", "tolerations[0].effect=NoSchedule",
		"imagePullSecrets[0].name=registry",
		"extraEnv[0].name=GOMEMLIMIT", "extraEnv[0].valueFrom.resourceFieldRef.resource=limits.memory",
		"resources.limits.cpu=1",
	))
	d, c := operatorContainer(t, r)
	require.Len(t, d.Spec.Template.Spec.Tolerations, 3, "the user's, then the chart's two of a lost node")
	assert.Equal(t, "dedicated", d.Spec.Template.Spec.Tolerations[0].Key)
	assert.Equal(t, "registry", d.Spec.Template.Spec.ImagePullSecrets[0].Name)
	assert.Equal(t, "limits.memory", c.Env[len(c.Env)-1].ValueFrom.ResourceFieldRef.Resource)
	assert.Equal(t, "1", c.Resources.Limits.Cpu().String())
}

func TestClusterScopedNamesIncludeTheReleaseNamespace(t *testing.T) {
	names := func(namespace string, sets ...string) []string {
		r := MustRender(t, namespace, Values(t, nil, sets...))
		role, binding := r.One(t, "ClusterRole"), Into[rbacv1.ClusterRoleBinding](t, r.One(t, "ClusterRoleBinding"))
		assert.Equal(t, role.GetName(), binding.RoleRef.Name)
		assert.Equal(t, namespace, binding.Subjects[0].Namespace)
		assert.LessOrEqual(t, len(role.GetName()), 63, role.GetName())
		assert.LessOrEqual(t, len(binding.GetName()), 63, binding.GetName())
		return []string{role.GetName(), binding.GetName()}
	}
	a, b := names("team-a"), names("team-b")
	assert.Equal(t, []string{"team-a-deckhand", "team-a-deckhand"}, a)
	assert.NotEqual(t, a, b, "the same release name in two namespaces collides")

	// Long names are cut to 63 characters and stay distinct.
	long := strings.Repeat("n", 60)
	la, lb := names(long+"-a", "fullnameOverride=operator"), names(long+"-b", "fullnameOverride=operator")
	assert.NotEqual(t, la, lb)

	// Roles in watched namespaces too: two releases may watch one namespace.
	role := func(namespace string) string {
		r := MustRender(t, namespace, Values(t, nil, "rbac.namespaced=true", "watchNamespaces={shared}"))
		for _, o := range r.Kind("Role") {
			if o.GetNamespace() == "shared" {
				return o.GetName()
			}
		}
		t.Fatal("no Role in the watched namespace")
		return ""
	}
	assert.NotEqual(t, role("team-a"), role("team-b"))
}

func TestPodLabelsCannotTouchTheSelector(t *testing.T) {
	for _, key := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} {
		err := renderErr(t, "podLabels."+strings.ReplaceAll(key, ".", `\.`)+"=mine")
		require.Error(t, err, key)
		assert.Contains(t, err.Error(), "podLabels."+key+": a selector label", key)
	}

	r := MustRender(t, ns, Values(t, nil, "podLabels.team=payments", `podLabels.app\.kubernetes\.io/version=custom`))
	d := Into[appsv1.Deployment](t, r.Operator(t, "Deployment"))
	sel, err := labels.ValidatedSelectorFromSet(d.Spec.Selector.MatchLabels)
	require.NoError(t, err)
	assert.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)))
	assert.Equal(t, "payments", d.Spec.Template.Labels["team"])
	assert.Equal(t, "custom", d.Spec.Template.Labels["app.kubernetes.io/version"], "podLabels may change a label that is not a selector")
}

func TestHealthProbeAndMetricsNeedTwoPorts(t *testing.T) {
	err := renderErr(t, "healthProbe.port=8080")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "metrics.port and healthProbe.port are both 8080")
	require.NoError(t, renderErr(t, "healthProbe.port=8080", "metrics.enabled=false"), "no metrics listener, no clash")
	require.NoError(t, renderErr(t, fmt.Sprintf("healthProbe.port=%d", 9443)))
}

// Only an explicit controllers.database.failoverByDefault=false reaches
// the operator's config. Unset, as after helm upgrade --reuse-values from
// a chart without the value (helm then keeps the old chart's values), the
// operator keeps its default: failover on for new Databases.
func TestDatabaseFailoverDefaultIsTurnedOffOnlyByAnExplicitFalse(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want any
	}{
		{"controllers.database.failoverByDefault=false", false},
		{"controllers.database.failoverByDefault=true", nil},
		{"controllers.database.failoverByDefault=null", nil},
	} {
		got := configFile(t, MustRender(t, ns, Values(t, nil, "controllers.database.enabled=true", tc.set)))
		assert.Equal(t, tc.want, got["database-failover-default"], tc.set)
	}
}

// The same for controllers.database.tlsByDefault and
// controllers.mysqlCluster.tlsByDefault: TLS for new Databases and
// MySQLClusters.
func TestTLSDefaultsAreTurnedOffOnlyByAnExplicitFalse(t *testing.T) {
	for _, c := range []struct{ controller, flag string }{
		{"database", "database-tls-default"},
		{"mysqlCluster", "mysqlcluster-tls-default"},
	} {
		for _, tc := range []struct {
			set  string
			want any
		}{
			{"controllers." + c.controller + ".tlsByDefault=false", false},
			{"controllers." + c.controller + ".tlsByDefault=true", nil},
			{"controllers." + c.controller + ".tlsByDefault=null", nil},
		} {
			got := configFile(t, MustRender(t, ns, Values(t, nil, "controllers."+c.controller+".enabled=true", tc.set)))
			assert.Equal(t, tc.want, got[c.flag], tc.set)
		}
	}
}

// The same for controllers.database.monitoringByDefault: PostgreSQL's
// metrics for new Databases.
func TestDatabaseMonitoringDefaultIsTurnedOffOnlyByAnExplicitFalse(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want any
	}{
		{"controllers.database.monitoringByDefault=false", false},
		{"controllers.database.monitoringByDefault=true", nil},
		{"controllers.database.monitoringByDefault=null", nil},
	} {
		got := configFile(t, MustRender(t, ns, Values(t, nil, "controllers.database.enabled=true", tc.set)))
		assert.Equal(t, tc.want, got["database-monitoring-default"], tc.set)
	}
}

// The operator's pods leave a node that stops answering 5 s after it is
// marked so (nodeLossTolerationSeconds), not Kubernetes' 300 s; a
// toleration of the user's for one of those taints replaces the chart's
// for it, a key-less Exists replaces both, and null leaves Kubernetes'.
func TestTheOperatorLeavesALostNodeWithinNodeLossTolerationSeconds(t *testing.T) {
	tolerations := func(sets ...string) []corev1.Toleration {
		d, _ := operatorContainer(t, MustRender(t, ns, Values(t, nil, sets...)))
		return d.Spec.Template.Spec.Tolerations
	}
	lost := func(key string, seconds int64) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(seconds)}
	}
	assert.Equal(t, []corev1.Toleration{lost(corev1.TaintNodeUnreachable, 5), lost(corev1.TaintNodeNotReady, 5)}, tolerations())
	assert.Equal(t, []corev1.Toleration{lost(corev1.TaintNodeUnreachable, 30), lost(corev1.TaintNodeNotReady, 30)},
		tolerations("nodeLossTolerationSeconds=30"))
	assert.Equal(t, []corev1.Toleration{lost(corev1.TaintNodeUnreachable, 600), lost(corev1.TaintNodeNotReady, 5)},
		tolerations("tolerations[0].key=node.kubernetes.io/unreachable", "tolerations[0].operator=Exists",
			"tolerations[0].effect=NoExecute", "tolerations[0].tolerationSeconds=600"))
	assert.Equal(t, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, tolerations("tolerations[0].operator=Exists"))
	assert.Empty(t, tolerations("nodeLossTolerationSeconds=null"))
	err := renderErr(t, "nodeLossTolerationSeconds=-1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nodeLossTolerationSeconds")
}
