package node

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// serverContainer is the PostgreSQL container of a Database's pod (the
// agent's, deckhand-instance, sorts before it in the pod's status).
const serverContainer = "postgres"

// failoverCluster is a Database with failover on, run by the chart's
// operator on the real node, and what the tests need to hurt it and
// watch it.
type failoverCluster struct {
	t      testing.TB
	ctx    context.Context
	cfg    *rest.Config
	cs     clientset
	c      client.Client
	ns     string
	name   string
	agents *instance.Client
}

// startFailoverCluster makes a PostgreSQL Database with failover on
// (primaryGoneAfter its default unless gone is set) and waits for it to be
// Ready with every pod running the agent.
func startFailoverCluster(ctx context.Context, t testing.TB, replicas int32, gone time.Duration, change ...func(*dbv1.Database)) *failoverCluster {
	t.Helper()
	cfg, cs := clientFor(t)
	operatorDeployment(ctx, t, cs)
	helmUpgrade(ctx, t, "--set", "controllers.database.enabled=true")
	f := &failoverCluster{t: t, ctx: ctx, cfg: cfg, cs: cs, c: crClient(t, cfg), ns: namespace(ctx, t, cs), name: "pay"}
	spec := &dbv1.FailoverSpec{Enabled: ptr.To(true)}
	if gone > 0 {
		spec.PrimaryGoneAfter = &metav1.Duration{Duration: gone}
	}
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: f.name, Namespace: f.ns},
		Spec: dbv1.DatabaseSpec{Name: "ledger", StorageSize: "64Mi", Image: imageRef(t, "postgres"),
			Replicas: replicas, Failover: spec},
	}
	for _, c := range change {
		c(db)
	}
	require.NoError(t, f.c.Create(ctx, db))
	waitDatabaseReady(ctx, t, f.c, f.ns, f.name)
	f.waitWatching()
	f.agents = f.agentClient()
	return f
}

// waitWatching waits for the operator to watch the primary (condition
// Failover True, PrimaryHealthy): the pods run the agent and no rollout is
// under way, so a fault from now on is a fault, not a restart on purpose.
func (f *failoverCluster) waitWatching() {
	f.t.Helper()
	var db dbv1.Database
	err := wait.PollUntilContextTimeout(f.ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.name}, &db); err != nil {
			return false, nil
		}
		for _, c := range db.Status.Conditions {
			if c.Type == "Failover" {
				return c.Status == metav1.ConditionTrue && c.Reason == "PrimaryHealthy", nil
			}
		}
		return false, nil
	})
	require.NoError(f.t, err, "the operator does not watch the primary: %+v", db.Status.Conditions)
}

func (f *failoverCluster) database() dbv1.Database {
	f.t.Helper()
	var db dbv1.Database
	require.NoError(f.t, f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: f.name}, &db))
	return db
}

// updateDatabase changes the Database and writes it, reading it again
// when the operator wrote it in between (its status, its finalizer): a
// user's kubectl edit does the same.
func (f *failoverCluster) updateDatabase(change func(*dbv1.Database)) {
	f.t.Helper()
	require.NoError(f.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		db := f.database()
		change(&db)
		return f.c.Update(f.ctx, &db)
	}))
}

func (f *failoverCluster) primary() string {
	f.t.Helper()
	p := f.database().Status.CurrentPrimary
	require.NotEmpty(f.t, p, "status.currentPrimary")
	return p
}

// standbyOf is the first pod that is not primary.
func (f *failoverCluster) standbyOf(primary string) string {
	f.t.Helper()
	pods := f.pods()
	i := slices.IndexFunc(pods, func(p string) bool { return p != primary })
	require.GreaterOrEqual(f.t, i, 0, "no pod but the primary %s", primary)
	return pods[i]
}

func (f *failoverCluster) pods() []string {
	var out []string
	for i := int32(0); i < f.database().Spec.Replicas; i++ {
		out = append(out, fmt.Sprintf("%s-%d", f.name, i))
	}
	return out
}

// agentClient asks the pods' agents with the operator's own certificate
// (the Secret the operator wrote), at each pod's address, checking the
// pod's name as the operator does. A pod's address is read from the API
// server, or, while that does not answer (a test stopped it), the last
// one read.
func (f *failoverCluster) agentClient() *instance.Client {
	f.t.Helper()
	var op corev1.Secret
	require.NoError(f.t, f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: f.name + "-instance-operator"}, &op))
	tlsConfig, err := instance.ClientTLSConfig(op.Data[instance.CACertKey], op.Data[instance.ClientCertKey], op.Data[instance.ClientKeyKey])
	require.NoError(f.t, err)
	var mu sync.Mutex
	lastIP := map[string]string{}
	podIP := func(ctx context.Context, name string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		pod, err := f.cs.CoreV1().Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			lastIP[name] = pod.Status.PodIP
		case lastIP[name] == "" || apierrors.IsNotFound(err):
			return "", err
		}
		return lastIP[name], nil
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		name := strings.SplitN(host, ".", 2)[0]
		ip, err := podIP(ctx, name)
		if err != nil {
			return nil, err
		}
		if !onANode(ip) {
			return nil, fmt.Errorf("pod %s has no address in a node's pod range (%q)", name, ip)
		}
		return (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, net.JoinHostPort(ip, strconv.Itoa(instance.DefaultPort)))
	}
	return instance.NewClient(tlsConfig, instance.DefaultPort, instance.WithDialContext(dial))
}

func (f *failoverCluster) agentStatus(pod string) (instance.Status, error) {
	ctx, cancel := context.WithTimeout(f.ctx, 3*time.Second)
	defer cancel()
	return f.agents.Status(ctx, instance.PodHosts(pod, f.name+"-headless", f.ns)[0])
}

