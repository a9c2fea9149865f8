package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// The whole major path, FROM == TO, on the host's real PostgreSQL, through
// the test seam (database.Options.MajorPathWithinMajor): the fence Job
// really ends the app's session, the pre-upgrade backup really dumps,
// upgrade.sh really restores into a new directory and keeps the old one,
// the app role logs in on the upgraded data, and the old directory goes
// only after the annotation.
func TestTheWholeMajorPathFencesUpgradesAndKeepsTheOldDirectoryOnARealServer(t *testing.T) {
	t.Parallel()
	e := newEndToEnd(t, database.Options{MajorPathWithinMajor: true})
	ctx := context.Background()
	const name = "up"
	db := e.database(name, dbv1.DeletionDelete, "")
	e.waitReady(name)
	e.sql(name, "CREATE TABLE notes (v text); INSERT INTO notes VALUES ('before the fence'); GRANT ALL ON notes TO PUBLIC")

	// The application: a session of the app role, open across the fence.
	app := func(sql string) (string, error) {
		return pgtest.PSQL(e.bin, e.servers[name], appDatabase, e.secret(name+"-app", "password"), appDatabase, sql)
	}
	out, err := app("INSERT INTO notes VALUES ('the app writes') RETURNING v")
	require.NoError(t, err, out)
	session := openSession(t, e.bin, e.servers[name], appDatabase, e.secret(name+"-app", "password"), appDatabase)

	// The server's pod is gone only once the host's server has stopped,
	// as a real pod is: no Job may use the data directory before.
	holdPod := func(hold bool) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var pod corev1.Pod
			require.NoError(t, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name + "-0"}, &pod))
			if hold {
				controllerutil.AddFinalizer(&pod, serverRunning)
			} else {
				controllerutil.RemoveFinalizer(&pod, serverRunning)
			}
			return e.c.Update(ctx, &pod)
		}))
	}
	holdPod(true)

	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, e.c.Get(ctx, client.ObjectKeyFromObject(db), db))
		db.Spec.Image = e.image + "-bookworm"
		return e.c.Update(ctx, db)
	}))

	// The servers stop after the backup: so does the host's server, before
	// the upgrade Job may touch its directory.
	stsStopped := func() bool {
		var sts appsv1.StatefulSet
		return e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &sts) == nil && ptr.Deref(sts.Spec.Replicas, 1) == 0
	}
	require.Eventually(t, stsStopped, 2*time.Minute, 10*time.Millisecond, "the StatefulSet never scaled down")

	// The backup has completed and the host's server still runs: the
	// fence ended the app's open session, and refuses a new login.
	_, _ = session.in.Write([]byte("INSERT INTO notes VALUES ('after the fence') RETURNING v;\n"))
	_ = session.in.Close()
	said := session.rest(t)
	assert.Contains(t, said, "terminating connection due to administrator command", "the fence ended the app's open session")
	assert.NotContains(t, said, "after the fence", "the session wrote nothing after the fence")
	out, err = app("SELECT 1")
	require.Error(t, err, "a new app login after the fence: %s", out)
	assert.Contains(t, out, "not permitted to log in")
	assert.Contains(t, events(t, e, name), "WritesFenced")
	e.procs[name].Stop(t)
	holdPod(false)

	// The StatefulSet comes back on the new image: its server starts on the
	// upgraded directory.
	require.Eventually(t, func() bool {
		var sts appsv1.StatefulSet
		return e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &sts) == nil &&
			ptr.Deref(sts.Spec.Replicas, 0) == 1 && sts.Spec.Template.Spec.Containers[0].Image == e.image+"-bookworm"
	}, 5*time.Minute, 100*time.Millisecond, "the servers never came back on the new image: %+v", e.get(name).Status.Conditions)
	e.startPrimary(name)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		d := e.get(name)
		require.NotNil(ct, d.Status.Upgrade)
		require.Equal(ct, dbv1.UpgradeStep("OldDataKept"), d.Status.Upgrade.Step, "conditions: %+v", d.Status.Conditions)
	}, 2*time.Minute, 200*time.Millisecond)
	cur := e.get(name)
	assert.Nil(t, meta.FindStatusCondition(cur.Status.Conditions, "WritesFenced"))
	version := cur.Status.Upgrade.FromVersion
	claim := e.runner.ClaimDir("data-" + name + "-0")
	assert.DirExists(t, filepath.Join(claim, "pgdata.old-"+version), "the old directory is kept")

	// The app logs in on the upgraded data and finds what it wrote before
	// the fence, and nothing after.
	out, err = app("SELECT string_agg(v, ',' ORDER BY v) FROM notes")
	require.NoError(t, err, out)
	assert.Equal(t, "before the fence,the app writes", out)

	// The user's signal: the servers restart once more, and the old
	// directory goes.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		require.NoError(t, e.c.Get(ctx, client.ObjectKeyFromObject(db), db))
		db.Annotations = map[string]string{database.AnnotationRemoveOldData: "true"}
		return e.c.Update(ctx, db)
	}))
	require.Eventually(t, func() bool {
		var sts appsv1.StatefulSet
		if e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &sts) != nil {
			return false
		}
		for _, v := range sts.Spec.Template.Spec.Containers[0].Env {
			if v.Name == "REMOVE_OLD_DATA" {
				return true
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "the servers never restart to remove the old directory")
	e.procs[name].Stop(t)
	e.startPrimary(name)
	_, err = os.Stat(filepath.Join(claim, "pgdata.old-"+version))
	assert.True(t, os.IsNotExist(err), "the old directory is removed: %v", err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.Equal(ct, dbv1.UpgradeCompleted, e.get(name).Status.Upgrade.Step)
	}, 2*time.Minute, 200*time.Millisecond)
	out, err = app("SELECT count(*) FROM notes")
	require.NoError(t, err, out)
	assert.Equal(t, "2", out)
}

// serverRunning holds a server pod while the host's server runs.
const serverRunning = "deckhand.dev/test-server-running"

func (e *endToEnd) get(name string) *dbv1.Database {
	var d dbv1.Database
	require.NoError(e.t, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &d))
	return &d
}

func eventReasons(t require.TestingT, c client.Client, ns, name string) []string {
	var evs eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &evs, client.InNamespace(ns)))
	var reasons []string
	for _, ev := range evs.Items {
		if ev.Regarding.Name == name {
			reasons = append(reasons, ev.Reason)
		}
	}
	return reasons
}

func events(t *testing.T, e *endToEnd, name string) string {
	var reasons []string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		reasons = eventReasons(ct, e.c, e.ns, name)
		require.Contains(ct, reasons, "WritesFenced")
	}, time.Minute, 200*time.Millisecond)
	return strings.Join(reasons, ",")
}
