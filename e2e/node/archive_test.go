package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/s3test"
)

// startObjectStore runs versitygw (the node's store image) as a pod of
// the namespace behind the Service store, serving TLS on 7070 with a
// certificate for the Service's names from a CA made for the test, over
// an emptyDir that holds the bucket "archive". It returns the object
// store settings that reach it: the keys in the Secret store-keys, the CA
// in the ConfigMap store-ca.
func startObjectStore(ctx context.Context, t testing.TB, cs *kubernetes.Clientset, ns string) *dbv1.ObjectStore {
	t.Helper()
	names := []string{"store." + ns + ".svc", "store." + ns + ".svc.cluster.local", "store." + ns, "store"}
	pems := s3test.ServerTLS(t, names, nil)
	access, secret := "deckhand"+rand.String(8), rand.String(32)
	_, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "store-tls"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: pems.Cert, corev1.TLSPrivateKeyKey: pems.Key},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "store-keys"},
		StringData: map[string]string{"access": access, "secret": secret},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "store-ca"},
		Data:       map[string]string{"ca.crt": string(pems.CA)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	labels := map[string]string{"app": "store"}
	key := func(k string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "store-keys"}, Key: k}}
	}
	restricted := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "store", Labels: labels},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To[int64](65532)},
			// The bucket is a directory of the store's root.
			InitContainers: []corev1.Container{{
				Name: "bucket", Image: busyboxImage(t), Command: []string{"mkdir", "-p", "/data/archive"},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				SecurityContext: restricted,
			}},
			Containers: []corev1.Container{{
				Name: "versitygw", Image: imageRef(t, "store"),
				Args: []string{"--port", ":7070", "--cert", "/tls/tls.crt", "--key", "/tls/tls.key", "--quiet", "posix", "/data"},
				// The keys reach it through the environment only.
				Env:       []corev1.EnvVar{{Name: "ROOT_ACCESS_KEY_ID", ValueFrom: key("access")}, {Name: "ROOT_SECRET_ACCESS_KEY", ValueFrom: key("secret")}},
				Ports:     []corev1.ContainerPort{{ContainerPort: 7070}},
				Resources: testPodResources(),
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(7070)}},
					PeriodSeconds: 1},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "tls", MountPath: "/tls", ReadOnly: true}},
				SecurityContext: restricted,
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "store-tls"}}},
			},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "store"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 7070, TargetPort: intstr.FromInt32(7070)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	runningPod(ctx, t, cs, ns, "store")
	waitServiceAnswersByName(ctx, t, cs, ns, "store."+ns+".svc", 7070)
	return &dbv1.ObjectStore{
		Endpoint: "https://store." + ns + ".svc:7070",
		Bucket:   "archive",
		Credentials: dbv1.ObjectStoreCredentials{
			AccessKeyID:     dbv1.KeyRef{Name: "store-keys", Key: "access"},
			SecretAccessKey: dbv1.KeyRef{Name: "store-keys", Key: "secret"},
		},
		CABundle: &dbv1.CABundleSource{ConfigMapKeyRef: &dbv1.KeyRef{Name: "store-ca", Key: "ca.crt"}},
	}
}

// waitServiceAnswersByName waits until a pod of the namespace connects
// to host:port. On a busy node kube-proxy may program a new Service late;
// a Database's archiver would only retry, but a test that times its first
// base backup must start from a store its pods can reach.
func waitServiceAnswersByName(ctx context.Context, t testing.TB, cs *kubernetes.Clientset, ns, host string, port int) {
	t.Helper()
	cfg, _ := clientFor(t)
	probe := startPod(ctx, t, cs, ns, "probe-"+strings.SplitN(host, ".", 2)[0], nil, "exec sleep 3600")
	var out string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		o, err := tryExec(ctx, cfg, cs, probe, "nc", "-w", "2", host, fmt.Sprint(port), "-e", "true")
		out = o
		return err == nil, nil
	})
	require.NoError(t, err, "%s:%d never answered from a pod: %s", host, port, out)
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, probe.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
}

