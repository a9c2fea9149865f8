package mysql_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/mysql"
	"github.com/deckhand-dev/deckhand/operator/database/mysql/mysqltest"
)

// The scripts the engine ships, run on the host against Debian's MariaDB
// with the environment the engine's pod builders set. This is the MariaDB
// branch of the scripts; the MySQL branch is covered by the statement
// tests in lib_test.go only (Debian ships no MySQL).

// A password that breaks naive quoting in SQL, option files and shells.
const rootPassword = `r0ot'"\$(x)` + "`id`;--"

type host struct {
	t       testing.TB
	u       *mysqltest.User
	root    string
	scripts string
	secrets map[string]map[string]string
	cluster engine.Cluster
	// started remembers how each server was started, for restarts; env,
	// with what environment (its probes run with it).
	started map[*mysqltest.Server]func(extra map[string]string) *mysqltest.Server
	env     map[*mysqltest.Server]map[string]string
	// tlsDir, when set, is the server TLS Secret's directory
	// (cluster.TLSSecret set): the servers mount it and the Jobs that
	// verify the servers its ca.crt (TLS_DIR, TLS_CA_FILE).
	tlsDir string
}

func newHost(t testing.TB) *host {
	mysqltest.RequireMariaDB(t)
	u := mysqltest.Unprivileged(t)
	root := mysqltest.TempRoot(t, u)
	h := &host{t: t, u: u, root: root, scripts: filepath.Join(root, "scripts"), started: map[*mysqltest.Server]func(map[string]string) *mysqltest.Server{}, env: map[*mysqltest.Server]map[string]string{}}
	mysqltest.WriteScripts(t, u, h.scripts, mysql.Engine{}.Scripts())
	h.cluster = engine.Cluster{
		Name: "my-cluster", Namespace: "default", Image: "mariadb:10.11", Port: 3306,
		Database: "name-of_database", AppUser: "app'user", AppSecret: "my-cluster-app",
		SuperuserSecret: "my-secret", ReplicationSecret: "my-cluster-replication",
		PrimaryHost: "my-cluster-rw.default.svc",
	}
	h.secrets = map[string]map[string]string{
		"my-secret":              {"password": rootPassword},
		"my-cluster-replication": {"password": `repl"'\pass`},
		"my-cluster-app":         {"password": `app'pa"ss`},
	}
	return h
}

// server starts ordinal's bootstrap on its own data volume.
func (h *host) server(name string, ordinal int, primaryPort string) *mysqltest.Server {
	h.t.Helper()
	pod := mysql.Engine{}.ServerPod(h.cluster)
	vol := mysqltest.Dir(h.t, h.u, h.root, name)
	run := mysqltest.Dir(h.t, h.u, h.root, name+"-run")
	port := mysqltest.FreePort(h.t)
	if primaryPort == "" {
		primaryPort = port
	}
	env := mysqltest.Env(h.t, pod.Container, h.secrets, fmt.Sprintf("%s-%d", h.cluster.Name, ordinal), map[string]string{
		"DATA_DIR": filepath.Join(vol, "data"), "PORT": port, "BIND_ADDRESS": "127.0.0.1",
		"MYSQL_UNIX_PORT": filepath.Join(run, "mysqld.sock"),
		"PRIMARY_HOST":    "127.0.0.1", "PRIMARY_PORT": primaryPort,
		"PATH": mysqltest.Path, "HOME": run, "TMPDIR": mysqltest.Dir(h.t, h.u, h.root, name+"-tmp"),
	})
	if h.tlsDir != "" {
		env["TLS_DIR"], env["TLS_CA_FILE"] = h.tlsDir, filepath.Join(h.tlsDir, "ca.crt")
	}
	argv := mysqltest.Command(h.t, pod.Container, h.scripts)
	password := h.secrets[h.cluster.SuperuserSecret]["password"]
	var start func(extra map[string]string) *mysqltest.Server
	start = func(extra map[string]string) *mysqltest.Server {
		e := maps.Clone(env)
		maps.Copy(e, extra)
		s := mysqltest.Start(h.t, h.u, e, argv, password)
		h.started[s] = start
		h.env[s] = e
		return s
	}
	return start(nil)
}

