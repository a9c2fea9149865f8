package database_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// wait bounds how long a test waits for the cluster to get somewhere. It is
// a ceiling, not an expectation: under make test's peak load a three-pod
// StatefulSet's ordered start has taken 15 s to reach its last claim, a
// 30 s ceiling failed the seed sample's rollout once, and at the raced
// group's start (a 1-minute load of 20 on two cores) a claim stayed
// Pending for a minute.
const wait = 2 * time.Minute

// startOperator runs the Database controller for one namespace, as a
// ServiceAccount with the chart's RBAC for it.
// readyDatabase starts an operator for a new namespace, creates a
// Database of replicas there and waits until it is Ready.
func readyDatabase(t *testing.T, name string, replicas int32) (client.Client, string, *dbv1.Database) {
	t.Helper()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	db := newDatabase(ns, name, replicas)
	require.NoError(t, c.Create(context.Background(), db))
	waitFor(t, c, db, "Ready", ready)
	return c, ns, db
}

func startOperator(t *testing.T, ns string) {
	t.Helper()
	startOperatorAt(t, ns, nil)
}

// startOperatorAt is startOperator with now as the clock of schedules and
// retention.
func startOperatorAt(t *testing.T, ns string, now func() time.Time) {
	t.Helper()
	startOperatorWith(t, ns, database.Options{Now: now})
}

// startOperatorWith is startOperator with options (its namespace added).
func startOperatorWith(t *testing.T, ns string, o database.Options) {
	t.Helper()
	o.WatchNamespaces = []string{ns}
	if o.InstanceDial == nil {
		o.InstanceDial = testenv.NoPodDial
	}
	testenv.StartController(t, testenv.ChartRBACConfig(t, ns, database.Name), func(m ctrl.Manager) error {
		return database.Setup(m, o)
	}, ns)
	testenv.ReleaseNamespaceOnCleanup(t, ns, &dbv1.DatabaseList{}, &dbv1.DatabaseBackupList{})
}

// newDatabase is a Database for the kwok tests. Its backups are not
// verified (spec.backup.verify.mode Off): kwok ends every Job pod with
// exit 0 and no termination message, so a verification there could only
// end NoReport a minute later, with a Warning, a metric and a Job of its
// own in the middle of a test about something else. Verification is
// proven where its Job really runs: the HostRunner tests (postgres
// package, mysqlcluster) and the real node.
func newDatabase(ns, name string, replicas int32) *dbv1.Database {
	return &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: dbv1.DatabaseSpec{
			Name: "name-of-database", Port: 5432, StorageSize: "1Gi", Replicas: replicas,
			Backup: &dbv1.BackupSpec{Verify: &dbv1.BackupVerify{Mode: dbv1.VerifyOff}},
		},
	}
}

func get[T client.Object](t *testing.T, c client.Client, ns, name string, obj T) T {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj))
	}, wait, 100*time.Millisecond, "%T %s/%s never appeared", obj, ns, name)
	return obj
}

// update reads the Database into db, changes it and writes it back,
// again when the operator wrote it in between (its defaults, its
// finalizer).
func update(t *testing.T, c client.Client, db *dbv1.Database, change func(*dbv1.Database)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(db), db); err != nil {
			return err
		}
		change(db)
		return c.Update(context.Background(), db)
	}))
}

// waitFor polls the Database until check passes.
func waitFor(t *testing.T, c client.Client, db *dbv1.Database, what string, check func(*assert.CollectT, *dbv1.Database)) *dbv1.Database {
	t.Helper()
	var cur dbv1.Database
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(db), &cur))
		check(ct, &cur)
	}, wait, 100*time.Millisecond, "Database %s: %s", db.Name, what)
	return &cur
}

func condition(db *dbv1.Database, kind string) metav1.Condition {
	if c := meta.FindStatusCondition(db.Status.Conditions, kind); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func ready(ct *assert.CollectT, db *dbv1.Database) {
	require.Equal(ct, dbv1.PhaseReady, db.Status.Phase, "conditions: %+v", db.Status.Conditions)
	require.Equal(ct, metav1.ConditionTrue, condition(db, database.ConditionReady).Status)
}

// assertEvent waits for an Event of the kind and reason about the named
// object: the operator records Events after it writes status, so a test
// that just saw the status may not see the Event yet.
func assertEvent(t *testing.T, c client.Client, ns, name, kind, reason string) {
	t.Helper()
	assert.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.Contains(ct, eventReasons(ct, c, ns, name, kind), reason)
	}, wait, 200*time.Millisecond, "%s Event %s about %s", kind, reason, name)
}

