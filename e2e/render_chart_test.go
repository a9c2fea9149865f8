package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/pooler"
	"github.com/deckhand-dev/deckhand/operator/database/pooler/pgbouncer"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/mysqlcluster"
)

// everythingOn is every optional part of the chart switched on.
func everythingOn(t *testing.T, sets ...string) map[string]any {
	t.Helper()
	dir := ChartDir(t) + "/ci/"
	return Values(t, []string{dir + "monitoring-values.yaml", dir + "demo-values.yaml", dir + "replicas-2-values.yaml"},
		append([]string{"controllers.database.enabled=true", "controllers.jmxExporter.namespaces={team-a}"}, sets...)...)
}

// helmLimit is the longest release name Helm accepts.
const helmLimit = 53

func TestReleaseNamesUpToHelmsLimitKeepEveryNameWithin63(t *testing.T) {
	for _, n := range []int{47, helmLimit} {
		name := strings.Repeat("r", n-2) + "-x"
		for _, namespaced := range []string{"rbac.namespaced=false", "rbac.namespaced=true"} {
			r, err := testenv.RenderChart(t, ChartDir(t), name, strings.Repeat("n", 63), everythingOn(t, namespaced, "watchNamespaces={team-a}"))
			require.NoError(t, err, "a %d-character release name", n)
			seen := map[string]bool{}
			for _, o := range r.All() {
				key := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
				assert.LessOrEqual(t, len(o.GetName()), 63, key)
				assert.False(t, seen[key], "two objects named %s", key)
				seen[key] = true
				if o.GetKind() == "Service" {
					assert.Empty(t, validation.IsDNS1035Label(o.GetName()), key)
				}
				for k, v := range o.GetLabels() {
					assert.Empty(t, validation.IsValidLabelValue(v), "%s label %s=%s", key, k, v)
				}
			}
			// Suffixes survive the cut: a user still sees what each object is.
			svc := Into[corev1.Service](t, r.Operator(t, "Service"))
			assert.True(t, strings.HasSuffix(svc.Name, "-metrics"), svc.Name)
			// The Job's pods carry its name as a label value.
			require.Len(t, r.Tests, 1)
			assert.Empty(t, validation.IsValidLabelValue(r.Tests[0].GetName()))
		}
	}

	// Two long release names differing only at the end stay distinct.
	a := MustRenderNamed(t, strings.Repeat("r", 52)+"a").One(t, "Service").GetName()
	b := MustRenderNamed(t, strings.Repeat("r", 52)+"b").One(t, "Service").GetName()
	assert.NotEqual(t, a, b)

	_, err := testenv.RenderChart(t, ChartDir(t), strings.Repeat("r", helmLimit+1), ns, Values(t, nil))
	require.Error(t, err, "Helm's own limit: names beyond it are Helm's to refuse")
}

// MustRenderNamed renders the default values as release name.
func MustRenderNamed(t *testing.T, name string) *Rendered {
	t.Helper()
	r, err := testenv.RenderChart(t, ChartDir(t), name, ns, Values(t, nil))
	require.NoError(t, err)
	return r
}

func TestClusterRoleHasEachRuleOnce(t *testing.T) {
	r := MustRender(t, ns, Values(t, nil, "controllers.database.enabled=true", "controllers.jmxExporter.enabled=true", "controllers.jmxExporter.allNamespaces=true", "controllers.mysqlCluster.enabled=true"))
	role := Into[rbacv1.ClusterRole](t, r.One(t, "ClusterRole"))
	var rules []string
	events := 0
	for _, rule := range role.Rules {
		b, err := json.Marshal(rule)
		require.NoError(t, err)
		assert.NotContains(t, rules, string(b), "rule repeated")
		rules = append(rules, string(b))
		if slices.Contains(rule.Resources, "events") {
			events++
		}
	}
	assert.Equal(t, 1, events, "every controller records Events: one rule grants it")

	// The merge drops no rule: each controller's rules, rendered alone, are all there.
	for _, only := range onlyControllers() {
		alone := Into[rbacv1.ClusterRole](t, MustRender(t, ns, Values(t, nil, only...)).One(t, "ClusterRole"))
		for _, rule := range alone.Rules {
			assert.Contains(t, role.Rules, rule, only)
		}
	}
}

