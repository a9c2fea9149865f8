package database_test

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// postgresBin is the newest Debian PostgreSQL's binary directory.
func postgresBin(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	require.NotEmpty(t, dirs, "Debian's PostgreSQL is not installed: run hack/test-deps.sh (make test-deps)")
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dirs[i]))))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dirs[j]))))
		return a < b
	})
	return filepath.Dir(dirs[len(dirs)-1])
}

// serverUser is who runs the servers: PostgreSQL refuses root, so as root
// the test runs them as Debian's postgres user.
type serverUser struct {
	uid, gid int
	name     string
}

func unprivileged(t *testing.T) *serverUser {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	require.NoError(t, err, "Debian's postgresql package creates the postgres user: run hack/test-deps.sh")
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// Debian's servers put their socket here, as the official image does.
	require.NoError(t, os.MkdirAll("/var/run/postgresql", 0o2775))
	require.NoError(t, os.Chown("/var/run/postgresql", uid, gid))
	return &serverUser{uid: uid, gid: gid, name: u.Username}
}

// hostDir is a directory the server user owns.
func hostDir(t *testing.T, u *serverUser, parts ...string) string {
	t.Helper()
	dir := filepath.Join(parts...)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	if u != nil {
		require.NoError(t, os.Chown(dir, u.uid, u.gid))
	}
	return dir
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// containerEnv is the container's environment as the kubelet would set
// it for pod: values, Secret keys and the pod's name.
func containerEnv(t *testing.T, c client.Client, ns, pod string, container corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range container.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			var s corev1.Secret
			require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: e.ValueFrom.SecretKeyRef.Name}, &s))
			v, ok := s.Data[e.ValueFrom.SecretKeyRef.Key]
			require.True(t, ok, "Secret %s has no key %s", s.Name, e.ValueFrom.SecretKeyRef.Key)
			env[e.Name] = string(v)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = pod
		default:
			t.Fatalf("env %s: a source the test does not resolve", e.Name)
		}
	}
	return env
}

// hostCommand is the container's command and args with the scripts
// volume's mount path replaced by the host's copy of the ConfigMap.
func hostCommand(t *testing.T, container corev1.Container, scripts string) []string {
	t.Helper()
	var mount string
	for _, m := range container.VolumeMounts {
		if m.Name == engine.ScriptsVolume {
			mount = m.MountPath
		}
	}
	require.NotEmpty(t, mount, "container %s mounts no scripts", container.Name)
	var out []string
	for _, a := range append(append([]string{}, container.Command...), container.Args...) {
		if rest, ok := strings.CutPrefix(a, mount+"/"); ok {
			a = filepath.Join(scripts, rest)
		}
		out = append(out, a)
	}
	return out
}

