package postgres_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// recoveringPod is a new Database's primary pod as AddRecovery builds it,
// on the host: its init container, its archiver sidecar (restoring from
// the source archive) and its server, started by bootstrap.sh.
type recoveringPod struct {
	spec       corev1.PodSpec
	server     corev1.Container
	queue      string
	dataVolume string
}

func newRecoveringPod(t *testing.T, a *archiving, dataVolume string, o postgres.RecoveryOptions) *recoveringPod {
	h := a.h
	pod := postgres.Engine{}.ServerPod(h.cluster)
	spec := corev1.PodSpec{Containers: []corev1.Container{pod.Container}}
	o.Image = "archiver"
	o.Source = postgres.ArchiverOptions{
		Endpoint: a.store.Endpoint, Bucket: a.store.Bucket, Prefix: a.prefix, Server: a.server,
		Region: "us-east-1", PathStyle: true,
		AccessKey: postgres.KeyRef{Name: "keys", Key: "a"}, SecretKey: postgres.KeyRef{Name: "keys", Key: "s"},
		CASecret: &postgres.KeyRef{Name: "ca", Key: "ca.crt"},
	}
	require.NoError(t, postgres.AddRecovery(&spec, pod.Container.Name, o))
	require.Len(t, spec.InitContainers, 1)
	return &recoveringPod{spec: spec, server: spec.Containers[0], queue: h.u.TempDir(t), dataVolume: dataVolume}
}

// keyFiles are the source store's key files where s3test wrote them, under
// prefix's names.
func (a *archiving) keyFiles(prefix string) map[string]string {
	return map[string]string{
		prefix + "ACCESS_KEY_FILE": a.store.AccessKeyFile, prefix + "SECRET_KEY_FILE": a.store.SecretKeyFile, prefix + "CA_FILE": a.store.CAFile,
	}
}

// runInit runs the init container to its end: its output, and its error.
func (p *recoveringPod) runInit(t *testing.T, a *archiving) (string, error) {
	h := a.h
	init := p.spec.InitContainers[0]
	env := h.env(engine.Pod{Container: init}, h.cluster.Name+"-0", "", map[string]string{
		engine.DataVolume: h.volume(p.dataVolume),
		"archive-tmp":     h.u.TempDir(t),
	})
	maps.Copy(env, a.keyFiles("STORE_"))
	env["RESTORE_COMMAND"] = h.onHostPaths(env["RESTORE_COMMAND"], p.queue)
	out, err := h.u.Command(env, pgtest.HostCommand(t, init, h.scripts)).CombinedOutput()
	return string(out), err
}

// start runs the sidecar, then the server through bootstrap.sh, until it
// accepts connections.
func (p *recoveringPod) start(t *testing.T, a *archiving) *pgtest.Server {
	h := a.h
	runSidecar(t, h, p.spec.Containers[1], h.cluster.Name+"-0", p.dataVolume, p.queue, a.keyFiles("SOURCE_STORE_"))
	env := h.serverEnv(engine.Pod{Container: p.server}, 0, p.dataVolume, "")
	return h.u.StartServer(t, h.bin, env, h.podCommand(p.server, p.queue))
}