// onlyControllers is, for each controller, the sets enabling it alone.
func onlyControllers() [][]string {
	var out [][]string
	for _, key := range []string{"blogPost", "configMonitor", "tdset", "jmxExporter", "database", "mysqlCluster"} {
		var sets []string
		for _, other := range []string{"blogPost", "configMonitor", "tdset", "jmxExporter", "database", "mysqlCluster"} {
			sets = append(sets, "controllers."+other+".enabled="+boolString(other == key))
		}
		// pods/exec in every namespace must be asked for (least privilege).
		sets = append(sets, "controllers.jmxExporter.allNamespaces=true")
		out = append(out, sets)
	}
	return out
}

// operatorMetricNames are the metric names the controllers register
// (Name: "deckhand_..." in their metrics.go, and those of the two kinds on
// the shared database code).
func operatorMetricNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.Root(t), "operator", "*", "metrics.go"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	names := append(database.DatabaseKind.MetricNames(), mysqlcluster.Kind.MetricNames()...)
	// PostgreSQL's own, from the collector in the Database pods.
	names = append(names, instance.MetricNames...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`Name:\s+"(deckhand_[a-z_]+)"`).FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
	}
	return names
}

var deckhandMetric = regexp.MustCompile(`\bdeckhand_[a-z_]+`)

// assertKnownMetrics fails for a deckhand_ metric in text that no
// controller defines (histograms add _bucket, _sum, _count).
func assertKnownMetrics(t *testing.T, text, where string) {
	t.Helper()
	known := operatorMetricNames(t)
	found := deckhandMetric.FindAllString(text, -1)
	require.NotEmpty(t, found, where)
	for _, m := range found {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suffix); ok && slices.Contains(known, b) {
				base = b
			}
		}
		assert.Contains(t, known, base, "%s uses a metric no controller defines", where)
	}
}

// assertPgBouncerMetrics: every pgbouncer_* name in text is one the
// Pooler pods' metrics container serves.
func assertPgBouncerMetrics(t *testing.T, text, where string) {
	t.Helper()
	descs := make(chan *prometheus.Desc, 64)
	(&pgbouncer.Collector{}).Describe(descs)
	close(descs)
	var known []string
	for d := range descs {
		known = append(known, regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1])
	}
	found := regexp.MustCompile(`pgbouncer_[a-z_]+`).FindAllString(text, -1)
	require.NotEmpty(t, found, where)
	for _, m := range found {
		assert.Contains(t, known, m, "%s uses a metric the PgBouncer pods do not serve", where)
	}
}