// A Database on the real node archives into an object store that runs as
// a pod (versitygw over TLS), its primary's archiver sidecar takes the
// archive's first base backup by itself, its status says what the archive
// can recover (the base backups, the window), and a new Database recovered
// from that archive to a time, through the chart's operator from its
// image: its primary holds the row committed before the time and not the
// one after, and serves with the new Database's app password (the init
// Job replaced the source's); its standby clones the recovered primary.
func TestRealNodeRecoversADatabaseToATimeFromItsArchive(t *testing.T) {
	parallel(t, 6*time.Minute) // see the package comment: its own namespace, the shared operator
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Minute)
	defer cancel()
	operatorDeployment(ctx, t, cs)
	helmUpgrade(ctx, t, "--set", "controllers.database.enabled=true")
	c := crClient(t, cfg)
	ns := namespace(ctx, t, cs)
	store := startObjectStore(ctx, t, cs, ns)

	source := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: ns},
		Spec: dbv1.DatabaseSpec{Name: "ledger", StorageSize: "256Mi", Image: imageRef(t, "postgres"), Replicas: 1,
			Backup: &dbv1.BackupSpec{Storage: &dbv1.BackupStorage{ObjectStore: store.DeepCopy()}}},
	}
	require.NoError(t, c.Create(ctx, source))
	waitDatabaseReady(ctx, t, c, ns, "ledger")
	base := waitForContainerLog(ctx, t, cs, ns, "ledger-0", postgres.ArchiverContainer, "deckhand: base backup base-")
	require.Contains(t, base, " done: backup_id=", "the first base backup:\n%s", base)
	// The Database's status tells what the archive can recover, once the
	// archiver has read the archive's catalogue again after the backup
	// (Barman, in Python: slow to start on two busy cores).
	var src dbv1.Database
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, crclient.ObjectKeyFromObject(source), &src)
		return err == nil && src.Status.BaseBackups != nil && src.Status.BaseBackups.Count >= 1 &&
			src.Status.RecoverableFrom != nil && src.Status.RecoverableUntil != nil, nil
	}), "the Database's status names no base backup or window: %+v", src.Status)
	assert.True(t, strings.HasPrefix(src.Status.BaseBackups.Newest.Name, "base-"), src.Status.BaseBackups.Newest.Name)
	assert.Equal(t, src.Status.BaseBackups.Oldest.EndTime.Time, src.Status.RecoverableFrom.Time, "the window starts at the end of the oldest base backup")

	client := startPostgresClient(ctx, t, cs, ns, "ledger", "psql")
	psql(ctx, t, cfg, cs, client, "rw", "CREATE TABLE entries (v text, at timestamptz NOT NULL DEFAULT clock_timestamp()); INSERT INTO entries (v) VALUES ('before')")
	time.Sleep(1100 * time.Millisecond)
	target := psql(ctx, t, cfg, cs, client, "rw", `SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`)
	time.Sleep(1100 * time.Millisecond)
	psql(ctx, t, cfg, cs, client, "rw", "INSERT INTO entries (v) VALUES ('after')")
	// The segment that holds both rows goes to the archive now, not at
	// archiveTimeout; the app role may not switch WAL, the sidecar's
	// superuser may.
	archivedThrough(ctx, t, cs, ns, "ledger-0", switchWAL(ctx, t, cs, ns, "ledger-0"))

	restored := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "ledger-then", Namespace: ns},
		Spec: dbv1.DatabaseSpec{Name: "ledger", StorageSize: "256Mi", Image: imageRef(t, "postgres"), Replicas: 2,
			Recovery: &dbv1.Recovery{
				Source:         dbv1.RecoverySource{ObjectStore: *store.DeepCopy(), ServerName: "ledger"},
				RecoveryTarget: &dbv1.RecoveryTarget{TargetTime: target},
			}},
	}
	cond, took := createRecovered(ctx, t, c, restored)
	t.Logf("recovered and ready (with its standby) %.1f s after it was created", took.Seconds())
	assert.Equal(t, "Recovered", cond.Reason)
	assert.Equal(t, fmt.Sprintf("recovered from s3://archive/ledger to time %s", target), cond.Message)

	then := startPostgresClient(ctx, t, cs, ns, "ledger-then", "psql-then")
	assert.Equal(t, "before", psql(ctx, t, cfg, cs, then, "rw", "SELECT string_agg(v, ',') FROM entries"),
		"the recovered Database holds the row committed before the target, not the one after (app password: the new Database's)")
	assert.Equal(t, "before", eventuallyPsql(ctx, t, cfg, cs, then, "ro", "SELECT string_agg(v, ',') FROM entries", "before"), "its standby")
	psql(ctx, t, cfg, cs, then, "rw", "INSERT INTO entries (v) VALUES ('new')")
	assert.Equal(t, "before,after", psql(ctx, t, cfg, cs, client, "rw", "SELECT string_agg(v, ',' ORDER BY at) FROM entries"), "the source is untouched")

	// Meanwhile the source's first base backup was verified by restoring
	// it, in a Job of real containers (the restore, the archiver sidecar,
	// the server): every check passed.
	var verified dbv1.Database
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, crclient.ObjectKeyFromObject(source), &verified)
		return err == nil && verified.Status.BaseBackups != nil && verified.Status.BaseBackups.Verification != nil &&
			verified.Status.BaseBackups.Verification.Outcome != "", nil
	}), "no verification of the base backup recorded: %+v", verified.Status.BaseBackups)
	v := verified.Status.BaseBackups.Verification
	require.Equal(t, dbv1.VerificationVerified, v.Outcome, "%s: %+v", v.Message, v.Checks)
	assert.Equal(t, src.Status.BaseBackups.Newest.ID, v.BackupID)
	assert.Len(t, v.Checks, 6, "archive, restore, recovery, marker, amcheck, writable")
	t.Logf("base backup %s verified by restoring it: Job of %s", v.BackupName, v.Duration.Duration)

	baseBackupsAreDatabaseBackups(ctx, t, c, source, v)
}

