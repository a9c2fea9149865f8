// Package mysqltest runs the MySQL engine's shipped scripts on the host,
// against Debian's MariaDB (hack/test-deps.sh installs it), with the
// environment the engine's pod builders set. Only what a host cannot share
// with a pod is overridden by the caller: data and backup directories (the
// pod's volumes), the socket, ports, addresses (127.0.0.1 instead of the
// Services; servers listen on 127.0.0.1 only), PATH and the termination
// message file.
package mysqltest

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/internal/freeport"
	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// Path is where Debian keeps the server (/usr/sbin) and clients.
const Path = "/usr/sbin:/usr/bin:/bin"

// RequireMariaDB fails the test when Debian's MariaDB is missing.
func RequireMariaDB(t testing.TB) {
	t.Helper()
	_, err := os.Stat("/usr/sbin/mariadbd")
	require.NoError(t, err, "Debian's MariaDB is not installed: run hack/test-deps.sh (make test-deps)")
	_, err = exec.LookPath("mariadb")
	require.NoError(t, err, "Debian's MariaDB client is not installed: run hack/test-deps.sh (make test-deps)")
}

// User runs the servers and scripts: as root, Debian's mysql user (the
// server refuses root without --user, and a pod never runs it as root).
type User struct {
	UID, GID int
}

// Unprivileged is the mysql user when the test runs as root, else nil
// (the test's own user).
func Unprivileged(t testing.TB) *User {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("mysql")
	require.NoError(t, err, "Debian's mariadb-server package creates the mysql user: run hack/test-deps.sh")
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &User{UID: uid, GID: gid}
}

// Dir makes a directory the user owns.
func Dir(t testing.TB, u *User, parts ...string) string {
	t.Helper()
	dir := filepath.Join(parts...)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	if u != nil {
		require.NoError(t, os.Chown(dir, u.UID, u.GID))
	}
	return dir
}

// TempRoot is a temporary directory the user owns, removed after the test.
// Its name is short: the scripts put the server's socket under it, deep in
// a pod's volume directory, and a socket path is at most 107 bytes.
func TempRoot(t testing.TB, u *User) string {
	t.Helper()
	root, err := os.MkdirTemp("", "dh-mysql-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	return Dir(t, u, root)
}

// WriteScripts writes the engine's scripts into dir.
func WriteScripts(t testing.TB, u *User, dir string, scripts map[string]string) {
	t.Helper()
	Dir(t, u, dir)
	for name, body := range scripts {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o444))
	}
}

// FreePort is a TCP port on 127.0.0.1 nobody listens on, the test's
// until it ends: no other test, in this process or another, is given it
// meanwhile (see internal/freeport).
func FreePort(t testing.TB) string {
	t.Helper()
	return freeport.String(t)
}

// Env is the container's environment as the kubelet would set it for the
// pod podName: values, Secret keys (secrets: name -> key -> value) and the
// pod's name; then overrides (also PATH, HOME and TMPDIR, which a pod's
// image sets: a server's tmpdir is TMPDIR, and a MariaDB server that
// starts removes the #sql files it finds there, so servers on one host
// that share /tmp break each other's temporary tables).
func Env(t testing.TB, c corev1.Container, secrets map[string]map[string]string, podName string, overrides map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			s, ok := secrets[e.ValueFrom.SecretKeyRef.Name]
			require.True(t, ok, "env %s: no Secret %s", e.Name, e.ValueFrom.SecretKeyRef.Name)
			v, ok := s[e.ValueFrom.SecretKeyRef.Key]
			require.True(t, ok, "env %s: Secret %s has no key %s", e.Name, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = podName
		case e.ValueFrom.FieldRef != nil && strings.HasPrefix(e.ValueFrom.FieldRef.FieldPath, "metadata.labels["):
			// The kubelet gives a label the pod lacks as "": overrides
			// set the ones a test needs.
			env[e.Name] = ""
		default:
			t.Fatalf("env %s: a source the test does not resolve", e.Name)
		}
	}
	for k, v := range overrides {
		_, known := env[k]
		require.True(t, known || k == "PATH" || k == "HOME" || k == "TMPDIR", "override %s: the container sets no such variable", k)
		env[k] = v
	}
	return env
}

