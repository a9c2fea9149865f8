package postgres_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// The operator, its Jobs' scripts and a real PostgreSQL, together: the
// Database controller runs against the test cluster, its pods select a
// testenv.HostRunner (and no node), the runner runs each Job's container on
// this machine (the scripts from the operator's ConfigMap, the environment
// from the Job's pod and its Secrets) and writes the pod's end and
// termination message back, so the operator acts on what the script
// really did. Each Database's primary is the host's PostgreSQL, started
// by the shipped bootstrap.sh with the StatefulSet's environment; the
// Services <db>-rw and the pod <db>-0 reach it at 127.0.0.1.

// endToEnd is one test's cluster, operator, runner and host servers.
type endToEnd struct {
	t       *testing.T
	c       client.Client
	ns      string
	u       *pgtest.User
	bin     string
	root    string
	image   string
	runner  *testenv.HostRunner
	servers map[string]string
	procs   map[string]*pgtest.Server
	// opts are the operator's; stopOperator ends the running one.
	opts         database.Options
	stopOperator func()
}

// newEndToEnd starts the operator with opts (the first, if given) for a
// namespace of its own.
func newEndToEnd(t *testing.T, opts ...database.Options) *endToEnd {
	holdServerSlot(t)
	bin := pgtest.Bin(t)
	u := pgtest.Unprivileged(t)
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	root := u.TempDir(t)
	e := &endToEnd{t: t, c: c, ns: ns, u: u, bin: bin, root: root, servers: map[string]string{}, procs: map[string]*pgtest.Server{}}
	// The image's tag says the host server's version, so the operator sees
	// no upgrade to make.
	out, err := exec.Command(filepath.Join(bin, "postgres"), "-V").Output()
	require.NoError(t, err)
	version := strings.Fields(strings.TrimPrefix(string(out), "postgres (PostgreSQL) "))[0]
	e.image = "postgres:" + version
	e.runner = testenv.NewHostRunner(t, c, ns, root, testenv.HostOptions{
		Command: func(env map[string]string, argv []string) *exec.Cmd {
			// A Job's PGPORT is its own scratch server's (a verification's,
			// an upgrade's): in a pod it has the pod's network to itself; on
			// the host the pod spec's port would put the scratch servers of
			// every test that runs at once on the same 127.0.0.1:5432.
			if _, ok := env["PGPORT"]; ok {
				env["PGPORT"] = pgtest.FreePort(t)
			}
			return u.Command(env, argv)
		},
		Dir:  func(parts ...string) string { return u.Dir(t, parts...) },
		Path: bin + ":/usr/bin:/bin",
	})
	if len(opts) > 0 {
		e.opts = opts[0]
	}
	e.opts.WatchNamespaces = []string{ns}
	if e.opts.InstanceDial == nil {
		e.opts.InstanceDial = testenv.NoPodDial
	}
	e.startOperator()
	return e
}

// startOperator starts an operator for the test's namespace: a new one,
// with none of an earlier one's memory (an operator restarted). The
// namespace is released at the test's end while the last one started
// still runs (cleanups run last first).
func (e *endToEnd) startOperator() {
	e.stopOperator = testenv.StartStoppableController(e.t, testenv.ChartRBACConfig(e.t, e.ns, database.Name), func(m ctrl.Manager) error {
		return database.Setup(m, e.opts)
	}, e.ns)
	testenv.ReleaseNamespaceOnCleanup(e.t, e.ns, &dbv1.DatabaseList{}, &dbv1.DatabaseBackupList{})
}

// database is a one-replica Database whose pods the runner takes.
func (e *endToEnd) database(name string, policy dbv1.DeletionPolicy, fromBackup string) *dbv1.Database {
	selector := map[string]dbv1.LabelValue{}
	for k, v := range e.runner.NodeSelector() {
		selector[k] = dbv1.LabelValue(v)
	}
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: dbv1.DatabaseSpec{
			// A port of its own: the Jobs that run a server of their own
			// (upgrade, verification) listen on it, on the host.
			Name: appDatabase, Port: e.freePort(), StorageSize: "1Gi", Replicas: 1, Image: e.image,
			DeletionPolicy: policy, FromBackup: fromBackup,
			PodTemplate: &dbv1.PodTemplate{NodeSelector: selector},
		},
	}
	require.NoError(e.t, e.c.Create(context.Background(), db))
	e.startPrimary(name)
	return db
}

// freePort is a port of 127.0.0.1 nothing listens on, for a Database's
// spec.port.
func (e *endToEnd) freePort() int32 {
	p, err := strconv.Atoi(pgtest.FreePort(e.t))
	require.NoError(e.t, err)
	return int32(p)
}

// startPrimary runs the Database's ordinal 0 on the host, from its
// StatefulSet (as it is now) and Secrets, on its data claim's directory
// (where the runner mounts data-<db>-0 for a Job), and serves it as
// <db>-rw and <db>-0. Run again, it starts the server again on the same
// port.
func (e *endToEnd) startPrimary(db string) {
	t := e.t
	t.Helper()
	ctx := context.Background()
	var sts appsv1.StatefulSet
	var cm corev1.ConfigMap
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: db}, &sts))
		require.NoError(ct, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: db + "-scripts"}, &cm))
	}, time.Minute, 100*time.Millisecond, "the operator made no StatefulSet or scripts for %s", db)
	scripts := e.u.WriteScripts(t, e.u.Dir(t, e.root, "servers", db), cm.Data)
	server := sts.Spec.Template.Spec.Containers[0]
	env := pgtest.ContainerEnv(t, server, db+"-0", e.secret)
	port, ok := e.servers[db]
	if !ok {
		port = pgtest.FreePort(t)
	}
	env["PGDATA"] = filepath.Join(e.runner.ClaimDir("data-"+db+"-0"), "pgdata")
	env["PATH"] = e.bin + ":/usr/bin:/bin"
	env["PGPORT"], env["PRIMARY_PORT"], env["PRIMARY_HOST"] = port, port, "127.0.0.1"
	env["LISTEN_ADDRESSES"] = "127.0.0.1"
	e.procs[db] = e.u.StartServer(t, e.bin, env, pgtest.HostCommand(t, server, scripts))
	e.servers[db] = port
	e.runner.Serve(db+"-rw", "127.0.0.1:"+port)
	e.runner.Serve(db+"-0", "127.0.0.1:"+port)
}