// restart starts a server again on the same volume and port, with extra
// environment (what a changed pod template would set).
func (h *host) restart(s *mysqltest.Server, extra map[string]string) *mysqltest.Server {
	h.t.Helper()
	s.Stop(h.t)
	return h.started[s](extra)
}

// probe runs a server's probe (mode "ready" or "alive") as the kubelet
// does, in the server's environment.
func (h *host) probe(s *mysqltest.Server, mode string) (string, error) {
	h.t.Helper()
	argv := mysqltest.ReplaceMount([]string{"sh", "/deckhand/scripts/" + mysql.ProbeScript, mode}, "/deckhand/scripts", h.scripts)
	return mysqltest.Run(h.u, h.env[s], argv)
}

// job runs a Job's pod on the host.
func (h *host) job(pod engine.Pod, overrides map[string]string) (engine.Report, string, error) {
	h.t.Helper()
	for _, e := range pod.Container.Env {
		if _, set := overrides[e.Name]; e.Name == "TLS_CA_FILE" && !set {
			overrides[e.Name] = filepath.Join(h.tlsDir, "ca.crt")
		}
	}
	run := fmt.Sprint(time.Now().UnixNano())
	msg := filepath.Join(mysqltest.Dir(h.t, h.u, h.root, "jobs"), "termination-"+run)
	overrides["TERMINATION_MESSAGE_PATH"] = msg
	overrides["PATH"] = mysqltest.Path
	overrides["HOME"] = h.root
	// A Job's pod has a /tmp of its own (the verification's scratch
	// server keeps its temporary tables there).
	overrides["TMPDIR"] = mysqltest.Dir(h.t, h.u, h.root, "jobs", "tmp-"+run)
	env := mysqltest.Env(h.t, pod.Container, h.secrets, "job", overrides)
	out, err := mysqltest.Run(h.u, env, mysqltest.Command(h.t, pod.Container, h.scripts))
	b, _ := os.ReadFile(msg)
	rep, perr := engine.ParseReport(string(b))
	require.NoError(h.t, perr, "%s", b)
	return rep, out, err
}

func (h *host) sql(port, sql string) string {
	h.t.Helper()
	out, err := mysqltest.SQL(port, "root", rootPassword, "", sql)
	require.NoError(h.t, err, out)
	return out
}

// rows is a table's content in a stable order, with a checksum.
func (h *host) rows(port string) string {
	h.t.Helper()
	return h.sql(port, "SELECT id, note, HEX(blobby) FROM `name-of_database`.`t` ORDER BY id") + "\n" +
		h.sql(port, "CHECKSUM TABLE `name-of_database`.`t`")
}

