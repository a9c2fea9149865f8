package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// A MySQLCluster on the real node with the MariaDB image built from
// Debian's packages (hack/node/images.sh mariadb), run by the chart's
// operator with controllers.mysqlCluster.enabled: the PostgreSQL round
// trip again. A client pod (the mariadb image, with the mariadb client)
// writes rows as root with the cluster's Secret, reads them through
// <name>-ro from the replica; a MySQLBackupInstance completes; deleting
// the cluster completes its final backup (Snapshot, the default); the
// cluster made again from it has the rows. TLS is on (the chart's
// default for a new cluster): every query of the client verifies the
// server's certificate and name against the ConfigMap <name>-ca, a
// client without TLS is refused, and the replicas, backups and restores
// run over it.
func TestRealNodeRunsAMariaDBMySQLCluster(t *testing.T) {
	parallel(t, 3*time.Minute) // see the package comment: its own namespace, the shared operator
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	operatorDeployment(ctx, t, cs)
	helmUpgrade(ctx, t, "--set", "controllers.mysqlCluster.enabled=true")
	c := crClient(t, cfg)
	ns := namespace(ctx, t, cs)
	image := imageRef(t, "mariadb")

	const name = "shop"
	// The root password: a Secret of the user's, which the operator never
	// touches, so it outlives the cluster and serves its re-creation.
	_, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-root", Namespace: ns},
		StringData: map[string]string{"password": rand.String(20)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	mc := &mcv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       mcv1.MySQLClusterSpec{Secret: "shop-root", Storage: "256Mi", Image: image, Replicas: 2},
	}
	require.NoError(t, c.Create(ctx, mc))
	waitClusterReady(ctx, t, c, ns, name)

	sqlPod := startMariaDBClient(ctx, t, cs, ns, "mariadb", name)
	out, err := tryExec(ctx, cfg, cs, sqlPod, "sh", "-c", `MYSQL_PWD=$(cat /secret/password) exec mariadb --skip-ssl -h "$1" -u root -N -B -e "SELECT 1"`, "sql", name+"-rw")
	require.Error(t, err, "a client without TLS is refused:\n%s", out)
	token := rand.String(10)
	assert.Equal(t, "2", sqlAs(ctx, t, cfg, cs, sqlPod, name+"-rw",
		"CREATE DATABASE orders; CREATE TABLE orders.notes (v varchar(64)); INSERT INTO orders.notes VALUES ('one "+token+"'), ('two "+token+"'); SELECT count(*) FROM orders.notes"))

	// <name>-ro is the replica: read-only, with the rows once replicated.
	assert.Equal(t, "1", sqlAs(ctx, t, cfg, cs, sqlPod, name+"-ro", "SELECT @@read_only"), "<name>-ro answers from a read-only replica")
	want := "one " + token + ",two " + token
	got := eventuallySQL(ctx, t, cfg, cs, sqlPod, name+"-ro", "SELECT group_concat(v ORDER BY v) FROM orders.notes", want)
	assert.Equal(t, want, got, "rows read through <name>-ro")

	host := func(service string) string { return name + "-" + service }
	store := replicatedStore{
		ns: ns, name: name,
		query: func(service, sql string) string { return sqlAs(ctx, t, cfg, cs, sqlPod, host(service), sql) },
		eventually: func(service, sql, want string) string {
			return eventuallySQL(ctx, t, cfg, cs, sqlPod, host(service), sql, want)
		},
		insert:     func(row string) string { return "INSERT INTO orders.notes VALUES ('" + row + "')" },
		selectRows: "SELECT group_concat(v ORDER BY v) FROM orders.notes",
		standbySQL: "SELECT @@read_only", standbyWant: "1",
		waitReady: func() { waitClusterReady(ctx, t, c, ns, name) },
	}
	rows := survivesPrimaryCrash(ctx, t, cs, store, token, want)
	rows = standbyCatchesUpAfterCrash(ctx, t, cs, store, token, rows)

	require.NoError(t, c.Create(ctx, &mcv1.MySQLBackupInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: ns},
		Spec:       mcv1.MySQLBackupInstanceSpec{Cluster: name},
	}))
	first := waitInstanceCompleted(ctx, t, c, ns, "first")
	assert.True(t, strings.HasPrefix(first.Status.Version, "10.11."), "backup of MariaDB %q", first.Status.Version)
	// Each backup is verified (EachBackup, the default): the verification
	// Job restores it into a scratch MariaDB in a real container.
	waitVerified(ctx, t, "MySQLBackupInstance first", func() (*dbv1.BackupVerification, error) {
		var b mcv1.MySQLBackupInstance
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "first"}, &b)
		return b.Status.Verification, err
	})

	sqlAs(ctx, t, cfg, cs, sqlPod, name+"-rw", "INSERT INTO orders.notes VALUES ('three "+token+"')")
	require.NoError(t, c.Delete(ctx, mc))
	final := waitFinalInstance(ctx, t, c, ns, name)
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &mcv1.MySQLCluster{}) != nil, nil
	})
	require.NoError(t, err, "MySQLCluster %s still there", name)

	again := &mcv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       mcv1.MySQLClusterSpec{Secret: "shop-root", Storage: "256Mi", Image: image, Replicas: 2, FromBackup: final},
	}
	require.NoError(t, c.Create(ctx, again))
	waitClusterReady(ctx, t, c, ns, name)
	// A new client: the new cluster has a CA of its own.
	sqlPod = startMariaDBClient(ctx, t, cs, ns, "mariadb-again", name)
	assert.Equal(t, sortedRows(rows+",three "+token),
		sqlAs(ctx, t, cfg, cs, sqlPod, name+"-rw", "SELECT group_concat(v ORDER BY v) FROM orders.notes"),
		"the rows of the final backup, restored")
}

