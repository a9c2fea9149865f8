package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	jmxv1 "github.com/deckhand-dev/deckhand/operator/apis/banzaicloud/v1alpha1"
	mcv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// A Database on the real node, run by the chart's operator from its image
// with the Database controller on, with the PostgreSQL 15 image built from
// Debian's packages (hack/node/images.sh postgres): a primary and a
// streaming standby; a client pod connects with the app Secret's uri and
// writes rows, and reads them through <name>-ro from the standby; a
// DatabaseBackup completes; deleting the Database takes its final backup
// (deletionPolicy Snapshot, the default); the Database made again from
// that backup (fromBackup) has the rows.
func TestRealNodeRunsAPostgreSQLDatabase(t *testing.T) {
	parallel(t, 110*time.Second) // see the package comment: its own namespace, the shared operator
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	operatorDeployment(ctx, t, cs)
	helmUpgrade(ctx, t, "--set", "controllers.database.enabled=true")
	c := crClient(t, cfg)
	ns := namespace(ctx, t, cs)
	image := imageRef(t, "postgres")

	const name = "shop"
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       dbv1.DatabaseSpec{Name: "orders", StorageSize: "64Mi", Image: image, Replicas: 2},
	}
	require.NoError(t, c.Create(ctx, db))
	waitDatabaseReady(ctx, t, c, ns, name)
	failoverOnByDefault(ctx, t, cs, c, ns, name)

	orphanDyingLeavesTheServerUp(ctx, t, cfg, cs, ns, servedBy(ctx, t, cs, ns, name+"-rw"))

	client := startPostgresClient(ctx, t, cs, ns, name, "psql")
	token := rand.String(10)
	out := psql(ctx, t, cfg, cs, client, "rw",
		"CREATE TABLE notes (v text); INSERT INTO notes VALUES ('one "+token+"'), ('two "+token+"'); SELECT count(*) FROM notes")
	assert.Equal(t, "2", out, "rows written through the app Secret's uri")

	// <name>-ro is the standby: read-only, and it has the rows once
	// streaming replication has brought them.
	assert.Equal(t, "t", psql(ctx, t, cfg, cs, client, "ro", "SELECT pg_is_in_recovery()"), "<name>-ro answers from a standby")
	got := eventuallyPsql(ctx, t, cfg, cs, client, "ro", "SELECT string_agg(v, ',' ORDER BY v) FROM notes", "one "+token+",two "+token)
	assert.Equal(t, "one "+token+",two "+token, got, "rows read through <name>-ro")
	connectionsAreEncrypted(ctx, t, cfg, cs, client)

	store := replicatedStore{
		ns: ns, name: name,
		query: func(service, sql string) string { return psql(ctx, t, cfg, cs, client, service, sql) },
		eventually: func(service, sql, want string) string {
			return eventuallyPsql(ctx, t, cfg, cs, client, service, sql, want)
		},
		insert:     func(row string) string { return "INSERT INTO notes VALUES ('" + row + "')" },
		selectRows: "SELECT string_agg(v, ',' ORDER BY v) FROM notes",
		standbySQL: "SELECT pg_is_in_recovery()", standbyWant: "t",
		waitReady: func() { waitDatabaseReady(ctx, t, c, ns, name) },
	}
	rows := "one " + token + ",two " + token
	rows = survivesPrimaryCrash(ctx, t, cs, store, token, rows)
	rows = standbyCatchesUpAfterCrash(ctx, t, cs, store, token, rows)

	require.NoError(t, c.Create(ctx, &dbv1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: ns},
		Spec:       dbv1.DatabaseBackupSpec{Database: name},
	}))
	first := waitBackupCompleted(ctx, t, c, ns, "first")
	assert.True(t, strings.HasPrefix(first.Status.Version, "15."), "backup of PostgreSQL %q", first.Status.Version)
	assert.NotEmpty(t, first.Status.SHA256)
	// Each backup is verified (EachBackup, the default): the verification
	// Job restores it into a scratch server in a real container.
	waitVerified(ctx, t, "DatabaseBackup first", func() (*dbv1.BackupVerification, error) {
		var b dbv1.DatabaseBackup
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "first"}, &b)
		return b.Status.Verification, err
	})

	psql(ctx, t, cfg, cs, client, "rw", "INSERT INTO notes VALUES ('three "+token+"')")
	require.NoError(t, c.Delete(ctx, db))
	final := waitFinalBackup(ctx, t, c, ns, name)
	waitGone(ctx, t, c, ns, name)

	again := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       dbv1.DatabaseSpec{Name: "orders", StorageSize: "64Mi", Image: image, Replicas: 2, FromBackup: final},
	}
	require.NoError(t, c.Create(ctx, again))
	waitDatabaseReady(ctx, t, c, ns, name)
	// The Database made again has new Secrets (new passwords): a new
	// client pod mounts them (the first one's volume would show the new
	// uri only after the kubelet's next sync of it, a minute or more).
	client = startPostgresClient(ctx, t, cs, ns, name, "psql-again")
	assert.Equal(t, sortedRows(rows+",three "+token),
		psql(ctx, t, cfg, cs, client, "rw", "SELECT string_agg(v, ',' ORDER BY v) FROM notes"),
		"the rows of the final backup, restored")
}

