package postgres_test

import (
	"context"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/s3test"
)

// A server pod that archives through the sidecar, on the host: the pod
// as AddArchiver builds it, the server started by bootstrap.sh with the
// hand-off as archive_command (plain sh, as in an image without Barman),
// and the sidecar's own loop (archiver.sh) run as a process beside it,
// the queue directory shared as the emptyDir is.
type sidecarPod struct {
	*archiving
	queue string
	log   *syncbuf.Buffer
}

// firstBaseBackupWait bounds the wait for the sidecar's first base
// backup. Barman Cloud starts a Python process with boto3 for each step
// (the backup, the archive's list), each a second or two of CPU: at a
// 1-minute load of 20 on two cores one backup took over 2 minutes, and
// one that failed is tried again 30 s later.
const firstBaseBackupWait = 5 * time.Minute

// startSidecarPod starts the pod; with baseBackups its sidecar takes base
// backups too (once a day, so the first, at once).
func startSidecarPod(t *testing.T, baseBackups time.Duration) *sidecarPod {
	return startSidecarPodWith(t, postgres.ArchiverOptions{BaseBackupEvery: baseBackups})
}

// startSidecarPodWith is startSidecarPod with more of the archiver's
// options (BaseBackupEvery, MaxParallel); the store's are the test's.
func startSidecarPodWith(t testing.TB, opts postgres.ArchiverOptions) *sidecarPod {
	return startSidecarPodWithEnv(t, opts, nil)
}

// startSidecarPodWithEnv is startSidecarPodWith with variables of the
// sidecar's environment set by env (nil: none), given the test's host.
func startSidecarPodWithEnv(t testing.TB, opts postgres.ArchiverOptions, env func(*host) map[string]string) *sidecarPod {
	baseBackups := opts.BaseBackupEvery
	h := newHost(t)
	a := &archiving{t: t, h: h, store: s3test.Start(t, "deckhand"), prefix: "clusters/ns", server: "name-of-database"}
	// One scripts directory, as the scripts ConfigMap holds both sets.
	a.scripts = h.u.WriteScripts(t, h.root, postgres.ArchiveScripts())
	require.Equal(t, h.scripts, a.scripts)
	p := &sidecarPod{archiving: a, queue: h.u.Dir(t, h.root, "archive-queue")}

	c := h.cluster
	c.Parameters = postgres.ArchiveParameters(time.Minute)
	pod := postgres.Engine{}.ServerPod(c)
	spec := corev1.PodSpec{Containers: []corev1.Container{pod.Container}}
	require.NoError(t, postgres.AddArchiver(&spec, pod.Container.Name, postgres.ArchiverOptions{
		Image: "archiver", Endpoint: a.store.Endpoint, Bucket: a.store.Bucket, Prefix: a.prefix, Server: a.server,
		Region: "us-east-1", PathStyle: true, Compression: "gzip",
		AccessKey: postgres.KeyRef{Name: "keys", Key: "a"}, SecretKey: postgres.KeyRef{Name: "keys", Key: "s"},
		CASecret:        &postgres.KeyRef{Name: "ca", Key: "ca.crt"},
		BaseBackupEvery: baseBackups,
		MaxParallel:     opts.MaxParallel,
	}))

	// The server's environment first: it has the port the sidecar
	// reaches it on.
	dataVolume := "data-source"
	serverEnv := h.serverEnv(pod, 0, dataVolume, "")
	files := a.keyFiles("STORE_")
	if baseBackups > 0 {
		password := filepath.Join(h.u.TempDir(t), "superuser-password")
		require.NoError(t, os.WriteFile(password, []byte(h.superPassword()), 0o644))
		// The first base backup is taken at the first look the server
		// answers (tried every 5 s until it does), all these tests need;
		// each later look runs Barman twice (the holds, the summary),
		// about a CPU-second.
		files["SUPERUSER_PASSWORD_FILE"], files["PGPORT"], files["BASE_BACKUP_CHECK"] = password, serverEnv["PGPORT"], "30"
	}
	if env != nil {
		maps.Copy(files, env(h))
	}
	p.log = runSidecar(t, h, spec.Containers[1], "name-of-database-0", dataVolume, p.queue, files)

	// The server: its command with the scripts and queue directories of
	// the test (archive_command names both).
	a.source = h.u.StartServer(t, h.bin, serverEnv, h.podCommand(pod.Container, p.queue))
	h.sql(a.source.Port, "postgres", "CREATE TABLE ticks (id bigserial PRIMARY KEY, ts timestamptz NOT NULL DEFAULT clock_timestamp())")
	return p
}