// startMariaDBClient runs the mariadb image as a client pod of cluster:
// its root Secret (<cluster>-root) mounted at /secret (the password is
// read from there, never put on a command line), its CA ConfigMap
// (<cluster>-ca) at /ca.
func startMariaDBClient(ctx context.Context, t testing.TB, cs clientset, ns, name, cluster string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:      "client",
				Image:     imageRef(t, "mariadb"),
				Command:   []string{"sleep", "3600"},
				Resources: testPodResources(),
				VolumeMounts: []corev1.VolumeMount{
					{Name: "secret", MountPath: "/secret", ReadOnly: true},
					{Name: "ca", MountPath: "/ca", ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: cluster + "-root"}}},
				{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: cluster + "-ca"},
				}}},
			},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	return runningPod(ctx, t, cs, ns, pod.Name)
}

// sqlCommand runs sql as root at host (a Service name), verifying the
// server's certificate and name against the cluster's CA bundle; MYSQL_PWD
// keeps the password off the command line.
func sqlCommand(host, sql string) []string {
	return []string{"sh", "-c", `MYSQL_PWD=$(cat /secret/password) exec mariadb --ssl-ca=/ca/ca.crt --ssl-verify-server-cert -h "$1" -u root -N -B -e "$2"`, "sql", host, sql}
}

func sqlAs(ctx context.Context, t testing.TB, cfg *rest.Config, cs clientset, pod *corev1.Pod, host, sql string) string {
	t.Helper()
	out, err := tryExec(ctx, cfg, cs, pod, sqlCommand(host, sql)...)
	require.NoError(t, err, "mariadb (%s) %q:\n%s", host, sql, out)
	return strings.TrimSpace(out)
}

func eventuallySQL(ctx context.Context, t testing.TB, cfg *rest.Config, cs clientset, pod *corev1.Pod, host, sql, want string) string {
	t.Helper()
	var out string
	_ = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		o, err := tryExec(ctx, cfg, cs, pod, sqlCommand(host, sql)...)
		out = strings.TrimSpace(o)
		return err == nil && out == want, nil
	})
	return out
}

func waitClusterReady(ctx context.Context, t testing.TB, c client.Client, ns, name string) {
	t.Helper()
	var mc mcv1.MySQLCluster
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &mc); err != nil {
			return false, nil
		}
		return mc.Status.Phase == mcv1.PhaseReady && mc.Status.ReadyReplicas == mc.Spec.Replicas, nil
	})
	require.NoError(t, err, "MySQLCluster %s not Ready: phase %q, conditions %+v", name, mc.Status.Phase, mc.Status.Conditions)
}

func waitInstanceCompleted(ctx context.Context, t testing.TB, c client.Client, ns, name string) mcv1.MySQLBackupInstance {
	t.Helper()
	var b mcv1.MySQLBackupInstance
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &b); err != nil {
			return false, nil
		}
		return b.Status.Phase == mcv1.BackupCompleted || b.Status.Phase == mcv1.BackupFailed, nil
	})
	require.NoError(t, err, "MySQLBackupInstance %s did not end: %+v", name, b.Status)
	require.Equal(t, mcv1.BackupCompleted, b.Status.Phase, "MySQLBackupInstance %s: %+v", name, b.Status)
	return b
}

// waitFinalInstance waits for the final backup of a Snapshot deletion
// (<name>-final-<uid>) to complete, and returns its name.
func waitFinalInstance(ctx context.Context, t testing.TB, c client.Client, ns, cluster string) string {
	t.Helper()
	var final string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list mcv1.MySQLBackupInstanceList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		for _, b := range list.Items {
			if strings.HasPrefix(b.Name, cluster+"-final-") {
				final = b.Name
			}
		}
		return final != "", nil
	})
	require.NoError(t, err, "no final backup of %s", cluster)
	waitInstanceCompleted(ctx, t, c, ns, final)
	return final
}