func eventReasons(t require.TestingT, c client.Client, ns, name, kind string) []string {
	var evs eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &evs, client.InNamespace(ns)))
	var reasons []string
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Type == kind {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// seedSampleIn is examples/database.yaml, verbatim but for its namespace.
func seedSampleIn(t *testing.T, ns string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.Root(t), "examples", "database.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(b), "  namespace: default\n")
	file := filepath.Join(t.TempDir(), "database.yaml")
	require.NoError(t, os.WriteFile(file, []byte(strings.Replace(string(b), "namespace: default", "namespace: "+ns, 1)), 0o644))
	return file
}

func TestSeedSampleRunsThreeReplicasWithBoundVolumes(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)

	// The seed's file as it is (namespace default) is accepted.
	example := filepath.Join(testenv.Root(t), "examples", "database.yaml")
	out, err := testenv.Kubectl(t, "apply", "--dry-run=server", "-f", example)
	require.NoError(t, err, out)
	assert.Contains(t, out, "database.stable.imaginedata.co/my-first-crd-database created (server dry run)")

	out, err = testenv.Kubectl(t, "apply", "-f", seedSampleIn(t, ns))
	require.NoError(t, err, out)
	assert.Contains(t, out, "database.stable.imaginedata.co/my-first-crd-database created")
	db := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my-first-crd-database"}}

	db = waitFor(t, c, db, "Ready with 3 replicas", func(ct *assert.CollectT, d *dbv1.Database) {
		ready(ct, d)
		require.Equal(ct, "3/3", d.Status.Ready)
	})
	assert.Equal(t, "my-first-crd-database-0", db.Status.Primary)
	assert.Equal(t, "super-great-docker-image", db.Status.CurrentImage)
	assert.Empty(t, db.Status.CurrentVersion, "the sample's image has no version tag")
	assert.Equal(t, "VersionUnreadable", condition(db, database.ConditionVersionKnown).Reason)
	assert.Equal(t, metav1.ConditionTrue, condition(db, database.ConditionInitialized).Status)
	assert.Equal(t, metav1.ConditionTrue, condition(db, database.ConditionStorageBound).Status)
	assert.Equal(t, db.Generation, db.Status.ObservedGeneration)

	for _, resource := range []string{"db", "databases", "deckhand"} {
		out, err = testenv.Kubectl(t, "-n", ns, "get", resource)
		require.NoError(t, err, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2, out)
		assert.Regexp(t, `^NAME\s+DATABASE\s+READY\s+STORAGE\s+PHASE\s+AGE$`, lines[0], "kubectl get %s", resource)
		assert.Regexp(t, `^(database\.stable\.imaginedata\.co/)?my-first-crd-database\s+name-of-database\s+3/3\s+50G\s+Ready\s+\S+$`, lines[1], "kubectl get %s", resource)
	}

	sts := get(t, c, ns, "my-first-crd-database", &appsv1.StatefulSet{})
	assert.Equal(t, int32(3), *sts.Spec.Replicas)
	require.Len(t, sts.Spec.VolumeClaimTemplates, 1)
	assert.Equal(t, "50G", ptr.To(sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]).String())
	assert.Equal(t, "super-great-docker-image", sts.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, appsv1.RetainPersistentVolumeClaimRetentionPolicyType, sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted)
	psc := sts.Spec.Template.Spec.SecurityContext
	assert.True(t, *psc.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type)
	assert.False(t, *sts.Spec.Template.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation)
	assert.NotEmpty(t, sts.Spec.Template.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)

	for i := range 3 {
		pvc := get(t, c, ns, fmt.Sprintf("data-my-first-crd-database-%d", i), &corev1.PersistentVolumeClaim{})
		assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase, pvc.Name)
		assert.Equal(t, "standard", ptr.Deref(pvc.Spec.StorageClassName, ""), "the default StorageClass")
		pod := get(t, c, ns, fmt.Sprintf("my-first-crd-database-%d", i), &corev1.Pod{})
		assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
		role := map[bool]string{true: "primary", false: "standby"}[i == 0]
		assert.Equal(t, role, pod.Labels[database.LabelRole], pod.Name)
	}

	for _, name := range []string{"-headless", "-rw", "-ro"} {
		svc := get(t, c, ns, "my-first-crd-database"+name, &corev1.Service{})
		assert.Equal(t, int32(5432), svc.Spec.Ports[0].Port)
		assert.True(t, metav1.IsControlledBy(svc, db), svc.Name)
	}
	rw := get(t, c, ns, "my-first-crd-database-rw", &corev1.Service{})
	assert.Equal(t, "primary", rw.Spec.Selector[database.LabelRole])

	super := get(t, c, ns, "my-first-crd-database-superuser", &corev1.Secret{})
	assert.Equal(t, "postgres", string(super.Data["username"]))
	assert.Len(t, string(super.Data["password"]), 26)
	app := get(t, c, ns, "my-first-crd-database-app", &corev1.Secret{})
	var instances []string
	for i := range 3 {
		instances = append(instances, fmt.Sprintf("my-first-crd-database-%d.my-first-crd-database-headless.%s.svc:5432", i, ns))
	}
	hosts, appPassword := strings.Join(instances, ","), string(app.Data["password"])
	jdbc := "jdbc:postgresql://" + hosts + "/name-of-database?connectTimeout=2&password=" + appPassword + "&sslResponseTimeout=2000&targetServerType="
	assert.Equal(t, map[string]string{
		"host": "my-first-crd-database-rw." + ns + ".svc", "port": "5432", "dbname": "name-of-database", "user": "name-of-database",
		"password": appPassword,
		"uri":      "postgresql://name-of-database:" + appPassword + "@my-first-crd-database-rw." + ns + ".svc:5432/name-of-database",
		// Every instance, without kube-proxy: the primary, or a standby
		// for reads (no TLS here: the driver's default sslmode).
		"multihost-uri":         "postgresql://name-of-database:" + appPassword + "@" + hosts + "/name-of-database?connect_timeout=2&target_session_attrs=read-write",
		"multihost-ro-uri":      "postgresql://name-of-database:" + appPassword + "@" + hosts + "/name-of-database?connect_timeout=2&target_session_attrs=prefer-standby",
		"multihost-jdbc-uri":    jdbc + "primary&user=name-of-database",
		"multihost-ro-jdbc-uri": jdbc + "preferSecondary&user=name-of-database",
	}, stringData(app))
	assert.NotEqual(t, super.Data["password"], app.Data["password"])

	// Standbys replicate as a role of their own, with the password of a
	// Secret like the others: the Database's labels, owned by it.
	repl := get(t, c, ns, "my-first-crd-database-replication", &corev1.Secret{})
	assert.Equal(t, []string{"password"}, slices.Collect(maps.Keys(repl.Data)))
	assert.Len(t, string(repl.Data["password"]), 26)
	assert.NotEqual(t, super.Data["password"], repl.Data["password"])
	assert.NotEqual(t, app.Data["password"], repl.Data["password"])
	assert.True(t, metav1.IsControlledBy(repl, db))
	assert.Equal(t, super.Labels, repl.Labels, "the superuser Secret's labels")
	assert.Equal(t, super.OwnerReferences, repl.OwnerReferences, "the superuser Secret's owner")
	assert.Equal(t, "my-first-crd-database", repl.Labels[database.LabelDatabase])
	// Every server pod (one template: ordinal 0 initialises with the
	// superuser's password, which bootstrap.sh unsets before the server
	// starts) gets the role and its password.
	env := map[string]corev1.EnvVar{}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	assert.Equal(t, "deckhand_replication", env["REPLICATION_USER"].Value)
	require.NotNil(t, env["REPLICATION_PASSWORD"].ValueFrom)
	assert.Equal(t, &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "my-first-crd-database-replication"}, Key: "password",
	}, env["REPLICATION_PASSWORD"].ValueFrom.SecretKeyRef)

	job := get(t, c, ns, "my-first-crd-database-init", &batchv1.Job{})
	assert.Equal(t, "super-great-docker-image", job.Spec.Template.Spec.Containers[0].Image)
	pdb := get(t, c, ns, "my-first-crd-database", &policyv1.PodDisruptionBudget{})
	assert.Equal(t, 1, pdb.Spec.MaxUnavailable.IntValue())

	// No password in status or Events.
	b, err := json.Marshal(db.Status)
	require.NoError(t, err)
	assert.NotContains(t, string(b), string(app.Data["password"]))
	assert.NotContains(t, string(b), string(super.Data["password"]))
	assert.NotContains(t, string(b), string(repl.Data["password"]))
	var evs eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &evs, client.InNamespace(ns)))
	for _, e := range evs.Items {
		assert.NotContains(t, e.Note, string(app.Data["password"]))
		assert.NotContains(t, e.Note, string(super.Data["password"]))
		assert.NotContains(t, e.Note, string(repl.Data["password"]))
	}
	assertEvent(t, c, ns, db.Name, corev1.EventTypeNormal, "Initialized")
}