// baseBackupsAreDatabaseBackups: the archive's first base backup (verified
// as v says) is a DatabaseBackup the operator made, with its place in
// the archive and its verification; one asked for by creating a
// DatabaseBackup is taken by the primary's archiver and completes; and
// deleting it deletes it from the archive, after which the object goes
// and the archive lists only the first. Verification is turned off
// first: the new base backup's would hold it (deleted under its
// verification, it is not; verified, it is the newest verified, held).
func baseBackupsAreDatabaseBackups(ctx context.Context, t *testing.T, c crclient.Client, db *dbv1.Database, v *dbv1.BaseBackupVerification) {
	t.Helper()
	first := waitBackup(ctx, t, c, db.Namespace, db.Name+"-"+strings.ToLower(v.BackupName), "the first base backup's object, verified", func(b *dbv1.DatabaseBackup) bool {
		return b.Status.Phase == dbv1.BackupCompleted && b.Status.Verification != nil && b.Status.Verification.Outcome != ""
	})
	assert.Equal(t, dbv1.BackupMethodBaseBackup, first.Spec.Method)
	assert.Equal(t, v.BackupID, first.Status.BaseBackup.ID)
	assert.Positive(t, first.Status.Size, "its size in the store")
	assert.Equal(t, db.Name, first.Status.Archive.ServerName)
	assert.Equal(t, dbv1.VerificationVerified, first.Status.Verification.Outcome)

	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur dbv1.Database
		if err := c.Get(ctx, crclient.ObjectKeyFromObject(db), &cur); err != nil {
			return err
		}
		cur.Spec.Backup.Verify = &dbv1.BackupVerify{Mode: dbv1.VerifyOff}
		return c.Update(ctx, &cur)
	}))
	asked := &dbv1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Name: "before-migration", Namespace: db.Namespace},
		Spec: dbv1.DatabaseBackupSpec{Database: db.Name, Method: dbv1.BackupMethodBaseBackup}}
	start := time.Now()
	require.NoError(t, c.Create(ctx, asked))
	*asked = waitBackupCompleted(ctx, t, c, db.Namespace, asked.Name)
	t.Logf("base backup asked for: completed %.1f s after its DatabaseBackup was created (%d bytes, WAL %s to %s)",
		time.Since(start).Seconds(), asked.Status.Size, asked.Status.BaseBackup.BeginLSN, asked.Status.BaseBackup.EndLSN)
	assert.Equal(t, "before-migration", asked.Status.BaseBackup.Name, "named after its object")

	start = time.Now()
	require.NoError(t, c.Delete(ctx, asked))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, crclient.ObjectKeyFromObject(asked), &dbv1.DatabaseBackup{})
		return apierrors.IsNotFound(err), nil
	}), "the deleted base backup's object never went")
	t.Logf("base backup deleted from the archive and its object gone %.1f s after the delete", time.Since(start).Seconds())
	var after dbv1.Database
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, crclient.ObjectKeyFromObject(db), &after)
		return err == nil && after.Status.BaseBackups != nil && after.Status.BaseBackups.Newest != nil && after.Status.BaseBackups.Newest.ID == v.BackupID, nil
	}), "the archive still lists another base backup than the first: %+v", after.Status.BaseBackups)
	assert.Equal(t, int32(1), after.Status.BaseBackups.Count, "only the first is left in the archive")
	require.NoError(t, c.Get(ctx, crclient.ObjectKeyFromObject(first), &dbv1.DatabaseBackup{}), "the first one's object stays")
}

