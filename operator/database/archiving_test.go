package database_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

// objectStore is a valid spec.backup.storage.objectStore.
func objectStore() *dbv1.ObjectStore {
	return &dbv1.ObjectStore{
		Endpoint: "https://store.example.org:7070",
		Bucket:   "wal-archive",
		Credentials: dbv1.ObjectStoreCredentials{
			AccessKeyID:     dbv1.KeyRef{Name: "store-keys", Key: "access"},
			SecretAccessKey: dbv1.KeyRef{Name: "store-keys", Key: "secret"},
		},
	}
}

// column is the value in the column named header of the row of name in
// kubectl get's table, read at the header's offsets (an empty cell is
// blank); "" when empty.
func column(t *testing.T, table, name, header string) string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	start := strings.Index(lines[0], header)
	require.GreaterOrEqual(t, start, 0, "no column %s:\n%s", header, table)
	end := len(lines[0])
	if next := strings.IndexFunc(lines[0][start+len(header):], func(r rune) bool { return r != ' ' }); next >= 0 {
		end = start + len(header) + next
	}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, name+" ") {
			return strings.TrimSpace(l[start:min(end, len(l))])
		}
	}
	require.Failf(t, "no row", "%s in:\n%s", name, table)
	return ""
}

func withObjectStore(db *dbv1.Database, s *dbv1.ObjectStore) {
	if db.Spec.Backup == nil {
		db.Spec.Backup = &dbv1.BackupSpec{}
	}
	db.Spec.Backup.Storage = &dbv1.BackupStorage{ObjectStore: s}
}

