package database_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// The scripts the operator ships run here against Debian's PostgreSQL
// (hack/test-deps.sh installs it): the scripts are read from the ConfigMap
// the operator created and the environment from its StatefulSet and Job.
// Only what a host cannot share with a pod is overridden: the data
// directory (a volume in the pod), PATH (Debian keeps the binaries in
// /usr/lib/postgresql/<major>/bin), ports, the primary's address
// (127.0.0.1 instead of the read-write Service), the listen address (a pod
// has a network namespace of its own, the host does not: the test servers
// listen on 127.0.0.1 only) and the termination message file (the kubelet
// mounts it in a pod).

func TestShippedScriptsRunARealPostgreSQL(t *testing.T) {
	t.Parallel()
	bin := pgtest.Bin(t)
	u := pgtest.Unprivileged(t)
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()

	db := newDatabase(ns, "real", 2)
	require.NoError(t, c.Create(ctx, db))
	cm := get(t, c, ns, "real-scripts", &corev1.ConfigMap{})
	sts := get(t, c, ns, "real", &appsv1.StatefulSet{})
	job := get(t, c, ns, "real-init", &batchv1.Job{})
	app := get(t, c, ns, "real-app", &corev1.Secret{})
	super := get(t, c, ns, "real-superuser", &corev1.Secret{})

	root := u.TempDir(t)
	scripts := u.WriteScripts(t, root, cm.Data)
	u.Dir(t, root, "tmp")
	secret := func(name, key string) string {
		var s corev1.Secret
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s))
		v, ok := s.Data[key]
		require.True(t, ok, "Secret %s has no key %s", name, key)
		return string(v)
	}

	server := sts.Spec.Template.Spec.Containers[0]
	argv := pgtest.HostCommand(t, server, scripts)
	primaryPort, standbyPort := pgtest.FreePort(t), pgtest.FreePort(t)
	serverEnv := func(pod, port, volume string) map[string]string {
		env := pgtest.ContainerEnv(t, server, pod, secret)
		require.Contains(t, env, "PGDATA")
		// PGDATA is a directory below the volume's mount point.
		env["PGDATA"] = filepath.Join(u.Dir(t, root, volume), filepath.Base(env["PGDATA"]))
		env["PATH"] = bin + ":/usr/bin:/bin"
		env["PGPORT"], env["PRIMARY_PORT"] = port, primaryPort
		env["PRIMARY_HOST"] = "127.0.0.1"
		env["LISTEN_ADDRESSES"] = "127.0.0.1"
		return env
	}
	superPassword := string(super.Data["password"])

	// Primary: an empty volume is initialised; the generated password works.
	primaryEnv := serverEnv("real-0", primaryPort, "data-0")
	primary := u.StartServer(t, bin, primaryEnv, argv)
	assert.Contains(t, primary.Log.String(), "empty volume on the primary real-0: initialising")
	out, err := pgtest.PSQL(bin, primaryPort, "postgres", superPassword, "postgres", "SELECT 1")
	require.NoError(t, err, out)
	out, err = pgtest.PSQL(bin, primaryPort, "postgres", "wrong", "postgres", "SELECT 1")
	require.Error(t, err)
	assert.Contains(t, out, "password authentication failed")
	out, err = pgtest.PSQL(bin, primaryPort, "postgres", superPassword, "postgres", "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before restart')")
	require.NoError(t, err, out)

	// A restart on the same volume does not initialise again and keeps data.
	primary.Stop(t)
	primary = u.StartServer(t, bin, primaryEnv, argv)
	assert.Contains(t, primary.Log.String(), "holds a PostgreSQL")
	assert.NotContains(t, primary.Log.String(), "initialising")
	out, err = pgtest.PSQL(bin, primaryPort, "postgres", superPassword, "postgres", "SELECT v FROM kept")
	require.NoError(t, err, out)
	assert.Equal(t, "before restart", out)

	// The init Job, twice: one database, owned by the app role.
	initC := job.Spec.Template.Spec.Containers[0]
	initEnv := pgtest.ContainerEnv(t, initC, "real-init-x", secret)
	initEnv["PATH"] = bin + ":/usr/bin:/bin"
	initEnv["PRIMARY_HOST"], initEnv["PRIMARY_PORT"] = "127.0.0.1", primaryPort
	termination := filepath.Join(root, "tmp", "termination-log")
	initEnv["TERMINATION_MESSAGE_PATH"] = termination
	roleState := "SELECT r.rolpassword || ' ' || d.oid FROM pg_authid r, pg_database d WHERE r.rolname = 'name-of-database' AND d.datname = 'name-of-database'"
	var firstState string
	for i := range 2 {
		cmd := u.Command(initEnv, pgtest.HostCommand(t, initC, scripts))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "init run %d:\n%s", i+1, out)
		state, err := pgtest.PSQL(bin, primaryPort, "postgres", superPassword, "postgres", roleState)
		require.NoError(t, err, state)
		if i == 0 {
			firstState = state
		} else {
			assert.Equal(t, firstState, state, "a second run changes neither the role's password nor the database")
		}
	}
	out, err = pgtest.PSQL(bin, primaryPort, "postgres", superPassword, "postgres",
		"SELECT count(*) || ' ' || pg_get_userbyid(max(datdba)::oid) FROM pg_database WHERE datname = 'name-of-database'")
	require.NoError(t, err, out)
	assert.Equal(t, "1 name-of-database", out)
	b, err := os.ReadFile(termination)
	require.NoError(t, err)
	report, err := engine.ParseReport(string(b))
	require.NoError(t, err, string(b))
	major := filepath.Base(filepath.Dir(bin))
	assert.True(t, strings.HasPrefix(report.Version(), major+"."), "reported version %q, server %s", report.ServerVersion, major)

	// The app Secret's URI connects (at the test's address) as the app role,
	// which owns its database and cannot create roles.
	uri, err := url.Parse(string(app.Data["uri"]))
	require.NoError(t, err)
	uri.Host = "127.0.0.1:" + primaryPort
	appSQL := func(sql string) (string, error) {
		cmd := exec.Command(filepath.Join(bin, "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", uri.String(), "-c", sql)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	out, err = appSQL("SELECT current_user || ' ' || current_database()")
	require.NoError(t, err, out)
	assert.Equal(t, "name-of-database name-of-database", out)
	out, err = appSQL("CREATE TABLE orders (id int PRIMARY KEY, item text); INSERT INTO orders VALUES (1, 'first')")
	require.NoError(t, err, out)
	out, err = appSQL("CREATE ROLE intruder")
	require.Error(t, err)
	assert.Contains(t, out, "permission denied to create role")

	// A standby clones the primary, is read-only and follows it.
	standby := u.StartServer(t, bin, serverEnv("real-1", standbyPort, "data-1"), argv)
	assert.Contains(t, standby.Log.String(), "empty volume on standby real-1: cloning the primary")
	appPassword := string(app.Data["password"])
	out, err = pgtest.PSQL(bin, standbyPort, "name-of-database", appPassword, "name-of-database", "SELECT pg_is_in_recovery()")
	require.NoError(t, err, out)
	assert.Equal(t, "t", out)
	out, err = pgtest.PSQL(bin, standbyPort, "name-of-database", appPassword, "name-of-database", "INSERT INTO orders VALUES (2, 'on the standby')")
	require.Error(t, err)
	assert.Contains(t, out, "read-only transaction")
	out, err = appSQL("INSERT INTO orders VALUES (3, 'streamed')")
	require.NoError(t, err, out)
	written := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := pgtest.PSQL(bin, standbyPort, "name-of-database", appPassword, "name-of-database", "SELECT item FROM orders WHERE id = 3")
		require.NoError(ct, err, out)
		require.Equal(ct, "streamed", out)
	}, 30*time.Second, 100*time.Millisecond, "the standby never saw the row")
	t.Logf("row visible on the standby %v after the commit on the primary", time.Since(written).Round(time.Millisecond))
	out, err = pgtest.PSQL(bin, primaryPort, "postgres", superPassword, "postgres", "SELECT usename || ' ' || state FROM pg_stat_replication")
	require.NoError(t, err, out)
	assert.Equal(t, "deckhand_replication streaming", out, "the standby streams as the replication role, with its Secret's password")

	// A restarted standby starts as it is and keeps following.
	standby.Stop(t)
	standby = u.StartServer(t, bin, serverEnv("real-1", standbyPort, "data-1"), argv)
	assert.NotContains(t, standby.Log.String(), "cloning")
	out, err = pgtest.PSQL(bin, standbyPort, "name-of-database", appPassword, "name-of-database", "SELECT count(*) FROM orders")
	require.NoError(t, err, out)
	assert.Equal(t, "2", out)
}