// dataDir is the host directory of the pod's PGDATA (the node's hostPath
// PersistentVolume of its claim, then pgdata).
func (f *failoverCluster) dataDir(pod string) string {
	f.t.Helper()
	pvc, err := f.cs.CoreV1().PersistentVolumeClaims(f.ns).Get(f.ctx, "data-"+pod, metav1.GetOptions{})
	require.NoError(f.t, err)
	pv, err := f.cs.CoreV1().PersistentVolumes().Get(f.ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	require.NoError(f.t, err)
	require.NotNil(f.t, pv.Spec.HostPath, "PersistentVolume %s is not a hostPath", pv.Name)
	return filepath.Join(pv.Spec.HostPath.Path, "pgdata")
}

// killServer kills the pod's PostgreSQL container from the node's side
// (SIGKILL to its task through containerd, as a crash or the OOM killer
// would). It returns the killed container's ID and its restart count.
func (f *failoverCluster) killServer(pod string) (string, int32) {
	f.t.Helper()
	id, restarts := f.containerID(pod, serverContainer)
	f.ctr("tasks", "kill", "--signal", "SIGKILL", id)
	return "containerd://" + id, restarts
}

// containerID is containerd's ID of the pod's container, and its restart
// count.
func (f *failoverCluster) containerID(pod, container string) (string, int32) {
	f.t.Helper()
	p, err := f.cs.CoreV1().Pods(f.ns).Get(f.ctx, pod, metav1.GetOptions{})
	require.NoError(f.t, err)
	for _, s := range p.Status.ContainerStatuses {
		if s.Name != container {
			continue
		}
		id, ok := strings.CutPrefix(s.ContainerID, "containerd://")
		require.True(f.t, ok, "container %q", s.ContainerID)
		return id, s.RestartCount
	}
	require.FailNow(f.t, "no such container", "%s in pod %s", container, pod)
	return "", 0
}

// assertRejoinedWithoutRestart: the old primary's server container, which
// the kubelet had restarted restarts times before its fence, was not
// restarted again: its supervisor started the entrypoint again after the
// fence (a restart would grow the kubelet's back-off with each demotion).
func (f *failoverCluster) assertRejoinedWithoutRestart(old string, restarts int32) {
	f.t.Helper()
	_, now := f.containerID(old, serverContainer)
	assert.Equal(f.t, restarts, now, "the kubelet restarted %s's server container", old)
	assert.Contains(f.t, f.serverLog(old), "supervise: the server's entrypoint ended", "its supervisor started the entrypoint again")
}

// ctr runs containerd's ctr on the first node (hack/node.sh ctr) and
// returns its output.
func (f *failoverCluster) ctr(args ...string) string {
	f.t.Helper()
	out, err := runCtr(f.ctx, args...)
	require.NoError(f.t, err, "hack/node.sh ctr %v:\n%s", args, out)
	return string(out)
}

// ctrOn runs containerd's ctr on node (hack/node.sh ctr-on) and returns
// its output.
func (f *failoverCluster) ctrOn(node string, args ...string) string {
	f.t.Helper()
	out, err := exec.CommandContext(f.ctx, "../../hack/node.sh", append([]string{"ctr-on", node}, args...)...).CombinedOutput()
	require.NoError(f.t, err, "hack/node.sh ctr-on %s %v:\n%s", node, args, out)
	return string(out)
}

// runCtr runs containerd's ctr on the node (hack/node.sh ctr), for
// callers that look at a failure before failing the test.
func runCtr(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "../../hack/node.sh", append([]string{"ctr"}, args...)...).CombinedOutput()
}

// waitFailedOver waits for a completed failover begun after `since`, and
// returns its record.
func (f *failoverCluster) waitFailedOver(since time.Time) dbv1.FailoverRecord {
	f.t.Helper()
	var db dbv1.Database
	var recs []dbv1.FailoverRecord
	err := wait.PollUntilContextTimeout(f.ctx, 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.name}, &db); err != nil {
			return false, nil
		}
		recs = failoversSince(db.Status.Failovers, since)
		return len(recs) > 0 && recs[len(recs)-1].Phase == dbv1.FailoverCompleted, nil
	})
	require.NoError(f.t, err, "no completed failover: %+v, conditions %+v", db.Status.Failovers, db.Status.Conditions)
	return recs[len(recs)-1]
}

// failoversSince are the records of failovers begun after `since`
// (status.failovers keeps the last ten).
func failoversSince(recs []dbv1.FailoverRecord, since time.Time) []dbv1.FailoverRecord {
	var out []dbv1.FailoverRecord
	for _, r := range recs {
		if r.Started.After(since) {
			out = append(out, r)
		}
	}
	return out
}

// eventReasons are the reasons of the Database's Events.
func (f *failoverCluster) eventReasons() map[string]string {
	f.t.Helper()
	events, err := f.cs.CoreV1().Events(f.ns).List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Database,involvedObject.name=" + f.name})
	require.NoError(f.t, err)
	out := map[string]string{}
	for _, e := range events.Items {
		out[e.Reason] = e.Message
	}
	return out
}

// waitEvent waits for an Event of the Database with reason (waitForEvent).
func (f *failoverCluster) waitEvent(reason string) {
	f.t.Helper()
	waitForEvent(f.ctx, f.t, "Database "+f.name, reason, func() string {
		var lines []string
		for r, m := range f.eventReasons() {
			lines = append(lines, r+": "+m)
		}
		return strings.Join(lines, "\n")
	})
}

// writer is a client pod that inserts numbered rows through <name>-rw in a
// loop, one connection each (as an application reconnecting after an
// error would), and logs each outcome with the time: "ack N <unix time>"
// once the commit returned, "fail N <unix time> <error>" otherwise.
type writer struct {
	f   *failoverCluster
	pod *corev1.Pod
}

