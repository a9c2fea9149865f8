// Package pgtest runs the PostgreSQL engine's shipped scripts on the host's
// Debian PostgreSQL (hack/test-deps.sh installs it), as tests and
// benchmarks do: as an unprivileged user (servers refuse root), on free
// ports of 127.0.0.1, with a container's environment resolved the way the
// kubelet would resolve it.
package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/internal/freeport"
	"github.com/deckhand-dev/deckhand/internal/procfs"
	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// Bin is the newest Debian PostgreSQL's binary directory.
func Bin(t testing.TB) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	require.NotEmpty(t, dirs, "Debian's PostgreSQL is not installed: run hack/test-deps.sh (make test-deps)")
	major := func(p string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return n
	}
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) < major(dirs[j]) })
	return filepath.Dir(dirs[len(dirs)-1])
}

// Major is the major version of the binaries in bin
// (/usr/lib/postgresql/15/bin -> "15").
func Major(bin string) string { return filepath.Base(filepath.Dir(bin)) }

// User is who runs the servers and scripts; nil when the test itself is
// not root (then it runs them as itself).
type User struct {
	UID, GID int
	Name     string
}

// Unprivileged is Debian's postgres user when the test runs as root.
func Unprivileged(t testing.TB) *User {
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
	return &User{UID: uid, GID: gid, Name: u.Username}
}

// Dir makes a directory the server user owns.
func (u *User) Dir(t testing.TB, parts ...string) string {
	t.Helper()
	dir := filepath.Join(parts...)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	if u != nil {
		require.NoError(t, os.Chown(dir, u.UID, u.GID))
	}
	return dir
}

