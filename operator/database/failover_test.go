package database_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// Failover is on by default for a Database the operator has never run,
// and the default is recorded on it (annotation
// stable.imaginedata.co/failover-default) so a later operator with
// another default never turns it on or off under a running Database. A
// Database an older operator already ran (its status.observedGeneration
// set) keeps failover off: turning it on would restart every pod. The
// field, when set, wins over the recorded default; a recorded default a
// person set is kept.
func TestFailoverIsOnByDefaultForANewDatabaseOnly(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	// Run by an operator from before the default: it has a status, and
	// no recorded default.
	older := newDatabase(ns, "older", 1)
	require.NoError(t, c.Create(ctx, older))
	older.Status.ObservedGeneration = older.Generation
	require.NoError(t, c.Status().Update(ctx, older))

	startOperatorWith(t, ns, database.Options{OperatorImage: "example.org/deckhand:test", FailoverByDefault: true})
	fresh := newDatabase(ns, "fresh", 2)
	optedOut := newDatabase(ns, "opted-out", 1)
	optedOut.Spec.Failover = &dbv1.FailoverSpec{Enabled: ptr.To(false)}
	annotated := newDatabase(ns, "annotated", 1)
	annotated.Annotations = map[string]string{database.AnnotationFailoverDefault: "false"}
	for _, db := range []*dbv1.Database{fresh, optedOut, annotated} {
		require.NoError(t, c.Create(ctx, db))
	}

	for _, tc := range []struct {
		db       *dbv1.Database
		recorded string
		agent    bool
		why      string
	}{
		{fresh, "true", true, "a new Database without spec.failover.enabled gets the operator's default, on"},
		{older, "false", false, "a Database an older operator ran keeps failover off"},
		{optedOut, "true", false, "spec.failover.enabled false wins over the recorded default"},
		{annotated, "false", false, "a recorded default is never rewritten"},
	} {
		cur := waitFor(t, c, tc.db, "its failover default recorded", func(ct *assert.CollectT, d *dbv1.Database) {
			assert.Contains(ct, d.Annotations, database.AnnotationFailoverDefault)
		})
		assert.Equal(t, tc.recorded, cur.Annotations[database.AnnotationFailoverDefault], "%s: %s", tc.db.Name, tc.why)
		sts := get(t, c, ns, tc.db.Name, &appsv1.StatefulSet{})
		var names []string
		for _, ctr := range sts.Spec.Template.Spec.Containers {
			names = append(names, ctr.Name)
		}
		assert.Equal(t, tc.agent, slices.Contains(names, instance.AgentContainer), "%s: the instance agent in its pods (%v): %s", tc.db.Name, names, tc.why)
	}
}

// With spec.failover.enabled, a new Database's pods carry the instance
// agent (its init container copies it from the operator's image), the
// StatefulSet starts its pods in parallel (a primary at any ordinal
// starts after a restart of every pod), and the channel's two Secrets
// exist: the operator's (never mounted) and the pods' (a server
// certificate per pod).
func TestFailoverEnabledRunsTheInstanceAgentInEveryPod(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperatorWith(t, ns, database.Options{OperatorImage: "example.org/deckhand:test"})
	db := newDatabase(ns, "fo", 2)
	db.Spec.Failover = &dbv1.FailoverSpec{Enabled: ptr.To(true)}
	require.NoError(t, c.Create(context.Background(), db))

	sts := get(t, c, ns, "fo", &appsv1.StatefulSet{})
	assert.Equal(t, appsv1.ParallelPodManagement, sts.Spec.PodManagementPolicy)
	spec := sts.Spec.Template.Spec
	var names []string
	for _, ctr := range spec.Containers {
		names = append(names, ctr.Name)
	}
	assert.Contains(t, names, instance.AgentContainer)
	require.Len(t, spec.InitContainers, 1)
	assert.Equal(t, "example.org/deckhand:test", spec.InitContainers[0].Image)
	mounted := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			mounted[v.Secret.SecretName] = true
		}
	}
	assert.True(t, mounted["fo-instance-tls"], "the pods' Secret is mounted")
	assert.False(t, mounted["fo-instance-operator"], "the operator's Secret is never mounted")

	var op, pods corev1.Secret
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fo-instance-operator"}, &op))
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fo-instance-tls"}, &pods))
	}, wait, 100*time.Millisecond)
	assert.NotEmpty(t, op.Data[instance.CAKeyKey])
	assert.NotEmpty(t, op.Data[instance.ClientKeyKey])
	assert.NotContains(t, pods.Data, instance.CAKeyKey, "the CA's key stays with the operator")
	for _, pod := range []string{"fo-0", "fo-1"} {
		assert.NotEmpty(t, pods.Data[instance.ServerCertKey(pod)], pod)
	}
	opVersion, podsVersion := op.ResourceVersion, pods.ResourceVersion

	// A steady state rewrites neither Secret.
	waitFor(t, c, db, "Ready", ready)
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fo-instance-operator"}, &op))
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fo-instance-tls"}, &pods))
	assert.Equal(t, opVersion, op.ResourceVersion)
	assert.Equal(t, podsVersion, pods.ResourceVersion)
}