// writerScript: a psql that does not return in 5 s counts as failed
// (a connection to an address that no longer answers).
const writerScript = `uri=$(cat /app/uri)
export PGCONNECT_TIMEOUT=3
until psql "$uri" -X -q -c 'CREATE TABLE IF NOT EXISTS acks (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())' 2>/dev/null; do sleep 1; done
echo started
i=0
while [ ! -e /tmp/stop ]; do
	i=$((i + 1))
	if err=$(timeout 5 psql "$uri" -X -q -v ON_ERROR_STOP=1 -c "INSERT INTO acks (id) VALUES ($i)" 2>&1); then
		echo "ack $i $(date +%s.%N)"
	else
		echo "fail $i $(date +%s.%N) $(echo "$err" | tr '\n' ' ' | cut -c 1-160)"
	fi
	sleep 0.05
done
echo stopped
exec sleep 3600`

func (f *failoverCluster) startWriter(name string) *writer {
	f.t.Helper()
	return f.startWriterScript(name, writerScript)
}

// startWriterScript is startWriter running script; place changes its pod
// (onSecondNode).
func (f *failoverCluster) startWriterScript(name, script string, place ...func(*corev1.Pod) *corev1.Pod) *writer {
	f.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "writer", Image: imageRef(f.t, "postgres"),
				Command:   []string{"sh", "-c", script},
				Resources: testPodResources(),
				// The app Secret also where its verifying strings look for
				// its CA.
				VolumeMounts: []corev1.VolumeMount{{Name: "app", MountPath: "/app", ReadOnly: true},
					{Name: "app", MountPath: database.CAMountDir, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "app", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: f.name + "-app"},
			}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	for _, p := range place {
		pod = p(pod)
	}
	_, err := f.cs.CoreV1().Pods(f.ns).Create(f.ctx, pod, metav1.CreateOptions{})
	require.NoError(f.t, err)
	w := &writer{f: f, pod: runningPod(f.ctx, f.t, f.cs, f.ns, name)}
	w.waitAcks(3)
	return w
}

// writeOutcome is one write of the writer's log.
type writeOutcome struct {
	id   int
	ok   bool
	at   time.Time
	fail string
}

func (w *writer) log() []writeOutcome {
	w.f.t.Helper()
	out, err := w.readLog()
	require.NoError(w.f.t, err)
	return out
}

// readLog is the writer's log so far, read through the API server.
func (w *writer) readLog() ([]writeOutcome, error) {
	b, err := w.f.cs.CoreV1().Pods(w.f.ns).GetLogs(w.pod.Name, &corev1.PodLogOptions{}).DoRaw(w.f.ctx)
	if err != nil {
		return nil, err
	}
	var out []writeOutcome
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 4)
		if len(fields) < 3 || (fields[0] != "ack" && fields[0] != "fail") {
			continue
		}
		id, err1 := strconv.Atoi(fields[1])
		secs, err2 := strconv.ParseFloat(fields[2], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		o := writeOutcome{id: id, ok: fields[0] == "ack", at: time.Unix(0, int64(secs*1e9))}
		if len(fields) == 4 {
			o.fail = fields[3]
		}
		out = append(out, o)
	}
	return out, nil
}

// waitAcks waits for n more acknowledged writes than now.
func (w *writer) waitAcks(n int) {
	w.f.t.Helper()
	base := countAcks(w.log())
	err := wait.PollUntilContextTimeout(w.f.ctx, 500*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return countAcks(w.log()) >= base+n, nil
	})
	require.NoError(w.f.t, err, "the writer got no %d more acknowledged writes through -rw; its last outcomes: %+v", n, lastOutcomes(w.log(), 5))
}

// stop ends the loop and returns its outcomes.
func (w *writer) stop() []writeOutcome {
	w.f.t.Helper()
	_, err := tryExec(w.f.ctx, w.f.cfg, w.f.cs, w.pod, "touch", "/tmp/stop")
	require.NoError(w.f.t, err)
	require.Contains(w.f.t, waitForLogs(w.f.ctx, w.f.t, w.f.cs, w.f.ns, w.pod.Name, "stopped"), "stopped")
	return w.log()
}

// committedIDs are the rows the table holds now, read through -rw.
func (w *writer) committedIDs() map[int]bool {
	w.f.t.Helper()
	out := psql(w.f.ctx, w.f.t, w.f.cfg, w.f.cs, w.pod, "rw", "SELECT string_agg(id::text, ',') FROM acks")
	ids := map[int]bool{}
	for _, s := range strings.Split(out, ",") {
		if id, err := strconv.Atoi(s); err == nil {
			ids[id] = true
		}
	}
	return ids
}

func countAcks(log []writeOutcome) int {
	n := 0
	for _, o := range log {
		if o.ok {
			n++
		}
	}
	return n
}

func lastOutcomes(log []writeOutcome, n int) []writeOutcome {
	if len(log) > n {
		return log[len(log)-n:]
	}
	return log
}

// outage is the write outage the writer saw after a fault at `at`: from
// its first failed write after `at` to its first acknowledged write after
// that failure. Zero when no write failed.
func outage(log []writeOutcome, at time.Time) (time.Duration, writeOutcome) {
	var first *writeOutcome
	for i := range log {
		o := log[i]
		if o.at.Before(at) {
			continue
		}
		if first == nil && !o.ok {
			first = &log[i]
			continue
		}
		if first != nil && o.ok {
			return o.at.Sub(first.at), *first
		}
	}
	if first != nil {
		return -1, *first
	}
	return 0, writeOutcome{}
}

// outageSpan is every write outage the writer saw after a fault at `at`,
// as one span: from its first failed write after `at` to its first
// acknowledged write after its last failed one. outage ends with the first
// episode; a partition can bring a second, longer one (the old primary's
// connections cut, then -rw moving to the new one). Zero when no write
// failed; -1 when the last write failed.
func outageSpan(log []writeOutcome, at time.Time) time.Duration {
	_, first := outage(log, at)
	if first.at.IsZero() {
		return 0
	}
	last := -1
	for i, o := range log {
		if !o.ok && !o.at.Before(at) {
			last = i
		}
	}
	for _, o := range log[last+1:] {
		if o.ok {
			return o.at.Sub(first.at)
		}
	}
	return -1
}

