package postgres_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
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

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// startServer runs the Database's ordinal on the host from its
// StatefulSet and ConfigMap as they are now; primaryPort is where its
// primary listens ("" for the primary itself).
func (e *endToEnd) startServer(db string, ordinal int, primaryPort string) (*pgtest.Server, string, string) {
	return e.startServerOnPort(db, ordinal, primaryPort, "")
}

// startServerOnPort is startServer on port ("": a free one).
func (e *endToEnd) startServerOnPort(db string, ordinal int, primaryPort, port string) (*pgtest.Server, string, string) {
	t := e.t
	t.Helper()
	ctx := context.Background()
	var sts appsv1.StatefulSet
	var cm corev1.ConfigMap
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: db}, &sts))
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: db + "-scripts"}, &cm))
	pod := db + "-" + strconv.Itoa(ordinal)
	scripts := e.u.WriteScripts(t, e.u.Dir(t, e.root, "servers", pod), cm.Data)
	require.Equal(t, scriptsDir(e.root, pod), scripts)
	server := sts.Spec.Template.Spec.Containers[0]
	env := pgtest.ContainerEnv(t, server, pod, e.secret)
	if port == "" {
		port = pgtest.FreePort(t)
	}
	if primaryPort == "" {
		primaryPort = port
	}
	pgdata := e.claimData(pod)
	env["PGDATA"] = pgdata
	env["PATH"] = e.bin + ":/usr/bin:/bin"
	env["PGPORT"], env["PRIMARY_PORT"], env["PRIMARY_HOST"] = port, primaryPort, "127.0.0.1"
	env["LISTEN_ADDRESSES"] = "127.0.0.1"
	if _, ok := env[instance.RoleDirEnv]; ok {
		// The pod's shared directory, where its agent answers.
		env[instance.RoleDirEnv] = e.u.Dir(t, roleDir(e.root, pod))
	}
	return e.u.StartServer(t, e.bin, env, pgtest.HostCommand(t, server, scripts)), port, pgdata
}

// roleDir is where pod's entrypoint asks its agent for its role (the
// socket directory the pod's containers share).
func roleDir(root, pod string) string {
	return filepath.Join(root, "servers", pod, "role")
}

// claimData is pod's PGDATA on the host.
func (e *endToEnd) claimData(pod string) string {
	return filepath.Join(e.runner.ClaimDir("data-"+pod), "pgdata")
}

// scriptsDir is where startServer writes pod's scripts ConfigMap (its
// mount): written again at each start, as a restarted pod would see the
// ConfigMap then.
func scriptsDir(root, pod string) string {
	return filepath.Join(root, "servers", pod, "scripts")
}

// startAgent runs the agent binary for pod beside its server, as the
// servers' user, with the pods' Secret the operator wrote, and args added
// to its command line.
func (e *endToEnd) startAgent(a *testenv.LocalDialer, binary, db, pod, pgdata, port string, args ...string) {
	t := e.t
	t.Helper()
	var s corev1.Secret
	require.NoError(t, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: db + "-instance-tls"}, &s))
	dir := e.u.Dir(t, e.root, "instance-tls-"+pod)
	for name, data := range s.Data {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o400))
		if e.u != nil {
			require.NoError(t, os.Chown(filepath.Join(dir, name), e.u.UID, e.u.GID))
		}
	}
	listen := "127.0.0.1:" + pgtest.FreePort(t)
	cmd := e.u.Command(map[string]string{"PATH": e.bin + ":/usr/bin:/bin", "POD_NAME": pod, "PGDATA": pgdata, "PGPORT": port},
		append([]string{binary, "serve", "--tls-dir", dir, "--listen", listen, "--scripts-dir", scriptsDir(e.root, pod), "--role-dir", e.u.Dir(t, roleDir(e.root, pod))}, args...))
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Logf("agent %s:\n%s", pod, log.String())
	})
	a.Route(instance.PodHosts(pod, db+"-headless", e.ns)[0], listen)
}

// failoverSetup is a Database "fo" with failover on (a 2 s bound): its
// primary fo-0 and streaming standbys on the host, the agent beside each,
// Ready, a row 1 committed and replicated, the primary watched. The
// standbys follow fo-rw, which (as the Service does by its selector)
// sends each new connection to the pod the operator labels primary.
type failoverSetup struct {
	e                        *endToEnd
	agents                   *testenv.LocalDialer
	agentBinary              string
	primary                  *pgtest.Server
	primaryPort, standbyPort string
	superuser                string
	// rwPort is fo-rw's port on 127.0.0.1; ports and data are each
	// pod's server port and PGDATA.
	rwPort      string
	mu          sync.Mutex
	ports, data map[string]string
	// partitioned: fo-rw (the standbys' way to the primary) delivers
	// nothing, as across a network partition (partition).
	partitioned atomic.Bool
}