// TempDir is a directory the server user owns, removed at the end of the
// test (t.TempDir's parents are not reachable by another user).
func (u *User) TempDir(t testing.TB) string {
	t.Helper()
	root, err := os.MkdirTemp("", "deckhand-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	return u.Dir(t, root)
}

// Command is argv run as the server user with exactly env.
func (u *User) Command(env map[string]string, argv []string) *exec.Cmd {
	if u != nil {
		argv = append([]string{"setpriv", "--reuid=" + strconv.Itoa(u.UID), "--regid=" + strconv.Itoa(u.GID), "--init-groups", "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Its own process group, so a test can kill it with its children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// FreePort is a TCP port of 127.0.0.1 that nothing listens on, the
// test's until it ends: no other test, in this process or another, is
// given it meanwhile (see internal/freeport).
func FreePort(t testing.TB) string {
	t.Helper()
	return freeport.String(t)
}

// ContainerEnv is the container's environment as the kubelet would set it
// in pod: values, Secret keys (from secret(name, key)) and the pod's name.
func ContainerEnv(t testing.TB, container corev1.Container, pod string, secret func(name, key string) string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range container.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = secret(e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = pod
		case e.ValueFrom.FieldRef != nil && strings.HasPrefix(e.ValueFrom.FieldRef.FieldPath, "metadata.labels["):
			// The kubelet gives a label the pod lacks as "": a test that
			// needs one sets it afterwards.
			env[e.Name] = ""
		default:
			t.Fatalf("env %s: a source the test does not resolve", e.Name)
		}
	}
	return env
}

// HostCommand is the container's command and args with the scripts
// volume's mount path replaced by scripts, the host's copy of it. A
// server's entrypoint runs without the agent's supervisor (the pod's
// binary): a test starts it again itself where the supervisor would.
func HostCommand(t testing.TB, container corev1.Container, scripts string) []string {
	t.Helper()
	mount := MountPath(t, container, engine.ScriptsVolume)
	var out []string
	for _, a := range append(slices.Clone(instance.WithoutSupervisor(container.Command)), container.Args...) {
		if rest, ok := strings.CutPrefix(a, mount+"/"); ok {
			a = filepath.Join(scripts, rest)
		}
		out = append(out, a)
	}
	return out
}

// MountPath is where container mounts volume.
func MountPath(t testing.TB, container corev1.Container, volume string) string {
	t.Helper()
	for _, m := range container.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	t.Fatalf("container %s does not mount %s", container.Name, volume)
	return ""
}

// WriteScripts writes files (a scripts ConfigMap's data) into a directory
// the server user can read.
func (u *User) WriteScripts(t testing.TB, root string, files map[string]string) string {
	t.Helper()
	dir := u.Dir(t, root, "scripts")
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o444))
	}
	return dir
}

// Server is a server started through the bootstrap script.
type Server struct {
	Cmd  *exec.Cmd
	Port string
	Log  *syncbuf.Buffer
	done chan error
}

// StartServer runs argv (the bootstrap script) with env until the server
// on env["PGPORT"] accepts connections; it is stopped at the end of the
// test.
func (u *User) StartServer(t testing.TB, bin string, env map[string]string, argv []string) *Server {
	t.Helper()
	s := &Server{Cmd: u.Command(env, argv), Port: env["PGPORT"], Log: &syncbuf.Buffer{}, done: make(chan error, 1)}
	dataDir := serverDataDir(env, argv)
	removeStaleSocketLock(t, SocketDir, s.Port)
	s.Cmd.Stdout, s.Cmd.Stderr = s.Log, s.Log
	require.NoError(t, s.Cmd.Start())
	go func() { s.done <- s.Cmd.Wait() }()
	t.Cleanup(func() { s.Stop(t) })
	// Its log in the failure: the test's own cleanups that print it are
	// registered only once it started.
	if !assert.Eventually(t, func() bool {
		select {
		case err := <-s.done:
			s.done <- err
			return true
		default:
		}
		// pg_isready is a process and a backend: 4,000 of them a run
		// cost the postgres package a sixth of its CPU, waiting on
		// bootstraps that clone or wait for a primary. It runs once the
		// postmaster says it is ready (as pg_ctl -w reads it).
		if dataDir != "" && !postmasterReady(dataDir, s.Port) {
			return false
		}
		return exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", s.Port).Run() == nil
	}, 90*time.Second, 100*time.Millisecond) {
		t.Fatalf("server on port %s did not start within 90 s; its log:\n%s", s.Port, s.Log.String())
	}
	select {
	case err := <-s.done:
		t.Fatalf("server on port %s exited: %v\n%s", s.Port, err, s.Log.String())
	default:
	}
	return s
}

// SocketDir is where Debian's PostgreSQL puts its Unix sockets and their
// lock files (its compiled-in unix_socket_directories), shared by every
// host test's server on this machine.
const SocketDir = "/var/run/postgresql"

// removeStaleSocketLock removes the socket lock file of port in dir (and
// its socket) that a killed server left behind, unless it names a running
// postgres. A server refuses to start while the PID in that file runs,
// and with the machine's PIDs wrapping every few minutes under make test,
// a lock a SIGKILLed server left hours before named an unrelated process
// and failed a new server on the same port ("lock file ... already
// exists").
func removeStaleSocketLock(t testing.TB, dir, port string) {
	t.Helper()
	lock := filepath.Join(dir, ".s.PGSQL."+port+".lock")
	l, err := instance.ReadLockFile(lock)
	if err != nil {
		return
	}
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", l.PID)); err == nil && strings.TrimSpace(string(comm)) == "postgres" {
		return
	}
	for _, f := range []string{lock, strings.TrimSuffix(lock, ".lock")} {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			t.Logf("a stale socket lock of port %s stays: %v", port, err)
		}
	}
}

// serverDataDir is the data directory a server started with env and argv
// runs on: postgres -D, else PGDATA; empty when neither names one.
func serverDataDir(env map[string]string, argv []string) string {
	for i, a := range argv {
		if a == "-D" && i+1 < len(argv) && filepath.Base(argv[0]) == "postgres" {
			return argv[i+1]
		}
	}
	return env["PGDATA"]
}

// postmasterReady says whether postmaster.pid in dataDir names a running
// postmaster on port that accepts connections ("ready": a primary
// running, or a hot standby open to read-only sessions).
func postmasterReady(dataDir, port string) bool {
	l, err := instance.ReadLockFile(filepath.Join(dataDir, "postmaster.pid"))
	return err == nil && l.Port == port && l.Status == "ready" && l.Runs()
}