// lostAcks are the acknowledged writes the table does not hold.
func lostAcks(log []writeOutcome, committed map[int]bool) []writeOutcome {
	var lost []writeOutcome
	for _, o := range log {
		if o.ok && !committed[o.id] {
			lost = append(lost, o)
		}
	}
	return lost
}

// primaryWatcher asks every pod's agent, over and over, whether its
// server accepts writes (up, a primary, not fenced) and remembers every
// moment two did.
type primaryWatcher struct {
	mu      sync.Mutex
	samples int
	two     []string
	stop    func()
	done    chan struct{}
}

func (f *failoverCluster) watchPrimaries() *primaryWatcher {
	ctx, cancel := context.WithCancel(f.ctx)
	w := &primaryWatcher{stop: cancel, done: make(chan struct{})}
	pods := f.pods()
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			var writable []string
			var wg sync.WaitGroup
			var mu sync.Mutex
			for _, pod := range pods {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st, err := f.agentStatus(pod)
					if err == nil && st.ServerUp && st.Role == instance.RolePrimary && !st.Fenced {
						mu.Lock()
						writable = append(writable, pod)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			w.mu.Lock()
			w.samples++
			if len(writable) > 1 {
				w.two = append(w.two, time.Now().Format(time.RFC3339Nano)+" "+strings.Join(writable, ","))
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

// finish stops the watch and returns how many rounds it took and the
// moments two servers accepted writes.
func (w *primaryWatcher) finish() (int, []string) {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples, w.two
}

// logf prints a measurement both to the test log and, when
// DECKHAND_FAILOVER_REPORT names a file, appends it there.
func logf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Logf(format, args...)
	if path := os.Getenv("DECKHAND_FAILOVER_REPORT"); path != "" {
		if fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(fh, format+"\n", args...)
			_ = fh.Close()
		}
	}
}

// A primary that cannot come back: its PostgreSQL container killed
// (SIGKILL from the node) and its restart prevented by making its data
// directory unreadable on the host (chmod 000 of the volume's pgdata, as a
// failed disk would: the kubelet restarts the container, and bootstrap.sh
// cannot start the server). A client pod writes numbered rows through
// <name>-rw throughout. The operator fences the old primary, promotes the
// most advanced standby, and -rw takes writes again; status.failovers
// records it, with Events; every write acknowledged more than a second
// before the kill is on the new primary (replication is asynchronous:
// the last moment's are measured, not promised); no two servers accepted
// writes at any moment the agents were asked.
func TestRealNodeFailsOverAPrimaryThatCannotComeBack(t *testing.T) {
	parallel(t, 70*time.Second) // see the package comment: its own namespace, the shared operator
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	f := startFailoverCluster(ctx, t, 3, 0)
	old := f.primary()
	w := f.startWriter("writer")
	watch := f.watchPrimaries()

	data := f.dataDir(old)
	require.NoError(t, os.Chmod(data, 0))
	t.Cleanup(func() { _ = os.Chmod(data, 0o700) })
	killedAt := time.Now()
	f.killServer(old)

	rec := f.waitFailedOver(killedAt.Add(-time.Minute))
	w.waitAcks(5)
	log := w.stop()
	samples, two := watch.finish()

	assert.Equal(t, old, rec.From)
	assert.NotEqual(t, old, rec.To)
	assert.Equal(t, rec.To, f.primary(), "status.currentPrimary names the promoted standby")
	assert.Equal(t, rec.To, servedBy(ctx, t, f.cs, f.ns, f.name+"-rw"), "-rw selects the new primary")
	assert.True(t, rec.Fenced, "the old primary's agent fenced it: %s", rec.FenceMessage)
	assert.NotEmpty(t, rec.ToLSN)
	for _, r := range []string{"PrimaryGone", "Promoting", "FailedOver"} {
		f.waitEvent(r)
	}
	st, err := f.agentStatus(old)
	if assert.NoError(t, err, "the old primary's agent") {
		// Fenced, or (an operator that lifts the fence once the pod names
		// the new primary) a standby: never a primary.
		assert.False(t, st.ServerUp && st.Role == instance.RolePrimary, "the old primary runs as a primary: %+v", st)
	}
	assert.Empty(t, two, "two servers accepted writes at once (%d rounds asked)", samples)

	committed := w.committedIDs()
	lost := lostAcks(log, committed)
	for _, o := range lost {
		assert.True(t, o.at.After(killedAt.Add(-time.Second)), "write %d, acknowledged at %s (the kill at %s), is not on the new primary", o.id, o.at, killedAt)
	}
	down, firstFail := outage(log, killedAt.Add(-time.Second))
	require.Positive(t, down, "writes failed from %+v and never came back", firstFail)
	logf(t, "primary that cannot come back (3 replicas, primaryGoneAfter 10s): write outage %s (first failed write %.1fs after the kill: %s); failover started %.1fs and finished %.1fs after the kill, -rw took writes %.1fs after the promotion; %d acknowledged writes, %d lost; bytesPossiblyLost %v; %d agent rounds, %d with two writable",
		down.Round(100*time.Millisecond), firstFail.at.Sub(killedAt).Seconds(), firstFail.fail,
		rec.Started.Sub(killedAt).Seconds(), rec.Finished.Sub(killedAt).Seconds(),
		firstFail.at.Add(down).Sub(rec.Finished.Time).Seconds(), countAcks(log), len(lost), ptrString(rec.BytesPossiblyLost), samples, len(two))

	// The standby not promoted follows the new primary (timeline 2).
	for _, pod := range f.pods() {
		if pod != old && pod != rec.To {
			f.waitFollowing(pod, rec.To)
		}
	}
	// The disk comes back: the operator kept the old primary fenced while
	// its data directory could not be read (so its container waits on
	// the fence instead of failing into the kubelet's back-off), and lifts
	// the fence now; it rejoins as a standby of the new one (pg_rewind)
	// and the Database is Ready with every replica. Were the fence lifted
	// while the directory could not be read, its entrypoint would take the
	// unreadable directory for an empty one and clone beside it at every
	// restart, and a clone finished once the disk was back would be moved
	// into the old directory, start as a second primary, be fenced, and
	// stay fenced (docs/design/database-failover.md).
	require.NoError(t, os.Chmod(data, 0o700))
	back := time.Now()
	f.liftFence(old, rec.To)
	var db dbv1.Database
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.name}, &db); err != nil {
			return false, nil
		}
		return db.Status.Phase == dbv1.PhaseReady && db.Status.ReadyReplicas == db.Spec.Replicas, nil
	})
	require.NoError(t, err, "the old primary %s had not rejoined 4 minutes after its disk came back: phase %q, ready %s; its server log ends:\n%s",
		old, db.Status.Phase, db.Status.Ready, lastLines(f.serverLog(old), 20))
	f.waitFollowing(old, rec.To)
	logf(t, "the old primary rejoined %.1fs after its disk came back", time.Since(back).Seconds())
	assert.Contains(t, f.serverLog(old), "rewound", "the old primary rejoined through pg_rewind")
}