// started records pod's server port and PGDATA.
func (f *failoverSetup) started(pod, port, data string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ports[pod], f.data[pod] = port, data
}

func newFailoverSetup(t *testing.T) *failoverSetup { return newFailoverSetupOf(t, 2) }

func newFailoverSetupOf(t *testing.T, replicas int32) *failoverSetup {
	return newFailoverSetupWith(t, replicas, nil)
}

// newFailoverSetupWith is newFailoverSetupOf with change made to the
// Database before it is created.
func newFailoverSetupWith(t *testing.T, replicas int32, change func(*dbv1.Database)) *failoverSetup {
	return newFailoverSetupWithAgentArgs(t, replicas, change)
}

// newFailoverSetupWithAgentArgs is newFailoverSetupWith with agentArgs
// added to every agent's command line.
func newFailoverSetupWithAgentArgs(t *testing.T, replicas int32, change func(*dbv1.Database), agentArgs ...string) *failoverSetup {
	agents := &testenv.LocalDialer{}
	e := newEndToEnd(t, database.Options{OperatorImage: "example.org/deckhand:test", InstanceDial: agents.DialContext})
	binary := pgtest.AgentBinary(t)

	selector := map[string]dbv1.LabelValue{}
	for k, v := range e.runner.NodeSelector() {
		selector[k] = dbv1.LabelValue(v)
	}
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "fo", Namespace: e.ns},
		Spec: dbv1.DatabaseSpec{
			Name: appDatabase, Port: e.freePort(), StorageSize: "1Gi", Replicas: replicas, Image: e.image,
			PodTemplate: &dbv1.PodTemplate{NodeSelector: selector},
			Failover:    &dbv1.FailoverSpec{Enabled: ptr.To(true), PrimaryGoneAfter: &metav1.Duration{Duration: 2 * time.Second}},
		},
	}
	if change != nil {
		change(db)
	}
	require.NoError(t, e.c.Create(context.Background(), db))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var s corev1.Secret
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: "fo-instance-tls"}, &s))
		var sts appsv1.StatefulSet
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: "fo"}, &sts))
	}, time.Minute, 100*time.Millisecond)
	f := &failoverSetup{e: e, agents: agents, agentBinary: binary, ports: map[string]string{}, data: map[string]string{}}
	f.rwPort = f.serveReadWrite()
	// The primary's agent first, as in its pod: its entrypoint waits
	// for the operator's word, asked through the agent, before the
	// server starts.
	primaryPort := pgtest.FreePort(t)
	e.startAgent(agents, binary, "fo", "fo-0", e.claimData("fo-0"), primaryPort, agentArgs...)
	primary, _, primaryData := e.startServerOnPort("fo", 0, "", primaryPort)
	f.primary, f.primaryPort = primary, primaryPort
	f.started("fo-0", primaryPort, primaryData)
	e.servers["fo"] = primaryPort
	e.runner.Serve("fo-rw", "127.0.0.1:"+f.rwPort)
	e.runner.Serve("fo-0", "127.0.0.1:"+primaryPort)
	for ordinal := 1; ordinal < int(replicas); ordinal++ {
		pod := "fo-" + strconv.Itoa(ordinal)
		_, port, data := e.startServer("fo", ordinal, f.rwPort)
		f.started(pod, port, data)
		e.startAgent(agents, binary, "fo", pod, data, port, agentArgs...)
	}
	f.standbyPort = f.portOf("fo-1")
	e.waitReady("fo")
	e.sql("fo", "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	f.superuser = e.secret("fo-superuser", "password")
	for ordinal := 1; ordinal < int(replicas); ordinal++ {
		f.waitRows("fo-"+strconv.Itoa(ordinal), "1")
	}
	waitDatabase(t, e, "the primary watched", func(ct *assert.CollectT, d *dbv1.Database) {
		c := conditionOf(d, database.ConditionFailover)
		require.NotNil(ct, c)
		assert.Equal(ct, "PrimaryHealthy", c.Reason, c.Message)
	})
	return f
}

