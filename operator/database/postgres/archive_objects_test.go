package postgres_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// The pod's half of the DatabaseBackup objects of base backups, on a real
// primary, sidecar, agent and store. A base backup asked of the primary's
// agent (POST /base-backups) is taken by the sidecar under its name, with
// no schedule, and listed in the agent's status with its LSNs, its size
// in the store and the archive it was listed from; one that cannot be
// taken (Barman refuses the name "latest") is reported failed. Asked
// again, a name makes no second backup. delete-base.sh refuses a backup
// somebody kept by hand, deletes one deckhand kept (holds.sh), leaving
// nothing of it in the store, after which a request without a name has
// the sidecar list the archive again at once; and finds nothing to
// delete the second time.
func TestABaseBackupIsTakenOnRequestListedAndDeleted(t *testing.T) {
	t.Parallel()
	// The superuser without a schedule: the sidecar's loop takes requests
	// and summarizes, and takes no base backup of its own. One look at
	// the start, none after within the test.
	p := startSidecarPodWithEnv(t, postgres.ArchiverOptions{}, func(h *host) map[string]string {
		password := filepath.Join(h.u.TempDir(t), "superuser-password")
		require.NoError(t, os.WriteFile(password, []byte(h.superPassword()), 0o644))
		return map[string]string{
			"SUPERUSER_PASSWORD_FILE": password, "PGPORT": h.ports["data-source"], "PGUSER": postgres.Superuser,
			"BASE_BACKUP_CHECK": "3600",
		}
	})
	a, h := p.archiving, p.h
	ch := newChannel(t, h, "name-of-database-0")
	agent := ch.startAgent(t, h, 0, "data-source")
	ctx := context.Background()
	// listed is the agent's report of the sidecar's last summary, once
	// done says it holds what the test waits for.
	listed := func(what string, done func(*instance.BaseBackups) bool) *instance.BaseBackups {
		var bb *instance.BaseBackups
		require.Eventually(t, func() bool {
			st, err := ch.client.Status(ctx, agent)
			bb = st.BaseBackups
			return err == nil && bb != nil && done(bb)
		}, firstBaseBackupWait, 200*time.Millisecond, "%s: the agent reports %+v\nthe archiver's log:\n%s", what, bb, p.log.String())
		return bb
	}
	named := func(bb *instance.BaseBackups, name string) int {
		return slices.IndexFunc(bb.Backups, func(b instance.BaseBackup) bool { return b.Name == name })
	}
	requests := filepath.Join(h.volume("data-source"), instance.BaseBackupRequests)

	err := ch.client.RequestBaseBackup(ctx, agent, "Not_A_Name")
	require.ErrorContains(t, err, "answered 400: \"Not_A_Name\" is not a base backup's name")

	// Two requests, taken in turn: Barman refuses the second's name, so
	// it fails, and says why.
	require.NoError(t, ch.client.RequestBaseBackup(ctx, agent, "on-demand-1"))
	require.NoError(t, ch.client.RequestBaseBackup(ctx, agent, "latest"))
	require.NoError(t, ch.client.RequestBaseBackup(ctx, agent, "latest"), "asked again before it is taken")
	bb := listed("the requests", func(bb *instance.BaseBackups) bool { return named(bb, "on-demand-1") >= 0 && bb.Failed["latest"] != "" })
	got := bb.Backups[named(bb, "on-demand-1")]
	assert.Equal(t, &instance.ArchiveIdentity{Endpoint: a.store.Endpoint, Bucket: a.store.Bucket, Prefix: a.prefix, Server: a.server}, bb.Archive)
	assert.Equal(t, 1, bb.Count, "no scheduled backup beside it")
	require.Len(t, bb.Backups, 1)
	assert.NotEmpty(t, got.ID)
	assert.NotEmpty(t, got.BeginLSN)
	assert.NotEmpty(t, got.EndLSN)
	assert.Equal(t, int64(1), got.Timeline)
	assert.False(t, got.EndTime.Before(got.BeginTime), "%+v", got)
	assert.Empty(t, got.Kept)
	assert.Empty(t, bb.Error)
	// Its size is what its objects take in the store (versitygw keeps
	// each object as a file).
	base := a.prefix + "/" + a.server + "/base/" + got.ID + "/"
	var size int64
	for _, k := range a.store.Keys(t, base) {
		st, err := os.Stat(a.store.Path(k))
		require.NoError(t, err)
		size += st.Size()
	}
	assert.Positive(t, got.Size)
	assert.Equal(t, size, got.Size)
	log := p.log.String()
	assert.Contains(t, log, "deckhand: taking requested base backup on-demand-1")
	assert.Contains(t, log, "deckhand: requested base backup on-demand-1 done: backup_id="+got.ID)
	assert.NotContains(t, log, "deckhand: taking base backup", "no schedule, no scheduled backup")
	assert.NoFileExists(t, filepath.Join(requests, "on-demand-1"), "the request is answered")
	assert.Less(t, strings.Index(log, "taking requested base backup on-demand-1"), strings.Index(log, "taking requested base backup latest"), "the oldest first")

	assert.Contains(t, bb.Failed["latest"], "Backup name 'latest' is not allowed: reserved word")
	assert.Len(t, bb.Failed, 1)
	assert.NoFileExists(t, filepath.Join(requests, "latest"))
	assert.FileExists(t, filepath.Join(requests, "latest.failed"))

	// store runs a Barman Cloud command on the archive (id: a backup's
	// ID, or "").
	store := func(command, id string, flags ...string) (string, error) {
		env := a.storeEnv(a.server)
		env["SCRIPTS"] = a.scripts
		script := `. "$SCRIPTS/store.sh"; store_setup; cmd=$1; id=$2; shift 2; $cmd $store_endpoint "$@" "$store_url" "$STORE_SERVER" $id`
		out, err := h.u.Command(env, append([]string{"sh", "-c", script, "store", command, id}, flags...)).CombinedOutput()
		return string(out), err
	}
	listedIDs := func() []string {
		out, err := store("barman-cloud-backup-list", "", "--format", "json")
		require.NoError(t, err, out)
		var list struct {
			Backups []struct {
				ID string `json:"backup_id"`
			} `json:"backups_list"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &list), out)
		var ids []string
		for _, b := range list.Backups {
			ids = append(ids, b.ID)
		}
		return ids
	}
	deleteBase := func() (string, error) {
		env := a.storeEnv(a.server)
		env["BACKUP_ID"] = got.ID
		return a.script(env, postgres.DeleteBaseScript)
	}
	require.Equal(t, []string{got.ID}, listedIDs())

	// A keep made by hand is refused, and left.
	out, err := store("barman-cloud-backup-keep", got.ID, "--target", "full")
	require.NoError(t, err, out)
	out, err = deleteBase()
	require.Error(t, err, out)
	assert.Contains(t, out, "deckhand: base backup "+got.ID+" of s3://deckhand/clusters/ns/name-of-database has a keep that deckhand did not make: release it with barman-cloud-backup-keep --release to delete it")
	assert.Equal(t, []string{got.ID}, listedIDs())
	out, err = store("barman-cloud-backup-keep", got.ID, "--release")
	require.NoError(t, err, out)

	// A keep of the operator's holds (holds.sh, from the scripts
	// ConfigMap's key, as the sidecar runs it) is released first.
	h.u.WriteScripts(t, h.root, map[string]string{postgres.BaseBackupHoldsKey: postgres.KeepHold(got.ID, "the newest verified base backup")})
	out, err = a.script(a.storeEnv(a.server), postgres.HoldsScript)
	require.NoError(t, err, out)
	out, err = store("barman-cloud-backup-keep", got.ID, "--status")
	require.NoError(t, err, out)
	require.Contains(t, out, "full")
	// Asked again, the same name makes no second backup; the summary
	// after it shows the keep.
	require.NoError(t, ch.client.RequestBaseBackup(ctx, agent, "on-demand-1"))
	bb = listed("the kept backup", func(bb *instance.BaseBackups) bool { return len(bb.Backups) > 0 && bb.Backups[0].Kept != "" })
	require.Len(t, bb.Backups, 1)
	assert.Equal(t, got.ID, bb.Backups[0].ID)
	assert.Equal(t, "full", bb.Backups[0].Kept)
	assert.Equal(t, []instance.HeldBaseBackup{{ID: got.ID, Name: "on-demand-1", Reason: "the newest verified base backup"}}, bb.Held)
	assert.Equal(t, 2, strings.Count(p.log.String(), "deckhand: requested base backup on-demand-1 done: backup_id="+got.ID+" "), "taken twice, the same backup")
	out, err = deleteBase()
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	assert.Equal(t, "deleted="+got.ID, lines[len(lines)-1])
	assert.Contains(t, out, "deckhand: base backup "+got.ID+" released (was: the newest verified base backup)")
	assert.Empty(t, listedIDs())
	assert.Empty(t, a.store.Keys(t, base), "nothing of the backup is left in the store, its annotations neither")
	// Asked without a name, the sidecar looks at the archive now (its
	// next look is an hour away): the report stops listing the deleted
	// backup, as the operator waits for before the object goes.
	require.NoError(t, ch.client.RequestBaseBackup(ctx, agent, ""))
	listed("the archive listed again after the deletion", func(bb *instance.BaseBackups) bool { return len(bb.Backups) == 0 })

	out, err = deleteBase()
	require.NoError(t, err, "deleted already: %s", out)
	assert.Contains(t, out, "deckhand: base backup "+got.ID+" is not in s3://deckhand/clusters/ns/name-of-database: nothing to delete")
	assert.NotContains(t, out, "deleted=")
}
