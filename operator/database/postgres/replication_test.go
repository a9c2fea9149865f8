package postgres_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// Standbys clone and stream as the replication role (postgres.ReplicationUser),
// never as the superuser; see host for what runs here.

// replicationState is what the primary says of its standbys: who each
// streams as, its name and state, one line each.
const replicationState = "SELECT string_agg(usename || ' ' || application_name || ' ' || state, E'\\n' ORDER BY application_name) FROM pg_stat_replication"

// waitForStreaming waits until the primary on port reports want (see
// replicationState).
func waitForStreaming(t *testing.T, h *host, port, want string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, want, h.sql(port, "postgres", replicationState))
	}, 30*time.Second, 100*time.Millisecond)
}

// waitForRow waits until the server on port holds the row id of the
// app's table "rows", written on the primary.
func waitForRow(t *testing.T, h *host, port, id string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := h.appSQL(port, "SELECT count(*) FROM rows WHERE id = "+id)
		assert.NoError(ct, err, out)
		assert.Equal(ct, "1", out)
	}, 30*time.Second, 100*time.Millisecond, "row %s never reached the server on port %s", id, port)
}

// replicationConnect opens a replication connection to the server on port
// as user (IDENTIFY_SYSTEM, as a standby starts): the error and output.
func replicationConnect(h *host, port, user, password string) (string, error) {
	cmd := exec.Command(filepath.Join(h.bin, "psql"), "-X", "-A", "-t",
		"host=127.0.0.1 port="+port+" dbname=postgres replication=true user="+user, "-c", "IDENTIFY_SYSTEM")
	cmd.Env = []string{"PGPASSWORD=" + password, "PGCONNECT_TIMEOUT=5"}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// processEnvironments are the environments of the processes of s (its
// process group: the server and every process it started).
func processEnvironments(t *testing.T, s *pgtest.Server) map[int]string {
	t.Helper()
	out := map[int]string{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		if g, err := syscall.Getpgid(pid); err != nil || g != s.Cmd.Process.Pid {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue // gone meanwhile
		}
		out[pid] = string(b)
	}
	require.NotEmpty(t, out, "no process of the server on port %s", s.Port)
	return out
}

// assertNoPasswordIn asserts that no process of s carries the
// superuser's or the replication role's password in its environment.
func assertNoPasswordIn(t *testing.T, h *host, s *pgtest.Server) {
	t.Helper()
	for pid, env := range processEnvironments(t, s) {
		assert.NotContains(t, env, h.superPassword(), "process %d of the server on port %s has the superuser's password", pid, s.Port)
		assert.NotContains(t, env, h.replicationPassword(), "process %d of the server on port %s has the replication password", pid, s.Port)
		assert.NotContains(t, env, "PGPASSWORD=", "process %d", pid)
	}
}

// primaryConninfo is the standby's primary_conninfo setting as the
// server reads it, and the file's mode.
func primaryConninfo(t *testing.T, h *host, dataVolume string) (string, os.FileMode) {
	t.Helper()
	conf := filepath.Join(h.volume(dataVolume), "pgdata", "postgresql.auto.conf")
	info, err := os.Stat(conf)
	require.NoError(t, err)
	b, err := os.ReadFile(conf)
	require.NoError(t, err)
	return string(b), info.Mode().Perm()
}

func TestStandbysReplicateAsTheReplicationRole(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary := h.primary("data-0")
	assert.Contains(t, primary.Log.String(), "replication role deckhand_replication in place")
	h.init(primary.Port)
	assert.Equal(t, "t t f f f f",
		h.sql(primary.Port, "postgres", "SELECT concat_ws(' ', rolcanlogin, rolreplication, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls) FROM pg_authid WHERE rolname = 'deckhand_replication'"),
		"LOGIN REPLICATION, nothing more")
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)

	// The pod's environment names the role and its Secret.
	pod := postgres.Engine{}.ServerPod(h.cluster)
	env := h.serverEnv(pod, 1, "data-1", primary.Port)
	assert.Equal(t, postgres.ReplicationUser, env["REPLICATION_USER"])
	assert.Equal(t, h.replicationPassword(), env["REPLICATION_PASSWORD"])

	standby := h.standby(1, "data-1", primary.Port)
	assert.Contains(t, standby.Log.String(), "cloning the primary")
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming")
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)
	waitForRow(t, h, standby.Port, "2")

	// Neither password is in the environment of a running server, and the
	// standby's volume holds the replication password only, in
	// postgresql.auto.conf (mode 0600), not the superuser's.
	assertNoPasswordIn(t, h, primary)
	assertNoPasswordIn(t, h, standby)
	for _, s := range []*pgtest.Server{primary, standby} {
		assert.NotContains(t, s.Log.String(), h.replicationPassword(), "the log of the server on port %s", s.Port)
		assert.NotContains(t, s.Log.String(), h.superPassword(), "the log of the server on port %s", s.Port)
	}
	conf, mode := primaryConninfo(t, h, "data-1")
	assert.Equal(t, os.FileMode(0o600), mode)
	assert.NotContains(t, conf, h.superPassword())
	setting := h.sql(standby.Port, "postgres", "SELECT setting FROM pg_settings WHERE name = 'primary_conninfo'")
	assert.Contains(t, setting, "user='deckhand_replication'")
	assert.Contains(t, setting, "password='"+strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(h.replicationPassword())+"'",
		"the password as a connection string quotes it, through the configuration file's quoting")
	assert.Equal(t, 1, strings.Count(conf, "primary_conninfo"), conf)

	// Another role with REPLICATION, and the superuser itself, are refused
	// by pg_hba.conf; the role with its password gets in.
	h.sql(primary.Port, "postgres", "CREATE ROLE other LOGIN REPLICATION PASSWORD 'other-password'")
	out, err = replicationConnect(h, primary.Port, "other", "other-password")
	require.Error(t, err, out)
	assert.Contains(t, out, `no pg_hba.conf entry for replication connection from host "127.0.0.1", user "other"`)
	out, err = replicationConnect(h, primary.Port, postgres.Superuser, h.superPassword())
	require.Error(t, err, out)
	assert.Contains(t, out, `no pg_hba.conf entry for replication connection from host "127.0.0.1", user "postgres"`)
	out, err = replicationConnect(h, primary.Port, postgres.ReplicationUser, "wrong")
	require.Error(t, err, out)
	assert.Contains(t, out, "password authentication failed")
	out, err = replicationConnect(h, primary.Port, postgres.ReplicationUser, h.replicationPassword())
	require.NoError(t, err, out)

	// A new password in the Secret takes effect when the servers restart:
	// the primary sets it again, the standby rewrites primary_conninfo.
	h.secrets[h.cluster.ReplicationSecret]["password"] = randomPassword(t)
	standby.Stop(t)
	primary.Stop(t)
	primary = h.server(h.scripts, 0, "data-0", "")
	standby = h.standby(1, "data-1", primary.Port)
	assert.NotContains(t, standby.Log.String(), "cloning")
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming")
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (3)")
	require.NoError(t, err, out)
	waitForRow(t, h, standby.Port, "3")
	conf, _ = primaryConninfo(t, h, "data-1")
	assert.Equal(t, 1, strings.Count(conf, "primary_conninfo"), "rewritten, not appended:\n%s", conf)

	// A standby whose directory is of another major version (after a major
	// upgrade of the primary) moves it aside and clones again, as the role.
	standby.Stop(t)
	old := filepath.Join(h.volume("data-2"), "pgdata")
	h.u.Dir(t, old)
	require.NoError(t, os.WriteFile(filepath.Join(old, "PG_VERSION"), []byte("14\n"), 0o644))
	recloned := h.standby(2, "data-2", primary.Port)
	assert.Contains(t, recloned.Log.String(), "moving it to")
	assert.FileExists(t, filepath.Join(old+".old-14", "PG_VERSION"))
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-2 streaming")
	waitForRow(t, h, recloned.Port, "3")
}