func stringData(s *corev1.Secret) map[string]string {
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out
}

// TestVersionFromTheInitJobsTerminationMessage: kwok writes no termination
// message, so the test writes the one init.sh would have written.
func TestVersionFromTheInitJobsTerminationMessage(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)

	db := newDatabase(ns, "versioned", 1)
	require.NoError(t, c.Create(context.Background(), db))
	db = waitFor(t, c, db, "Ready", ready)
	assert.Equal(t, "postgres:17.6", db.Status.CurrentImage, "the default image")
	assert.Equal(t, "17.6", db.Status.CurrentVersion)
	assert.Equal(t, "FromImageTag", condition(db, database.ConditionVersionKnown).Reason)

	var pods corev1.PodList
	require.NoError(t, c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"batch.kubernetes.io/job-name": "versioned-init"}))
	require.Len(t, pods.Items, 1)
	pod := &pods.Items[0]
	require.Equal(t, corev1.PodSucceeded, pod.Status.Phase)
	require.Len(t, pod.Status.ContainerStatuses, 1)
	require.NotNil(t, pod.Status.ContainerStatuses[0].State.Terminated)
	require.Empty(t, pod.Status.ContainerStatuses[0].State.Terminated.Message, "kwok writes no termination message")

	const message = `{"serverVersion":"17.6 (Debian 17.6-1.pgdg12+1)"}`
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod))
		pod.Status.ContainerStatuses[0].State.Terminated.Message = message
		return c.Status().Update(context.Background(), pod)
	}))
	db = waitFor(t, c, db, "version reported by the server", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "ReportedByServer", condition(d, database.ConditionVersionKnown).Reason)
	})
	assert.Equal(t, "17.6", db.Status.CurrentVersion)
	assert.Contains(t, condition(db, database.ConditionVersionKnown).Message, "17.6 (Debian 17.6-1.pgdg12+1)")

	// kwok leaves the patched status alone.
	time.Sleep(3 * time.Second)
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod))
	assert.Equal(t, message, pod.Status.ContainerStatuses[0].State.Terminated.Message)
}