// A primary that hangs instead of dying: its PostgreSQL container frozen
// (the cgroup freezer, as a stalled disk or a paused VM stops it) while
// its pod and agent stay up, with a client writing through <name>-rw. The
// server answers nothing and acts on no signal, so the agent's fence
// sends an immediate shutdown and, past instance.ImmediateStopWait,
// SIGKILLs every process of it: it answers fenced while they are still
// frozen (each dies before it answers a client again), and the standby is
// promoted at once, with no naming first and no standby detached. Thawed,
// the old primary's processes die; it never runs as a primary again, and
// rejoins as a standby through crash recovery and pg_rewind. No write
// acknowledged before the hang is lost; no two servers accepted writes at
// any moment the agents were asked. A second client writes through the
// multi-host string, which lists the hung server first: it passes over it
// (connect_timeout) to the new primary, and no write of it is
// acknowledged by the old one, frozen or thawed.
func TestRealNodeFailsOverAHungPrimaryWithoutWaitingForIt(t *testing.T) {
	parallel(t, 75*time.Second) // see the package comment: its own namespace, the shared operator
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	f := startFailoverCluster(ctx, t, 2, 0)
	old := f.primary()
	w := f.startWriter("writer")
	mw := f.startMultiHostWriter("multihost-writer")
	watch := f.watchPrimaries()
	_, restarts := f.containerID(old, serverContainer)

	hungAt := time.Now()
	thaw := f.freezeServer(old)
	rec := f.waitFailedOver(hungAt.Add(-time.Second))
	down, firstFail := w.waitOutageOver(hungAt)
	multiDown, _ := mw.waitOutageOver(hungAt)
	assert.True(t, rec.Fenced, "the agent fenced the hung server: %s", rec.FenceMessage)
	assert.Contains(t, rec.FenceMessage, "SIGKILL")
	assert.Nil(t, rec.NamedFirst, "a killed server is not waited for")
	assert.Nil(t, rec.StandbysDetached)
	assert.Equal(t, rec.To, servedBy(ctx, t, f.cs, f.ns, f.name+"-rw"), "-rw selects the new primary")
	thawedAt := time.Now()
	thaw()

	f.liftFence(old, rec.To)
	waitDatabaseReady(ctx, t, f.c, f.ns, f.name)
	f.waitFollowing(old, rec.To)
	assert.Contains(t, f.serverLog(old), "rewound", "the old primary rejoined through pg_rewind")
	f.assertRejoinedWithoutRestart(old, restarts)
	w.waitAcks(3)
	mw.waitAcks(3)
	log, multiLog := w.stop(), mw.stop()
	samples, two := watch.finish()
	assert.Empty(t, two, "two servers accepted writes at once (%d rounds asked)", samples)
	committed := w.committedIDs()
	lost := checkNoAckLost(t, log, committed, hungAt)
	multiLost := checkNoAckLost(t, multiLog, committed, hungAt)
	logf(t, "hung primary (2 replicas, primaryGoneAfter 10s): write outage through -rw %s, through multihost-uri %s (first failed -rw write %.1fs after the hang); failover started %.1fs and finished %.1fs after the hang; rejoined %.1fs after the thaw; %d and %d acknowledged writes, %d and %d lost; %d agent rounds, %d with two writable",
		down.Round(100*time.Millisecond), multiDown.Round(100*time.Millisecond), firstFail.at.Sub(hungAt).Seconds(), rec.Started.Sub(hungAt).Seconds(), rec.Finished.Sub(hungAt).Seconds(),
		time.Since(thawedAt).Seconds(), countAcks(log), countAcks(multiLog), lost, multiLost, samples, len(two))
}

// waitSteady waits for the state a fault should find: the Database Ready,
// the operator watching its primary, and every standby streaming from it,
// as their agents say now (the Database's status may still be the one
// from before a restart that just ended).
func (f *failoverCluster) waitSteady() {
	f.t.Helper()
	waitDatabaseReady(f.ctx, f.t, f.c, f.ns, f.name)
	f.waitWatching()
	primary := f.primary()
	for _, pod := range f.pods() {
		if pod != primary {
			f.waitFollowing(pod, primary)
		}
	}
}

