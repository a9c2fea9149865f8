package v1_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// These tests only apply objects to the local cluster's API server with
// the generated CRDs installed: no controller runs MySQLClusters yet.

func apiClient(t *testing.T) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, grtlv1.AddToScheme(s))
	c, err := client.New(testenv.RESTConfig(t), client.Options{Scheme: s})
	require.NoError(t, err)
	return c
}

func TestSeedExampleAppliesUnchanged(t *testing.T) {
	testenv.InstallCRDs(t)
	c := apiClient(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	for _, file := range []string{"mysqlcluster.yaml", "mysqlcluster-fresh.yaml"} {
		out, err := testenv.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(testenv.Root(t), "examples", file))
		require.NoError(t, err, "%s: %s", file, out)
		assert.Contains(t, out, "mysqlcluster.cr.mysqloperator.grtl.github.com/my-cluster")

		var got grtlv1.MySQLCluster
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "my-cluster"}, &got))
		assert.Equal(t, "my-secret", got.Spec.Secret)
		assert.Equal(t, int32(3306), got.Spec.Port)
		assert.Equal(t, int32(2), got.Spec.Replicas)
		assert.Equal(t, "1Gi", got.Spec.Storage)
		assert.Equal(t, "mysql:latest", got.Spec.Image)
		assert.Equal(t, grtlv1.DeletionSnapshot, got.Spec.DeletionPolicy, "the same default as a Database")
		if file == "mysqlcluster.yaml" {
			assert.Equal(t, "my-backup-2017-12-14-01-22", got.Spec.FromBackup)
			// The fresh example is the same cluster without fromBackup:
			// applying it over the seed's must be refused (fromBackup is
			// set at creation only), so start again.
			out, err := testenv.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(testenv.Root(t), "examples", "mysqlcluster-fresh.yaml"))
			require.Error(t, err)
			assert.Contains(t, out, "fromBackup is set at creation only")
			require.NoError(t, c.Delete(ctx, &got))
		} else {
			assert.Empty(t, got.Spec.FromBackup)
		}
	}

	// kubectl get answers the first question, by grtl's names too.
	for _, name := range []string{"mysqlclusters", "mc"} {
		out, err := testenv.Kubectl(t, "get", name, "-n", ns)
		require.NoError(t, err, out)
		header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
		assert.Equal(t, []string{"NAME", "READY", "STORAGE", "PHASE", "VERSION", "AGE"}, header)
		assert.Contains(t, out, "1Gi")
	}
	out, err := testenv.Kubectl(t, "get", "mysqlclusters", "-n", ns, "-o", "wide")
	require.NoError(t, err, out)
	assert.Contains(t, out, "mysql:latest")
}

func cluster(ns, name string) *grtlv1.MySQLCluster {
	return &grtlv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       grtlv1.MySQLClusterSpec{Secret: "s", Storage: "1Gi"},
	}
}