func TestInitJobFailureIsReportedAndAFixedImageRunsANewJob(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	quota := testenv.PodQuota(t, c, ns, 1)
	startOperator(t, ns)
	db := newDatabase(ns, "failing", 1)
	db.Spec.Image = "super-great-docker-image"
	require.NoError(t, c.Create(context.Background(), db))
	job := get(t, c, ns, "failing-init", &batchv1.Job{})

	testenv.FailJob(t, c, job)

	cur := waitFor(t, c, db, "InitJobFailed", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "InitJobFailed", condition(d, database.ConditionInitialized).Reason)
	})
	assert.Equal(t, dbv1.PhaseDegraded, cur.Status.Phase)
	assert.Contains(t, condition(cur, database.ConditionInitialized).Message, "BackoffLimitExceeded")
	assert.Contains(t, condition(cur, database.ConditionInitialized).Message, "is super-great-docker-image a PostgreSQL server image?")
	assert.Equal(t, metav1.ConditionFalse, condition(cur, database.ConditionReady).Status)
	assertEvent(t, c, ns, db.Name, corev1.EventTypeWarning, "InitJobFailed")

	// A fixed image: the failed Job is replaced by one with the new image.
	update(t, c, cur, func(d *dbv1.Database) { d.Spec.Image = "postgres:17.6" })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var j batchv1.Job
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "failing-init"}, &j))
		require.Equal(ct, "postgres:17.6", j.Spec.Template.Spec.Containers[0].Image)
	}, wait, 100*time.Millisecond)
	assertEvent(t, c, ns, db.Name, corev1.EventTypeNormal, "Deleted")

	// Room for its pod: the new Job runs and the Database is Ready.
	require.NoError(t, c.Delete(context.Background(), quota))
	waitFor(t, c, db, "Ready", ready)
}