func TestMonitoringObjectsAreOffByDefaultAndRenderWhenAskedFor(t *testing.T) {
	kinds := []string{"ServiceMonitor", "PrometheusRule", "NetworkPolicy"}
	def := MustRender(t, ns, Values(t, nil))
	for _, k := range kinds {
		assert.Empty(t, def.Kind(k), k)
	}
	assert.Len(t, def.Kind("ConfigMap"), 1, "no dashboard by default")

	on := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/monitoring-values.yaml"}))
	svc := Into[corev1.Service](t, on.One(t, "Service"))

	sm := on.One(t, "ServiceMonitor")
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		assert.Equal(t, v, svc.Labels[k], "the ServiceMonitor selects the metrics Service")
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	require.Len(t, endpoints, 1)
	assert.Equal(t, "metrics", endpoints[0].(map[string]any)["port"])
	assert.Equal(t, "prometheus", sm.GetLabels()["release"], "metrics.serviceMonitor.labels")

	rule := on.One(t, "PrometheusRule")
	assert.Equal(t, "prometheus", rule.GetLabels()["release"])
	alerts := alertsOf(t, rule)
	databaseAlerts := []string{"DeckhandDatabaseBackupOverdue", "DeckhandDatabaseBackupNeverSucceeded", "DeckhandDatabaseBackupFailed",
		"DeckhandDatabaseVerifiedBackupTooOld", "DeckhandDatabaseBackupVerificationFailed", "DeckhandDatabaseFailoverIncomplete",
		"DeckhandDatabaseWALArchivingFailing", "DeckhandDatabaseWALBacklogExceedsFreeSpace", "DeckhandDatabaseBaseBackupVerificationFailed",
		"DeckhandDatabaseServerCertificateExpiringSoon"}
	postgresAlerts := []string{"DeckhandPostgresDown", "DeckhandPostgresReplicationLagHigh", "DeckhandPostgresStandbyNotStreaming",
		"DeckhandPostgresXIDAgeHigh", "DeckhandPostgresConnectionsNearLimit"}
	pgbouncerAlerts := []string{"DeckhandPgBouncerDown", "DeckhandPgBouncerClientsWaiting"}
	assert.ElementsMatch(t, append(append(append([]string{"DeckhandReconcileErrors", "DeckhandConfigMonitorRestartFailing", "DeckhandJMXExporterAttachFailing"},
		databaseAlerts...), postgresAlerts...), pgbouncerAlerts...), keys(alerts))
	for name, expr := range alerts {
		if slices.Contains(pgbouncerAlerts, name) {
			// Scraped from the Poolers' pods.
			assert.NotContains(t, expr, `service="`, name)
			assertPgBouncerMetrics(t, expr, name)
			continue
		}
		if slices.Contains(postgresAlerts, name) {
			// Scraped from the Database pods, not the operator's Service.
			assert.NotContains(t, expr, `service="`, name)
			assertKnownMetrics(t, expr, name)
			continue
		}
		assert.Contains(t, expr, `service="`+svc.Name+`"`, name)
		assert.Contains(t, expr, `namespace="`+ns+`"`, name)
	}
	assertKnownMetrics(t, alerts["DeckhandConfigMonitorRestartFailing"]+alerts["DeckhandJMXExporterAttachFailing"], "PrometheusRule")
	assert.Contains(t, alerts["DeckhandJMXExporterAttachFailing"], `result="Failed"`, "the attaches counter's failure result")
	for _, name := range databaseAlerts {
		assertKnownMetrics(t, alerts[name], "PrometheusRule")
	}
	// Once scraped, the Database metrics' own namespace label is
	// exported_namespace (the target's namespace is the operator's).
	assert.Contains(t, alerts["DeckhandDatabaseBackupOverdue"], "> 90000", "metrics.prometheusRule.databaseBackupMaxAgeSeconds")
	assert.Contains(t, alerts["DeckhandDatabaseBackupOverdue"], "on (exported_namespace, database)")
	assert.Contains(t, alerts["DeckhandDatabaseBackupFailed"], `result="failed"`, "the backups counter's failure result")
	assert.Contains(t, alerts["DeckhandDatabaseVerifiedBackupTooOld"], "deckhand_database_backup_verified_stale", "the BackupVerified condition's gauge")
	assert.Contains(t, alerts["DeckhandDatabaseBackupVerificationFailed"], `result=~"failed|error"`, "the verifications counter's results")
	assert.Contains(t, alerts["DeckhandDatabaseFailoverIncomplete"], "deckhand_database_failover_pending", "the gauge of a primary gone and not replaced")

	// Alerts follow the controllers: none for a controller the release does not run.
	noJMX := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/monitoring-values.yaml"}, "controllers.jmxExporter.enabled=false", "controllers.configMonitor.enabled=false", "controllers.database.enabled=false"))
	assert.ElementsMatch(t, []string{"DeckhandReconcileErrors"}, keys(alertsOf(t, noJMX.One(t, "PrometheusRule"))))

	var dashboard *corev1.ConfigMap
	for _, o := range on.Kind("ConfigMap") {
		if o.GetLabels()["app.kubernetes.io/component"] == "dashboard" {
			dashboard = Into[corev1.ConfigMap](t, o)
		}
	}
	require.NotNil(t, dashboard, "no dashboard ConfigMap")
	assert.Equal(t, "1", dashboard.Labels["grafana_dashboard"], "Grafana's sidecar label")
	var board struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(dashboard.Data["deckhand.json"]), &board))
	assert.Equal(t, "deckhand operator", board.Title)
	require.NotEmpty(t, board.Panels)
	var exprs []string
	for _, p := range board.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	assertKnownMetrics(t, strings.Join(exprs, "\n"), "the dashboard")
	assert.Contains(t, strings.Join(exprs, "\n"), "deckhand_database_failovers_total", "the dashboard shows failovers")
	assertPgBouncerMetrics(t, strings.Join(exprs, "\n"), "the dashboard")

	np := Into[networkingv1.NetworkPolicy](t, on.One(t, "NetworkPolicy"))
	var ports []int32
	for _, p := range np.Spec.Ingress[0].Ports {
		ports = append(ports, p.Port.IntVal)
	}
	assert.ElementsMatch(t, []int32{8080, 8081}, ports)

	// Without metrics they have nothing to work on: not rendered, and the notes say so.
	off := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/monitoring-values.yaml"}, "metrics.enabled=false"))
	for _, k := range []string{"ServiceMonitor", "PrometheusRule", "Service"} {
		assert.Empty(t, off.Kind(k), k)
	}
	assert.Empty(t, off.Tests, "helm test reaches the operator through the metrics Service")
	for _, v := range []string{"metrics.serviceMonitor.enabled", "metrics.prometheusRule.enabled", "metrics.grafanaDashboard.enabled", "helmTest.enabled"} {
		assert.Contains(t, off.Notes, v+" does nothing with metrics.enabled=false")
	}
}