// secret is a key of a Secret of the namespace (waiting for it).
func (e *endToEnd) secret(name, key string) string {
	var s corev1.Secret
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &s))
		require.Contains(ct, s.Data, key)
	}, time.Minute, 100*time.Millisecond, "Secret %s has no key %s", name, key)
	return string(s.Data[key])
}

// sql runs SQL in the Database's app database as its superuser.
func (e *endToEnd) sql(db, sql string) string {
	e.t.Helper()
	out, err := pgtest.PSQL(e.bin, e.servers[db], "postgres", e.secret(db+"-superuser", "password"), appDatabase, sql)
	require.NoError(e.t, err, "%s\n%s", sql, out)
	return out
}

func (e *endToEnd) waitReady(db string) {
	e.t.Helper()
	var cur dbv1.Database
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: db}, &cur))
		require.Equal(ct, dbv1.PhaseReady, cur.Status.Phase, "conditions: %+v", cur.Status.Conditions)
	}, 2*time.Minute, 200*time.Millisecond, "Database %s never Ready", db)
}

func (e *endToEnd) waitCompleted(name string) *dbv1.DatabaseBackup {
	e.t.Helper()
	var cur dbv1.DatabaseBackup
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &cur))
		require.Equal(ct, dbv1.BackupCompleted, cur.Status.Phase, "status: %+v", cur.Status)
	}, 2*time.Minute, 200*time.Millisecond, "DatabaseBackup %s never Completed", name)
	// A completed backup names the file it wrote and where: its
	// verification and its deletion read them.
	require.NotEmpty(e.t, cur.Status.ClaimName, "DatabaseBackup %s completed without its claim: %+v", name, cur.Status)
	require.FileExists(e.t, filepath.Join(e.runner.ClaimDir(cur.Status.ClaimName), cur.Status.File))
	return &cur
}

// TestTheOperatorAndItsScriptsBackUpRestoreAndSnapshotARealPostgreSQL:
// a row written before each lifecycle step is read after it. A
// DatabaseBackup's Job dumps the real database (the file on the backup
// claim is the one its status names, with that checksum); a Database
// created with fromBackup is restored from it; deleting the Database
// (deletionPolicy Snapshot) takes a final backup that holds a row written
// after the first backup, and a Database restored from that final backup
// reads it.
func TestTheOperatorAndItsScriptsBackUpRestoreAndSnapshotARealPostgreSQL(t *testing.T) {
	t.Parallel()
	e := newEndToEnd(t)
	ctx := context.Background()

	e.database("orig", dbv1.DeletionSnapshot, "")
	e.waitReady("orig")
	e.sql("orig", "CREATE TABLE notes (v text); INSERT INTO notes VALUES ('before the backup')")

	// Backup.
	require.NoError(t, e.c.Create(ctx, &dbv1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: e.ns},
		Spec:       dbv1.DatabaseBackupSpec{Database: "orig"},
	}))
	first := e.waitCompleted("first")
	file := filepath.Join(e.runner.ClaimDir(first.Status.ClaimName), first.Status.File)
	require.FileExists(t, file)
	assert.Equal(t, fileSHA256(t, file), first.Status.SHA256, "the status names the file the Job wrote")
	assert.True(t, strings.HasPrefix(first.Status.Version, strings.TrimPrefix(e.image, "postgres:")), "version %q", first.Status.Version)

	// Restore with fromBackup.
	e.database("copy", dbv1.DeletionDelete, "first")
	e.waitReady("copy")
	assert.Equal(t, "before the backup", e.sql("copy", "SELECT string_agg(v, ',') FROM notes"))

	// The final backup on delete.
	e.sql("orig", "INSERT INTO notes VALUES ('before the delete')")
	var orig dbv1.Database
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "orig"}, &orig))
	require.NoError(t, e.c.Delete(ctx, &orig))
	var backups dbv1.DatabaseBackupList
	var final string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.List(ctx, &backups, client.InNamespace(e.ns)))
		final = ""
		for _, b := range backups.Items {
			if strings.HasPrefix(b.Name, "orig-final-") {
				final = b.Name
			}
		}
		require.NotEmpty(ct, final, "no final backup")
	}, 2*time.Minute, 200*time.Millisecond)
	e.waitCompleted(final)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "orig"}, &orig)
		require.Error(ct, err, "Database orig is still there: %+v", orig.Status.Conditions)
	}, 2*time.Minute, 200*time.Millisecond)

	e.database("after", dbv1.DeletionDelete, final)
	e.waitReady("after")
	assert.Equal(t, "before the backup,before the delete", e.sql("after", "SELECT string_agg(v, ',' ORDER BY v) FROM notes"))
}

// appDatabase is the Databases' spec.name: libpq would read it as a
// connection string naming the postgres database if a script passed it
// as one, and it holds a space and a quote.
const appDatabase = "dbname=postgres app's data"