// runSidecar runs the archiver sidecar of the pod podName on the host
// until the test ends: its environment as the pod gives it, its mounts
// moved to the test's directories (the data volume dataVolume, the queue
// directory queue), with files overriding the key files' paths (where
// s3test wrote them). It returns the sidecar's log once it is ready.
func runSidecar(t testing.TB, h *host, sidecar corev1.Container, podName, dataVolume, queue string, files map[string]string) *syncbuf.Buffer {
	return runSidecarWith(t, h, sidecar, podName, map[string]string{
		engine.DataVolume: h.volume(dataVolume),
		"archive-tmp":     h.u.TempDir(t),
	}, queue, files)
}

// runSidecarWith is runSidecar with the pod's volumes on the host given by
// name (the queue directory aside).
func runSidecarWith(t testing.TB, h *host, sidecar corev1.Container, podName string, volumes map[string]string, queue string, files map[string]string) *syncbuf.Buffer {
	volumes = maps.Clone(volumes)
	volumes[postgres.ArchiveQueueVolume] = queue
	env := h.env(engine.Pod{Container: sidecar}, podName, "", volumes)
	maps.Copy(env, files)
	log := &syncbuf.Buffer{}
	cmd := h.u.Command(env, pgtest.HostCommand(t, sidecar, h.scripts))
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("the archiver's log:\n%s", log.String())
		}
	})
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(queue, "archiver-ready"))
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the archiver never said it was ready:\n%s", log.String())
	return log
}

// podCommand is container's command on the host: the scripts and queue
// directories of the test in its arguments (archive_command names both).
func (h *host) podCommand(c corev1.Container, queue string) []string {
	argv := pgtest.HostCommand(h.t, c, h.scripts)
	for i, arg := range argv {
		argv[i] = h.onHostPaths(arg, queue)
	}
	return argv
}

// onHostPaths is v with the container's scripts and queue directories
// moved to the test's.
func (h *host) onHostPaths(v, queue string) string {
	v = strings.ReplaceAll(v, engine.ScriptsDir+"/", h.scripts+"/")
	return strings.ReplaceAll(v, postgres.ArchiveQueueDir, queue)
}