func TestBadInputIsRefusedWithReadableMessages(t *testing.T) {
	testenv.InstallCRDs(t)
	c := apiClient(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	refused := func(obj client.Object, mutate func(), want string) {
		t.Helper()
		mutate()
		err := c.Create(ctx, obj)
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), want)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*grtlv1.MySQLCluster)
		want   string
	}{
		{"replicas", func(m *grtlv1.MySQLCluster) { m.Spec.Replicas = -1 }, "replicas must be at least 1 (the primary)"},
		{"port", func(m *grtlv1.MySQLCluster) { m.Spec.Port = 70000 }, "port must be between 1 and 65535"},
		{"storage", func(m *grtlv1.MySQLCluster) { m.Spec.Storage = "lots" }, `storage must be a quantity such as 1Gi or 500M, not "lots"`},
		{"zero", func(m *grtlv1.MySQLCluster) { m.Spec.Storage = "0" }, "storage must be more than 0"},
		{"secret", func(m *grtlv1.MySQLCluster) { m.Spec.Secret = "My Secret" }, `secret must be the name of a Secret`},
		{"backup", func(m *grtlv1.MySQLCluster) { m.Spec.FromBackup = "Backup_1" }, "fromBackup must be the name of a MySQLBackupInstance"},
		{"policy", func(m *grtlv1.MySQLCluster) { m.Spec.DeletionPolicy = "Forget" }, `supported values: "Snapshot", "Retain", "Delete"`},
		{"verify schedule without Scheduled", func(m *grtlv1.MySQLCluster) {
			m.Spec.Backup = &grtlv1.ClusterBackup{Verify: &dbv1.BackupVerify{Schedule: "@weekly"}}
		}, "verify.schedule is used only with mode Scheduled"},
		{"verify mode", func(m *grtlv1.MySQLCluster) {
			m.Spec.Backup = &grtlv1.ClusterBackup{Verify: &dbv1.BackupVerify{Mode: "Sometimes"}}
		}, `supported values: "EachBackup", "Scheduled", "Off"`},
		{"name", func(m *grtlv1.MySQLCluster) { m.Name = "my.cluster" }, "metadata.name must be a DNS label"},
		{"long", func(m *grtlv1.MySQLCluster) { m.Name = strings.Repeat("a", 53) }, "metadata.name must be at most 52 characters"},
	} {
		m := cluster(ns, "bad-"+tc.name)
		refused(m, func() { tc.mutate(m) }, tc.want)
	}

	// Updates: storage only grows; secret and fromBackup stay.
	m := cluster(ns, "good")
	m.Spec.FromBackup = "b1"
	require.NoError(t, c.Create(ctx, m))
	update := func(mutate func(*grtlv1.MySQLCluster), want string) {
		t.Helper()
		var cur grtlv1.MySQLCluster
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(m), &cur))
		mutate(&cur)
		err := c.Update(ctx, &cur)
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), want)
	}
	update(func(m *grtlv1.MySQLCluster) { m.Spec.Storage = "512Mi" }, "storage cannot shrink (from 1Gi to 512Mi): volumes can only grow")
	update(func(m *grtlv1.MySQLCluster) { m.Spec.Secret = "other" }, "secret is immutable")
	update(func(m *grtlv1.MySQLCluster) { m.Spec.FromBackup = "b2" }, "fromBackup is set at creation only")
	update(func(m *grtlv1.MySQLCluster) { m.Spec.FromBackup = "" }, "fromBackup is set at creation only")
	var cur grtlv1.MySQLCluster
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(m), &cur))
	cur.Spec.Storage, cur.Spec.Replicas = "2Gi", 3
	require.NoError(t, c.Update(ctx, &cur), "storage grows, replicas change")

	// Backup kinds.
	schedule := func(name string, mutate func(*grtlv1.MySQLBackupSchedule)) *grtlv1.MySQLBackupSchedule {
		s := &grtlv1.MySQLBackupSchedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: grtlv1.MySQLBackupScheduleSpec{Cluster: "good", Time: "0 3 * * *", Storage: "5Gi"}}
		mutate(s)
		return s
	}
	require.NoError(t, c.Create(ctx, schedule("nightly", func(s *grtlv1.MySQLBackupSchedule) {
		s.Spec.Retention = &grtlv1.Retention{KeepLast: ptr.To(int32(7)), MaxAge: &metav1.Duration{Duration: 720 * 60 * 60 * 1e9}}
	})))
	require.NoError(t, c.Create(ctx, schedule("daily", func(s *grtlv1.MySQLBackupSchedule) { s.Spec.Time = "@daily"; s.Spec.Storage = "" })))
	for _, tc := range []struct {
		name   string
		mutate func(*grtlv1.MySQLBackupSchedule)
		want   string
	}{
		{"time", func(s *grtlv1.MySQLBackupSchedule) { s.Spec.Time = "every night" }, `time must be five cron fields (minute hour day-of-month month day-of-week, e.g. '0 3 * * *') or one of @hourly, @daily, @weekly, @monthly, @yearly, not "every night"`},
		{"storage", func(s *grtlv1.MySQLBackupSchedule) { s.Spec.Storage = "big" }, `storage must be a quantity such as 10Gi, not "big"`},
		{"keep", func(s *grtlv1.MySQLBackupSchedule) { s.Spec.Retention = &grtlv1.Retention{KeepLast: ptr.To(int32(0))} }, "retention.keepLast must be at least 1"},
		{"empty", func(s *grtlv1.MySQLBackupSchedule) { s.Spec.Retention = &grtlv1.Retention{} }, "retention needs keepLast, maxAge or both"},
		{"cluster", func(s *grtlv1.MySQLBackupSchedule) { s.Spec.Cluster = "" }, "spec.cluster"},
	} {
		err := c.Create(ctx, schedule("bad-"+tc.name, tc.mutate))
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}

	bi := &grtlv1.MySQLBackupInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my-backup-2017-12-14-01-22"},
		Spec: grtlv1.MySQLBackupInstanceSpec{Cluster: "good", Schedule: "nightly"}}
	require.NoError(t, c.Create(ctx, bi))
	bi.Spec.Cluster = "other"
	err := c.Update(ctx, bi)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cluster is immutable")
	// grtl's phases, and size and checksum in status.
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(bi), bi))
	bi.Status = grtlv1.MySQLBackupInstanceStatus{Phase: grtlv1.BackupCompleted, Size: 1234, SHA256: strings.Repeat("ab", 32)}
	require.NoError(t, c.Status().Update(ctx, bi))
	bi.Status.Phase = "Done"
	err = c.Status().Update(ctx, bi)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `supported values: "Scheduled", "Started", "Failed", "Completed"`)
	out, err := testenv.Kubectl(t, "get", "mbi", "-n", ns)
	require.NoError(t, err, out)
	assert.Contains(t, out, "Completed")
	assert.Contains(t, out, "1234")

	// Not a Database: kubectl get db does not list MySQLClusters.
	out, _ = testenv.Kubectl(t, "get", "db", "-n", ns)
	assert.NotContains(t, out, "good")
}