// waitRows waits until pod's server holds exactly the rows ids (ordered,
// comma-separated): a standby has streamed them.
func (f *failoverSetup) waitRows(pod, ids string) {
	f.e.t.Helper()
	require.EventuallyWithT(f.e.t, func(ct *assert.CollectT) {
		out, err := f.psql(pod, "SELECT string_agg(id::text, ',' ORDER BY id) FROM rows")
		assert.NoError(ct, err, out)
		assert.Equal(ct, ids, out)
	}, 2*time.Minute, 200*time.Millisecond, "%s holds rows %s", pod, ids)
}

// psql runs sql as the superuser on pod's server.
func (f *failoverSetup) psql(pod, sql string) (string, error) {
	return pgtest.PSQL(f.e.bin, f.portOf(pod), "postgres", f.superuser, appDatabase, sql)
}

// serveReadWrite listens for fo-rw on 127.0.0.1 and returns its port:
// each connection goes to the server of the pod labelled primary when it
// is made, as the read-write Service's endpoints do (its selector is the
// role label); none labelled, or its server not reached: the connection
// is closed.
func (f *failoverSetup) serveReadWrite() string {
	t := f.e.t
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go f.forwardToPrimary(conn)
		}
	}()
	_, port, err := net.SplitHostPort(l.Addr().String())
	require.NoError(t, err)
	return port
}

func (f *failoverSetup) forwardToPrimary(conn net.Conn) {
	defer conn.Close()
	var pods corev1.PodList
	if err := f.e.c.List(context.Background(), &pods, client.InNamespace(f.e.ns), client.MatchingLabels{database.LabelRole: "primary"}); err != nil {
		return
	}
	var target string
	for _, p := range pods.Items {
		if port := f.portOf(p.Name); port != "" {
			target = "127.0.0.1:" + port
		}
	}
	if target == "" {
		return
	}
	if f.partitioned.Load() {
		return
	}
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { f.copyAcrossThePartition(up, conn); done <- struct{}{} }()
	go func() { f.copyAcrossThePartition(conn, up); done <- struct{}{} }()
	<-done
}

// copyAcrossThePartition copies src to dst, holding what it read while
// the partition lasts: neither end sees the connection close, and
// nothing gets through.
func (f *failoverSetup) copyAcrossThePartition(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for f.partitioned.Load() {
			time.Sleep(50 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// partition cuts fo-rw, the standbys' way to the primary, as a network
// partition does: open connections deliver nothing (and do not close),
// new ones are closed at once; until the test ends.
func (f *failoverSetup) partition() {
	f.partitioned.Store(true)
	f.e.t.Cleanup(func() { f.partitioned.Store(false) })
}

// waitReadWriteRoutesTo waits until pod is the only pod labelled
// primary: fo-rw (serveReadWrite) then sends every new connection to its
// server.
func (f *failoverSetup) waitReadWriteRoutesTo(pod string) {
	f.e.t.Helper()
	require.EventuallyWithT(f.e.t, func(ct *assert.CollectT) {
		var pods corev1.PodList
		require.NoError(ct, f.e.c.List(context.Background(), &pods, client.InNamespace(f.e.ns), client.MatchingLabels{database.LabelRole: "primary"}))
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		assert.Equal(ct, []string{pod}, names, "the pods labelled primary")
	}, time.Minute, 200*time.Millisecond, "fo-rw never routed to %s alone", pod)
}

// portOf is pod's server port ("" before it was started; the proxy reads
// it while servers start).
func (f *failoverSetup) portOf(pod string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ports[pod]
}

// TestTheOperatorFailsOverARealPrimary: the reconciler itself, on the
// kwok cluster, with a real primary and its streaming standby on the host
// and the agent binary beside each (pods' names dialled at 127.0.0.1):
// the primary's server killed and not restarted, the operator fences it,
// promotes the standby, names it in status.currentPrimary, the ConfigMap
// and the role labels, and records the failover; the new primary takes
// writes and holds every committed row.
func TestTheOperatorFailsOverARealPrimary(t *testing.T) {
	t.Parallel()
	f := newFailoverSetup(t)
	e, primary, standbyPort, superuser := f.e, f.primary, f.standbyPort, f.superuser
	require.NoError(t, syscall.Kill(-primary.Cmd.Process.Pid, syscall.SIGKILL))
	primary.Stop(t)

	got := waitDatabase(t, e, "failed over", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotEmpty(ct, d.Status.Failovers)
		assert.Equal(ct, dbv1.FailoverCompleted, d.Status.Failovers[len(d.Status.Failovers)-1].Phase, "%+v", d.Status.Failovers)
	})
	rec := got.Status.Failovers[len(got.Status.Failovers)-1]
	assert.Equal(t, "fo-0", rec.From)
	assert.Equal(t, "fo-1", rec.To)
	assert.True(t, rec.Fenced, rec.FenceMessage)
	assert.NotEmpty(t, rec.ToLSN)
	assert.Len(t, got.Status.Failovers, 1, "one failover")
	assert.Equal(t, "fo-1", got.Status.CurrentPrimary)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var cm corev1.ConfigMap
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: "fo-scripts"}, &cm))
		assert.Equal(ct, "fo-1", cm.Data[engine.ScriptsPrimaryKey])
		var p corev1.Pod
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: "fo-1"}, &p))
		assert.Equal(ct, "primary", p.Labels[database.LabelRole])
	}, time.Minute, 200*time.Millisecond)
	out2, err := pgtest.PSQL(e.bin, standbyPort, "postgres", superuser, appDatabase, "INSERT INTO rows VALUES (2); SELECT string_agg(id::text, ',' ORDER BY id) FROM rows")
	require.NoError(t, err, "the new primary takes writes: %s", out2)
	assert.Contains(t, out2, "1,2")
}