// Without the field nothing changes: no agent, ordered start, no Secrets.
func TestFailoverOffByDefault(t *testing.T) {
	t.Parallel()
	c, ns, _ := readyDatabase(t, "nofo", 1)
	sts := get(t, c, ns, "nofo", &appsv1.StatefulSet{})
	assert.Equal(t, appsv1.OrderedReadyPodManagement, sts.Spec.PodManagementPolicy)
	assert.Len(t, sts.Spec.Template.Spec.Containers, 1)
	var s corev1.Secret
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "nofo-instance-tls"}, &s)
	assert.True(t, client.IgnoreNotFound(err) == nil && err != nil, "no channel Secret: %v", err)
}

// agents serves, on 127.0.0.1, an agent per pod of the Database with the
// pods' Secret the operator wrote, for pods whose servers are not running
// (kwok pods run nothing); dial sends each pod's name to its agent.
type agents struct {
	testenv.LocalDialer
}

// start serves pod's agent on 127.0.0.1 (no server runs) and returns its
// socket directory, where the entrypoint would ask for its role.
func (a *agents) start(t *testing.T, tlsDir, pod, host string) (socketDir string) {
	t.Helper()
	dataDir := filepath.Join(t.TempDir(), "pgdata")
	require.NoError(t, os.MkdirAll(dataDir, 0o700))
	socketDir = t.TempDir()
	agent, err := instance.New(instance.Config{Pod: pod, SocketDir: socketDir, Port: 5432, DataDir: dataDir})
	require.NoError(t, err)
	tlsConfig, err := instance.ServerTLSConfig(tlsDir, pod)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Serve(ctx, l, tlsConfig) }()
	t.Cleanup(func() {
		cancel()
		<-done
		agent.Close()
	})
	a.Route(host, l.Addr().String())
	return socketDir
}

// failoverWithAgents starts the operator for ns and a Database name of
// two replicas with failover on (primaryGoneAfter bound), waits for it to
// be Ready, and serves an agent on 127.0.0.1 for each of its pods, with
// the pods' Secret the operator wrote (no server runs). It returns the
// agents, the Database and each pod's socket directory.
func failoverWithAgents(t *testing.T, c client.Client, ns, name string, bound time.Duration) (*agents, *dbv1.Database, map[string]string) {
	t.Helper()
	a := &agents{}
	startOperatorWith(t, ns, database.Options{OperatorImage: "example.org/deckhand:test", InstanceDial: a.DialContext})
	db := newDatabase(ns, name, 2)
	db.Spec.Failover = &dbv1.FailoverSpec{Enabled: ptr.To(true), PrimaryGoneAfter: &metav1.Duration{Duration: bound}}
	require.NoError(t, c.Create(context.Background(), db))
	waitFor(t, c, db, "Ready", ready)

	var pods corev1.Secret
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-instance-tls"}, &pods))
	tlsDir := t.TempDir()
	for file, data := range pods.Data {
		require.NoError(t, os.WriteFile(filepath.Join(tlsDir, file), data, 0o600))
	}
	sockets := map[string]string{}
	for _, pod := range []string{name + "-0", name + "-1"} {
		sockets[pod] = a.start(t, tlsDir, pod, instance.PodHosts(pod, name+"-headless", ns)[0])
	}
	return a, db, sockets
}

