package database_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// applyYAML applies a manifest as a user would, so the test says the same
// to the API server whatever the Go types know.
func applyYAML(t *testing.T, manifest string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "manifest.yaml")
	require.NoError(t, os.WriteFile(file, []byte(manifest), 0o644))
	out, err := testenv.Kubectl(t, "apply", "-f", file)
	require.NoError(t, err, out)
}

func databaseYAML(ns, name, podTemplate string) string {
	return "apiVersion: stable.imaginedata.co/v1\nkind: Database\nmetadata:\n  name: " + name + "\n  namespace: " + ns +
		"\nspec:\n  name: app\n  port: 5432\n  storage-size: 1Gi\n  replicas: 1\n" + podTemplate
}

// podUser is the UID a server pod and the init Job run as.
func podUsers(t *testing.T, c client.Client, ns, name string) (int64, int64) {
	t.Helper()
	var sts appsv1.StatefulSet
	var job batchv1.Job
	get(t, c, ns, name, &sts)
	get(t, c, ns, name+"-init", &job)
	return *sts.Spec.Template.Spec.SecurityContext.RunAsUser, *job.Spec.Template.Spec.SecurityContext.RunAsUser
}

// The servers' user comes from spec.podTemplate.runAsUser (default 999),
// never from the image reference. A data directory owned by another UID
// stops the real bootstrap script with a message naming both owners, and
// the Database's Ready condition says the same, with the fix.
func TestTheServersUserComesFromTheSpecAndAWrongOneIsReported(t *testing.T) {
	t.Parallel()
	bin := pgtest.Bin(t)
	u := pgtest.Unprivileged(t)
	require.NotNil(t, u, "the test makes directories of two owners: it runs as root")
	require.NotEqual(t, 999, u.UID, "the host's postgres user must differ from the default")
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()

	// Alpine's image, by digest: nothing in the reference says 70.
	alpine := "  image: registry.example/postgres@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + "\n"
	applyYAML(t, databaseYAML(ns, "alpine", alpine+"  podTemplate:\n    runAsUser: 70\n"))
	server, initJob := podUsers(t, c, ns, "alpine")
	assert.Equal(t, int64(70), server, "the server runs as the spec's user")
	assert.Equal(t, int64(70), initJob, "and so does every Job")

	applyYAML(t, databaseYAML(ns, "owner", ""))
	db := &dbv1.Database{}
	get(t, c, ns, "owner", db)
	server, _ = podUsers(t, c, ns, "owner")
	assert.Equal(t, int64(999), server, "the default is the official image's 999")
	waitFor(t, c, db, "Ready", ready)

	// The volume was made by an image whose server user is the host's
	// postgres; the pods run as 999: the real bootstrap script, as 999,
	// refuses the directory and says why in its termination message.
	root := u.TempDir(t)
	require.NoError(t, os.Chmod(root, 0o755), "uid 999 reads the scripts too")
	h := serverOnHost(t, c, ns, "owner", root, u, bin)
	env, argv := h.env, h.argv
	termination := filepath.Join(u.Dir(t, root, "tmp"), "termination-log")
	require.NoError(t, os.WriteFile(termination, nil, 0o666))
	require.NoError(t, os.Chmod(termination, 0o666))
	env["TERMINATION_MESSAGE_PATH"] = termination
	made := u.StartServer(t, bin, env, argv)
	made.Stop(t)

	// As a pod would: uid 999, which has no name on this host.
	asPod := exec.Command("setpriv", append([]string{"--reuid=999", "--regid=999", "--clear-groups", "--"}, argv...)...)
	for k, v := range env {
		asPod.Env = append(asPod.Env, k+"="+v)
	}
	out, err := asPod.CombinedOutput()
	require.Error(t, err, "the server must not start on a data directory of another owner:\n%s", out)
	uid := strconv.Itoa(u.UID)
	assert.Contains(t, string(out), "belongs to uid "+uid+", but the server runs as uid 999")
	message, err := os.ReadFile(termination)
	require.NoError(t, err)
	var report map[string]string
	require.NoError(t, json.Unmarshal(message, &report), string(message))
	assert.Equal(t, map[string]string{"dataDirectory": env["PGDATA"], "dataOwner": uid, "runAsUser": "999"}, report)

	// The kubelet puts it in the pod's status (kwok runs no script).
	testenv.ContainerExited(t, c, ns, "owner-0", string(message))
	db = waitFor(t, c, db, "the owner mismatch reported", func(ct *assert.CollectT, d *dbv1.Database) {
		cond := condition(d, database.ConditionReady)
		require.Equal(ct, "DataDirectoryOwnerMismatch", cond.Reason, "%+v", cond)
		require.Equal(ct, dbv1.PhaseDegraded, d.Status.Phase)
	})
	msg := condition(db, database.ConditionReady).Message
	assert.Contains(t, msg, "pod owner-0: the data directory "+env["PGDATA"]+" belongs to uid "+uid+", but the servers run as uid 999")
	assert.Contains(t, msg, "set spec.podTemplate.runAsUser to "+uid)
	assertEvent(t, c, ns, "owner", corev1.EventTypeWarning, "DataDirectoryOwnerMismatch")

	// The fix: the spec names the image's user; the pods run as it, and the
	// real script starts the kept data as that user.
	applyYAML(t, databaseYAML(ns, "owner", "  podTemplate:\n    runAsUser: "+uid+"\n"))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var sts appsv1.StatefulSet
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "owner"}, &sts))
		require.Equal(ct, int64(u.UID), *sts.Spec.Template.Spec.SecurityContext.RunAsUser)
	}, wait, 100*time.Millisecond)
	restarted := u.StartServer(t, bin, env, argv)
	assert.Contains(t, restarted.Log.String(), "holds a PostgreSQL")
}

