package mysqlcluster_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/mysql/mysqltest"
	"github.com/deckhand-dev/deckhand/operator/mysqlcluster"
)

// The MySQLCluster operator, its Jobs' scripts and Debian's MariaDB,
// together: the cluster's pods select a testenv.HostRunner through
// spec.nodeSelector (and no node), the runner runs each Job's container
// on this machine and writes its end and termination message back, so
// the operator acts on what backup.sh and verify.sh really did. The
// primary is the host's MariaDB, started by the shipped bootstrap.sh with
// the StatefulSet's environment; the Service <mc>-rw and the pod <mc>-0
// reach it at 127.0.0.1.
type mariaEndToEnd struct {
	t      *testing.T
	c      client.Client
	ns     string
	u      *mysqltest.User
	root   string
	runner *testenv.HostRunner
	port   string // the primary's, on 127.0.0.1
}

func newMariaEndToEnd(t *testing.T) *mariaEndToEnd {
	mysqltest.RequireMariaDB(t)
	u := mysqltest.Unprivileged(t)
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	root := mysqltest.TempRoot(t, u)
	e := &mariaEndToEnd{t: t, c: c, ns: ns, u: u, root: root}
	e.runner = testenv.NewHostRunner(t, c, ns, root, testenv.HostOptions{
		Command: func(env map[string]string, argv []string) *exec.Cmd {
			// A pod has a /tmp of its own: a MariaDB server that starts
			// (the verification's scratch server) removes the #sql files
			// it finds in its tmpdir.
			env["TMPDIR"] = env["HOME"]
			return mysqltest.Cmd(u, env, argv)
		},
		Dir:  func(parts ...string) string { return mysqltest.Dir(t, u, parts...) },
		Path: mysqltest.Path,
	})
	startOperator(t, ns, nil)
	return e
}

// hostImage is a MariaDB image whose tag is the host server's version, so
// the operator sees no upgrade to make.
func hostImage(t *testing.T) string {
	out, err := exec.Command("/usr/sbin/mariadbd", "--version").Output()
	require.NoError(t, err)
	v := regexp.MustCompile(`Ver (\d+\.\d+\.\d+)-MariaDB`).FindStringSubmatch(string(out))
	require.NotNil(t, v, "mariadbd --version: %s", out)
	return "mariadb:" + v[1]
}

// cluster is a one-server MySQLCluster whose pods the runner takes, its
// primary running on the host.
func (e *mariaEndToEnd) cluster(name string) {
	t := e.t
	selector := map[string]grtlv1.NodeLabelValue{}
	for k, v := range e.runner.NodeSelector() {
		selector[k] = grtlv1.NodeLabelValue(v)
	}
	// spec.port is a free port of its own: the verification's scratch
	// server listens on it, on the host.
	port := mysqltest.FreePort(t)
	mc := newCluster(e.ns, name, name+"-root", 1)
	mc.Spec.Image, mc.Spec.DeletionPolicy, mc.Spec.NodeSelector = hostImage(t), grtlv1.DeletionDelete, selector
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	mc.Spec.Port = int32(p)
	require.NoError(t, e.c.Create(context.Background(), mc))
	e.startPrimary(name)
}

// startPrimary runs ordinal 0 on the host from the StatefulSet and
// Secrets the operator made, on its data claim's directory, and serves it
// as <mc>-rw and <mc>-0.
func (e *mariaEndToEnd) startPrimary(name string) {
	t := e.t
	ctx := context.Background()
	var sts appsv1.StatefulSet
	var cm corev1.ConfigMap
	secrets := map[string]map[string]string{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &sts))
		require.NoError(ct, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name + "-scripts"}, &cm))
		for _, s := range []string{name + "-root", name + "-replication"} {
			var secret corev1.Secret
			require.NoError(ct, e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: s}, &secret))
			secrets[s] = map[string]string{}
			for k, v := range secret.Data {
				secrets[s][k] = string(v)
			}
		}
	}, wait, 100*time.Millisecond, "the operator made no StatefulSet, scripts or Secrets for %s", name)
	scripts := filepath.Join(e.root, "servers", name, "scripts")
	mysqltest.WriteScripts(t, e.u, scripts, cm.Data)
	server := sts.Spec.Template.Spec.Containers[0]
	run := mysqltest.Dir(t, e.u, e.root, "servers", name, "run")
	e.port = mysqltest.FreePort(t)
	env := mysqltest.Env(t, server, secrets, name+"-0", map[string]string{
		"DATA_DIR": filepath.Join(e.runner.ClaimDir("data-"+name+"-0"), "data"), "PORT": e.port, "BIND_ADDRESS": "127.0.0.1",
		"MYSQL_UNIX_PORT": filepath.Join(run, "mysqld.sock"), "PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": e.port,
		"PATH": mysqltest.Path, "HOME": run, "TMPDIR": mysqltest.Dir(t, e.u, e.root, "servers", name, "tmp"),
	})
	mysqltest.Start(t, e.u, env, mysqltest.Command(t, server, scripts), secrets[name+"-root"]["password"])
	e.runner.Serve(name+"-rw", "127.0.0.1:"+e.port)
	e.runner.Serve(name+"-0", "127.0.0.1:"+e.port)
}

func (e *mariaEndToEnd) sql(name, sql string) string {
	e.t.Helper()
	var s corev1.Secret
	require.NoError(e.t, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name + "-root"}, &s))
	out, err := mysqltest.SQL(e.port, "root", string(s.Data["password"]), "", sql)
	require.NoError(e.t, err, "%s\n%s", sql, out)
	return out
}