func TestShippedScriptsRunARealMariaDB(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	e := mysql.Engine{}

	// Primary: a new data directory whose root has the Secret's password.
	primary := h.server("primary", 0, "")
	_, err := mysqltest.SQL(primary.Port, "root", "wrong", "", "SELECT 1")
	require.Error(t, err, "root must need its password")
	assert.Equal(t, "0", h.sql(primary.Port, "SELECT COUNT(*) FROM mysql.user WHERE user = ''"), "no anonymous accounts")
	assert.Contains(t, h.sql(primary.Port, "SELECT @@read_only, @@server_id, @@log_bin"), "0\t1\t1")
	seriesOf := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(h.root, name, "data", "deckhand-series"))
		return strings.TrimSpace(string(b))
	}
	assert.Equal(t, "10.11", seriesOf("primary"), "the data directory records its release series")

	// Init, twice: the database and its account, once.
	for range 2 {
		rep, out, err := h.job(e.InitPod(h.cluster), map[string]string{"PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": primary.Port})
		require.NoError(t, err, out)
		assert.Contains(t, rep.ServerVersion, "MariaDB")
	}
	assert.Equal(t, "name-of_database", h.sql(primary.Port, "SHOW DATABASES LIKE 'name-of\\_database'"))
	appPass := h.secrets["my-cluster-app"]["password"]
	_, err = mysqltest.SQL(primary.Port, "app'user", appPass, "name-of_database",
		"CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(100), blobby BLOB); INSERT INTO t VALUES (1, 'one', x'00ff'), (2, 'tab\\there', NULL)")
	require.NoError(t, err)
	_, err = mysqltest.SQL(primary.Port, "app'user", appPass, "", "CREATE DATABASE other")
	require.Error(t, err, "the app account owns its database only")

	// Replica: cloned from a dump of the primary, then following it.
	replica := h.server("replica", 1, primary.Port)
	assert.Equal(t, h.rows(primary.Port), h.rows(replica.Port))
	h.sql(primary.Port, "INSERT INTO `name-of_database`.t VALUES (3, 'after the clone', x'01')")
	require.Eventually(t, func() bool {
		out, _ := mysqltest.SQL(replica.Port, "root", rootPassword, "", "SELECT note FROM `name-of_database`.t WHERE id = 3")
		return out == "after the clone"
	}, 20*time.Second, 200*time.Millisecond, "a row written on the primary reaches the replica")
	assert.Contains(t, h.sql(replica.Port, "SELECT @@read_only, @@server_id"), "1\t2")
	out, err := mysqltest.SQL(replica.Port, "app'user", appPass, "name-of_database", "INSERT INTO t VALUES (9, 'no', NULL)")
	require.Error(t, err, "the replica refuses writes")
	assert.Contains(t, out, "read-only")
	status := h.sql(replica.Port, "SELECT @@gtid_slave_pos")
	assert.NotEmpty(t, status, "the replica follows a GTID position")

	// The readiness probe, as the kubelet runs it on the replica.
	assert.Equal(t, []string{"sh", "/deckhand/scripts/" + mysql.ProbeScript, "ready"}, e.ServerPod(h.cluster).Container.ReadinessProbe.Exec.Command)
	out, err = h.probe(replica, "ready")
	require.NoError(t, err, out)
	h.sql(replica.Port, "STOP SLAVE")
	_, err = h.probe(replica, "ready")
	require.Error(t, err, "a replica that does not replicate is not ready")
	h.sql(replica.Port, "START SLAVE")

	// A restarted primary keeps its data directory.
	primary2 := h.restart(primary, nil)
	assert.Contains(t, h.rows(primary2.Port), "after the clone")
	primary = primary2

	// Backup from the replica.
	backupDir := mysqltest.Dir(t, h.u, h.root, "backup")
	h.sql(primary.Port, "CREATE DATABASE `second db`; CREATE TABLE `second db`.x (v INT); INSERT INTO `second db`.x VALUES (42)")
	require.Eventually(t, func() bool {
		out, _ := mysqltest.SQL(replica.Port, "root", rootPassword, "", "SELECT v FROM `second db`.x")
		return out == "42"
	}, 20*time.Second, 200*time.Millisecond)
	backupJob := func() (engine.Report, string, error) {
		return h.job(e.BackupPod(h.cluster, engine.Backup{File: "my-cluster/2026-01-01.sql", Host: "my-cluster-1.my-cluster", ClaimName: "b"}),
			map[string]string{"SOURCE_HOST": "127.0.0.1", "SOURCE_PORT": replica.Port, "BACKUP_DIR": backupDir})
	}
	rep, out, err := backupJob()
	require.NoError(t, err, out)
	file := filepath.Join(backupDir, "my-cluster/2026-01-01.sql")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	assert.Equal(t, hex.EncodeToString(sum[:]), rep.SHA256, "the reported checksum is the file's")
	assert.Equal(t, int64(len(b)), rep.Size)
	assert.Equal(t, "my-cluster/2026-01-01.sql", rep.File)
	assert.Contains(t, rep.ServerVersion, "MariaDB")
	assert.NotContains(t, string(b), "deckhand_repl", "accounts are not in a backup")
	leftovers, _ := filepath.Glob(filepath.Join(backupDir, "my-cluster", "*.partial"))
	assert.Empty(t, leftovers)

	// Restore into a new cluster with its own password: checksum first.
	h.secrets["other-secret"] = map[string]string{"password": "other-root"}
	other := h.cluster
	other.Name, other.SuperuserSecret = "restored", "other-secret"
	saved := h.cluster
	h.cluster = other
	restored := h.server("restored", 0, "")
	restoreJob := func(sum string) (string, error) {
		_, out, err := h.job(e.RestorePod(other, engine.Restore{File: "my-cluster/2026-01-01.sql", SHA256: sum, ClaimName: "b"}),
			map[string]string{"PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": restored.Port, "BACKUP_DIR": backupDir})
		return out, err
	}
	out, err = restoreJob(strings.Repeat("0", 64))
	require.Error(t, err, "a checksum mismatch is refused")
	assert.Contains(t, out, "refusing to load it")
	dbs, _ := mysqltest.SQL(restored.Port, "root", "other-root", "", "SHOW DATABASES LIKE 'name-of%'")
	assert.Empty(t, dbs, "nothing was loaded")
	out, err = restoreJob(rep.SHA256)
	require.NoError(t, err, out)
	got, err := mysqltest.SQL(restored.Port, "root", "other-root", "", "SELECT id, note, HEX(blobby) FROM `name-of_database`.`t` ORDER BY id")
	require.NoError(t, err, got)
	assert.Equal(t, h.sql(primary.Port, "SELECT id, note, HEX(blobby) FROM `name-of_database`.`t` ORDER BY id"), got, "rows equal after dump and restore")
	got, _ = mysqltest.SQL(restored.Port, "root", "other-root", "", "SELECT v FROM `second db`.x")
	assert.Equal(t, "42", got)
	_, err = mysqltest.SQL(restored.Port, "root", rootPassword, "", "SELECT 1")
	assert.Error(t, err, "the restored cluster keeps its own root password")
	h.cluster = saved

	// A killed dump leaves nothing that looks complete.
	h.sql(primary.Port, "CREATE TABLE `name-of_database`.big (id INT AUTO_INCREMENT PRIMARY KEY, pad TEXT);"+
		"INSERT INTO `name-of_database`.big (pad) SELECT REPEAT('x', 2000) FROM `name-of_database`.seq_1_to_40000")
	require.Eventually(t, func() bool {
		out, _ := mysqltest.SQL(replica.Port, "root", rootPassword, "", "SELECT COUNT(*) FROM `name-of_database`.big")
		return out == "40000"
	}, 60*time.Second, 250*time.Millisecond)
	killed := "my-cluster/killed.sql"
	pod := e.BackupPod(h.cluster, engine.Backup{File: killed, Host: "x", ClaimName: "b"})
	env := mysqltest.Env(t, pod.Container, h.secrets, "job", map[string]string{
		"SOURCE_HOST": "127.0.0.1", "SOURCE_PORT": replica.Port, "BACKUP_DIR": backupDir,
		"TERMINATION_MESSAGE_PATH": filepath.Join(h.root, "jobs", "killed"), "PATH": mysqltest.Path, "HOME": h.root,
	})
	cmd := mysqltest.Cmd(h.u, env, mysqltest.Command(t, pod.Container, h.scripts))
	require.NoError(t, cmd.Start())
	partial := filepath.Join(backupDir, killed+".partial")
	require.Eventually(t, func() bool {
		st, err := os.Stat(partial)
		return err == nil && st.Size() > 0
	}, 30*time.Second, 5*time.Millisecond, "the dump started")
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
	_ = cmd.Wait()
	_, err = os.Stat(filepath.Join(backupDir, killed))
	assert.True(t, os.IsNotExist(err), "no file under the backup's name")
	msg, _ := os.ReadFile(filepath.Join(h.root, "jobs", "killed"))
	assert.Empty(t, msg, "no report")
	// The next run replaces the leftover.
	rep2, out, err := h.job(pod, map[string]string{"SOURCE_HOST": "127.0.0.1", "SOURCE_PORT": replica.Port, "BACKUP_DIR": backupDir})
	require.NoError(t, err, out)
	assert.Greater(t, rep2.Size, int64(40000*2000))
	_, err = os.Stat(partial)
	assert.True(t, os.IsNotExist(err), "the leftover is gone")

	// The upgrade path, same version: new directory, load, swap, keep old.
	restored.Stop(t)
	other.Image = "mariadb:10.11"
	up := e.UpgradePod(other, engine.Upgrade{File: "my-cluster/2026-01-01.sql", SHA256: rep.SHA256, ClaimName: "b", DataClaimName: "data-restored-0", FromVersion: "10.11", ToVersion: "10.11"})
	upRun := mysqltest.Dir(t, h.u, h.root, "upgrade-run")
	upRep, out, err := h.job(up, map[string]string{
		"DATA_DIR": filepath.Join(h.root, "restored", "data"), "MYSQL_UNIX_PORT": filepath.Join(upRun, "sock"), "BACKUP_DIR": backupDir,
	})
	require.NoError(t, err, out)
	assert.Contains(t, upRep.ServerVersion, "MariaDB")
	_, err = os.Stat(filepath.Join(h.root, "restored", "data.deckhand-old-10.11", "mysql"))
	assert.NoError(t, err, "the old data directory is kept")
	h.cluster = other
	upgraded := h.restart(restored, nil)
	got, err = mysqltest.SQL(upgraded.Port, "root", "other-root", "", "SELECT id, note, HEX(blobby) FROM `name-of_database`.`t` ORDER BY id")
	require.NoError(t, err, got)
	assert.Contains(t, got, "after the clone")
	assert.Equal(t, "10.11", seriesOf("restored"))
	h.cluster = saved

	// A replica whose data is of another series (the primary was upgraded)
	// moves it aside and clones the primary again; REMOVE_OLD_DATA removes
	// what was kept.
	require.NoError(t, os.WriteFile(filepath.Join(h.root, "replica", "data", "deckhand-series"), []byte("10.6\n"), 0o644))
	replica = h.restart(replica, nil)
	_, err = os.Stat(filepath.Join(h.root, "replica", "data.deckhand-old-10.6", "mysql"))
	require.NoError(t, err, "the replica's old data is kept aside")
	assert.Equal(t, "10.11", seriesOf("replica"))
	h.sql(primary.Port, "INSERT INTO `name-of_database`.t VALUES (4, 'after the re-clone', NULL)")
	require.Eventually(t, func() bool {
		out, _ := mysqltest.SQL(replica.Port, "root", rootPassword, "", "SELECT note FROM `name-of_database`.t WHERE id = 4")
		return out == "after the re-clone"
	}, 30*time.Second, 200*time.Millisecond, "the re-cloned replica follows the primary")
	assert.Equal(t, h.rows(primary.Port), h.rows(replica.Port))
	replica = h.restart(replica, map[string]string{"REMOVE_OLD_DATA": "true"})
	_, err = os.Stat(filepath.Join(h.root, "replica", "data.deckhand-old-10.6"))
	assert.True(t, os.IsNotExist(err), "REMOVE_OLD_DATA removed the old data")
	assert.Equal(t, h.rows(primary.Port), h.rows(replica.Port), "and nothing else")
}