// archiverSQL is a command for the archiver sidecar: psql as the
// superuser over the pod's loopback address, with the password file the
// sidecar mounts.
func archiverSQL(sql string) []string {
	return []string{"sh", "-c", `PGPASSWORD=$(cat "$SUPERUSER_PASSWORD_FILE") exec psql -h 127.0.0.1 -X -A -t -q -v ON_ERROR_STOP=1 -d postgres -c "$1"`, "psql", sql}
}

// switchWAL ends the current WAL segment of the primary in pod (so it is
// archived now): the segment's name.
func switchWAL(ctx context.Context, t testing.TB, cs *kubernetes.Clientset, ns, pod string) string {
	t.Helper()
	cfg, _ := clientFor(t)
	out, err := tryExecIn(ctx, cfg, cs, runningPod(ctx, t, cs, ns, pod), postgres.ArchiverContainer, archiverSQL("SELECT pg_walfile_name(pg_switch_wal())")...)
	require.NoError(t, err, out)
	return strings.TrimSpace(out)
}

// archivedThrough waits until the primary in pod has archived segment,
// as its pg_stat_archiver says, and returns the last segment it archived
// and how many attempts failed.
func archivedThrough(ctx context.Context, t testing.TB, cs *kubernetes.Clientset, ns, pod, segment string) (last, failures string) {
	t.Helper()
	cfg, _ := clientFor(t)
	var stats string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := tryExecIn(ctx, cfg, cs, runningPod(ctx, t, cs, ns, pod), postgres.ArchiverContainer,
			archiverSQL("SELECT coalesce(last_archived_wal, '') || ' ' || failed_count FROM pg_stat_archiver")...)
		stats = strings.TrimSpace(out)
		return err == nil && stats >= segment, nil
	}), "segment %s not archived by %s: %s", segment, pod, stats)
	last, failures, _ = strings.Cut(stats, " ")
	return last, failures
}

// createRecovered creates db, a Database recovered from an archive, and
// waits until it is Ready: its Restored condition, and how long after its
// creation it was Ready.
func createRecovered(ctx context.Context, t testing.TB, c crclient.Client, db *dbv1.Database) (*metav1.Condition, time.Duration) {
	t.Helper()
	start := time.Now()
	require.NoError(t, c.Create(ctx, db))
	waitDatabaseReady(ctx, t, c, db.Namespace, db.Name)
	took := time.Since(start)
	var got dbv1.Database
	require.NoError(t, c.Get(ctx, crclient.ObjectKeyFromObject(db), &got))
	cond := meta.FindStatusCondition(got.Status.Conditions, database.ConditionRestored)
	require.NotNil(t, cond, "Database %s has no %s condition", db.Name, database.ConditionRestored)
	return cond, took
}

