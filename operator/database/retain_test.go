package database_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// hostServer runs the Database's server as its StatefulSet says, on a host
// directory standing for its volume (see postgres_test.go for what is
// overridden), with the Secrets as they are now.
type hostServer struct {
	bin, root, scripts, port string
	u                        *pgtest.User
	env                      map[string]string
	argv                     []string
}

func serverOnHost(t *testing.T, c client.Client, ns, name, root string, u *pgtest.User, bin string) *hostServer {
	t.Helper()
	ctx := context.Background()
	cm := get(t, c, ns, name+"-scripts", &corev1.ConfigMap{})
	sts := get(t, c, ns, name, &appsv1.StatefulSet{})
	secret := func(secretName, key string) string {
		var s corev1.Secret
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName}, &s))
		return string(s.Data[key])
	}
	h := &hostServer{bin: bin, root: root, u: u, port: pgtest.FreePort(t)}
	h.scripts = u.WriteScripts(t, filepath.Join(root, "run-"+h.port), cm.Data)
	container := sts.Spec.Template.Spec.Containers[0]
	h.argv = pgtest.HostCommand(t, container, h.scripts)
	h.env = pgtest.ContainerEnv(t, container, name+"-0", secret)
	h.env["PGDATA"] = filepath.Join(u.Dir(t, root, "data-0"), filepath.Base(h.env["PGDATA"]))
	h.env["PATH"] = bin + ":/usr/bin:/bin"
	h.env["PGPORT"], h.env["PRIMARY_PORT"] = h.port, h.port
	h.env["PRIMARY_HOST"], h.env["LISTEN_ADDRESSES"] = "127.0.0.1", "127.0.0.1"
	return h
}

// initOnHost runs the Database's init Job's container against the server.
func (h *hostServer) initOnHost(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	job := get(t, c, ns, name+"-init", &batchv1.Job{})
	initC := job.Spec.Template.Spec.Containers[0]
	env := pgtest.ContainerEnv(t, initC, name+"-init-x", func(secretName, key string) string {
		var s corev1.Secret
		require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: secretName}, &s))
		return string(s.Data[key])
	})
	env["PATH"] = h.bin + ":/usr/bin:/bin"
	env["PRIMARY_HOST"], env["PRIMARY_PORT"] = "127.0.0.1", h.port
	env["TERMINATION_MESSAGE_PATH"] = filepath.Join(h.u.Dir(t, h.root, "tmp"), "termination-log")
	out, err := h.u.Command(env, pgtest.HostCommand(t, initC, h.scripts)).CombinedOutput()
	require.NoError(t, err, "init:\n%s", out)
}

func secretsOf(t *testing.T, c client.Client, ns string, names ...string) map[string]*corev1.Secret {
	t.Helper()
	out := map[string]*corev1.Secret{}
	for _, n := range names {
		var s corev1.Secret
		require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, &s))
		out[n] = &s
	}
	return out
}