// failoverOnByDefault: the chart's operator gave the Database, which does
// not set spec.failover.enabled, automatic failover, recorded on it, and
// its pods run the instance agent.
func failoverOnByDefault(ctx context.Context, t testing.TB, cs clientset, c client.Client, ns, name string) {
	t.Helper()
	var db dbv1.Database
	require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &db))
	assert.Equal(t, "true", db.Annotations[database.AnnotationFailoverDefault], "the recorded failover default of a new Database")
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name+"-0", metav1.GetOptions{})
	require.NoError(t, err)
	var containers []string
	for _, ctr := range pod.Spec.Containers {
		containers = append(containers, ctr.Name)
	}
	assert.Contains(t, containers, instance.AgentContainer, "the instance agent in %s", pod.Name)
}

// orphanDyingLeavesTheServerUp starts a process in the server's container
// that outlives its parent and then dies of SIGPIPE, as a probe's psql
// does when the kubelet gives up on the probe and its shell is gone. The
// orphan is re-parented to the pod's PID 1; were that the postmaster, it
// would take the death for a crashed backend and restart the server,
// ending every session ("the database system is in recovery mode"). A
// session open meanwhile must end normally.
func orphanDyingLeavesTheServerUp(ctx context.Context, t testing.TB, cfg *rest.Config, cs clientset, ns, podName string) {
	t.Helper()
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	require.NoError(t, err)
	_, err = tryExec(ctx, cfg, cs, pod, "sh", "-c", `sh -c 'sleep 3; kill -PIPE $$' </dev/null >/dev/null 2>&1 &`)
	require.NoError(t, err)
	out, err := tryExec(ctx, cfg, cs, pod, "sh", "-c",
		`PGHOST=127.0.0.1 exec psql -X -A -t -q -d postgres -c 'SELECT pg_sleep(8)' -c 'SELECT 42'`)
	require.NoError(t, err, "a session open while an orphaned process of the server's container died of SIGPIPE:\n%s", out)
	assert.Equal(t, "42", strings.TrimSpace(out))
}