// waitFollowing waits for the pod's server to be a standby streaming on
// the new primary's timeline.
func (f *failoverCluster) waitFollowing(pod, primary string) {
	f.t.Helper()
	// Both agents asked again until the deadline: on a busy node one
	// question can time out (the test's client, not the operator's).
	var want, st instance.Status
	var wantErr error
	err := wait.PollUntilContextTimeout(f.ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		if want, wantErr = f.agentStatus(primary); wantErr != nil {
			return false, nil
		}
		var err error
		st, err = f.agentStatus(pod)
		return err == nil && st.ServerUp && st.Role == instance.RoleStandby && st.Streaming && st.Timeline == want.Timeline, nil
	})
	require.NoError(f.t, wantErr, "the primary's agent")
	require.NoError(f.t, err, "%s does not stream from %s on timeline %d: %+v", pod, primary, want.Timeline, st)
}

// liftFence lifts the fence of the old primary through its agent, as a
// person does (docs/guides/database-failover.md), once its pod reads the
// new primary's name: lifted before, it would start as a primary again. It
// reads the name in the server container, which the kubelet may hold back
// for up to 5 minutes (CrashLoopBackOff) when the same pod's server failed
// to start again and again within 10 minutes: the benchmark's "cannot
// come back" fault strikes each pod every third run, and a run has waited
// past 3 minutes for it.
func (f *failoverCluster) liftFence(old, primary string) {
	f.t.Helper()
	pod, err := f.cs.CoreV1().Pods(f.ns).Get(f.ctx, old, metav1.GetOptions{})
	require.NoError(f.t, err)
	var named string
	err = wait.PollUntilContextTimeout(f.ctx, time.Second, 6*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := tryExecIn(ctx, f.cfg, f.cs, pod, serverContainer, "cat", "/deckhand/scripts/primary")
		named = strings.TrimSpace(out)
		return err == nil && named == primary, nil
	})
	require.NoError(f.t, err, "%s still reads %q as the primary", old, named)
	// An operator that lifts the fence itself may have done so already.
	if st, err := f.agentStatus(old); err == nil && !st.Fenced {
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	_, err = f.agents.Unfence(ctx, instance.PodHosts(old, f.name+"-headless", f.ns)[0])
	if st, stErr := f.agentStatus(old); err != nil && (stErr != nil || st.Fenced) {
		require.NoError(f.t, err, "lifting the fence of %s", old)
	}
}

func (f *failoverCluster) serverLog(pod string) string {
	f.t.Helper()
	b, err := f.cs.CoreV1().Pods(f.ns).GetLogs(pod, &corev1.PodLogOptions{Container: serverContainer}).DoRaw(f.ctx)
	require.NoError(f.t, err)
	return string(b)
}

func ptrString(p *int64) string {
	if p == nil {
		return "unknown"
	}
	return strconv.FormatInt(*p, 10)
}

// waitOutageOver waits for the writer to have failed a write after `at`
// and to have been acknowledged one after that, and returns the outage.
func (w *writer) waitOutageOver(at time.Time) (time.Duration, writeOutcome) {
	w.f.t.Helper()
	var down time.Duration
	var first writeOutcome
	err := wait.PollUntilContextTimeout(w.f.ctx, time.Second, 5*time.Minute, true, func(context.Context) (bool, error) {
		// Asked again on an error: after an API-server fault the
		// log is read through a server that may refuse a moment more.
		log, err := w.readLog()
		if err != nil {
			return false, nil
		}
		down, first = outage(log, at)
		return down > 0, nil
	})
	require.NoError(w.f.t, err, "the writes of %s did not come back after %s (first failure %+v)", w.pod.Name, at, first)
	return down, first
}

// checkNoAckLost fails the test for every acknowledged write the table
// does not hold, but those acknowledged from a second before a fault to
// the first write that failed after it (asynchronous replication may
// lose them); it returns how many were lost.
func checkNoAckLost(t testing.TB, log []writeOutcome, committed map[int]bool, faults ...time.Time) int {
	t.Helper()
	lost := lostAcks(log, committed)
	for _, o := range lost {
		excused := false
		for _, at := range faults {
			_, firstFail := outage(log, at)
			excused = excused || (o.at.After(at.Add(-time.Second)) && o.at.Before(firstFail.at))
		}
		var since []string
		for _, at := range faults {
			since = append(since, fmt.Sprintf("%+.1fs", o.at.Sub(at).Seconds()))
		}
		assert.True(t, excused, "write %d, acknowledged %s after the faults, is not on the primary", o.id, strings.Join(since, "/"))
	}
	return len(lost)
}