// A backup's file is written as the Database's user, and the Job that
// deletes it runs as that user too, even once the Database is gone: a
// Job of the default 999 cannot remove a file in a directory of uid 26
// (the Red Hat image's postgres), so the DatabaseBackup would never go.
func TestTheJobThatDeletesABackupFileRunsAsTheUserWhoWroteIt(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()
	const uid = 26
	db := newDatabase(ns, "rhel", 1)
	db.Spec.PodTemplate = &dbv1.PodTemplate{RunAsUser: ptr.To(int64(uid))}
	db.Spec.DeletionPolicy = dbv1.DeletionRetain
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)

	require.NoError(t, c.Create(ctx, newBackup(ns, "before", "rhel")))
	backupJob := backupJobOf(t, c, ns, "rhel", "before")
	assertRunsAs(t, backupJob, uid, "the backup Job")
	reportBackup(t, c, ns, "rhel", "before", 1000)
	b := waitForBackup(t, c, ns, "before", "Completed", backupPhase(dbv1.BackupCompleted))
	require.NotNil(t, b.Status.RunAsUser, "the backup records who wrote its file")
	assert.Equal(t, int64(uid), *b.Status.RunAsUser)

	// The Database goes (its volumes and backups are kept); then its
	// backup is deleted.
	require.NoError(t, c.Delete(ctx, db))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{})
		require.True(ct, apierrors.IsNotFound(err), "the Database is still there")
	}, wait, 100*time.Millisecond)
	deleteJob, quota := deleteBackupHoldingItsJob(t, c, b)
	assertRunsAs(t, &deleteJob, uid, "the Job that deletes the file")

	// Its command, as its pod's user, on a backup directory as the
	// Database's pods leave it: the file goes.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		require.NoError(t, os.Chmod(d, 0o755), "uid %d reaches the directory", uid)
	}
	mount := filepath.Join(dir, "backup")
	require.NoError(t, os.Mkdir(mount, 0o755))
	file := filepath.Join(mount, b.Status.File)
	require.NoError(t, os.WriteFile(file, []byte("dump"), 0o600))
	require.NoError(t, os.WriteFile(file+".owner", []byte("job"), 0o600))
	for _, p := range []string{mount, file, file + ".owner"} {
		require.NoError(t, os.Chown(p, uid, uid))
	}
	sc := deleteJob.Spec.Template.Spec.SecurityContext
	argv := []string{"setpriv", "--reuid=" + strconv.FormatInt(*sc.RunAsUser, 10), "--regid=" + strconv.FormatInt(*sc.RunAsGroup, 10), "--clear-groups", "--"}
	for _, a := range deleteJob.Spec.Template.Spec.Containers[0].Command {
		argv = append(argv, strings.Replace(a, engine.BackupMount, mount, 1))
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	require.NoError(t, err, "%v:\n%s", argv, out)
	assert.NoFileExists(t, file)
	assert.NoFileExists(t, file+".owner")

	// kwok completes the Job; the DatabaseBackup goes.
	require.NoError(t, c.Delete(ctx, quota))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKeyFromObject(b), &dbv1.DatabaseBackup{})
		require.True(ct, apierrors.IsNotFound(err), "the DatabaseBackup is still there")
	}, 2*wait, 100*time.Millisecond)
}