func TestBadInputsAreRefusedWithReadableMessages(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	for _, tc := range []struct {
		name   string
		change func(*dbv1.Database)
		msg    string
	}{
		{"zero replicas", func(d *dbv1.Database) { d.Spec.Replicas = -1 }, "replicas must be at least 1 (the primary)"},
		{"port too high", func(d *dbv1.Database) { d.Spec.Port = 70000 }, "port must be between 1 and 65535"},
		{"port negative", func(d *dbv1.Database) { d.Spec.Port = -5 }, "port must be between 1 and 65535"},
		{"storage not a quantity", func(d *dbv1.Database) { d.Spec.StorageSize = "fifty gigs" }, `storage-size must be a quantity such as 50G or 10Gi, not "fifty gigs"`},
		{"storage zero", func(d *dbv1.Database) { d.Spec.StorageSize = "0" }, "storage-size must be more than 0"},
		{"empty name", func(d *dbv1.Database) { d.Spec.Name = "" }, "name must not be empty"},
		{"name of 64 bytes", func(d *dbv1.Database) { d.Spec.Name = strings.Repeat("a", 64) }, "name must be at most 63 bytes long (PostgreSQL's limit on names)"},
		{"name of 32 characters, 64 bytes", func(d *dbv1.Database) { d.Spec.Name = strings.Repeat("é", 32) }, "name must be at most 63 bytes long"},
		{"reserved name", func(d *dbv1.Database) { d.Spec.Name = "postgres" }, "reserved by PostgreSQL"},
		{"pg_ name", func(d *dbv1.Database) { d.Spec.Name = "pg_stuff" }, "reserved by PostgreSQL"},
		{"unknown engine", func(d *dbv1.Database) { d.Spec.Engine = "Oracle" }, `Unsupported value: "Oracle"`},
		{"operator's parameter", func(d *dbv1.Database) { d.Spec.Parameters = map[string]string{"Port": "1"} }, "are set by the operator"},
		{"bad parameter name", func(d *dbv1.Database) { d.Spec.Parameters = map[string]string{"max connections": "1"} }, "each key is a setting name"},
		{"long metadata.name", func(d *dbv1.Database) { d.Name = strings.Repeat("d", 53) }, "metadata.name must be at most 52 characters"},
		{"dotted metadata.name", func(d *dbv1.Database) { d.Name = "my.db" }, "metadata.name must be a DNS label"},
		{"runAsUser root", func(d *dbv1.Database) { d.Spec.PodTemplate = &dbv1.PodTemplate{RunAsUser: ptr.To(int64(0))} }, "podTemplate.runAsUser must be more than 0"},
		{"spread over a bad label key", func(d *dbv1.Database) {
			d.Spec.PodTemplate = &dbv1.PodTemplate{Spread: &dbv1.Spread{TopologyKey: "my zone"}}
		}, "podTemplate.spread.topologyKey must be a node label key such as kubernetes.io/hostname"},
		{"spread None with a key", func(d *dbv1.Database) {
			d.Spec.PodTemplate = &dbv1.PodTemplate{Spread: &dbv1.Spread{Type: dbv1.SpreadNone, TopologyKey: "topology.kubernetes.io/zone"}}
		}, "podTemplate.spread: topologyKey has no use with type None"},
		{"unknown spread type", func(d *dbv1.Database) { d.Spec.PodTemplate = &dbv1.PodTemplate{Spread: &dbv1.Spread{Type: "Always"}} }, `Unsupported value: "Always"`},
		{"switchover to another Database's pod", func(d *dbv1.Database) {
			d.Spec.Replicas, d.Spec.Failover = 2, &dbv1.FailoverSpec{Enabled: ptr.To(true), SwitchoverTo: "other-1"}
		}, `spec.failover.switchoverTo must name an instance of this Database, bad-<ordinal> with an ordinal below spec.replicas, not "other-1"`},
		{"switchover beyond the replicas", func(d *dbv1.Database) {
			d.Spec.Replicas, d.Spec.Failover = 2, &dbv1.FailoverSpec{Enabled: ptr.To(true), SwitchoverTo: "bad-2"}
		}, "spec.failover.switchoverTo must name an instance of this Database"},
		{"switchover to a non-ordinal", func(d *dbv1.Database) {
			d.Spec.Replicas, d.Spec.Failover = 2, &dbv1.FailoverSpec{Enabled: ptr.To(true), SwitchoverTo: "bad-x"}
		}, "spec.failover.switchoverTo must name an instance of this Database"},
		{"switchover without failover", func(d *dbv1.Database) {
			d.Spec.Replicas, d.Spec.Failover = 2, &dbv1.FailoverSpec{SwitchoverTo: "bad-1"}
		}, "spec.failover.switchoverTo needs spec.failover.enabled: true"},
		{"switchover timeout too short", func(d *dbv1.Database) {
			d.Spec.Replicas, d.Spec.Failover = 2, &dbv1.FailoverSpec{Enabled: ptr.To(true), SwitchoverTimeout: &metav1.Duration{Duration: time.Second}}
		}, "failover.switchoverTimeout must be at least 5s"},
		{"switchover timeout too long", func(d *dbv1.Database) {
			d.Spec.Replicas, d.Spec.Failover = 2, &dbv1.FailoverSpec{Enabled: ptr.To(true), SwitchoverTimeout: &metav1.Duration{Duration: 2 * time.Hour}}
		}, "failover.switchoverTimeout must be at most 1h"},
		{"synchronous standbys as many as replicas", func(d *dbv1.Database) {
			d.Spec.Replicas, d.Spec.Failover = 2, &dbv1.FailoverSpec{Enabled: ptr.To(true)}
			d.Spec.Replication = &dbv1.ReplicationSpec{Synchronous: &dbv1.SynchronousSpec{MinStandbys: 2}}
		}, "spec.replication.synchronous.minStandbys must be below spec.replicas"},
		{"tls: a Secret name with capitals", func(d *dbv1.Database) { d.Spec.TLS = &dbv1.TLSSpec{ServerCertSecret: "My_Cert"} },
			`tls.serverCertSecret must be the name of a Secret (lower-case letters, digits, '-' and '.'), not "My_Cert"`},
		{"monitoring: a ConfigMap name with capitals", func(d *dbv1.Database) {
			d.Spec.Monitoring = &dbv1.MonitoringSpec{CustomQueries: &dbv1.CustomQueriesSource{Name: "My_Queries"}}
		}, `monitoring.customQueries.name must be the name of a ConfigMap (lower-case letters, digits, '-' and '.'), not "My_Queries"`},
		{"tls: a certificate with TLS off", func(d *dbv1.Database) {
			d.Spec.TLS = &dbv1.TLSSpec{Enabled: ptr.To(false), ServerCertSecret: "mine"}
		}, "tls.serverCertSecret needs TLS on: remove tls.enabled: false, or remove tls.serverCertSecret"},
		{"synchronous without failover", func(d *dbv1.Database) {
			d.Spec.Replicas = 2
			d.Spec.Replication = &dbv1.ReplicationSpec{Synchronous: &dbv1.SynchronousSpec{MinStandbys: 1}}
		}, "spec.replication.synchronous.minStandbys needs spec.failover.enabled: true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDatabase(ns, "bad", 1)
			tc.change(db)
			err := c.Create(ctx, db)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}

	// The sample's hyphens and a name of exactly 63 bytes are fine.
	ok := newDatabase(ns, "fine", 1)
	ok.Spec.Name = strings.Repeat("é", 31) + "x"
	require.NoError(t, c.Create(ctx, ok))
	// A switchover to an instance, synchronous standbys below replicas.
	wanted := newDatabase(ns, "wanted", 3)
	wanted.Spec.Failover = &dbv1.FailoverSpec{Enabled: ptr.To(true), SwitchoverTo: "wanted-2"}
	wanted.Spec.Replication = &dbv1.ReplicationSpec{Synchronous: &dbv1.SynchronousSpec{MinStandbys: 2}}
	require.NoError(t, c.Create(ctx, wanted))

	for _, tc := range []struct {
		name   string
		change func(*dbv1.Database)
		msg    string
	}{
		{"shrink storage", func(d *dbv1.Database) { d.Spec.StorageSize = "500Mi" }, "storage-size cannot shrink (from 1Gi to 500Mi): volumes can only grow"},
		{"rename database", func(d *dbv1.Database) { d.Spec.Name = "other" }, "name is immutable"},
		{"set storageClassName", func(d *dbv1.Database) { d.Spec.StorageClassName = ptr.To("expandable") }, "storageClassName cannot change"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cur dbv1.Database
			require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(ok), &cur))
			tc.change(&cur)
			err := c.Update(ctx, &cur)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	// Growing is fine.
	update(t, c, ok, func(d *dbv1.Database) { d.Spec.StorageSize = "2Gi" })
}

func TestAForeignObjectOfTheSameNameIsNeverTouched(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()

	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-rw", Namespace: ns, Labels: map[string]string{"owner": "someone-else"}},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "theirs"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	require.NoError(t, c.Create(ctx, foreign))
	db := newDatabase(ns, "shop", 1)
	require.NoError(t, c.Create(ctx, db))

	cur := waitFor(t, c, db, "refusal", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "ServiceNotOwned", condition(d, database.ConditionReady).Reason)
	})
	assert.Equal(t, dbv1.PhaseDegraded, cur.Status.Phase)
	assert.Contains(t, condition(cur, database.ConditionReady).Message, "Service shop-rw exists and is not owned by this Database")
	assertEvent(t, c, ns, db.Name, corev1.EventTypeWarning, "ServiceNotOwned")

	var after corev1.Service
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(foreign), &after))
	assert.Equal(t, map[string]string{"app": "theirs"}, after.Spec.Selector)
	assert.Equal(t, map[string]string{"owner": "someone-else"}, after.Labels)
	assert.Empty(t, after.OwnerReferences)
	// Nothing of the Database was created while the name is taken.
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop"}, &appsv1.StatefulSet{})
	assert.True(t, apierrors.IsNotFound(err), "StatefulSet created despite the foreign Service: %v", err)

	// Once it is gone, the Database comes up.
	require.NoError(t, c.Delete(ctx, foreign))
	waitFor(t, c, db, "Ready", ready)
}