// Stop shuts the server down fast (SIGINT), as the official image's stop
// signal does.
func (s *Server) Stop(t testing.TB) { s.stop(t, syscall.SIGINT) }

// StopImmediately shuts the server down at once (SIGQUIT, pg_ctl's
// immediate mode): a server whose archive_command keeps failing tries
// each waiting segment again before a fast shutdown ends, which on a
// loaded machine took more than a minute.
func (s *Server) StopImmediately(t testing.TB) { s.stop(t, syscall.SIGQUIT) }

func (s *Server) stop(t testing.TB, sig syscall.Signal) {
	select {
	case err := <-s.done:
		s.done <- err
		return
	default:
	}
	_ = s.Cmd.Process.Signal(sig)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(60 * time.Second):
		_ = s.Cmd.Process.Kill()
		t.Errorf("server on port %s did not stop within 60 s", s.Port)
	}
}

// PSQL runs SQL as a client of the server on port of 127.0.0.1. The
// database's name goes through PGDATABASE, which libpq never reads as a
// connection string (psql -d would, for a name holding "=" or starting
// with "postgresql://").
func PSQL(bin, port, user, password, dbname, sql string) (string, error) {
	cmd := exec.Command(filepath.Join(bin, "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", port, "-U", user, "-c", sql)
	cmd.Env = []string{"PGPASSWORD=" + password, "PGCONNECT_TIMEOUT=5", "PGDATABASE=" + dbname}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Freeze stops every process of the server (the postmaster and every
// process under it) as a hung VM or a stalled disk does: it puts them
// into a cgroup of their own and freezes it, so nothing of the server is
// scheduled and the signals sent to it wait. It returns a function that
// thaws them, once; the test's cleanup thaws them too. Needs root:
// cgroup v1's freezer, else cgroup v2's cgroup.freeze.
func (s *Server) Freeze(t testing.TB) (thaw func()) {
	t.Helper()
	group, state, frozen, thawed := freezerCgroup(t, fmt.Sprintf("deckhand-test-%d", s.Cmd.Process.Pid))
	// The postmaster first: what it forks from then on is born in the
	// cgroup. Its backends are not in its process group (each calls
	// setsid), so they are found as its descendants.
	for _, pid := range procfs.Tree("/proc", s.Cmd.Process.Pid) {
		require.NoError(t, os.WriteFile(filepath.Join(group, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644), "moving %d into %s", pid, group)
	}
	require.NoError(t, os.WriteFile(filepath.Join(group, state), []byte(frozen), 0o644))
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(group, state))
		return err == nil && strings.TrimSpace(string(b)) == frozen
	}, 10*time.Second, 50*time.Millisecond, "%s never read %s", filepath.Join(group, state), frozen)
	done := false
	thaw = func() {
		if done {
			return
		}
		done = true
		require.NoError(t, os.WriteFile(filepath.Join(group, state), []byte(thawed), 0o644))
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(group, state), []byte(thawed), 0o644)
		// A cgroup is removed once empty: what is left of the server
		// goes back to the parent.
		if b, err := os.ReadFile(filepath.Join(group, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				_ = os.WriteFile(filepath.Join(filepath.Dir(group), "cgroup.procs"), []byte(pid), 0o644)
			}
		}
		_ = os.Remove(group)
	})
	return thaw
}

// freezerCgroup makes the cgroup name under the freezer's hierarchy and
// says which file of it freezes and what it reads frozen and thawed.
func freezerCgroup(t testing.TB, name string) (dir, state, frozen, thawed string) {
	t.Helper()
	if fi, err := os.Stat("/sys/fs/cgroup/freezer"); err == nil && fi.IsDir() {
		dir, state, frozen, thawed = filepath.Join("/sys/fs/cgroup/freezer", name), "freezer.state", "FROZEN", "THAWED"
	} else {
		require.FileExists(t, "/sys/fs/cgroup/cgroup.controllers", "neither cgroup v1's freezer nor cgroup v2 is mounted at /sys/fs/cgroup")
		dir, state, frozen, thawed = filepath.Join("/sys/fs/cgroup", name), "cgroup.freeze", "1", "0"
	}
	require.NoError(t, os.Mkdir(dir, 0o755), "making a freezer cgroup needs root")
	return dir, state, frozen, thawed
}