// crClient is a controller-runtime client for the Database kinds and
// PrometheusJmxExporters.
func crClient(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	// controller-runtime prints a stack trace at the first client made
	// without a logger; the client logs nothing the test needs.
	ctrllog.SetLogger(logr.Discard())
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, dbv1.AddToScheme(scheme))
	require.NoError(t, mcv1.AddToScheme(scheme))
	require.NoError(t, jmxv1.AddToScheme(scheme))
	require.NoError(t, magalixv1.AddToScheme(scheme))
	require.NoError(t, schedulev1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// startPostgresClient runs the postgres image itself as a client pod,
// with the app Secret mounted at /app (the uri is read from there, so it
// is never in a command line or a test's output).
func startPostgresClient(ctx context.Context, t testing.TB, cs clientset, ns, db, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:      "psql",
				Image:     imageRef(t, "postgres"),
				Command:   []string{"sleep", "3600"},
				Resources: testPodResources(),
				// Also where the app Secret's verify-full and multi-host
				// strings look for its CA (database.CAMountDir).
				VolumeMounts: []corev1.VolumeMount{{Name: "app", MountPath: "/app", ReadOnly: true},
					{Name: "app", MountPath: database.CAMountDir, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "app", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: db + "-app"},
			}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	return runningPod(ctx, t, cs, ns, pod.Name)
}

// psqlCommand runs sql through the app Secret's uri (mounted at /app),
// against <name>-rw or, with service "ro", <name>-ro.
func psqlCommand(service, sql string) []string {
	return []string{"sh", "-c", `uri=$(cat /app/uri); [ "$1" = ro ] && uri=$(echo "$uri" | sed 's/-rw\./-ro./'); ` +
		`exec psql "$uri" -X -A -t -q -v ON_ERROR_STOP=1 -c "$2"`, "psql", service, sql}
}

func psql(ctx context.Context, t testing.TB, cfg *rest.Config, cs clientset, pod *corev1.Pod, service, sql string) string {
	t.Helper()
	out, err := tryExec(ctx, cfg, cs, pod, psqlCommand(service, sql)...)
	require.NoError(t, err, "psql (%s) %q:\n%s", service, sql, out)
	return strings.TrimSpace(out)
}

// eventuallyPsql runs sql until it prints want (a standby replays the
// primary's writes within moments).
func eventuallyPsql(ctx context.Context, t testing.TB, cfg *rest.Config, cs clientset, pod *corev1.Pod, service, sql, want string) string {
	t.Helper()
	var out string
	_ = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		o, err := tryExec(ctx, cfg, cs, pod, psqlCommand(service, sql)...)
		out = strings.TrimSpace(o)
		return err == nil && out == want, nil
	})
	return out
}

func waitDatabaseReady(ctx context.Context, t testing.TB, c client.Client, ns, name string) {
	t.Helper()
	waitDatabaseReadyWithin(ctx, t, c, ns, name, 8*time.Minute, "")
}

// waitDatabaseReadyWithin waits for the Database to be Ready with every
// replica; after, when set, says what it waited after in a failure.
func waitDatabaseReadyWithin(ctx context.Context, t testing.TB, c client.Client, ns, name string, within time.Duration, after string) {
	t.Helper()
	var db dbv1.Database
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, within, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &db); err != nil {
			return false, nil
		}
		return db.Status.Phase == dbv1.PhaseReady && db.Status.ReadyReplicas == db.Spec.Replicas, nil
	})
	if after != "" {
		after = " after " + after
	}
	require.NoError(t, err, "Database %s not Ready with every replica within %s%s: phase %q, ready %s, conditions %+v",
		name, within, after, db.Status.Phase, db.Status.Ready, db.Status.Conditions)
}

func waitBackupCompleted(ctx context.Context, t testing.TB, c client.Client, ns, name string) dbv1.DatabaseBackup {
	t.Helper()
	b := waitBackup(ctx, t, c, ns, name, "did not end", func(b *dbv1.DatabaseBackup) bool {
		return b.Status.Phase == dbv1.BackupCompleted || b.Status.Phase == dbv1.BackupFailed
	})
	require.Equal(t, dbv1.BackupCompleted, b.Status.Phase, "DatabaseBackup %s: %+v", name, b.Status)
	return *b
}

// waitBackup waits until the DatabaseBackup name exists and done says so.
func waitBackup(ctx context.Context, t testing.TB, c client.Client, ns, name, what string, done func(*dbv1.DatabaseBackup) bool) *dbv1.DatabaseBackup {
	t.Helper()
	var b dbv1.DatabaseBackup
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &b) == nil && done(&b), nil
	})
	require.NoError(t, err, "%s: DatabaseBackup %s/%s: %+v", what, ns, name, b.Status)
	return &b
}