func TestRetainDeletionKeepsTheVolumesAndSecrets(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()

	db := newDatabase(ns, "gone", 2)
	db.Spec.DeletionPolicy = dbv1.DeletionRetain
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)
	require.NoError(t, c.Delete(ctx, db))

	owned := []client.Object{
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "gone"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gone-rw"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gone-ro"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gone-headless"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gone-scripts"}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "gone-init"}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "gone"}},
		&dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "gone"}},
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, o := range owned {
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.GetName()}, o)
			require.True(ct, apierrors.IsNotFound(err), "%T %s still there", o, o.GetName())
		}
	}, 60*time.Second, 250*time.Millisecond)
	for i := range 2 {
		var pvc corev1.PersistentVolumeClaim
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("data-gone-%d", i)}, &pvc))
		assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase)
		assert.True(t, pvc.DeletionTimestamp.IsZero())
	}
	// Kept data is useless without its passwords: the Secrets stay, no
	// longer owned by anything.
	for _, name := range []string{"gone-superuser", "gone-app", "gone-replication"} {
		var s corev1.Secret
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s))
		assert.Empty(t, s.OwnerReferences, name)
		assert.NotEmpty(t, s.Data["password"], name)
	}
	var backups dbv1.DatabaseBackupList
	require.NoError(t, c.List(ctx, &backups, client.InNamespace(ns)))
	assert.Empty(t, backups.Items, "Retain takes no final backup")
	assertEvent(t, c, ns, "gone", corev1.EventTypeNormal, "Kept")
}