// assertRunsAs: the Job's pod runs as uid, with uid as its group and the
// volumes' group.
func assertRunsAs(t *testing.T, job *batchv1.Job, uid int64, what string) {
	t.Helper()
	sc := job.Spec.Template.Spec.SecurityContext
	require.NotNil(t, sc, "%s has no security context", what)
	assert.Equal(t, uid, ptr.Deref(sc.RunAsUser, -1), "%s runs as the Database's user", what)
	assert.Equal(t, uid, ptr.Deref(sc.RunAsGroup, -1), "%s runs with the Database's group", what)
	assert.Equal(t, uid, ptr.Deref(sc.FSGroup, -1), "%s owns its volumes with the Database's group", what)
}

// The Job that deletes a backup's file runs where the Database's pods may
// run (issue 21): its nodeSelector and tolerations. Without them it could
// land on a node the Database's user never meant (or, with every node
// tainted, on none: the DatabaseBackup would never go).
func TestTheJobThatDeletesABackupFileRunsWhereTheDatabasesPodsRun(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()
	toleration := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}
	db := newDatabase(ns, "placed", 1)
	db.Spec.PodTemplate = &dbv1.PodTemplate{
		NodeSelector: map[string]dbv1.LabelValue{corev1.LabelHostname: "kwok-node-1"},
		Tolerations:  []corev1.Toleration{toleration},
	}
	require.NoError(t, c.Create(ctx, db))
	waitFor(t, c, db, "Ready", ready)
	require.NoError(t, c.Create(ctx, newBackup(ns, "one", "placed")))
	reportBackup(t, c, ns, "placed", "one", 1000)
	b := waitForBackup(t, c, ns, "one", "Completed", backupPhase(dbv1.BackupCompleted))

	deleteJob, quota := deleteBackupHoldingItsJob(t, c, b)
	spec := deleteJob.Spec.Template.Spec
	assert.Equal(t, map[string]string{corev1.LabelHostname: "kwok-node-1"}, spec.NodeSelector)
	assert.Equal(t, []corev1.Toleration{toleration}, spec.Tolerations)
	require.NoError(t, c.Delete(ctx, quota))
}

// deleteBackupHoldingItsJob deletes the backup while no pod may start (a
// pod quota of 0, returned for the test to delete), so the Job that
// deletes its file stays to be read (done, it would go with the
// DatabaseBackup); it returns that Job.
func deleteBackupHoldingItsJob(t *testing.T, c client.Client, b *dbv1.DatabaseBackup) (batchv1.Job, *corev1.ResourceQuota) {
	t.Helper()
	ctx := context.Background()
	quota := testenv.PodQuota(t, c, b.Namespace, 0)
	require.NoError(t, c.Delete(ctx, b))
	var job batchv1.Job
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var jobs batchv1.JobList
		require.NoError(ct, c.List(ctx, &jobs, client.InNamespace(b.Namespace), client.MatchingLabels{database.LabelComponent: "backup-delete"}))
		require.Len(ct, jobs.Items, 1)
		job = jobs.Items[0]
	}, wait, 100*time.Millisecond, "the Job that deletes the file")
	return job, quota
}