// A primary whose server is down, with no healthy standby to take its
// place, is reported and left alone: never fenced (that would turn an
// outage it may come back from into one it cannot), nothing promoted,
// status.currentPrimary unchanged.
func TestAGonePrimaryWithoutAHealthyStandbyIsNeitherFencedNorReplaced(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	a, db, _ := failoverWithAgents(t, c, ns, "lone", time.Second)
	hosts := map[string]string{}
	for _, pod := range []string{"lone-0", "lone-1"} {
		hosts[pod] = instance.PodHosts(pod, "lone-headless", ns)[0]
	}

	got := waitFor(t, c, db, "failover blocked", func(ct *assert.CollectT, d *dbv1.Database) {
		cond := condition(d, database.ConditionFailover)
		require.Equal(ct, "FailoverBlocked", cond.Reason, "%+v", cond)
		assert.Contains(ct, cond.Message, "its server is down")
		assert.Contains(ct, cond.Message, "no healthy standby")
	})
	assert.Equal(t, "lone-0", got.Status.CurrentPrimary)
	assert.Empty(t, got.Status.Failovers, "no failover was begun")
	assert.Equal(t, 1.0, gaugeValue(t, "deckhand_database_failover_pending", ns, "lone"), "the primary is gone and not replaced: the alert's gauge")
	assertEvent(t, c, ns, "lone", corev1.EventTypeWarning, "FailoverBlocked")

	// Asked until the agent answers: under load one request can outlast
	// the client's timeout, which says nothing about the fence.
	oc := operatorClient(t, c, ns, "lone", a)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := oc.Status(context.Background(), hosts["lone-0"])
		require.NoError(ct, err)
		assert.False(ct, st.Fenced, "the primary was not fenced")
	}, wait, 500*time.Millisecond)
}

// operatorClient is a client with the operator's certificate, as the
// operator's Secret holds it.
func operatorClient(t *testing.T, c client.Client, ns, name string, a *agents) *instance.Client {
	t.Helper()
	var op corev1.Secret
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-instance-operator"}, &op))
	tlsConfig, err := instance.ClientTLSConfig(op.Data[instance.CACertKey], op.Data[instance.ClientCertKey], op.Data[instance.ClientKeyKey])
	require.NoError(t, err)
	return instance.NewClient(tlsConfig, instance.DefaultPort, instance.WithDialContext(a.DialContext))
}

// gaugeValue is the operator's gauge name for the Database ns/name (the
// operator runs in this process); -1 when absent.
func gaugeValue(t *testing.T, name, ns, db string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			if have["namespace"] == ns && have["database"] == db {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// Turning failover off on a Database that runs with it keeps its
// StatefulSet (podManagementPolicy cannot change in place, so asking for
// OrderedReady would have every update refused): the same StatefulSet,
// still Parallel, its pods without the agent, the Database Ready.
func TestTurningFailoverOffKeepsTheParallelStatefulSetAndDropsTheAgent(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperatorWith(t, ns, database.Options{OperatorImage: "example.org/deckhand:test"})
	db := newDatabase(ns, "off", 2)
	db.Spec.Failover = &dbv1.FailoverSpec{Enabled: ptr.To(true)}
	require.NoError(t, c.Create(context.Background(), db))
	waitFor(t, c, db, "Ready", ready)
	before := get(t, c, ns, "off", &appsv1.StatefulSet{})
	require.Equal(t, appsv1.ParallelPodManagement, before.Spec.PodManagementPolicy)

	update(t, c, db, func(d *dbv1.Database) { d.Spec.Failover.Enabled = ptr.To(false) })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var sts appsv1.StatefulSet
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "off"}, &sts))
		assert.Equal(ct, before.UID, sts.UID, "the same StatefulSet")
		assert.Equal(ct, appsv1.ParallelPodManagement, sts.Spec.PodManagementPolicy)
		for _, ctr := range sts.Spec.Template.Spec.Containers {
			assert.NotEqual(ct, instance.AgentContainer, ctr.Name, "the agent left the pod template")
		}
	}, wait, 100*time.Millisecond)
	waitFor(t, c, db, "Ready with failover off", ready)
	var cur dbv1.Database
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(db), &cur))
	for _, cond := range cur.Status.Conditions {
		assert.NotEqual(t, "ApplyFailed", cond.Reason, "%s: %s", cond.Type, cond.Message)
	}
}

