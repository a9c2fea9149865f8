package postgres_test

import (
	"encoding/json"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// baseBackupDone is the sidecar's log line of a finished base backup.
var baseBackupDone = regexp.MustCompile(`deckhand: base backup (base-[0-9TZ]+) done: backup_id=(\S+)`)

// verifyBase runs the verification pod of the base backup (id, name) on
// the host, as VerifyBasePod builds it: the restore container to its end,
// the archiver sidecar, then the verify container. It returns the
// verify container's Report and output.
func verifyBase(t *testing.T, a *archiving, id, name string) (engine.Report, string) {
	h := a.h
	c := h.cluster
	pod, inits := postgres.VerifyBasePod(c, postgres.BaseBackupVerify{
		Image: "archiver", BackupID: id, BackupName: name,
		Store: postgres.ArchiverOptions{
			Endpoint: a.store.Endpoint, Bucket: a.store.Bucket, Prefix: a.prefix, Server: a.server,
			Region: "us-east-1", PathStyle: true,
			AccessKey: postgres.KeyRef{Name: "keys", Key: "a"}, SecretKey: postgres.KeyRef{Name: "keys", Key: "s"},
			CASecret: &postgres.KeyRef{Name: "ca", Key: "ca.crt"},
		},
	})
	require.Len(t, inits, 2)
	restore, sidecar := inits[0], inits[1]
	require.Equal(t, corev1.ContainerRestartPolicyAlways, *sidecar.RestartPolicy, "the sidecar is a native sidecar")
	scratch, queue := h.u.TempDir(t), h.u.TempDir(t)
	volumes := map[string]string{engine.ScratchVolume: scratch, "archive-tmp": h.u.TempDir(t)}
	podName := c.Name + "-verify"

	env := h.env(engine.Pod{Container: restore}, podName, "", volumes)
	maps.Copy(env, a.keyFiles("STORE_"))
	env["RESTORE_COMMAND"] = h.onHostPaths(env["RESTORE_COMMAND"], queue)
	out, err := h.u.Command(env, pgtest.HostCommand(t, restore, h.scripts)).CombinedOutput()
	require.NoError(t, err, "the restore container fails only when it cannot run:\n%s", out)

	runSidecarWith(t, h, sidecar, podName, volumes, queue, a.keyFiles("SOURCE_STORE_"))
	env = h.env(pod, podName, "", volumes)
	_ = os.Remove(env["TERMINATION_MESSAGE_PATH"])
	verifyOut, err := h.u.Command(env, pgtest.HostCommand(t, pod.Container, h.scripts)).CombinedOutput()
	require.NoError(t, err, "the verify container fails only when it cannot run:\n%s\n%s", out, verifyOut)
	b, err := os.ReadFile(env["TERMINATION_MESSAGE_PATH"])
	require.NoError(t, err, "no report:\n%s", verifyOut)
	report, err := engine.ParseReport(string(b))
	require.NoError(t, err, "%s", b)
	require.NotNil(t, report.Verification, "%s", b)
	left, err := os.ReadDir(filepath.Join(scratch, "pgdata"))
	assert.True(t, os.IsNotExist(err), "the restored data directory is removed (%d entries left)", len(left))
	return report, string(out) + string(verifyOut)
}

// damage overwrites the store's object key with garbage, or deletes it,
// and returns what puts it back.
func damage(t *testing.T, a *archiving, key string, remove bool) (restore func()) {
	file := a.store.Path(key)
	orig, err := os.ReadFile(file)
	require.NoError(t, err)
	if remove {
		require.NoError(t, os.Remove(file))
	} else {
		require.NoError(t, os.WriteFile(file, []byte(strings.Repeat("bit rot ", 4096)), 0o644))
	}
	return func() { require.NoError(t, os.WriteFile(file, orig, 0o644)) }
}

// A base backup taken by the primary's sidecar (with its marker row and
// restore point) is proven by the verification pod on real parts: this
// machine's PostgreSQL, Barman Cloud and versitygw. A good backup passes
// every check in order; the restored copy is gone after. Bit rot in the
// store is caught and named: a WAL segment the recovery needs overwritten
// with garbage fails the recovery, naming it, and a later segment deleted
// fails the archive's check, naming it (both in one verification); the
// backup's own file overwritten fails the restore.
func TestABaseBackupIsVerifiedByRestoringItToItsRestorePoint(t *testing.T) {
	t.Parallel()
	p := startSidecarPod(t, 24*time.Hour)
	a, h := p.archiving, p.h
	h.init(a.source.Port)
	a.startWriter()
	var m []string
	require.Eventually(t, func() bool {
		m = baseBackupDone.FindStringSubmatch(p.log.String())
		return m != nil
	}, firstBaseBackupWait, 200*time.Millisecond, "no base backup:\n%s", p.log.String())
	name, id := m[1], m[2]
	// Segments after the restore point's: the archive continues past it,
	// and past last (deleted below: a hole, not the archive's end).
	a.switchAndWait(a.source.Port, time.Minute)
	last := a.switchAndWait(a.source.Port, time.Minute)
	a.switchAndWait(a.source.Port, time.Minute)
	a.stopWriter()

	report, out := verifyBase(t, a, id, name)
	assert.Nil(t, report.Verification.Failed(), "%+v\n%s", report.Verification.Checks, out)
	assert.Equal(t, []string{"archive:passed", "restore:passed", "recovery:passed", "marker:passed", "amcheck:passed", "writable:passed"},
		checkNames(report.Verification), out)
	assert.Contains(t, out, "deckhand: the archive holds every WAL segment from ")

	// The segments of the backup: from its start to the restore point's.
	info := a.baseBackupInfo(id)
	segments := slices.Sorted(maps.Keys(a.archived(a.server)))
	var needed []string
	for _, s := range segments {
		if s >= info.BeginWAL && s <= info.EndWAL {
			needed = append(needed, s)
		}
	}
	require.NotEmpty(t, needed, "segments %v, backup %+v", segments, info)
	walKey := func(seg string) string {
		keys := a.store.Keys(t, a.prefix+"/"+a.server+"/wals/")
		// The segment's object (<seg>.gz), not the backup label beside it
		// (<seg>.<offset>.backup.gz).
		i := slices.IndexFunc(keys, func(k string) bool { return strings.TrimSuffix(path.Base(k), ".gz") == seg })
		require.GreaterOrEqual(t, i, 0, "no object of %s in %v", seg, keys)
		return keys[i]
	}

	t.Run("a needed segment overwritten fails the recovery, a later one deleted the archive, each named", func(t *testing.T) {
		seg := needed[len(needed)-1]
		require.Greater(t, last, seg)
		defer damage(t, a, walKey(seg), false)()
		defer damage(t, a, walKey(last), true)()
		report, out := verifyBase(t, a, id, name)
		assert.Equal(t, []string{"archive:failed", "restore:passed", "recovery:failed"}, checkNames(report.Verification),
			"the restore needs no segment; nothing runs after a recovery that failed: %s", out)
		failed := report.Verification.Failed()
		require.NotNil(t, failed, out)
		assert.Equal(t, "archive", failed.Name, "the first check that failed")
		assert.Contains(t, failed.Message, last, out)
		t.Logf("archive's message: %s", failed.Message)
		recovery := report.Verification.Checks[2]
		assert.Contains(t, recovery.Message, seg, out)
		t.Logf("recovery's message: %s", recovery.Message)
	})

	t.Run("the base backup's file overwritten fails the restore", func(t *testing.T) {
		keys := a.store.Keys(t, a.prefix+"/"+a.server+"/base/"+id+"/")
		i := slices.IndexFunc(keys, func(k string) bool { return strings.Contains(path.Base(k), "data.tar") })
		require.GreaterOrEqual(t, i, 0, "no data.tar in %v", keys)
		defer damage(t, a, keys[i], false)()
		report, out := verifyBase(t, a, id, name)
		failed := report.Verification.Failed()
		require.NotNil(t, failed, out)
		assert.Equal(t, "restore", failed.Name, out)
		assert.Equal(t, []string{"archive:passed", "restore:failed"}, checkNames(report.Verification), "nothing runs on a backup that did not restore")
		assert.Contains(t, failed.Message, "restoring base backup "+id+" (s3://deckhand/clusters/ns/name-of-database/base/"+id+"/): ", "the backup named")
		assert.NotContains(t, failed.Message, "deckhand: ", "Barman's error, not deckhand's progress lines")
		t.Logf("restore's message: %s", failed.Message)
	})
}

// backupInfo is what Barman recorded of a base backup.
type backupInfo struct {
	BeginWAL string `json:"begin_wal"`
	EndWAL   string `json:"end_wal"`
}

// baseBackupInfo reads the base backup's backup.info from the store.
func (a *archiving) baseBackupInfo(id string) backupInfo {
	t := a.t
	b, err := os.ReadFile(a.store.Path(a.prefix + "/" + a.server + "/base/" + id + "/backup.info"))
	require.NoError(t, err)
	kv := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = v
		}
	}
	j, err := json.Marshal(kv)
	require.NoError(t, err)
	var info backupInfo
	require.NoError(t, json.Unmarshal(j, &info))
	require.NotEmpty(t, info.BeginWAL, "%s", b)
	return info
}