// The primary's PostgreSQL container killed once (SIGKILL from the node;
// the kubelet restarts it, the server recovers from its WAL), then the
// primary's pod deleted (the StatefulSet makes it again on the same
// volume), with a client writing through <name>-rw throughout: writes
// come back after each, either on the same primary (it came back within
// primaryGoneAfter) or after one clean failover; no acknowledged write
// older than a second before a fault is lost; no two servers accepted
// writes at any moment the agents were asked.
func TestRealNodeRidesOutAPrimaryRestartAndAPodDeletion(t *testing.T) {
	parallel(t, 75*time.Second) // see the package comment: its own namespace, the shared operator
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	f := startFailoverCluster(ctx, t, 2, 0)
	w := f.startWriter("writer")
	watch := f.watchPrimaries()

	primary := f.primary()
	killedAt := time.Now()
	f.killServer(primary)
	down, _ := w.waitOutageOver(killedAt)
	afterKill := f.database().Status
	logf(t, "primary's container killed once (2 replicas): write outage %s; primary now %s (was %s), %d failovers",
		down.Round(100*time.Millisecond), afterKill.CurrentPrimary, primary, len(afterKill.Failovers))
	f.checkFailoversClean(afterKill.Failovers)
	if afterKill.CurrentPrimary == primary {
		assert.Contains(t, f.serverLog(primary), "the operator confirmed this pod is the primary",
			"the restarted primary's server started only on the operator's word")
	}

	// The next fault once the Database is Ready again and its standby
	// streams, as its agent says: a standby still reconnecting to a primary that restarted
	// moments ago (wal_retrieve_retry_interval, 5 s) has not received
	// what it took since, and a failover to it then loses those writes
	// (measured: 8 to 10, acknowledged in the second after the restart and
	// before the pod's deletion; docs/design/database-failover.md).
	// A restart slower than the bound (a loaded machine) is failed over:
	// the old primary rejoins once its fence is lifted.
	for _, rec := range failoversSince(afterKill.Failovers, killedAt.Add(-time.Second)) {
		f.liftFence(rec.From, rec.To)
	}
	f.waitSteady()
	w.waitAcks(3)
	primary = f.primary()
	deletedAt := time.Now()
	require.NoError(t, f.cs.CoreV1().Pods(f.ns).Delete(ctx, primary, metav1.DeleteOptions{}))
	down, _ = w.waitOutageOver(deletedAt)
	afterDelete := f.database().Status
	logf(t, "primary's pod deleted (2 replicas): write outage %s; primary now %s (was %s), %d failovers",
		down.Round(100*time.Millisecond), afterDelete.CurrentPrimary, primary, len(afterDelete.Failovers))
	f.checkFailoversClean(afterDelete.Failovers)

	w.waitAcks(3)
	log := w.stop()
	samples, two := watch.finish()
	assert.Empty(t, two, "two servers accepted writes at once (%d rounds asked)", samples)
	lost := checkNoAckLost(t, log, w.committedIDs(), killedAt, deletedAt)
	if lost > 0 {
		for _, r := range f.database().Status.Failovers {
			t.Logf("failover %+v", r)
		}
		for _, pod := range f.pods() {
			t.Logf("%s:\n%s", pod, f.serverLog(pod))
		}
	}
	logf(t, "restart and deletion: %d acknowledged writes, %d lost; %d agent rounds, %d with two writable", countAcks(log), lost, samples, len(two))
}

// checkFailoversClean: each failover recorded is completed, its old
// primary fenced, and no pod was promoted twice.
func (f *failoverCluster) checkFailoversClean(recs []dbv1.FailoverRecord) {
	f.t.Helper()
	promoted := map[string]int{}
	for _, r := range recs {
		assert.Equal(f.t, dbv1.FailoverCompleted, r.Phase, "failover %+v", r)
		assert.True(f.t, r.Fenced, "failover %+v: the old primary fenced", r)
		promoted[r.To]++
	}
	for pod, n := range promoted {
		assert.LessOrEqual(f.t, n, 1, "%s promoted %d times", pod, n)
	}
}

// An old primary cut off from the operator but not from its clients: its
// agent's port dropped inside its pod's network namespace (iptables
// through nsenter, from the node), so the operator sees it gone, fails
// over, and its fence does not reach it. A second client writes at the
// old primary's own address throughout (rows with negative ids), as a
// client that reached it directly would. Its pod shows its server
// running, so the operator names the standby the primary first (the
// record's namedFirst): the kubelet refreshes the old primary's mounted
// ConfigMap, its agent fences its own server, still cut off from the
// operator, and only then is the standby promoted. So it acknowledges no
// write the new primary lacks, and its fence marker is older than the
// promotion. Reachable again, the operator records the self-fence (Event
// OldPrimaryFencedItself), lifts the fence, and it rejoins as a standby
// holding exactly the new primary's rows.
func TestRealNodeFencesAnOldPrimaryCutOffFromTheOperator(t *testing.T) {
	parallel(t, 75*time.Second) // see the package comment: its own namespace, the shared operator
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	f := startFailoverCluster(ctx, t, 2, 0)
	w := f.startWriter("writer")
	old := f.primary()
	pod, err := f.cs.CoreV1().Pods(f.ns).Get(ctx, old, metav1.GetOptions{})
	require.NoError(t, err)
	direct := f.startDirectWriter("direct", pod.Status.PodIP)
	_, restarts := f.containerID(old, serverContainer)

	agent := f.agentTask(pod)
	require.NoError(t, dropAgentPort(ctx, agent, "-I"))
	cut := time.Now()
	rec := f.waitFailedOver(cut.Add(-time.Second))
	assert.False(t, rec.Fenced, "the fence reached an agent that was cut off: %+v", rec)
	require.NotNil(t, rec.NamedFirst, "the new primary was not named first: %+v", rec)

	// Still cut off from the operator, the old primary fences itself:
	// the marker on its volume says so, and the direct client's writes
	// fail from then on.
	marker := filepath.Join(filepath.Dir(f.dataDir(old)), instance.FenceMarker)
	var reason []byte
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		reason, err = os.ReadFile(marker)
		return err == nil, nil
	})
	require.NoError(t, err, "the cut-off old primary did not fence itself")
	seen := time.Now()
	if st, err := os.Stat(marker); assert.NoError(t, err) {
		// Status times are whole seconds: the marker is older than the
		// second after the promotion's.
		assert.True(t, st.ModTime().Before(rec.Finished.Add(time.Second)), "the old primary fenced itself at %s, after the promotion (%s)", st.ModTime().Format(time.StampMilli), rec.Finished.Format(time.Stamp))
	}
	assert.Contains(t, string(reason), "fenced by its own agent: its pod names "+rec.To+" the primary")
	direct.waitFailing(seen)
	w.waitAcks(3)

	require.NoError(t, dropAgentPort(ctx, agent, "-D"))
	f.waitEvent("OldPrimaryFencedItself")
	f.liftFence(old, rec.To)
	f.waitFollowing(old, rec.To)
	f.assertRejoinedWithoutRestart(old, restarts)
	log, directLog := w.stop(), direct.stop()
	var db dbv1.Database
	require.NoError(t, f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.name}, &db))
	last := db.Status.Failovers[len(db.Status.Failovers)-1]
	assert.NotNil(t, last.SelfFenced, "the record says the old primary fenced itself: %+v", last)

	// What the old primary took alone: the direct client's acknowledged
	// writes the new primary does not hold (the standby streamed from
	// the old primary until its promotion; status times are whole
	// seconds, too coarse to split the writes by). Never served: the
	// rejoined old primary holds exactly the new primary's rows.
	committed := w.committedIDs()
	alone, lastAlone, refused := 0, time.Time{}, time.Time{}
	for _, o := range directLog {
		if o.ok && !committed[o.id] {
			alone++
			lastAlone = o.at
		}
	}
	for _, o := range directLog {
		if !o.ok && o.at.After(cut) && o.at.After(lastAlone) {
			refused = o.at // the first write refused after the cut and the last it took alone
			break
		}
	}
	served := psql(ctx, t, f.cfg, f.cs, w.pod, "rw", "SELECT count(*) FROM acks WHERE id < 0")
	out, err := tryExecIn(ctx, f.cfg, f.cs, pod, serverContainer, "psql", "-X", "-A", "-t", "-U", "postgres", "-d", "ledger", "-c", "SELECT count(*) FROM acks WHERE id < 0")
	require.NoError(t, err, out)
	assert.Equal(t, served, strings.TrimSpace(out), "the rejoined old primary holds rows the new primary does not (what it took alone)")
	assert.Zero(t, alone, "the old primary acknowledged writes the new primary lacks: it ran as a primary beside the new one")
	down := outageSpan(log, cut)
	sinceAlone := "none"
	if alone > 0 {
		sinceAlone = fmt.Sprintf("%.1fs", lastAlone.Sub(cut).Seconds())
	}
	logf(t, "old primary cut off from the operator (2 replicas): failover %.1fs after the cut (named first %.1fs after it), write outage through -rw %s (first failed write to the first acknowledged after the last failed one), %d -rw writes lost (acknowledged by the old primary before -rw left it); it fenced itself (marker seen %.1fs after the cut; the direct client's first refused write %.1fs after the cut); %d writes at its own address acknowledged by it alone (the last %s after the cut)",
		rec.Finished.Sub(cut).Seconds(), rec.NamedFirst.Sub(cut).Seconds(), down.Round(100*time.Millisecond), len(lostAcks(log, committed)),
		seen.Sub(cut).Seconds(), refused.Sub(cut).Seconds(), alone, sinceAlone)
}