func TestObjectStoreSettingsAreRefusedWithReadableMessages(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(*dbv1.ObjectStore, *dbv1.Database)
		msg    string
	}{
		{"plain http", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Endpoint = "http://store:7070" },
			`objectStore.endpoint must be an https:// URL such as https://s3.example.com:9000 (or empty for AWS S3), not "http://store:7070"`},
		{"no scheme", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Endpoint = "store.example.org" },
			`objectStore.endpoint must be an https:// URL`},
		{"a query", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Endpoint = "https://store/?bucket=x" },
			"objectStore.endpoint must have no user, query or fragment"},
		{"empty bucket", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Bucket = "" },
			"objectStore.bucket must not be empty: name the bucket that holds the archive"},
		{"bucket with capitals", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Bucket = "My_Bucket" },
			`objectStore.bucket must be an S3 bucket name (3 to 63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit, not like an IP address), not "My_Bucket"`},
		{"bucket of two letters", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Bucket = "ab" }, "must be an S3 bucket name"},
		{"bucket like an address", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Bucket = "192.168.1.1" }, "must be an S3 bucket name"},
		{"bucket with two dots", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Bucket = "a..b" }, "must be an S3 bucket name"},
		{"path with a leading slash", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Path = "/clusters" },
			`objectStore.path must be a key prefix of letters, digits, '.', '_', '-' and '/' with no leading '/' and no empty part (e.g. clusters/production), not "/clusters"`},
		{"region with spaces", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Region = "eu west" },
			`objectStore.region must be a region name such as eu-west-1, not "eu west"`},
		{"unknown compression", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Compression = "zstd" },
			`objectStore.compression must be gzip, bzip2 or none, not "zstd"`},
		{"archiveTimeout too short", func(s *dbv1.ObjectStore, _ *dbv1.Database) {
			s.ArchiveTimeout = &metav1.Duration{Duration: time.Second}
		}, "objectStore.archiveTimeout must be between 10s and 1h"},
		{"baseBackupInterval too short", func(s *dbv1.ObjectStore, _ *dbv1.Database) {
			s.BaseBackupInterval = &metav1.Duration{Duration: 10 * time.Minute}
		}, "objectStore.baseBackupInterval must be between 1h and 720h (30 days)"},
		{"retentionPolicy in hours", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.RetentionPolicy = "36h" },
			`objectStore.retentionPolicy must be a number of days, weeks or months such as 30d, 4w or 6m, not "36h"`},
		{"archiveTimeout too long", func(s *dbv1.ObjectStore, _ *dbv1.Database) {
			s.ArchiveTimeout = &metav1.Duration{Duration: 2 * time.Hour}
		}, "objectStore.archiveTimeout must be between 10s and 1h"},
		{"a Secret name with capitals", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Credentials.AccessKeyID.Name = "Keys" },
			`name must be the name of a Secret or ConfigMap (lower-case letters, digits, '-' and '.'), not "Keys"`},
		{"a Secret key with a slash", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.Credentials.SecretAccessKey.Key = "a/b" },
			`key must be a key of the Secret or ConfigMap`},
		{"a CA bundle from both", func(s *dbv1.ObjectStore, _ *dbv1.Database) {
			s.CABundle = &dbv1.CABundleSource{SecretKeyRef: &dbv1.KeyRef{Name: "ca", Key: "ca.crt"}, ConfigMapKeyRef: &dbv1.KeyRef{Name: "ca", Key: "ca.crt"}}
		}, "objectStore.caBundle needs exactly one of secretKeyRef or configMapKeyRef"},
		{"maxParallel below 1", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.MaxParallel = -1 },
			"objectStore.maxParallel must be between 1 and 16 (WAL segments archived at once)"},
		{"maxParallel above 16", func(s *dbv1.ObjectStore, _ *dbv1.Database) { s.MaxParallel = 17 },
			"objectStore.maxParallel must be between 1 and 16 (WAL segments archived at once)"},
		{"archive_command in parameters", func(_ *dbv1.ObjectStore, d *dbv1.Database) {
			d.Spec.Parameters = map[string]string{"archive_command": "/bin/true"}
		}, "backup.storage.objectStore: the operator sets archive_mode, archive_command, archive_library and archive_timeout for it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDatabase(ns, "bad", 1)
			s := objectStore()
			tc.change(s, db)
			withObjectStore(db, s)
			err := c.Create(ctx, db)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}

	// AWS S3 (no endpoint), a CA bundle, and the defaults written.
	ok := newDatabase(ns, "fine", 1)
	s := objectStore()
	s.Endpoint, s.Path, s.Region = "", "clusters/production", "eu-west-1"
	s.CABundle = &dbv1.CABundleSource{ConfigMapKeyRef: &dbv1.KeyRef{Name: "store-ca", Key: "ca.crt"}}
	withObjectStore(ok, s)
	ok.Spec.Parameters = map[string]string{"wal_level": "replica"}
	require.NoError(t, c.Create(ctx, ok))
	got := ok.Spec.Backup.Storage.ObjectStore
	assert.Equal(t, dbv1.CompressionGzip, got.Compression, "default compression")
	assert.Equal(t, ptr.To(true), got.PathStyle, "default path style")
	assert.Equal(t, time.Minute, got.ArchiveTimeout.Duration, "default archiveTimeout")
	assert.Equal(t, 24*time.Hour, got.BaseBackupInterval.Duration, "default baseBackupInterval")
	assert.Equal(t, int32(1), got.MaxParallel, "default maxParallel")

	// The example make run applies on the real node is accepted as it is.
	out, err := testenv.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(testenv.Root(t), "examples", "database", "archiving.yaml"))
	require.NoError(t, err, out)
}