// The hand-off proven with a real server, store and sidecar: every
// segment reaches the store with no failure counted; with the store down
// archive_command fails (the failures counted, the reason in the server's
// log, the server writable); the store back, the archive catches up with
// nothing missing. The keys appear in no log.
func TestArchivingThroughTheSidecarHandOff(t *testing.T) {
	t.Parallel()
	p := startSidecarPod(t, 0)
	a, h := p.archiving, p.h
	// The instance agent reports pg_stat_archiver (the operator's
	// WALArchiving condition reads it).
	ch := newChannel(t, h, "name-of-database-0")
	agent := ch.startAgent(t, h, 0, "data-source")
	archiver := func() instance.ArchiverStatus {
		st, err := ch.client.Status(context.Background(), agent)
		require.NoError(t, err)
		require.NotNil(t, st.Archiver, "a primary with archive_mode on reports its archiver")
		return *st.Archiver
	}
	a.startWriter()
	first := a.switchAndWait(a.source.Port, time.Minute)
	a.requireEverySegment(first)
	s := a.stats(a.source.Port)
	assert.Zero(t, s.failed, "pg_stat_archiver.failed_count")
	got := archiver()
	assert.False(t, got.Failing())
	assert.GreaterOrEqual(t, got.LastArchivedWAL, first)
	assert.NotNil(t, got.LastArchivedTime)
	assert.Contains(t, p.log.String(), "deckhand: archived "+first)
	assert.Equal(t, "on", h.sql(a.source.Port, "postgres", "SHOW archive_mode"))
	assert.Equal(t, "1min", h.sql(a.source.Port, "postgres", "SHOW archive_timeout"))

	// The store down: each try fails (about 11 s each while barman
	// retries the connection), and is counted.
	writes := a.writes.Load()
	a.store.Stop(t)
	h.sql(a.source.Port, "postgres", "SELECT pg_switch_wal()")
	require.Eventually(t, func() bool { return a.stats(a.source.Port).failed > 0 }, time.Minute, 200*time.Millisecond,
		"no failure counted with the store down")
	got = archiver()
	assert.True(t, got.Failing(), "%+v", got)
	assert.NotEmpty(t, got.LastFailedWAL)
	// What piles up in pg_wal meanwhile, and the room left for it.
	assert.GreaterOrEqual(t, got.PendingSegments, int64(1), "%+v", got)
	assert.Equal(t, got.PendingSegments*16<<20, got.PendingBytes)
	st, err := ch.client.Status(context.Background(), agent)
	require.NoError(t, err)
	require.NotNil(t, st.DataVolume)
	assert.Greater(t, st.DataVolume.FreeBytes, int64(0))
	assert.GreaterOrEqual(t, st.DataVolume.TotalBytes, st.DataVolume.FreeBytes)
	assert.Contains(t, a.source.Log.String(), "deckhand: the archiver could not archive")
	h.sql(a.source.Port, "postgres", "INSERT INTO ticks DEFAULT VALUES")
	assert.Greater(t, a.writes.Load(), writes, "the server took writes while the store was down")
	assert.Zero(t, a.writeErrs.Load(), "the writer's failed inserts")

	a.store.Restart(t)
	last := a.switchAndWait(a.source.Port, 3*time.Minute)
	a.requireEverySegment(last)
	a.stopWriter()
	assert.False(t, archiver().Failing(), "archiving again")
	require.Eventually(t, func() bool { return archiver().PendingSegments == 0 }, time.Minute, 200*time.Millisecond, "the backlog is archived")

	// Nothing is left in the queue, and no key reached a log.
	entries, err := os.ReadDir(p.queue)
	require.NoError(t, err)
	for _, e := range entries {
		assert.Equal(t, "archiver-ready", e.Name(), "left in the queue")
	}
	// A standby promoted after archiving began (its data directory never
	// recorded the check) archives its new timeline's history file into
	// the archive its old primary filled; a server on the same timeline
	// is refused (TestArchivingAndPointInTimeRecoveryFromAnObjectStore).
	fresh := h.u.TempDir(t)
	history := filepath.Join(fresh, "00000002.history")
	require.NoError(t, os.WriteFile(history, []byte("1\t0/3000000\tno recovery target specified\n"), 0o644))
	env := a.storeEnv(a.server)
	env["PGDATA"] = fresh
	out, err := a.script(env, postgres.WALArchiveScript, history)
	require.NoError(t, err, out)
	assert.True(t, slices.ContainsFunc(a.store.Keys(t, a.prefix+"/"+a.server+"/wals/"), func(k string) bool {
		return strings.HasPrefix(path.Base(k), "00000002.history")
	}), "the history file is in the archive")

	for _, f := range []string{a.store.AccessKeyFile, a.store.SecretKeyFile} {
		key, err := os.ReadFile(f)
		require.NoError(t, err)
		k := strings.TrimSpace(string(key))
		require.NotEmpty(t, k)
		assert.NotContains(t, p.log.String(), k, "a key in the archiver's log")
		assert.NotContains(t, a.source.Log.String(), k, "a key in the server's log")
	}
}