func conditionOf(d *dbv1.Database, kind string) *metav1.Condition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == kind {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

func waitDatabase(t *testing.T, e *endToEnd, what string, check func(*assert.CollectT, *dbv1.Database)) *dbv1.Database {
	t.Helper()
	var cur dbv1.Database
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: "fo"}, &cur))
		check(ct, &cur)
	}, 2*time.Minute, 200*time.Millisecond, "Database fo: %s", what)
	return &cur
}

// An operator that stopped mid-failover left its record at Promoting
// (the old primary fenced, the standby promoted, the promotion not yet
// recorded): the operator resumes from the status, promotes nothing
// again (the standby's timeline is 2: one promotion), and completes the
// record, naming the standby the primary.
func TestTheOperatorResumesAFailoverItsPredecessorBeganWithoutASecondPromotion(t *testing.T) {
	t.Parallel()
	f := newFailoverSetup(t)
	e := f.e
	ctx := context.Background()
	var op corev1.Secret
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "fo-instance-operator"}, &op))
	tlsConfig, err := instance.ClientTLSConfig(op.Data[instance.CACertKey], op.Data[instance.ClientCertKey], op.Data[instance.ClientKeyKey])
	require.NoError(t, err)
	predecessor := instance.NewClient(tlsConfig, instance.DefaultPort, instance.WithDialContext(f.agents.DialContext))
	host := func(pod string) string { return instance.PodHosts(pod, "fo-headless", e.ns)[0] }

	// What the stopped operator did and recorded.
	started := metav1.NewTime(time.Now())
	_, err = predecessor.Fence(ctx, host("fo-0"))
	require.NoError(t, err)
	st, err := predecessor.Promote(ctx, host("fo-1"))
	require.NoError(t, err)
	require.Equal(t, int64(2), st.Timeline)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur dbv1.Database
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "fo"}, &cur); err != nil {
			return err
		}
		cur.Status.Failovers = []dbv1.FailoverRecord{{Started: started, Phase: dbv1.FailoverPromoting, From: "fo-0", To: "fo-1", Fenced: true, Reason: "the predecessor's choice"}}
		return e.c.Status().Update(ctx, &cur)
	}))

	got := waitDatabase(t, e, "the failover completed", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Len(ct, d.Status.Failovers, 1)
		assert.Equal(ct, dbv1.FailoverCompleted, d.Status.Failovers[0].Phase)
		assert.Equal(ct, "fo-1", d.Status.CurrentPrimary)
	})
	assert.Equal(t, "fo-1", got.Status.Failovers[0].To)
	st = statusOf(t, predecessor, host("fo-1"))
	assert.Equal(t, instance.RolePrimary, st.Role)
	assert.Equal(t, int64(2), st.Timeline, "promoted once")
	out, err := pgtest.PSQL(e.bin, f.standbyPort, "postgres", f.superuser, appDatabase, "INSERT INTO rows VALUES (2); SELECT count(*) FROM rows")
	require.NoError(t, err, "%s", out)
}