func TestStorageGrowsWhereTheStorageClassAllowsIt(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()

	fixed := newDatabase(ns, "fixed", 2)
	growing := newDatabase(ns, "growing", 2)
	growing.Spec.StorageClassName = ptr.To("expandable")
	for _, db := range []*dbv1.Database{fixed, growing} {
		require.NoError(t, c.Create(ctx, db))
		waitFor(t, c, db, "Ready", ready)
		update(t, c, db, func(d *dbv1.Database) { d.Spec.StorageSize = "3Gi" })
	}

	cur := waitFor(t, c, fixed, "expansion refused", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "ExpansionNotAllowed", condition(d, database.ConditionStorageResized).Reason)
	})
	assert.Contains(t, condition(cur, database.ConditionStorageResized).Message, "StorageClass standard does not allow volume expansion")
	assertEvent(t, c, ns, fixed.Name, corev1.EventTypeWarning, "ExpansionNotAllowed")
	for i := range 2 {
		var pvc corev1.PersistentVolumeClaim
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("data-fixed-%d", i)}, &pvc))
		assert.Equal(t, "1Gi", ptr.To(pvc.Spec.Resources.Requests[corev1.ResourceStorage]).String())
	}

	want := resource.MustParse("3Gi")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for i := range 2 {
			var pvc corev1.PersistentVolumeClaim
			require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("data-growing-%d", i)}, &pvc))
			require.Zero(ct, want.Cmp(pvc.Spec.Resources.Requests[corev1.ResourceStorage]), pvc.Name)
			require.Zero(ct, want.Cmp(pvc.Status.Capacity[corev1.ResourceStorage]), "%s: %+v", pvc.Name, pvc.Status)
		}
	}, wait, 100*time.Millisecond, "the expandable class's volumes grow")
	waitFor(t, c, growing, "resized", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "Resized", condition(d, database.ConditionStorageResized).Reason)
	})
	assertEvent(t, c, ns, growing.Name, corev1.EventTypeNormal, "Resizing")
}