// startDirectWriter is a writer (negative ids) at the address addr (a
// pod's own), not through a Service; place as startWriterScript's.
func (f *failoverCluster) startDirectWriter(name, addr string, place ...func(*corev1.Pod) *corev1.Pod) *writer {
	f.t.Helper()
	script := strings.Replace(writerScript, `uri=$(cat /app/uri)`, `uri=$(sed 's#@[^:/]*#@`+addr+`#' /app/uri)`, 1)
	script = strings.Replace(script, `VALUES ($i)`, `VALUES (-$i)`, 1)
	script = strings.Replace(script, `echo "ack $i`, `echo "ack -$i`, 1)
	script = strings.Replace(script, `echo "fail $i`, `echo "fail -$i`, 1)
	return f.startWriterScript(name, script, place...)
}

// multiHostIDs offsets the ids of the multi-host writer's rows from the
// -rw writer's, in the same table.
const multiHostIDs = 1000000

// startMultiHostWriter is a writer through the app Secret's multihost-uri
// (every instance's name, target_session_attrs=read-write): it finds the
// primary by asking each server, without -rw. Its ids start at
// multiHostIDs.
func (f *failoverCluster) startMultiHostWriter(name string) *writer {
	f.t.Helper()
	script := strings.Replace(writerScript, `uri=$(cat /app/uri)`, `uri=$(cat /app/`+database.AppMultiHostURIKey+`)`, 1)
	script = strings.Replace(script, `i=0`, `i=`+strconv.Itoa(multiHostIDs), 1)
	return f.startWriterScript(name, script)
}

// waitFailing waits for the writer's writes after `at` to fail (two in a
// row): its server takes no more.
func (w *writer) waitFailing(at time.Time) {
	w.f.t.Helper()
	err := wait.PollUntilContextTimeout(w.f.ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		fails := 0
		for _, o := range w.log() {
			switch {
			case o.at.Before(at):
			case o.ok:
				fails = 0
			default:
				fails++
			}
		}
		return fails >= 2, nil
	})
	require.NoError(w.f.t, err, "the writer's writes still succeed: %+v", lastOutcomes(w.log(), 5))
}

// agentTask is the node's process ID of the pod's agent container (its
// network namespace is the pod's).
func (f *failoverCluster) agentTask(pod *corev1.Pod) string {
	f.t.Helper()
	id, _ := f.containerID(pod.Name, instance.AgentContainer)
	out := f.ctrOn(pod.Spec.NodeName, "tasks", "ls")
	for _, l := range strings.Split(out, "\n") {
		if fs := strings.Fields(l); len(fs) >= 2 && fs[0] == id {
			return fs[1]
		}
	}
	require.FailNow(f.t, "no task of the agent container", "%s in:\n%s", id, out)
	return ""
}

// dropAgentPort adds (-I) or removes (-D) the rule that drops connections
// to the agent's port inside the network namespace of the process pid.
func dropAgentPort(ctx context.Context, pid, op string) error {
	return podRule(ctx, pid, op, "INPUT", "-p", "tcp", "--dport", strconv.Itoa(instance.DefaultPort), "-j", "DROP")
}

// podRule adds (-I) or removes (-D) an iptables rule of chain inside the
// network namespace of the process pid.
func podRule(ctx context.Context, pid, op, chain string, rule ...string) error {
	args := append([]string{"-t", pid, "-n", "--", "iptables", op, chain}, rule...)
	out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nsenter %v: %w: %s", args, err, out)
	}
	return nil
}