// Turning failover on for an existing Database recreates its OrderedReady
// StatefulSet as Parallel (a primary at a non-zero ordinal would deadlock
// OrderedReady after a restart of every pod): the old one deleted with
// its pods orphaned, a new one made, the same data volumes, Ready again,
// an Event.
func TestTurningFailoverOnRecreatesAnOrderedReadyStatefulSetAsParallel(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperatorWith(t, ns, database.Options{OperatorImage: "example.org/deckhand:test"})
	db := newDatabase(ns, "late", 2)
	require.NoError(t, c.Create(context.Background(), db))
	waitFor(t, c, db, "Ready", ready)
	old := get(t, c, ns, "late", &appsv1.StatefulSet{})
	require.Equal(t, appsv1.OrderedReadyPodManagement, old.Spec.PodManagementPolicy)
	claims := map[string]string{}
	for _, claim := range []string{"data-late-0", "data-late-1"} {
		claims[claim] = string(get(t, c, ns, claim, &corev1.PersistentVolumeClaim{}).UID)
	}

	update(t, c, db, func(d *dbv1.Database) { d.Spec.Failover = &dbv1.FailoverSpec{Enabled: ptr.To(true)} })
	var sts appsv1.StatefulSet
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "late"}, &sts))
		assert.NotEqual(ct, old.UID, sts.UID, "made again")
		assert.Equal(ct, appsv1.ParallelPodManagement, sts.Spec.PodManagementPolicy)
	}, wait, 100*time.Millisecond)
	assertEvent(t, c, ns, "late", corev1.EventTypeNormal, "StatefulSetRecreated")
	waitFor(t, c, db, "Ready again", ready)
	for claim, uid := range claims {
		assert.Equal(t, uid, string(get(t, c, ns, claim, &corev1.PersistentVolumeClaim{}).UID), "%s kept", claim)
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, pod := range []string{"late-0", "late-1"} {
			var p corev1.Pod
			require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod}, &p))
			owner := metav1.GetControllerOf(&p)
			require.NotNil(ct, owner, pod)
			assert.Equal(ct, sts.UID, owner.UID, "%s belongs to the new StatefulSet", pod)
		}
	}, wait, 100*time.Millisecond)
}

// A server about to start as the primary waits for the operator's word
// (the entrypoint's question, through its agent): the primary is
// confirmed; after a failover, the old primary, whose pod was made again
// before it read the new name, is told the new primary instead (it would
// otherwise start writable beside it). Events say both.
func TestAServerWaitingForItsRoleIsToldWhoIsPrimary(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	// No server runs here: the bound keeps the watch from acting on it.
	_, db, sockets := failoverWithAgents(t, c, ns, "ask", time.Hour)
	ask := func(pod, token string) {
		require.NoError(t, os.WriteFile(filepath.Join(sockets[pod], instance.RoleAskedFile), []byte(token+"\n"), 0o600))
	}
	answered := func(pod, want string) {
		t.Helper()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			b, err := os.ReadFile(filepath.Join(sockets[pod], instance.RoleAnswerFile))
			require.NoError(ct, err)
			assert.Equal(ct, want+"\n", string(b))
		}, wait, 200*time.Millisecond, "the answer to %s's server", pod)
	}

	ask("ask-0", "first")
	answered("ask-0", "first ask-0")
	assertEvent(t, c, ns, "ask", corev1.EventTypeNormal, "PrimaryConfirmed")

	// A failover to ask-1 completed while ask-0's pod was being made again.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur dbv1.Database
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(db), &cur); err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status.CurrentPrimary = "ask-1"
		cur.Status.Failovers = append(cur.Status.Failovers, dbv1.FailoverRecord{From: "ask-0", To: "ask-1", Phase: dbv1.FailoverCompleted, Started: now, Finished: &now})
		return c.Status().Update(context.Background(), &cur)
	}))
	ask("ask-0", "second")
	answered("ask-0", "second ask-1")
	assertEvent(t, c, ns, "ask", corev1.EventTypeWarning, "NotThePrimary")
}