// waitVerified waits for a backup's verification to end, and requires
// it Verified with its restore and row counts checked. It logs how long
// the wait added to the test.
func waitVerified(ctx context.Context, t *testing.T, what string, get func() (*dbv1.BackupVerification, error)) {
	t.Helper()
	start := time.Now()
	var v *dbv1.BackupVerification
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := get()
		if err != nil || cur == nil {
			return false, nil
		}
		v = cur
		return v.Outcome != "", nil
	})
	require.NoError(t, err, "%s never verified: %+v", what, v)
	require.Equal(t, dbv1.VerificationVerified, v.Outcome, "%s: %+v", what, v)
	var checks []string
	for _, c := range v.Checks {
		checks = append(checks, c.Name)
	}
	assert.Subset(t, checks, []string{"checksum", "restore", "rowCounts"}, "%s", what)
	t.Logf("%s verified (%v in its Job); waiting for it added %s", what, v.Duration, time.Since(start).Round(time.Second))
}

// waitFinalBackup waits for the final backup a Snapshot deletion makes
// (<name>-final-<uid>) to complete, and returns its name.
func waitFinalBackup(ctx context.Context, t testing.TB, c client.Client, ns, db string) string {
	t.Helper()
	var final string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var backups dbv1.DatabaseBackupList
		if err := c.List(ctx, &backups, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		for _, b := range backups.Items {
			if strings.HasPrefix(b.Name, db+"-final-") {
				final = b.Name
			}
		}
		return final != "", nil
	})
	require.NoError(t, err, "no final backup of %s", db)
	waitBackupCompleted(ctx, t, c, ns, final)
	return final
}

func waitGone(ctx context.Context, t testing.TB, c client.Client, ns, name string) {
	t.Helper()
	var db dbv1.Database
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &db)
		return err != nil, nil
	})
	require.NoError(t, err, "Database %s still there: %+v", name, db.Status.Conditions)
}

// connectionsAreEncrypted: a new Database requires TLS (the chart's
// default): the app Secret's verify-full-uri connects with the server's
// certificate verified against its CA, a client that refuses encryption is
// turned away, and the multi-host strings (every pod by name, verify-full
// too) reach the primary or, for reads, the standby.
func connectionsAreEncrypted(ctx context.Context, t testing.TB, cfg *rest.Config, cs clientset, client *corev1.Pod) {
	t.Helper()
	const encrypted = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
	// The multi-host strings give each host 2 s (connect_timeout): on a
	// loaded machine TLS and the password exchange with the primary have
	// taken longer, and libpq then tried the standby, which is not the
	// session it asks for. A timed-out attempt is tried again, for up to a
	// minute; an answer, right or wrong, is final.
	run := func(key, suffix, sql string) (out string, err error) {
		_ = wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			out, err = tryExec(ctx, cfg, cs, client, "sh", "-c",
				`exec psql "$(cat /app/$1)$2" -X -A -t -q -v ON_ERROR_STOP=1 -c "$3" 2>&1`, "psql", key, suffix, sql)
			out = strings.TrimSpace(out)
			return err == nil || !strings.Contains(out, "timeout expired"), nil
		})
		return out, err
	}
	out, err := run(database.AppVerifyFullURIKey, "", encrypted)
	require.NoError(t, err, "psql with %s:\n%s", database.AppVerifyFullURIKey, out)
	assert.Equal(t, "t", out, "a verify-full connection is encrypted")

	out, err = run("uri", "?sslmode=disable", "SELECT 1")
	require.Error(t, err, "a connection without TLS was accepted: %s", out)
	assert.Contains(t, out, "no encryption", "the server's refusal of an unencrypted connection")

	out, err = run(database.AppMultiHostURIKey, "", "SELECT pg_is_in_recovery()")
	require.NoError(t, err, "psql with %s:\n%s", database.AppMultiHostURIKey, out)
	assert.Equal(t, "f", out, "multihost-uri lands on the primary")
	out, err = run(database.AppMultiHostROURIKey, "", "SELECT pg_is_in_recovery()")
	require.NoError(t, err, "psql with %s:\n%s", database.AppMultiHostROURIKey, out)
	assert.Equal(t, "t", out, "multihost-ro-uri lands on the standby")
}