// A new Database's primary recovers to a time from the archive another
// server filled (its sidecar took the base backup by itself, being the
// primary of an archive without one), through the pod's own parts: the
// init container restores
// the base backup and writes the recovery settings, the server (plain sh
// and PostgreSQL, as in an image without Barman) replays every segment
// through the sidecar and promotes before it serves on TCP. It holds
// every row up to the target and none after; it takes writes; its
// superuser has the new Database's password, not the source's; the
// recovery settings are gone. A target outside the archive's window stops
// the init container with the window in its last line.
func TestARecoveringPodReplaysTheArchiveThroughItsSidecarBeforeItServes(t *testing.T) {
	t.Parallel()
	p := startSidecarPod(t, 24*time.Hour)
	a, h := p.archiving, p.h
	h.init(a.source.Port) // the app role and database, in the base backup
	a.startWriter()
	// The primary's sidecar takes the archive's first base backup by
	// itself.
	require.Eventually(t, func() bool { return strings.Contains(p.log.String(), "deckhand: base backup base-") }, firstBaseBackupWait, 200*time.Millisecond,
		"no base backup:\n%s", p.log.String())
	require.Contains(t, p.log.String(), " done: backup_id=")
	// The primary's instance agent reports what the sidecar found.
	ch := newChannel(t, h, "name-of-database-0")
	agent := ch.startAgent(t, h, 0, "data-source")
	var found *instance.BaseBackups
	require.Eventually(t, func() bool {
		st, err := ch.client.Status(context.Background(), agent)
		found = st.BaseBackups
		return err == nil && found != nil && found.Count > 0
	}, 30*time.Second, 200*time.Millisecond, "the agent reports no base backup: %+v", found)
	assert.Equal(t, 1, found.Count)
	require.NotNil(t, found.Newest)
	assert.True(t, strings.HasPrefix(found.Newest.Name, "base-"), found.Newest.Name)
	assert.Equal(t, found.Newest, found.Oldest)
	assert.False(t, found.Newest.EndTime.IsZero())
	assert.Equal(t, int64(1), found.Newest.Timeline)
	assert.Empty(t, found.Error)
	time.Sleep(2 * time.Second)
	target := a.now()
	time.Sleep(2 * time.Second)
	a.switchAndWait(a.source.Port, time.Minute)
	a.stopWriter()
	// It looked every second since, and found the backup fresh.
	assert.Equal(t, 1, strings.Count(p.log.String(), "deckhand: taking base backup"), p.log.String())
	cut := target.Add(-time.Second).Format(time.RFC3339Nano)
	want := h.sql(a.source.Port, "postgres", fmt.Sprintf("SELECT count(*) FROM ticks WHERE ts <= '%s'", cut))
	require.NotEqual(t, "0", want)
	require.NotEqual(t, "0", h.sql(a.source.Port, "postgres", fmt.Sprintf("SELECT count(*) FROM ticks WHERE ts > '%s'", target.Format(time.RFC3339Nano))),
		"the source has rows after the target")

	// The operator's scripts ConfigMap says the recovery is pending.
	h.u.WriteScripts(t, h.root, map[string]string{postgres.ScriptsRecoveryKey: postgres.RecoveryPending})

	t.Run("a target outside the archive stops the init container with the window", func(t *testing.T) {
		r := newRecoveringPod(t, a, "data-refused", postgres.RecoveryOptions{TargetTime: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
		out, err := r.runInit(t, a)
		require.Error(t, err, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		assert.Contains(t, lines[len(lines)-1], "is outside what s3://deckhand/clusters/ns/name-of-database can recover: from ")
		entries, err := os.ReadDir(h.volume("data-refused"))
		require.NoError(t, err)
		assert.Empty(t, entries, "a refused recovery leaves the volume empty")
	})

	// The new Database has a superuser password of its own.
	sourcePassword := h.superPassword()
	h.secrets[h.cluster.SuperuserSecret]["password"] = randomPassword(t)
	r := newRecoveringPod(t, a, "data-recovered", postgres.RecoveryOptions{TargetTime: target.Format(time.RFC3339Nano)})
	out, err := r.runInit(t, a)
	require.NoError(t, err, out)
	assert.Contains(t, out, "deckhand: recovering s3://deckhand/clusters/ns/name-of-database from base backup")
	// A second run of the init container (the pod restarted before the
	// server promoted) leaves the data directory to bootstrap.sh.
	out, err = r.runInit(t, a)
	require.NoError(t, err, out)
	assert.Contains(t, out, "holds a data directory: not recovering over it")

	server := r.start(t, a)
	assert.Contains(t, server.Log.String(), "recovered: the server reached its target and was promoted")
	assert.Equal(t, want, h.sql(server.Port, "postgres", fmt.Sprintf("SELECT count(*) FROM ticks WHERE ts <= '%s'", cut)), "rows with ts <= %s", cut)
	assert.Equal(t, "0", h.sql(server.Port, "postgres", fmt.Sprintf("SELECT count(*) FROM ticks WHERE ts > '%s'", target.Format(time.RFC3339Nano))),
		"rows after the target")
	assert.Equal(t, "f", h.sql(server.Port, "postgres", "SELECT pg_is_in_recovery()"), "the new superuser password works")
	h.sql(server.Port, "postgres", "INSERT INTO ticks DEFAULT VALUES")
	assert.Equal(t, "2", h.sql(server.Port, "postgres", "SELECT timeline_id FROM pg_control_checkpoint()"), "a new timeline")
	conf, err := os.ReadFile(filepath.Join(h.volume("data-recovered"), "pgdata", "postgresql.auto.conf"))
	require.NoError(t, err)
	assert.NotContains(t, string(conf), "restore_command")
	assert.NotContains(t, string(conf), "recovery_target")
	// The source's superuser password no longer works.
	_, err = pgtest.PSQL(h.bin, server.Port, postgres.Superuser, sourcePassword, "postgres", "SELECT 1")
	assert.Error(t, err, "the source's superuser password")

	// The app role came with the data, with the source's password; the
	// init Job of a recovered Database gives it the new app Secret's.
	h.secrets[h.cluster.AppSecret]["password"] = randomPassword(t)
	_, err = h.appSQL(server.Port, "SELECT 1")
	require.Error(t, err, "the new app password before the init Job")
	c := h.cluster
	c.ResetAppPassword = true
	_, out, err = h.job(postgres.Engine{}.InitPod(c), "init", server.Port, nil)
	require.NoError(t, err, out)
	got, err := h.appSQL(server.Port, "SELECT current_user")
	require.NoError(t, err, "the new app password after the init Job: %s", got)
}