// waitForContainerLog waits until a container's log holds want, and
// returns the log.
func waitForContainerLog(ctx context.Context, t testing.TB, cs *kubernetes.Clientset, ns, pod, container, want string) string {
	t.Helper()
	var logs string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		logs = string(b)
		return strings.Contains(logs, want), nil
	})
	require.NoError(t, err, "%s/%s never logged %q:\n%s", pod, container, want, logs)
	return logs
}

// A Database archiving under a steady writer fails over (its primary's
// server hung) through the chart's operator: the new primary archives
// on the new timeline with no failed attempt, and a new Database
// recovered to the end of the archive crosses the timeline switch. It
// holds exactly the rows the new primary held up to the switched
// segment, those written after the failover among them, and serves on a
// timeline after the failover's.
func TestRealNodeArchivesAcrossAFailoverAndRecoversPastIt(t *testing.T) {
	parallel(t, 150*time.Second) // see the package comment: its own namespace, the shared operator
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	var store *dbv1.ObjectStore
	f := startFailoverCluster(ctx, t, 2, 0, func(db *dbv1.Database) {
		_, cs := clientFor(t)
		store = startObjectStore(ctx, t, cs, db.Namespace)
		db.Spec.Backup = &dbv1.BackupSpec{Storage: &dbv1.BackupStorage{ObjectStore: store.DeepCopy()}}
	})
	old := f.primary()
	base := waitForContainerLog(ctx, t, f.cs, f.ns, old, postgres.ArchiverContainer, "deckhand: base backup base-")
	require.Contains(t, base, " done: backup_id=", "the first base backup:\n%s", base)
	w := f.startWriter("writer")

	// Frozen, it fails over every time (a killed server may be back
	// within primaryGoneAfter); the fence kills it.
	hungAt := time.Now()
	thaw := f.freezeServer(old)
	rec := f.waitFailedOver(hungAt.Add(-time.Second))
	thaw()
	w.waitAcks(10)
	client := startPostgresClient(ctx, t, f.cs, f.ns, f.name, "psql")
	upTo := psql(ctx, t, f.cfg, f.cs, client, "rw", "SELECT max(id) FROM acks")
	rows := "SELECT string_agg(id::text, ',' ORDER BY id) FROM acks WHERE id <= " + upTo
	held := psql(ctx, t, f.cfg, f.cs, client, "rw", rows)
	segment := switchWAL(ctx, t, f.cs, f.ns, rec.To)
	require.True(t, strings.HasPrefix(segment, "00000002"), "the new primary %s writes timeline 2: %s", rec.To, segment)
	last, failures := archivedThrough(ctx, t, f.cs, f.ns, rec.To, segment)
	assert.Equal(t, "0", failures, "no archiving attempt of the new primary failed")

	recovered := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "pay-now", Namespace: f.ns},
		Spec: dbv1.DatabaseSpec{Name: "ledger", StorageSize: "64Mi", Image: imageRef(t, "postgres"), Replicas: 1,
			Recovery: &dbv1.Recovery{Source: dbv1.RecoverySource{ObjectStore: *store.DeepCopy(), ServerName: f.name}}},
	}
	cond, took := createRecovered(ctx, t, f.c, recovered)
	assert.Equal(t, "Recovered", cond.Reason, cond.Message)

	now := startPostgresClient(ctx, t, f.cs, f.ns, recovered.Name, "psql-now")
	assert.Equal(t, held, psql(ctx, t, f.cfg, f.cs, now, "rw", rows),
		"the recovery holds every row the new primary held up to the switched segment, and no other")
	timeline := psql(ctx, t, f.cfg, f.cs, now, "rw", "SELECT pg_walfile_name(pg_current_wal_lsn())")
	assert.Greater(t, timeline[:8], "00000002", "the recovered Database serves on a timeline after the failover's")
	acks := countAcks(w.stop())
	logf(t, "archiving across a failover (%s to %s): the new primary archived through %s, %s failed attempts; recovered to the end of the archive (rows up to %s of %d acknowledged) and Ready %.1f s after its creation, on timeline %s: %s",
		rec.From, rec.To, last, failures, upTo, acks, took.Seconds(), timeline[:8], cond.Message)
}