func (e *mariaEndToEnd) setVerify(name string, v *dbv1.BackupVerify) {
	e.t.Helper()
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		var mc grtlv1.MySQLCluster
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &mc))
		mc.Spec.Backup = &grtlv1.ClusterBackup{Verify: v}
		require.NoError(ct, e.c.Update(context.Background(), &mc))
	}, time.Minute, 100*time.Millisecond)
}

func (e *mariaEndToEnd) backup(cluster, name string) {
	e.t.Helper()
	require.NoError(e.t, e.c.Create(context.Background(), &grtlv1.MySQLBackupInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec:       grtlv1.MySQLBackupInstanceSpec{Cluster: cluster},
	}))
}

// waitVerified waits for a verification's outcome on the instance.
func (e *mariaEndToEnd) waitVerified(name string) *grtlv1.MySQLBackupInstance {
	e.t.Helper()
	var cur grtlv1.MySQLBackupInstance
	require.EventuallyWithT(e.t, func(ct *assert.CollectT) {
		require.NoError(ct, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &cur))
		require.NotNil(ct, cur.Status.Verification, "status: %+v", cur.Status)
		require.NotEmpty(ct, cur.Status.Verification.Outcome, "verification: %+v, conditions: %+v", cur.Status.Verification, cur.Status.Conditions)
	}, 3*time.Minute, 200*time.Millisecond, "MySQLBackupInstance %s never verified", name)
	return &cur
}

// TestTheOperatorVerifiesMySQLBackupsByRestoringThemWithARealMariaDB:
// each MySQLBackupInstance is verified by a Job the runner really runs
// (verify.sh restoring the dump into a scratch MariaDB); a good backup
// is Verified, a failing user check and a corrupted file are Failed with
// the check named on the status, the Verified condition and an Event.
func TestTheOperatorVerifiesMySQLBackupsByRestoringThemWithARealMariaDB(t *testing.T) {
	e := newMariaEndToEnd(t)
	ctx := context.Background()

	e.cluster("mc")
	waitFor(t, e.c, e.ns, "mc", "Ready", ready)
	e.sql("mc", "CREATE DATABASE shop; CREATE TABLE shop.notes (v text); INSERT INTO shop.notes VALUES ('one'), ('two')")
	e.setVerify("mc", &dbv1.BackupVerify{UserCheck: "SELECT COUNT(*) = 2 FROM shop.notes"})

	// Each backup is verified (mode EachBackup, the default).
	e.backup("mc", "good")
	good := e.waitVerified("good")
	v := good.Status.Verification
	require.Equal(t, dbv1.VerificationVerified, v.Outcome, "%+v", v)
	assert.Equal(t, []string{"checksum", "restore", "rowCounts", "userCheck"}, checkNames(v))
	assert.EqualValues(t, 2, v.Rows)
	assert.Equal(t, metav1.ConditionTrue, condition(good.Status.Conditions, database.ConditionVerified).Status)
	waitEvents(t, e.c, e.ns, "good", corev1.EventTypeNormal, "Verified")
	waitFor(t, e.c, e.ns, "mc", "the newest verified backup is good", func(ct *assert.CollectT, mc *grtlv1.MySQLCluster) {
		require.Equal(ct, "good", mc.Status.LastVerifiedBackup)
		require.Equal(ct, metav1.ConditionTrue, condition(mc.Status.Conditions, database.ConditionBackupVerified).Status, "%+v", mc.Status.Conditions)
	})

	// A user check that no longer holds fails the next one, named.
	e.sql("mc", "INSERT INTO shop.notes VALUES ('three')")
	e.backup("mc", "check-fails")
	failed := e.waitVerified("check-fails")
	require.Equal(t, dbv1.VerificationFailed, failed.Status.Verification.Outcome, "%+v", failed.Status.Verification)
	assert.Equal(t, "userCheck", failed.Status.Verification.FailedCheck)
	c := condition(failed.Status.Conditions, database.ConditionVerified)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, "UserCheckFailed", c.Reason)
	assert.Contains(t, waitEvents(t, e.c, e.ns, "check-fails", corev1.EventTypeWarning, "VerificationFailed")["VerificationFailed"], "userCheck")

	// A corrupted file, verified on demand (mode Off: only when asked).
	e.setVerify("mc", &dbv1.BackupVerify{Mode: dbv1.VerifyOff})
	e.backup("mc", "corrupted")
	corrupted := waitForBackup(t, e.c, e.ns, "corrupted", "Completed", func(ct *assert.CollectT, b *grtlv1.MySQLBackupInstance) {
		require.Equal(ct, grtlv1.BackupCompleted, b.Status.Phase, "conditions: %+v", b.Status.Conditions)
	})
	assert.Nil(t, corrupted.Status.Verification, "mode Off verifies nothing by itself")
	e.runner.CorruptFile(corrupted.Status.ClaimName, corrupted.Status.File)
	patch := []byte(`{"metadata":{"annotations":{"` + mysqlcluster.Keys.Verify + `":"now"}}}`)
	require.NoError(t, e.c.Patch(ctx, corrupted, client.RawPatch("application/merge-patch+json", patch)))
	bad := e.waitVerified("corrupted")
	require.Equal(t, dbv1.VerificationFailed, bad.Status.Verification.Outcome)
	assert.Equal(t, "checksum", bad.Status.Verification.FailedCheck)
	assert.Contains(t, bad.Status.Verification.Message, corrupted.Status.SHA256)
	assert.Equal(t, "ChecksumFailed", condition(bad.Status.Conditions, database.ConditionVerified).Reason)
	assert.Contains(t, waitEvents(t, e.c, e.ns, "corrupted", corev1.EventTypeWarning, "VerificationFailed")["VerificationFailed"], "checksum")
}

func checkNames(v *dbv1.BackupVerification) []string {
	var out []string
	for _, c := range v.Checks {
		out = append(out, c.Name)
	}
	return out
}