// The sidecar's resident Barman Cloud process (wal-resident.sh archive)
// ships the segments: no barman-cloud-wal-archive of their own runs while
// it serves. Killed, the segments are still archived (wal-archive.sh runs
// the command itself meanwhile) and the archiver starts another; a
// changed CA bundle (a rotated Secret's files) makes it start again at
// once with the new files. PostgreSQL counts no failure through any of
// it.
func TestTheSidecarsResidentProcessShipsSegmentsAndIsReplacedWhenItGoes(t *testing.T) {
	t.Parallel()
	var runsAlone func() int
	p := startSidecarPodWithEnv(t, postgres.ArchiverOptions{}, func(h *host) map[string]string {
		var bin string
		bin, runsAlone = countRuns(t, h.u, "barman-cloud-wal-archive")
		return map[string]string{"PATH": bin + ":" + h.bin + ":/usr/bin:/bin"}
	})
	a := p.archiving
	m := regexp.MustCompile(`shipping through (\S+)`).FindStringSubmatch(p.log.String())
	require.NotNil(t, m, "the archiver names its resident process's directory:\n%s", p.log.String())
	// resident is the pid of the resident process serving now, once there
	// is one other than old.
	resident := func(old int) int { return residentPID(t, m[1], old) }

	first := resident(0)
	a.startWriter()
	for range 3 {
		a.switchAndWait(a.source.Port, time.Minute)
	}
	assert.Zero(t, runsAlone(), "barman-cloud-wal-archive ran while the resident process served")

	require.NoError(t, syscall.Kill(first, syscall.SIGKILL))
	a.switchAndWait(a.source.Port, time.Minute)
	second := resident(first)
	alone := runsAlone()
	for range 2 {
		a.switchAndWait(a.source.Port, time.Minute)
	}
	assert.Equal(t, alone, runsAlone(), "barman-cloud-wal-archive ran while the second one served")

	f, err := os.OpenFile(a.store.CAFile, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	third := resident(second)
	// Started again because of the change (exit 75), not after an
	// unexpected exit: the archiver says which.
	assert.Contains(t, p.log.String(), "the store's keys or CA bundle changed")
	assert.Equal(t, 1, strings.Count(p.log.String(), "the resident Barman Cloud process (archive) exited"), "only the SIGKILL counts as an unexpected exit:\n%s", p.log.String())
	alone = runsAlone()
	last := ""
	for range 2 {
		last = a.switchAndWait(a.source.Port, time.Minute)
	}
	assert.Equal(t, alone, runsAlone(), "barman-cloud-wal-archive ran while the third one served")
	assert.NoError(t, syscall.Kill(third, 0), "the third serves on")
	a.stopWriter()
	a.requireEverySegment(last)
	assert.Zero(t, a.stats(a.source.Port).failed, "pg_stat_archiver.failed_count")
}

// With maxParallel 4, a backlog (twelve segments switched at once, far
// faster than one upload takes) is shipped four segments at once:
// PostgreSQL's request ships its segment and the three after it, and
// finds those archived when it asks. Nothing is missing or archived twice
// by PostgreSQL's count, nothing is left in the queue, and a server
// recovered from the archive replays every segment to the last row.
func TestTheSidecarShipsABacklogSeveralSegmentsAtOnce(t *testing.T) {
	t.Parallel()
	p := startSidecarPodWith(t, postgres.ArchiverOptions{MaxParallel: 4})
	a, h := p.archiving, p.h
	a.baseBackup("base")
	a.switchAndWait(a.source.Port, time.Minute)

	before := a.stats(a.source.Port)
	h.sql(a.source.Port, "postgres", strings.Repeat("INSERT INTO ticks DEFAULT VALUES; SELECT pg_switch_wal();", 12))
	h.sql(a.source.Port, "postgres", "INSERT INTO ticks DEFAULT VALUES")
	last := a.switchAndWait(a.source.Port, 3*time.Minute)
	a.requireEverySegment(last)
	after := a.stats(a.source.Port)
	assert.Equal(t, 13, after.archived-before.archived, "PostgreSQL counted each segment of the backlog archived, once")
	assert.Zero(t, after.failed, "pg_stat_archiver.failed_count")
	ahead := strings.Count(p.log.String(), " ahead\n")
	assert.GreaterOrEqual(t, ahead, 6, "segments shipped before PostgreSQL asked:\n%s", p.log.String())
	require.Eventually(t, func() bool {
		entries, err := os.ReadDir(filepath.Join(p.queue, "ahead"))
		return err == nil && len(entries) == 0
	}, time.Minute, 200*time.Millisecond, "every segment shipped ahead was asked for")

	r, err := a.recover(t, nil)
	require.NoError(t, err, r.out)
	assert.Equal(t, h.sql(a.source.Port, "postgres", "SELECT count(*) FROM ticks"), h.sql(r.port, "postgres", "SELECT count(*) FROM ticks"),
		"the recovered server replayed every segment, to the last row")
}

// archive_command with no archiver, or one that never answers, fails
// (PostgreSQL keeps the segment) rather than waiting for ever, and a
// request not taken is withdrawn.
func TestWALHandoffFailsWithoutAnArchiver(t *testing.T) {
	t.Parallel()
	u := pgtest.Unprivileged(t)
	root := u.TempDir(t)
	scripts := u.WriteScripts(t, root, postgres.ArchiveScripts())
	queue := u.Dir(t, root, "queue")
	wal := filepath.Join(u.Dir(t, root, "pg_wal"), "000000010000000000000001")
	require.NoError(t, os.WriteFile(wal, []byte("segment"), 0o644))
	handoff := func(timeout string) (string, error) {
		out, err := u.Command(map[string]string{"PATH": "/usr/bin:/bin", "ARCHIVE_HANDOFF_TIMEOUT": timeout},
			[]string{"sh", filepath.Join(scripts, postgres.HandoffScript), queue, wal}).CombinedOutput()
		return string(out), err
	}

	out, err := handoff("300")
	require.Error(t, err, out)
	assert.Contains(t, out, "cannot archive 000000010000000000000001: the archiver is not running")

	// Ready, but it never answers.
	require.NoError(t, os.WriteFile(filepath.Join(queue, "archiver-ready"), nil, 0o644))
	start := time.Now()
	out, err = handoff("1")
	require.Error(t, err, out)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Contains(t, out, "the archiver did not answer for 000000010000000000000001 within 1s")
	entries, err := os.ReadDir(queue)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the request was withdrawn")
}