// A Database with an object store: every server pod runs the archiver
// sidecar (the operator's archiver image, the store's settings in its
// environment, the keys and CA bundle as files of a projected volume
// mounted in it alone, the data volume at the server's path), the server
// and the sidecar share the queue directory, and the server archives
// through the hand-off (archive_mode on, archive_timeout from the spec).
// A Database without one has none of it.
func TestArchivingPutsAnArchiverBesideEveryServer(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	startOperatorWith(t, ns, database.Options{ArchiverImage: "example.org/archiver:test"})

	archiving := newDatabase(ns, "archiving", 2)
	s := objectStore()
	s.Path = "clusters/ns"
	s.ArchiveTimeout = &metav1.Duration{Duration: 90 * time.Second}
	s.CABundle = &dbv1.CABundleSource{SecretKeyRef: &dbv1.KeyRef{Name: "store-ca", Key: "bundle.pem"}}
	s.RetentionPolicy = "4w"
	s.MaxParallel = 4
	withObjectStore(archiving, s)
	archiving.Annotations = map[string]string{database.AnnotationArchiveSkipEmptyCheck: "true"}
	plain := newDatabase(ns, "plain", 1)
	for _, db := range []*dbv1.Database{archiving, plain} {
		require.NoError(t, c.Create(ctx, db))
	}
	waitFor(t, c, archiving, "Ready", ready)
	waitFor(t, c, plain, "Ready", ready)
	// Failover is off here (no operator image): no agent reports the
	// archiver, and the condition says so and where to look instead.
	cond := condition(waitFor(t, c, archiving, "WALArchiving reported", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotEmpty(ct, condition(d, database.ConditionWALArchiving).Type)
	}), database.ConditionWALArchiving)
	assert.Equal(t, metav1.ConditionUnknown, cond.Status)
	assert.Equal(t, "NotReported", cond.Reason)
	assert.Contains(t, cond.Message, "deckhand_pg_archiver_")
	assert.Empty(t, condition(get(t, c, ns, "plain", &dbv1.Database{}), database.ConditionWALArchiving).Type, "no object store, no condition")
	// kubectl get -o wide shows it: the reason, nothing without a store.
	wide, err := testenv.Kubectl(t, "get", "databases", "-n", ns, "-o", "wide")
	require.NoError(t, err, wide)
	assert.Equal(t, "NotReported", column(t, wide, "archiving", "ARCHIVING"))
	// The recoverable window's columns: empty until an agent reports it.
	assert.Empty(t, column(t, wide, "archiving", "RECOVERABLE FROM"))
	assert.Empty(t, column(t, wide, "archiving", "RECOVERABLE UNTIL"))
	assert.Empty(t, column(t, wide, "plain", "ARCHIVING"))

	sts := get(t, c, ns, "archiving", &appsv1.StatefulSet{})
	spec := sts.Spec.Template.Spec
	server := spec.Containers[0]
	args := strings.Join(server.Args, " ")
	assert.Contains(t, args, "-c archive_mode=on")
	assert.Contains(t, args, "-c archive_timeout=90s")
	assert.Contains(t, args, "-c archive_command=sh /deckhand/scripts/wal-handoff.sh "+postgres.ArchiveQueueDir+" %p")
	assert.Contains(t, server.VolumeMounts, corev1.VolumeMount{Name: postgres.ArchiveQueueVolume, MountPath: postgres.ArchiveQueueDir})
	for _, e := range server.Env {
		assert.False(t, strings.HasPrefix(e.Name, "STORE_"), "the server's container has no store setting: %s", e.Name)
	}
	assert.NotEmpty(t, sts.Spec.Template.Annotations[database.AnnotationArchiveScripts])

	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == postgres.ArchiverContainer })
	require.GreaterOrEqual(t, i, 1, "the archiver sidecar")
	archiver := spec.Containers[i]
	assert.Equal(t, "example.org/archiver:test", archiver.Image)
	assert.Equal(t, []string{"sh", "/deckhand/scripts/archiver.sh"}, archiver.Command)
	env := testenv.EnvOf(archiver)
	for k, v := range map[string]string{
		"STORE_ENDPOINT": "https://store.example.org:7070", "STORE_BUCKET": "wal-archive", "STORE_PREFIX": "clusters/ns",
		"STORE_SERVER": "archiving", "STORE_REGION": "us-east-1", "STORE_PATH_STYLE": "true", "STORE_COMPRESSION": "gzip",
		"STORE_ACCESS_KEY_FILE": postgres.ArchiveStoreDir + "/access-key-id", "STORE_SECRET_KEY_FILE": postgres.ArchiveStoreDir + "/secret-access-key",
		"STORE_CA_FILE": postgres.ArchiveStoreDir + "/ca.crt", "STORE_SKIP_EMPTY_CHECK": "true",
		"ARCHIVE_QUEUE": postgres.ArchiveQueueDir, "PGDATA": testenv.EnvOf(server)["PGDATA"],
		"ARCHIVE_MAX_PARALLEL": "4",
		"BASE_BACKUP_EVERY":    "86400", "RETENTION_POLICY": "RECOVERY WINDOW OF 4 WEEKS", "PGPORT": "5432", "PGUSER": "postgres", "SUPERUSER_PASSWORD_FILE": postgres.ArchiveStoreDir + "/superuser-password",
	} {
		assert.Equal(t, v, env[k], k)
	}
	for _, e := range archiver.Env {
		assert.Nil(t, e.ValueFrom, "%s: no key reaches the environment", e.Name)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range archiver.VolumeMounts {
		mounts[m.Name] = m
	}
	dataMount := server.VolumeMounts[slices.IndexFunc(server.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == engine.DataVolume })]
	assert.Equal(t, dataMount.MountPath, mounts[engine.DataVolume].MountPath, "the data directory at the server's path")
	assert.Equal(t, postgres.ArchiveQueueDir, mounts[postgres.ArchiveQueueVolume].MountPath)
	assert.True(t, mounts[postgres.ArchiveStoreVolume].ReadOnly)
	assert.True(t, mounts[engine.ScriptsVolume].ReadOnly)
	assert.Equal(t, ptr.To(false), archiver.SecurityContext.AllowPrivilegeEscalation)

	store := testenv.VolumeNamed(spec, postgres.ArchiveStoreVolume)
	require.NotNil(t, store)
	require.NotNil(t, store.Projected)
	var files []string
	for _, src := range store.Projected.Sources {
		require.NotNil(t, src.Secret, "the keys and the CA bundle come from Secrets here")
		assert.Equal(t, ptr.To(true), src.Secret.Optional, "a missing Secret does not keep the server from starting")
		for _, item := range src.Secret.Items {
			files = append(files, src.Secret.Name+":"+item.Key+"->"+item.Path)
		}
	}
	assert.ElementsMatch(t, []string{"store-keys:access->access-key-id", "store-keys:secret->secret-access-key", "store-ca:bundle.pem->ca.crt",
		"archiving-superuser:password->superuser-password"}, files, "the store's keys, and the superuser's password for base backups")
	require.NotNil(t, testenv.VolumeNamed(spec, postgres.ArchiveQueueVolume))
	assert.NotNil(t, testenv.VolumeNamed(spec, postgres.ArchiveQueueVolume).EmptyDir)

	// The scripts both containers run are in the Database's scripts
	// ConfigMap.
	scripts := get(t, c, ns, "archiving-scripts", &corev1.ConfigMap{})
	for name, body := range postgres.ArchiveScripts() {
		assert.Equal(t, body, scripts.Data[name], name)
	}

	// No object store: no sidecar, no queue, no archive settings, no
	// archiving scripts.
	sts = get(t, c, ns, "plain", &appsv1.StatefulSet{})
	spec = sts.Spec.Template.Spec
	for _, ctr := range spec.Containers {
		assert.NotEqual(t, postgres.ArchiverContainer, ctr.Name)
	}
	assert.Nil(t, testenv.VolumeNamed(spec, postgres.ArchiveQueueVolume))
	assert.Nil(t, testenv.VolumeNamed(spec, postgres.ArchiveStoreVolume))
	assert.NotContains(t, strings.Join(spec.Containers[0].Args, " "), "archive_")
	assert.NotContains(t, sts.Spec.Template.Annotations, database.AnnotationArchiveScripts)
	assert.NotContains(t, get(t, c, ns, "plain-scripts", &corev1.ConfigMap{}).Data, postgres.HandoffScript)
}