// MountFilesystem mounts a file system of its own at dir, owned by u: an
// ext4 image of size bytes on a loop device, so a test can freeze that
// disk alone (FreezeFilesystem). It is unmounted at the end of the test.
// Needs root, losetup and mkfs.ext4.
func (u *User) MountFilesystem(t testing.TB, dir string, size int64) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(img)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	require.NoError(t, err, "losetup (root only): %s", out)
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	for _, argv := range [][]string{{"mkfs.ext4", "-q", dev}, {"mount", dev, dir}} {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", argv, out)
	}
	t.Cleanup(func() {
		// A server may still hold it for a moment after the test.
		if exec.Command("umount", dir).Run() != nil {
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
	require.NoError(t, os.Chown(dir, u.UID, u.GID))
}

// DropPackets drops, on the loopback interface, every TCP packet from
// port from to port to (an iptables rule: root only), as a link whose far
// end stopped answering drops them: nothing is refused, the sender's
// kernel only retransmits. It returns a function that removes the rule,
// once; the test's cleanup removes it too.
func DropPackets(t testing.TB, from, to string) (restore func()) {
	t.Helper()
	// -w: kube-proxy on the real node may hold the rules' lock a moment.
	rule := []string{"INPUT", "-i", "lo", "-p", "tcp", "--sport", from, "--dport", to, "-j", "DROP"}
	out, err := exec.Command("iptables", append([]string{"-w", "10", "-I"}, rule...)...).CombinedOutput()
	require.NoError(t, err, "iptables -I %v (root only): %s", rule, out)
	return undoOnce(t, "iptables", append([]string{"-w", "10", "-D"}, rule...)...)
}

// FreezeFilesystem freezes the file system mounted at dir (fsfreeze: a
// disk that takes no writes; reads of what is cached still work) and
// returns a function that thaws it, once; the test's cleanup thaws it
// too.
func FreezeFilesystem(t testing.TB, dir string) (thaw func()) {
	t.Helper()
	out, err := exec.Command("fsfreeze", "--freeze", dir).CombinedOutput()
	require.NoError(t, err, "fsfreeze --freeze %s: %s", dir, out)
	return undoOnce(t, "fsfreeze", "--unfreeze", dir)
}

// undoOnce returns a function that runs the command that undoes a fault,
// the first time it is called, and fails the test if it fails; the test's
// cleanup runs it too when the test did not.
func undoOnce(t testing.TB, name string, args ...string) func() {
	done := false
	t.Cleanup(func() {
		if !done {
			_ = exec.Command(name, args...).Run()
		}
	})
	return func() {
		if done {
			return
		}
		done = true
		out, err := exec.Command(name, args...).CombinedOutput()
		require.NoError(t, err, "%s %v: %s", name, args, out)
	}
}

// AgentBinary is cmd/deckhand-instance, built once per test binary (tests
// side by side each linking it again cost about 2 s of CPU each) into a
// directory every user can read: the servers' user runs it. The test
// binary's TestMain calls RemoveAgentBinary.
func AgentBinary(t testing.TB) string {
	t.Helper()
	agent.once.Do(func() {
		dir, err := os.MkdirTemp("", "deckhand-instance-")
		if err == nil {
			agent.dir = dir
			err = os.Chmod(dir, 0o755)
		}
		if err == nil {
			out := filepath.Join(dir, "deckhand-instance")
			b, berr := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/deckhand-dev/deckhand/cmd/deckhand-instance").CombinedOutput()
			if berr != nil {
				err = fmt.Errorf("go build: %w\n%s", berr, b)
			}
			agent.path = out
		}
		agent.err = err
	})
	require.NoError(t, agent.err)
	return agent.path
}

// RemoveAgentBinary removes what AgentBinary built.
func RemoveAgentBinary() {
	if agent.dir != "" {
		os.RemoveAll(agent.dir)
	}
}

var agent struct {
	once      sync.Once
	dir, path string
	err       error
}