// previousScriptFiles are the previous release's bootstrap.sh and lib.sh
// (testdata/previous), by name.
func previousScriptFiles(t testing.TB) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, name := range []string{postgres.BootstrapScript, "lib.sh"} {
		b, err := os.ReadFile(filepath.Join("testdata", "previous", name))
		require.NoError(t, err)
		files[name] = string(b)
	}
	return files
}

// previousScripts is a scripts directory with previousScriptFiles.
func previousScripts(t *testing.T, h *host) string {
	t.Helper()
	return h.u.WriteScripts(t, h.u.Dir(t, h.root, "previous"), previousScriptFiles(t))
}

func TestADataDirectoryOfThePreviousReleaseGetsTheReplicationRole(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	previous := previousScripts(t, h)

	// A Database as the previous release made it: a standby cloned and
	// streaming as the superuser, and a line of the user's own in
	// pg_hba.conf.
	primary := h.server(previous, 0, "data-0", "")
	h.init(primary.Port)
	out, err := h.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)
	standby := h.server(previous, 1, "data-1", primary.Port)
	waitForStreaming(t, h, primary.Port, "postgres walreceiver streaming")
	assert.Equal(t, "0", h.sql(primary.Port, "postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'deckhand_replication'"))
	hba := filepath.Join(h.volume("data-0"), "pgdata", "pg_hba.conf")
	b, err := os.ReadFile(hba)
	require.NoError(t, err)
	require.Contains(t, string(b), "# deckhand: clients and standbys from other pods, with a password\nhost all all all scram-sha-256\nhost replication all all scram-sha-256\n")
	users := "\n# the user's own\nhost replication all 192.0.2.0/24 scram-sha-256\n"
	require.NoError(t, os.WriteFile(hba, append(b, users...), 0o600))
	h.sql(primary.Port, "postgres", "SELECT pg_reload_conf()")

	// The operator upgraded: the StatefulSet rolls, the standby first. It
	// starts with the new scripts while the primary has no role yet: it
	// serves reads and asks for the role until the primary has it.
	standby.Stop(t)
	standby = h.standby(1, "data-1", primary.Port)
	assert.NotContains(t, standby.Log.String(), "cloning")
	require.Eventually(t, func() bool {
		return strings.Contains(standby.Log.String(), `password authentication failed for user "deckhand_replication"`)
	}, 30*time.Second, 100*time.Millisecond, "the standby never asked for the role:\n%s", standby.Log)
	assert.Empty(t, h.sql(primary.Port, "postgres", replicationState), "nothing streams as the superuser any more")
	out, err = h.appSQL(standby.Port, "SELECT count(*) FROM rows")
	require.NoError(t, err, out)
	assert.Equal(t, "1", out, "the standby serves reads meanwhile")

	// Then the primary restarts with the new scripts.
	primary.Stop(t)
	primary = h.primary("data-0")
	assert.Contains(t, primary.Log.String(), "replication role deckhand_replication in place")
	assert.Contains(t, primary.Log.String(), "replication connections over TCP only for deckhand_replication")
	b, err = os.ReadFile(hba)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "host replication all all scram-sha-256", "the line the previous release wrote is gone")
	assert.Contains(t, string(b), "host all all all scram-sha-256\n", "clients still get in")
	assert.Contains(t, string(b), users, "the user's line stays")
	assert.Contains(t, string(b), "\nhost replication deckhand_replication all scram-sha-256\n")
	// What the server reads: replication from anywhere for the role only.
	assert.Equal(t, "deckhand_replication",
		h.sql(primary.Port, "postgres", "SELECT string_agg(array_to_string(user_name, ','), ' ') FROM pg_hba_file_rules WHERE database = '{replication}' AND type = 'host' AND address = 'all'"),
		"the only replication rule for every address")

	standby = h.standby(1, "data-1", primary.Port)
	assert.NotContains(t, standby.Log.String(), "cloning")
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming")
	out, err = h.appSQL(primary.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)
	waitForRow(t, h, standby.Port, "2")
	conf, _ := primaryConninfo(t, h, "data-1")
	assert.NotContains(t, conf, h.superPassword(), "the superuser's password is gone from the standby's volume")

	// A new standby clones the upgraded primary.
	added := h.standby(2, "data-2", primary.Port)
	assert.Contains(t, added.Log.String(), "cloning the primary")
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming\ndeckhand_replication name-of-database-2 streaming")
	waitForRow(t, h, added.Port, "2")

	// Another start changes nothing in pg_hba.conf.
	primary.Stop(t)
	primary = h.primary("data-0")
	after, err := os.ReadFile(hba)
	require.NoError(t, err)
	assert.Equal(t, string(b), string(after))
	assert.NotContains(t, primary.Log.String(), "replication connections over TCP only for")
}

func TestAReplicationPasswordWithALineBreakIsRefusedBeforeAnythingIsDone(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	// As a Secret made with "echo password | base64" holds it.
	h.secrets[h.cluster.ReplicationSecret]["password"] = "password\n"
	pod := postgres.Engine{}.ServerPod(h.cluster)
	for ordinal, volume := range []string{"data-0", "data-1"} {
		env := h.serverEnv(pod, ordinal, volume, "1")
		out, err := h.u.Command(env, pgtest.HostCommand(t, pod.Container, h.scripts)).CombinedOutput()
		require.Error(t, err, "%s", out)
		assert.Contains(t, string(out), "REPLICATION_PASSWORD (the replication Secret's password) holds a line break: remove it from the Secret")
		entries, err := os.ReadDir(h.volume(volume))
		require.NoError(t, err)
		assert.Empty(t, entries, "nothing was initialised or cloned")
	}
}