// Command is the container's command and args with the scripts volume's
// mount path replaced by the host's copy.
func Command(t testing.TB, c corev1.Container, scripts string) []string {
	t.Helper()
	var mount string
	for _, m := range c.VolumeMounts {
		if m.Name == engine.ScriptsVolume {
			mount = m.MountPath
		}
	}
	require.NotEmpty(t, mount, "container %s mounts no scripts", c.Name)
	return ReplaceMount(append(append([]string{}, c.Command...), c.Args...), mount, scripts)
}

// ReplaceMount rewrites arguments under mount to dir.
func ReplaceMount(argv []string, mount, dir string) []string {
	out := make([]string, 0, len(argv))
	for _, a := range argv {
		if rest, ok := strings.CutPrefix(a, mount+"/"); ok {
			a = filepath.Join(dir, rest)
		}
		out = append(out, a)
	}
	return out
}

// Cmd is argv as the user with exactly env, in its own process group.
func Cmd(u *User, env map[string]string, argv []string) *exec.Cmd {
	if u != nil {
		argv = append([]string{"setpriv", "--reuid=" + strconv.Itoa(u.UID), "--regid=" + strconv.Itoa(u.GID), "--init-groups", "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// Run runs a Job's script to its end: its combined output and error.
func Run(u *User, env map[string]string, argv []string) (string, error) {
	out, err := Cmd(u, env, argv).CombinedOutput()
	return string(out), err
}

// Server is a running bootstrap script (then the server it execs).
type Server struct {
	Cmd  *exec.Cmd
	Port string
	Log  *syncbuf.Buffer
	done chan error
}

// Start runs the server's bootstrap until root can query it with
// password on env["PORT"].
func Start(t testing.TB, u *User, env map[string]string, argv []string, password string) *Server {
	t.Helper()
	s := &Server{Cmd: Cmd(u, env, argv), Port: env["PORT"], Log: &syncbuf.Buffer{}, done: make(chan error, 1)}
	s.Cmd.Stdout, s.Cmd.Stderr = s.Log, s.Log
	require.NoError(t, s.Cmd.Start())
	go func() { s.done <- s.Cmd.Wait() }()
	t.Cleanup(func() { s.Stop(t) })
	deadline := time.Now().Add(180 * time.Second)
	for {
		require.False(t, s.Exited(), "server on port %s exited:\n%s", s.Port, s.Log.String())
		if _, err := SQL(s.Port, "root", password, "", "SELECT 1"); err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "server on port %s did not start:\n%s", s.Port, s.Log.String())
		time.Sleep(250 * time.Millisecond)
	}
	return s
}

// Exited is true once the process has ended.
func (s *Server) Exited() bool {
	select {
	case err := <-s.done:
		s.done <- err
		return true
	default:
		return false
	}
}

// Stop shuts the server down (SIGTERM, as the kubelet does).
func (s *Server) Stop(t testing.TB) {
	if s.Exited() {
		return
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		s.done <- nil
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-s.Cmd.Process.Pid, syscall.SIGKILL)
		t.Errorf("server on port %s did not stop within 60 s", s.Port)
	}
}

// SQL runs statements as user on the server at 127.0.0.1:port: tab
// separated rows, no headers.
func SQL(port, user, password, database, sql string) (string, error) {
	args := []string{"-e", sql}
	if database != "" {
		args = append(args, database)
	}
	return Client(port, user, password, args...)
}

// Client runs the mariadb client as user on the server at
// 127.0.0.1:port with args after the connection options (tab separated
// rows, no headers unless args ask for them): its output, trimmed.
func Client(port, user, password string, args ...string) (string, error) {
	cmd := exec.Command("mariadb", append([]string{"--no-defaults", "-h", "127.0.0.1", "-P", port, "-u", user, "-N", "-B", "--connect-timeout=5"}, args...)...)
	cmd.Env = []string{"MYSQL_PWD=" + password, "PATH=" + Path}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
