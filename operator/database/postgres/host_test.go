package postgres_test

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// host runs the engine's pods on the host's PostgreSQL: each pod's
// command and environment come from the pod builders; only what a host
// cannot share with a pod is overridden: volumes (mount paths become
// directories of the test), PATH (Debian keeps the binaries in
// /usr/lib/postgresql/<major>/bin), ports and hosts (127.0.0.1: the test's
// servers listen there only) and the termination message file.
type host struct {
	t       testing.TB
	u       *pgtest.User
	bin     string
	root    string
	scripts string
	cluster engine.Cluster
	secrets map[string]map[string]string
	// ports are the servers' ports, by data volume.
	ports map[string]string
	// jobUID is the UID of the Job whose pods job runs (the pod's
	// batch.kubernetes.io/controller-uid label): every call is a retry
	// of one Job until a test changes it.
	jobUID string
	// standbyPort is where a Job's STANDBY_HOST listens.
	standbyPort string
}

func newHost(t testing.TB) *host {
	holdServerSlot(t)
	bin := pgtest.Bin(t)
	u := pgtest.Unprivileged(t)
	root := u.TempDir(t)
	h := &host{
		t: t, u: u, bin: bin, root: root,
		scripts: u.WriteScripts(t, root, postgres.Engine{}.Scripts()),
		cluster: engine.Cluster{
			Name: "name-of-database", Namespace: "ns", Image: postgres.DefaultImage, Port: postgres.DefaultPort,
			Database: "name-of-database", AppUser: "name-of-database",
			SuperuserSecret: "name-of-database-superuser", AppSecret: "name-of-database-app",
			ReplicationSecret: "name-of-database-replication",
			PrimaryHost:       "name-of-database-rw.ns.svc",
		},
		ports:  map[string]string{},
		jobUID: "job-uid-1",
		secrets: map[string]map[string]string{
			"name-of-database-superuser":   {"username": postgres.Superuser, "password": randomPassword(t)},
			"name-of-database-app":         {"password": randomPassword(t)},
			"name-of-database-replication": {"password": randomPassword(t)},
		},
	}
	u.Dir(t, root, "tmp")
	// The operator names ordinal 0 the primary of a new Database.
	h.namePrimary(0)
	return h
}

// namePrimary writes what the operator writes into the scripts ConfigMap
// (its key "primary"): the pod of ordinal is the primary. Every server of
// the test shares the scripts directory, as pods share the ConfigMap.
func (h *host) namePrimary(ordinal int) {
	h.t.Helper()
	file := filepath.Join(h.scripts, "primary")
	require.NoError(h.t, os.RemoveAll(file))
	require.NoError(h.t, os.WriteFile(file, []byte(fmt.Sprintf("%s-%d", h.cluster.Name, ordinal)), 0o444))
}