// docs/guides/database.md, Deletion: with deletionPolicy Retain the volumes and Secrets are
// kept, and a Database made again under the same name reuses them. The
// whole round trip: rows written by the real server, the Database deleted,
// made again, and the same rows read with the same passwords.
func TestARetainedDatabaseMadeAgainServesItsKeptDataWithItsPasswords(t *testing.T) {
	t.Parallel()
	bin := pgtest.Bin(t)
	u := pgtest.Unprivileged(t)
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()
	names := []string{"kept-superuser", "kept-app", "kept-replication"}

	db := newDatabase(ns, "kept", 1)
	db.Spec.DeletionPolicy = dbv1.DeletionRetain
	require.NoError(t, c.Create(ctx, db))
	first := waitFor(t, c, db, "Ready", ready)
	before := secretsOf(t, c, ns, names...)

	root := u.TempDir(t)
	h := serverOnHost(t, c, ns, "kept", root, u, bin)
	server := u.StartServer(t, bin, h.env, h.argv)
	h.initOnHost(t, c, ns, "kept")
	app := string(before["kept-app"].Data["password"])
	out, err := pgtest.PSQL(bin, h.port, "name-of-database", app, "name-of-database",
		"CREATE TABLE orders (id int PRIMARY KEY, item text); INSERT INTO orders VALUES (1, 'kept across re-creation')")
	require.NoError(t, err, out)
	server.Stop(t)

	require.NoError(t, c.Delete(ctx, db))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := c.Get(ctx, client.ObjectKeyFromObject(db), &dbv1.Database{})
		require.True(ct, apierrors.IsNotFound(err), "Database still there: %v", err)
	}, wait, 100*time.Millisecond)
	for name, s := range secretsOf(t, c, ns, names...) {
		assert.Empty(t, s.OwnerReferences, name)
		assert.Equal(t, string(first.UID), s.Annotations["stable.imaginedata.co/kept-from"], name)
	}
	pvc := get(t, c, ns, "data-kept-0", &corev1.PersistentVolumeClaim{})
	assert.Equal(t, string(first.UID), pvc.Annotations["stable.imaginedata.co/kept-from"])

	// Made again: the kept Secrets are adopted, passwords unchanged.
	again := newDatabase(ns, "kept", 1)
	again.Spec.DeletionPolicy = dbv1.DeletionRetain
	require.NoError(t, c.Create(ctx, again))
	second := waitFor(t, c, again, "Ready with the kept Secrets", ready)
	require.NotEqual(t, first.UID, second.UID)
	for name, s := range secretsOf(t, c, ns, names...) {
		assert.True(t, metav1.IsControlledBy(s, second), "%s is the new Database's", name)
		assert.Equal(t, before[name].Data["password"], s.Data["password"], "%s keeps its password", name)
		assert.Equal(t, string(second.UID), s.Annotations["stable.imaginedata.co/database-uid"], name)
		assert.NotContains(t, s.Annotations, "stable.imaginedata.co/kept-from", name)
	}
	assertEvent(t, c, ns, "kept", corev1.EventTypeNormal, "Adopted")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var pvc corev1.PersistentVolumeClaim
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "data-kept-0"}, &pvc))
		require.NotContains(ct, pvc.Annotations, "stable.imaginedata.co/kept-from", "the mark goes once the Secrets are adopted")
	}, wait, 100*time.Millisecond)

	// The new Database's server, on the kept volume, with its Secrets:
	// the same rows, read with the same app password.
	h = serverOnHost(t, c, ns, "kept", root, u, bin)
	server = u.StartServer(t, bin, h.env, h.argv)
	assert.Contains(t, server.Log.String(), "holds a PostgreSQL")
	h.initOnHost(t, c, ns, "kept")
	out, err = pgtest.PSQL(bin, h.port, "name-of-database", app, "name-of-database", "SELECT item FROM orders WHERE id = 1")
	require.NoError(t, err, out)
	assert.Equal(t, "kept across re-creation", out)
	_ = os.Remove(filepath.Join(root, "tmp", "termination-log"))
}

// A Secret with the labels of a kept one, made by someone else, is never
// adopted: without the kept volume's identity it stays someone else's.
func TestASecretWithCopiedLabelsIsNotAdopted(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()

	copied := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "copy-app", Labels: map[string]string{
		database.LabelDatabase: "copy", "app.kubernetes.io/name": "database", "app.kubernetes.io/instance": "copy",
	}}, StringData: map[string]string{"password": "not-the-operators"}}
	require.NoError(t, c.Create(ctx, copied))
	db := newDatabase(ns, "copy", 1)
	require.NoError(t, c.Create(ctx, db))
	got := waitFor(t, c, db, "refused", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "SecretNotOwned", condition(d, database.ConditionReady).Reason)
	})
	assert.Contains(t, condition(got, database.ConditionReady).Message, "Secret copy-app exists and is not owned by this Database")
	var s corev1.Secret
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(copied), &s))
	assert.Empty(t, s.OwnerReferences, "never taken over")
}