func alertsOf(t *testing.T, rule *unstructured.Unstructured) map[string]string {
	t.Helper()
	groups, _, err := unstructured.NestedSlice(rule.Object, "spec", "groups")
	require.NoError(t, err)
	out := map[string]string{}
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			r := r.(map[string]any)
			out[r["alert"].(string)] = r["expr"].(string)
			assert.NotEmpty(t, r["annotations"].(map[string]any)["description"], r["alert"])
		}
	}
	return out
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestPodValuesUsersExpect(t *testing.T) {
	r := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/monitoring-values.yaml"},
		"podSecurityContext.fsGroup=2000", "livenessProbe.periodSeconds=5", "readinessProbe.failureThreshold=6",
		"securityContext.readOnlyRootFilesystem=true"))
	d, c := operatorContainer(t, r)
	pod := d.Spec.Template.Spec
	assert.EqualValues(t, 2000, *pod.SecurityContext.FSGroup)
	assert.EqualValues(t, 65532, *pod.SecurityContext.RunAsUser, "a value added keeps the defaults")
	assert.EqualValues(t, 5, c.LivenessProbe.PeriodSeconds)
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	assert.EqualValues(t, 6, c.ReadinessProbe.FailureThreshold)

	require.Len(t, pod.TopologySpreadConstraints, 1)
	assert.Equal(t, d.Spec.Selector.MatchLabels, pod.TopologySpreadConstraints[0].LabelSelector.MatchLabels,
		"an empty labelSelector spreads the operator's own pods")
	withSelector := MustRender(t, ns, Values(t, nil, "topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=zone",
		"topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule", "topologySpreadConstraints[0].labelSelector.matchLabels.team=a"))
	d2, _ := operatorContainer(t, withSelector)
	assert.Equal(t, map[string]string{"team": "a"}, d2.Spec.Template.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels)

	assert.Contains(t, volumeNames(pod.Volumes), "cache")
	assert.Contains(t, pod.Volumes, corev1.Volume{Name: "config", VolumeSource: pod.Volumes[0].VolumeSource}, "the chart's own volumes stay")
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.Name+":"+m.MountPath)
	}
	assert.Subset(t, mounts, []string{"config:/etc/deckhand", "tmp:/tmp", "cache:/var/cache/deckhand"})

	for name, tc := range map[string]struct{ set, want string }{
		"probe field":      {"livenessProbe.httpGett.path=/x", "httpGett"},
		"volume field":     {"extraVolumes[0].nmae=x", "nmae"},
		"mount field":      {"extraVolumeMounts[0].mountpath=/x", "mountpath"},
		"security field":   {"securityContext.runAsNonroot=true", "runAsNonroot"},
		"spread field":     {"topologySpreadConstraints[0].maxskew=1", "maxskew"},
		"pod security typ": {"podSecurityContext.runAsUser=nobody", "runAsUser"},
	} {
		t.Run(name, func(t *testing.T) {
			err := renderErr(t, tc.set)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func volumeNames(vs []corev1.Volume) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

func TestHelmTestJobProbesTheOperatorThroughItsService(t *testing.T) {
	r := MustRender(t, ns, Values(t, nil))
	require.Len(t, r.Tests, 1)
	job := Into[batchv1.Job](t, r.Tests[0])
	assert.Equal(t, "test", job.Annotations["helm.sh/hook"])
	svc := Into[corev1.Service](t, r.One(t, "Service"))
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	c := job.Spec.Template.Spec.Containers[0]
	host := svc.Name + "." + ns + ".svc"
	assert.Contains(t, c.Args, "--health=http://"+host+":8081")
	assert.Contains(t, c.Args, "--metrics=http://"+host+":8080/metrics")
	assert.Equal(t, map[string]int32{"metrics": 8080, "health": 8081}, ports)
	_, op := operatorContainer(t, r)
	assert.Equal(t, op.Image, c.Image, "the operator image's own binary")
	assert.Equal(t, op.SecurityContext, c.SecurityContext)
	assert.False(t, *job.Spec.Template.Spec.AutomountServiceAccountToken, "the probe needs no API access")

	for _, sets := range [][]string{{"metrics.enabled=false"}, {"replicaCount=0"}, {"helmTest.enabled=false"}} {
		assert.Empty(t, MustRender(t, ns, Values(t, nil, sets...)).Tests, sets)
	}
}

// notesCommands are the NOTES lines a user pastes into a shell.
func notesCommands(notes string) []string {
	var out []string
	for _, line := range strings.Split(notes, "\n") {
		l := strings.TrimSpace(line)
		for _, prefix := range []string{"kubectl ", "helm ", "CHART="} {
			if strings.HasPrefix(l, prefix) {
				out = append(out, l)
			}
		}
	}
	return out
}

func TestNotesCommandsWorkWhenPasted(t *testing.T) {
	demo := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/demo-values.yaml"}))
	cmds := notesCommands(demo.Notes)
	require.NotEmpty(t, cmds)
	script := strings.Join(cmds, "\n") + "\n"
	out, err := exec.Command("bash", "-n", "-c", script).CombinedOutput()
	require.NoError(t, err, "bash cannot parse the notes' commands: %s\n%s", out, script)
	for _, c := range cmds {
		assert.NotRegexp(t, `<[a-z]`, c, "a placeholder the shell reads as a redirection")
		if strings.Contains(c, "port-forward") {
			assert.Contains(t, c, "until curl", "curl waits for the forward to listen")
		}
	}
	assert.Contains(t, script, "logs deploy/deckhand")
	assert.Contains(t, script, "helm -n "+ns+" test deckhand")
	assert.Contains(t, script, "get crds -l app.kubernetes.io/instance=deckhand")
	assert.Contains(t, demo.Notes, "--take-ownership")

	zero := MustRender(t, ns, Values(t, nil, "replicaCount=0", "crds.enabled=false"))
	assert.NotContains(t, zero.Notes, "kubectl -n "+ns+" logs", "kubectl logs would wait for a pod that never comes")
	assert.NotContains(t, zero.Notes, "helm -n "+ns+" test")
	assert.NotContains(t, zero.Notes, "get crds", "no CRDs in this release")
	assert.Contains(t, zero.Notes, "replicaCount=0: no operator pod runs")

	for sets, want := range map[string][]string{
		"crds.enabled=false,crds.installAll=true":                                                      {"crds.installAll does nothing with crds.enabled=false"},
		"demo.enabled=true,controllers.blogPost.enabled=false,controllers.configMonitor.enabled=false": {"demo.enabled does nothing"},
		"metrics.enabled=false,metrics.serviceMonitor.enabled=true":                                    {"metrics.serviceMonitor.enabled does nothing with metrics.enabled=false"},
	} {
		notes := MustRender(t, ns, Values(t, nil, strings.Split(sets, ",")...)).Notes
		for _, w := range want {
			assert.Contains(t, notes, w, sets)
		}
	}
	assert.NotContains(t, MustRender(t, ns, Values(t, nil)).Notes, "do nothing", "the defaults are all in use")
}

// PostgreSQL's own metrics: with the values that render the ServiceMonitor
// and the Database controller, a PodMonitor scrapes the Database pods'
// port "metrics" in every namespace (or the watched ones), labelling each
// target with its Database; the PrometheusRule alerts on replication lag,
// a standby not streaming, XID age and connections near max_connections,
// with the thresholds' values; the dashboard has server panels. Without
// the Database controller, or without the ServiceMonitor's values, there is
// no PodMonitor.
func TestPostgresPodMonitorAlertsAndPanelsRenderWithMonitoringOn(t *testing.T) {
	on := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/monitoring-values.yaml"},
		"metrics.prometheusRule.postgresReplicationLagBytes=1000", "metrics.prometheusRule.postgresXIDAge=12345",
		"metrics.prometheusRule.postgresReplicationLagSeconds=42"))
	require.Len(t, on.Kind("PodMonitor"), 2, "PostgreSQL's and PgBouncer's")
	pm := podMonitorNamed(t, on, "postgres")
	assert.Equal(t, "prometheus", pm.GetLabels()["release"], "metrics.serviceMonitor.labels")
	selector, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	assert.Equal(t, map[string]string{database.LabelComponent: "server"}, selector)
	exprs, _, _ := unstructured.NestedSlice(pm.Object, "spec", "selector", "matchExpressions")
	require.Len(t, exprs, 1)
	assert.Equal(t, database.LabelDatabase, exprs[0].(map[string]any)["key"])
	anyNS, _, _ := unstructured.NestedBool(pm.Object, "spec", "namespaceSelector", "any")
	assert.True(t, anyNS, "every namespace, as the operator watches")
	endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	require.Len(t, endpoints, 1)
	ep := endpoints[0].(map[string]any)
	assert.Equal(t, instance.MetricsPortName, ep["port"])
	assert.Equal(t, "/metrics", ep["path"])
	relabel := ep["relabelings"].([]any)[0].(map[string]any)
	assert.Equal(t, "database", relabel["targetLabel"])
	assert.Equal(t, []any{"__meta_kubernetes_pod_label_stable_imaginedata_co_database"}, relabel["sourceLabels"])

	alerts := alertsOf(t, on.One(t, "PrometheusRule"))
	assert.Contains(t, alerts["DeckhandPostgresReplicationLagHigh"], "deckhand_pg_replication_lag_bytes")
	assert.Contains(t, alerts["DeckhandPostgresReplicationLagHigh"], "> 1000")
	assert.Contains(t, alerts["DeckhandPostgresReplicationLagHigh"], "> 42")
	assert.Contains(t, alerts["DeckhandPostgresXIDAgeHigh"], "deckhand_pg_database_xid_age > 12345")
	assert.Contains(t, alerts["DeckhandPostgresConnectionsNearLimit"], "deckhand_pg_max_connections")
	assert.Contains(t, alerts["DeckhandPostgresConnectionsNearLimit"], "> 0.9", "metrics.prometheusRule.postgresConnectionsRatio")
	assert.Contains(t, alerts["DeckhandPostgresStandbyNotStreaming"], "deckhand_pg_standby_streaming == 0")

	var dashboard *corev1.ConfigMap
	for _, o := range on.Kind("ConfigMap") {
		if o.GetLabels()["app.kubernetes.io/component"] == "dashboard" {
			dashboard = Into[corev1.ConfigMap](t, o)
		}
	}
	require.NotNil(t, dashboard)
	for _, m := range []string{"deckhand_pg_up", "deckhand_pg_replication_lag_bytes", "deckhand_pg_connections", "deckhand_pg_max_connections",
		"deckhand_pg_wal_bytes_total", "deckhand_pg_database_xid_age", "deckhand_pg_database_dead_tuples", "deckhand_pg_checkpoints_timed_total",
		"deckhand_pg_database_size_bytes", "deckhand_pg_archiver_archived_total"} {
		assert.Contains(t, dashboard.Data["deckhand.json"], m, "a server panel of the dashboard")
	}

	// PgBouncer's: the Poolers' PgBouncer pods (not their setup Jobs'),
	// labelled with their Pooler; its alerts.
	bouncers := podMonitorNamed(t, on, "pgbouncer")
	selector, _, _ = unstructured.NestedStringMap(bouncers.Object, "spec", "selector", "matchLabels")
	assert.Equal(t, map[string]string{database.LabelComponent: "pgbouncer"}, selector)
	exprs, _, _ = unstructured.NestedSlice(bouncers.Object, "spec", "selector", "matchExpressions")
	require.Len(t, exprs, 1)
	assert.Equal(t, pooler.LabelPooler, exprs[0].(map[string]any)["key"])
	endpoints, _, _ = unstructured.NestedSlice(bouncers.Object, "spec", "podMetricsEndpoints")
	require.Len(t, endpoints, 1)
	ep = endpoints[0].(map[string]any)
	assert.Equal(t, pooler.MetricsPortName, ep["port"])
	relabel = ep["relabelings"].([]any)[0].(map[string]any)
	assert.Equal(t, "pooler", relabel["targetLabel"])
	assert.Equal(t, []any{"__meta_kubernetes_pod_label_stable_imaginedata_co_pooler"}, relabel["sourceLabels"])
	assert.Contains(t, alerts["DeckhandPgBouncerDown"], "pgbouncer_up == 0")
	assert.Contains(t, alerts["DeckhandPgBouncerClientsWaiting"], "pgbouncer_pools_client_maxwait_seconds) > 5", "metrics.prometheusRule.pgbouncerClientWaitSeconds")

	watched := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/monitoring-values.yaml"}, "watchNamespaces={apps,billing}"))
	for _, which := range []string{"postgres", "pgbouncer"} {
		names, _, _ := unstructured.NestedStringSlice(podMonitorNamed(t, watched, which).Object, "spec", "namespaceSelector", "matchNames")
		assert.Equal(t, []string{"apps", "billing"}, names, which)
	}

	for _, set := range []string{"controllers.database.enabled=false", "metrics.serviceMonitor.enabled=false", "metrics.enabled=false"} {
		r := MustRender(t, ns, Values(t, []string{ChartDir(t) + "/ci/monitoring-values.yaml"}, set))
		assert.Empty(t, r.Kind("PodMonitor"), set)
	}
}

// podMonitorNamed is the rendered PodMonitor whose name ends in -suffix.
func podMonitorNamed(t *testing.T, r *Rendered, suffix string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range r.Kind("PodMonitor") {
		if strings.HasSuffix(o.GetName(), "-"+suffix) {
			return o
		}
	}
	require.Failf(t, "no PodMonitor", "none named *-%s", suffix)
	return nil
}