func randomPassword(t testing.TB) string {
	b := make([]byte, 12)
	_, err := rand.Read(b)
	require.NoError(t, err)
	// Quotes and a backslash, so a script that does not quote fails.
	return hex.EncodeToString(b) + `'"\`
}

func (h *host) superPassword() string { return h.secrets[h.cluster.SuperuserSecret]["password"] }
func (h *host) appPassword() string   { return h.secrets[h.cluster.AppSecret]["password"] }
func (h *host) replicationPassword() string {
	return h.secrets[h.cluster.ReplicationSecret]["password"]
}

// volume is a directory standing for a volume.
func (h *host) volume(name string) string { return h.u.Dir(h.t, h.root, "volumes", name) }

// controlData is pg_controldata's report on the data directory of the
// volume dataVolume (its "Database cluster state" among it).
func (h *host) controlData(t *testing.T, dataVolume string) string {
	t.Helper()
	out, err := h.u.Command(map[string]string{"PATH": h.bin + ":/usr/bin:/bin"}, []string{filepath.Join(h.bin, "pg_controldata"), "-D", filepath.Join(h.volume(dataVolume), "pgdata")}).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// onHost is the path v of a container as the host has it: under the
// directory of the volume mounted deepest above it, moved once (a host
// directory may itself lie under another mount's path, such as /tmp).
func onHost(v string, mounts []corev1.VolumeMount, volumes map[string]string) string {
	best := -1
	for i, m := range mounts {
		if _, ok := volumes[m.Name]; !ok || (v != m.MountPath && !strings.HasPrefix(v, m.MountPath+"/")) {
			continue
		}
		if best < 0 || len(m.MountPath) > len(mounts[best].MountPath) {
			best = i
		}
	}
	if best < 0 {
		return v
	}
	return volumes[mounts[best].Name] + strings.TrimPrefix(v, mounts[best].MountPath)
}

// env is pod's environment on the host. volumes maps the pod's volume
// names to directories; values under a mount path move with it.
func (h *host) env(pod engine.Pod, podName, port string, volumes map[string]string) map[string]string {
	t := h.t
	t.Helper()
	c := pod.Container
	env := pgtest.ContainerEnv(t, c, podName, func(name, key string) string {
		v, ok := h.secrets[name][key]
		require.True(t, ok, "Secret %s has no key %s", name, key)
		return v
	})
	for k, v := range env {
		env[k] = onHost(v, c.VolumeMounts, volumes)
	}
	env["PATH"] = h.bin + ":/usr/bin:/bin"
	for _, k := range []string{"PGPORT", "PRIMARY_PORT", "SOURCE_PORT"} {
		if _, ok := env[k]; ok {
			env[k] = port
		}
	}
	for _, k := range []string{"PRIMARY_HOST", "SOURCE_HOST", "LISTEN_ADDRESSES"} {
		if _, ok := env[k]; ok {
			env[k] = "127.0.0.1"
		}
	}
	if _, ok := env["STANDBY_HOST"]; ok {
		env["STANDBY_HOST"], env["STANDBY_PORT"] = "127.0.0.1", h.standbyPort
	}
	if _, ok := env["BACKUP_JOB_UID"]; ok {
		env["BACKUP_JOB_UID"] = h.jobUID
	}
	if _, ok := env["TERMINATION_MESSAGE_PATH"]; ok {
		env["TERMINATION_MESSAGE_PATH"] = filepath.Join(h.root, "tmp", podName+"-termination-log")
	}
	return env
}

// primary starts ordinal 0 (named the primary by newHost) on the volume
// dataVolume.
func (h *host) primary(dataVolume string) *pgtest.Server {
	h.t.Helper()
	return h.server(h.scripts, 0, dataVolume, "")
}

// standby starts a standby (ordinal) on the volume dataVolume, following
// the primary on primaryPort.
func (h *host) standby(ordinal int, dataVolume, primaryPort string) *pgtest.Server {
	h.t.Helper()
	return h.server(h.scripts, ordinal, dataVolume, primaryPort)
}

// server starts the server pod's ordinal on dataVolume with the scripts in
// the directory scripts; primaryPort is the primary's (standbys only).
func (h *host) server(scripts string, ordinal int, dataVolume, primaryPort string) *pgtest.Server {
	h.t.Helper()
	pod := postgres.Engine{}.ServerPod(h.cluster)
	env := h.serverEnv(pod, ordinal, dataVolume, primaryPort)
	return h.u.StartServer(h.t, h.bin, env, pgtest.HostCommand(h.t, pod.Container, scripts))
}

// serverEnv is the environment of the server pod's ordinal on the host; a
// primaryPort (standbys) is where PRIMARY_HOST listens, else the server's
// own port.
func (h *host) serverEnv(pod engine.Pod, ordinal int, dataVolume, primaryPort string) map[string]string {
	h.t.Helper()
	// A volume's server keeps its port across restarts, as a pod does.
	port, ok := h.ports[dataVolume]
	if !ok {
		port = pgtest.FreePort(h.t)
		h.ports[dataVolume] = port
	}
	env := h.env(pod, fmt.Sprintf("%s-%d", h.cluster.Name, ordinal), port, map[string]string{engine.DataVolume: h.volume(dataVolume)})
	if primaryPort != "" {
		env["PRIMARY_PORT"] = primaryPort
	}
	return env
}

// job runs a Job's pod to its end: its Report, its output and whether it
// failed.
func (h *host) job(pod engine.Pod, name, port string, volumes map[string]string) (engine.Report, string, error) {
	h.t.Helper()
	env := h.env(pod, name, port, volumes)
	_ = os.Remove(env["TERMINATION_MESSAGE_PATH"])
	out, err := h.u.Command(env, pgtest.HostCommand(h.t, pod.Container, h.scripts)).CombinedOutput()
	if err != nil {
		return engine.Report{}, string(out), err
	}
	b, rerr := os.ReadFile(env["TERMINATION_MESSAGE_PATH"])
	require.NoError(h.t, rerr, "the Job succeeded without a report:\n%s", out)
	report, rerr := engine.ParseReport(string(b))
	require.NoError(h.t, rerr, "%s", b)
	return report, string(out), nil
}

// init runs the init Job against the server on port.
func (h *host) init(port string) {
	h.t.Helper()
	_, out, err := h.job(postgres.Engine{}.InitPod(h.cluster), "init", port, nil)
	require.NoError(h.t, err, out)
}

// backup runs a backup Job of the server on port into backupVolume.
func (h *host) backup(port, backupVolume, file string) (engine.Report, string, error) {
	h.t.Helper()
	pod := postgres.Engine{}.BackupPod(h.cluster, engine.Backup{File: file, Host: h.cluster.Name + "-1", ClaimName: "backup"})
	return h.job(pod, "backup", port, map[string]string{engine.BackupVolume: h.volume(backupVolume)})
}

// restore runs a restore Job into the server on port.
func (h *host) restore(port, backupVolume, file, sha256 string) (engine.Report, string, error) {
	h.t.Helper()
	pod := postgres.Engine{}.RestorePod(h.cluster, engine.Restore{File: file, SHA256: sha256, ClaimName: "backup"})
	return h.job(pod, "restore", port, map[string]string{engine.BackupVolume: h.volume(backupVolume)})
}

// sql runs SQL on the server on port as the superuser.
func (h *host) sql(port, dbname, sql string) string {
	h.t.Helper()
	out, err := pgtest.PSQL(h.bin, port, postgres.Superuser, h.superPassword(), dbname, sql)
	require.NoError(h.t, err, "%s\n%s", sql, out)
	return out
}

// superuserDB is a connection pool to the server on port, as the
// superuser over TCP.
func (h *host) superuserDB(port string) (*sql.DB, error) {
	return sql.Open("postgres", fmt.Sprintf("host=127.0.0.1 port=%s user=postgres password=%s dbname=postgres sslmode=disable connect_timeout=5",
		port, quoteDSN(h.superPassword())))
}

// appSQL runs SQL on the server on port as the app role, with the app
// Secret's password.
func (h *host) appSQL(port, sql string) (string, error) {
	return pgtest.PSQL(h.bin, port, h.cluster.AppUser, h.appPassword(), h.cluster.Database, sql)
}

// serverSlots bounds how many of this package's tests run their servers
// at once. The raced group of make test runs with -parallel 12 for the
// kwok tests of operator/database and operator/mysqlcluster, which
// mostly wait on the API server; these tests spend CPU instead (initdb,
// servers, pg_basebackup): 12 at once took 178 s at a load of 15, 6 took
// 192 s at a load of 11 (docs/performance.md, Test time).
var serverSlots = make(chan struct{}, 6)

// holdServerSlot waits for a slot and gives it back when the test ends,
// after its servers stopped (cleanups run last registered first).
func holdServerSlot(t testing.TB) {
	serverSlots <- struct{}{}
	t.Cleanup(func() { <-serverSlots })
}