// run starts argv as the server user with exactly env.
func run(u *serverUser, env map[string]string, argv []string) *exec.Cmd {
	if u != nil {
		argv = append([]string{"setpriv", "--reuid=" + strconv.Itoa(u.uid), "--regid=" + strconv.Itoa(u.gid), "--init-groups", "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

type server struct {
	cmd  *exec.Cmd
	port string
	log  *syncBuffer
	done chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer runs the bootstrap script until the server accepts
// connections.
func startServer(t *testing.T, u *serverUser, bin string, env map[string]string, argv []string) *server {
	t.Helper()
	s := &server{cmd: run(u, env, argv), port: env["PGPORT"], log: &syncBuffer{}, done: make(chan error, 1)}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	require.NoError(t, s.cmd.Start())
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	require.Eventually(t, func() bool {
		select {
		case err := <-s.done:
			s.done <- err
			return true
		default:
		}
		return exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", s.port).Run() == nil
	}, 90*time.Second, 200*time.Millisecond, "server on port %s did not start", s.port)
	select {
	case err := <-s.done:
		t.Fatalf("server on port %s exited: %v\n%s", s.port, err, s.log.String())
	default:
	}
	return s
}

// stop shuts the server down fast (SIGINT), as the official image's stop
// signal does.
func (s *server) stop(t *testing.T) {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Errorf("server on port %s did not stop within 60 s", s.port)
	}
}

// psql runs SQL as a client of the server on port.
func psql(bin, port, user, password, dbname, sql string) (string, error) {
	cmd := exec.Command(filepath.Join(bin, "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", port, "-U", user, "-d", dbname, "-c", sql)
	cmd.Env = []string{"PGPASSWORD=" + password, "PGCONNECT_TIMEOUT=5"}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestShippedScriptsRunARealPostgreSQL(t *testing.T) {
	bin := postgresBin(t)
	u := unprivileged(t)
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

	root, err := os.MkdirTemp("", "deckhand-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	hostDir(t, u, root)
	scripts := hostDir(t, u, root, "scripts")
	for name, body := range cm.Data {
		require.NoError(t, os.WriteFile(filepath.Join(scripts, name), []byte(body), 0o444))
	}
	hostDir(t, u, root, "tmp")

	server := sts.Spec.Template.Spec.Containers[0]
	argv := hostCommand(t, server, scripts)
	primaryPort, standbyPort := freePort(t), freePort(t)
	serverEnv := func(pod, port, volume string) map[string]string {
		env := containerEnv(t, c, ns, pod, server)
		require.Contains(t, env, "PGDATA")
		// PGDATA is a directory below the volume's mount point.
		env["PGDATA"] = filepath.Join(hostDir(t, u, root, volume), filepath.Base(env["PGDATA"]))
		env["PATH"] = bin + ":/usr/bin:/bin"
		env["PGPORT"], env["PRIMARY_PORT"] = port, primaryPort
		env["PRIMARY_HOST"] = "127.0.0.1"
		env["LISTEN_ADDRESSES"] = "127.0.0.1"
		return env
	}
	superPassword := string(super.Data["password"])

	// Primary: an empty volume is initialised; the generated password works.
	primaryEnv := serverEnv("real-0", primaryPort, "data-0")
	primary := startServer(t, u, bin, primaryEnv, argv)
	assert.Contains(t, primary.log.String(), "empty volume on the primary (ordinal 0): initialising")
	out, err := psql(bin, primaryPort, "postgres", superPassword, "postgres", "SELECT 1")
	require.NoError(t, err, out)
	out, err = psql(bin, primaryPort, "postgres", "wrong", "postgres", "SELECT 1")
	require.Error(t, err)
	assert.Contains(t, out, "password authentication failed")
	out, err = psql(bin, primaryPort, "postgres", superPassword, "postgres", "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before restart')")
	require.NoError(t, err, out)

	// A restart on the same volume does not initialise again and keeps data.
	primary.stop(t)
	primary = startServer(t, u, bin, primaryEnv, argv)
	assert.Contains(t, primary.log.String(), "holds a PostgreSQL")
	assert.NotContains(t, primary.log.String(), "initialising")
	out, err = psql(bin, primaryPort, "postgres", superPassword, "postgres", "SELECT v FROM kept")
	require.NoError(t, err, out)
	assert.Equal(t, "before restart", out)

	// The init Job, twice: one database, owned by the app role.
	initC := job.Spec.Template.Spec.Containers[0]
	initEnv := containerEnv(t, c, ns, "real-init-x", initC)
	initEnv["PATH"] = bin + ":/usr/bin:/bin"
	initEnv["PRIMARY_HOST"], initEnv["PRIMARY_PORT"] = "127.0.0.1", primaryPort
	termination := filepath.Join(root, "tmp", "termination-log")
	initEnv["TERMINATION_MESSAGE_PATH"] = termination
	roleState := "SELECT r.rolpassword || ' ' || d.oid FROM pg_authid r, pg_database d WHERE r.rolname = 'name-of-database' AND d.datname = 'name-of-database'"
	var firstState string
	for i := range 2 {
		cmd := run(u, initEnv, hostCommand(t, initC, scripts))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "init run %d:\n%s", i+1, out)
		state, err := psql(bin, primaryPort, "postgres", superPassword, "postgres", roleState)
		require.NoError(t, err, state)
		if i == 0 {
			firstState = state
		} else {
			assert.Equal(t, firstState, state, "a second run changes neither the role's password nor the database")
		}
	}
	out, err = psql(bin, primaryPort, "postgres", superPassword, "postgres",
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
	standby := startServer(t, u, bin, serverEnv("real-1", standbyPort, "data-1"), argv)
	assert.Contains(t, standby.log.String(), "empty volume on standby ordinal 1: cloning the primary")
	appPassword := string(app.Data["password"])
	out, err = psql(bin, standbyPort, "name-of-database", appPassword, "name-of-database", "SELECT pg_is_in_recovery()")
	require.NoError(t, err, out)
	assert.Equal(t, "t", out)
	out, err = psql(bin, standbyPort, "name-of-database", appPassword, "name-of-database", "INSERT INTO orders VALUES (2, 'on the standby')")
	require.Error(t, err)
	assert.Contains(t, out, "read-only transaction")
	out, err = appSQL("INSERT INTO orders VALUES (3, 'streamed')")
	require.NoError(t, err, out)
	written := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := psql(bin, standbyPort, "name-of-database", appPassword, "name-of-database", "SELECT item FROM orders WHERE id = 3")
		require.NoError(ct, err, out)
		require.Equal(ct, "streamed", out)
	}, 10*time.Second, 100*time.Millisecond, "the standby never saw the row")
	t.Logf("row visible on the standby %v after the commit on the primary", time.Since(written).Round(time.Millisecond))

	// A restarted standby starts as it is and keeps following.
	standby.stop(t)
	standby = startServer(t, u, bin, serverEnv("real-1", standbyPort, "data-1"), argv)
	assert.NotContains(t, standby.log.String(), "cloning")
	out, err = psql(bin, standbyPort, "name-of-database", appPassword, "name-of-database", "SELECT count(*) FROM orders")
	require.NoError(t, err, out)
	assert.Equal(t, "2", out)
}