func TestChangesRollTheStatefulSetAndKeepThePasswords(t *testing.T) {
	t.Parallel()
	c, ns, db := readyDatabase(t, "changing", 1)
	ctx := context.Background()
	app := get(t, c, ns, "changing-app", &corev1.Secret{})
	password := string(app.Data["password"])
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "changing"}, &policyv1.PodDisruptionBudget{})
	assert.True(t, apierrors.IsNotFound(err), "no PodDisruptionBudget for one replica")

	update(t, c, db, func(d *dbv1.Database) {
		d.Spec.Replicas = 2
		d.Spec.Port = 6543
		d.Spec.Parameters = map[string]string{"max_connections": "50"}
		d.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}
	})
	cur := waitFor(t, c, db, "Ready with 2 replicas", func(ct *assert.CollectT, d *dbv1.Database) {
		ready(ct, d)
		require.Equal(ct, "2/2", d.Status.Ready)
		require.Equal(ct, d.Generation, d.Status.ObservedGeneration)
	})
	sts := get(t, c, ns, "changing", &appsv1.StatefulSet{})
	container := sts.Spec.Template.Spec.Containers[0]
	assert.Contains(t, strings.Join(container.Args, " "), "-c max_connections=50")
	assert.Equal(t, "256Mi", ptr.To(container.Resources.Requests[corev1.ResourceMemory]).String())
	assert.Equal(t, int32(6543), container.Ports[0].ContainerPort)
	assert.Equal(t, sts.Status.UpdateRevision, sts.Status.CurrentRevision, "rolled")
	get(t, c, ns, "changing", &policyv1.PodDisruptionBudget{})

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "changing-app"}, app))
		require.Equal(ct, "6543", string(app.Data["port"]))
	}, wait, 100*time.Millisecond)
	assert.Equal(t, password, string(app.Data["password"]), "the password is never replaced")
	assert.Contains(t, string(app.Data["uri"]), ":"+password+"@changing-rw."+ns+".svc:6543/")
	svc := get(t, c, ns, "changing-rw", &corev1.Service{})
	assert.Equal(t, int32(6543), svc.Spec.Ports[0].Port)
	assertScriptsSayReplicas(t, c, ns, "changing-scripts", "2")

	// Back to one replica: the PodDisruptionBudget goes, the volume stays.
	update(t, c, cur, func(d *dbv1.Database) { d.Spec.Replicas = 1 })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "changing"}, &policyv1.PodDisruptionBudget{})
		require.True(ct, apierrors.IsNotFound(err))
	}, wait, 100*time.Millisecond)
	waitFor(t, c, db, "Ready with 1 replica", func(ct *assert.CollectT, d *dbv1.Database) {
		ready(ct, d)
		require.Equal(ct, "1/1", d.Status.Ready)
	})
	get(t, c, ns, "data-changing-1", &corev1.PersistentVolumeClaim{})
	assertScriptsSayReplicas(t, c, ns, "changing-scripts", "1")
}

// assertScriptsSayReplicas waits until the scripts ConfigMap holds the
// Database's replicas, which the primary's probe reads to drop the
// replication slots of removed standbys.
func assertScriptsSayReplicas(t *testing.T, c client.Client, ns, name, replicas string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var cm corev1.ConfigMap
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cm))
		require.Equal(ct, replicas, cm.Data["replicas"])
	}, wait, 100*time.Millisecond)
}
