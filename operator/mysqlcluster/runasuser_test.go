package mysqlcluster_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/mysql/mysqltest"
)

// The MySQL bootstrap script, run as the pods' default 999 on a data
// directory the host's mysql user made, stops and says both owners; the
// MySQLCluster's Ready condition says the same, with spec.runAsUser as the
// fix, which then starts the kept data.
func TestAWrongServerUserIsReportedWithTheFix(t *testing.T) {
	t.Parallel()
	mysqltest.RequireMariaDB(t)
	u := mysqltest.Unprivileged(t)
	require.NotNil(t, u, "the test makes directories of two owners: it runs as root")
	require.NotEqual(t, 999, u.UID, "the host's mysql user must differ from the default")
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns, nil)
	ctx := context.Background()

	mc := newCluster(ns, "owner", "owner-root", 1)
	mc.Spec.Image = "mariadb:10.11"
	require.NoError(t, c.Create(ctx, mc))
	waitFor(t, c, ns, "owner", "Ready", ready)
	sts := get(t, c, ns, "owner", &appsv1.StatefulSet{})
	require.Equal(t, int64(999), *sts.Spec.Template.Spec.SecurityContext.RunAsUser)
	cm := get(t, c, ns, "owner-scripts", &corev1.ConfigMap{})
	secrets := map[string]map[string]string{}
	for _, name := range []string{"owner-root", "owner-replication"} {
		s := get(t, c, ns, name, &corev1.Secret{})
		secrets[name] = map[string]string{"password": string(s.Data["password"])}
	}

	root := mysqltest.TempRoot(t, u)
	require.NoError(t, os.Chmod(root, 0o755), "uid 999 reads the scripts too")
	scripts := filepath.Join(root, "scripts")
	mysqltest.WriteScripts(t, u, scripts, cm.Data)
	vol, run := mysqltest.Dir(t, u, root, "volume"), mysqltest.Dir(t, u, root, "run")
	require.NoError(t, os.Chmod(run, 0o777), "the socket's directory, for either user")
	termination := filepath.Join(run, "termination-log")
	container := sts.Spec.Template.Spec.Containers[0]
	port := mysqltest.FreePort(t)
	env := mysqltest.Env(t, container, secrets, "owner-0", map[string]string{
		"DATA_DIR": filepath.Join(vol, "data"), "PORT": port, "BIND_ADDRESS": "127.0.0.1",
		"MYSQL_UNIX_PORT": filepath.Join(run, "mysqld.sock"), "PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": port,
		"PATH": mysqltest.Path, "HOME": run,
	})
	// The kubelet's file, at /dev/termination-log in a pod.
	env["TERMINATION_MESSAGE_PATH"] = termination
	argv := mysqltest.Command(t, container, scripts)
	made := mysqltest.Start(t, u, env, argv, secrets["owner-root"]["password"])
	made.Stop(t)

	// As a pod with the default runAsUser: uid 999, no name on this host.
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
	assert.Equal(t, map[string]string{"dataDirectory": env["DATA_DIR"], "dataOwner": uid, "runAsUser": "999"}, report)

	// The kubelet puts it in the pod's status (kwok runs no script).
	testenv.ContainerExited(t, c, ns, "owner-0", string(message))
	got := waitFor(t, c, ns, "owner", "the owner mismatch reported", func(ct *assert.CollectT, m *grtlv1.MySQLCluster) {
		require.Equal(ct, "DataDirectoryOwnerMismatch", condition(m.Status.Conditions, database.ConditionReady).Reason)
		require.Equal(ct, grtlv1.PhaseDegraded, m.Status.Phase)
	})
	msg := condition(got.Status.Conditions, database.ConditionReady).Message
	assert.Contains(t, msg, "pod owner-0: the data directory "+env["DATA_DIR"]+" belongs to uid "+uid+", but the servers run as uid 999 (spec.runAsUser, default 999)")
	assert.Contains(t, msg, "set spec.runAsUser to "+uid)

	// The fix: the spec names the image's user; the real script starts the
	// kept data as that user.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur grtlv1.MySQLCluster
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(mc), &cur))
		cur.Spec.RunAsUser = ptrTo(int64(u.UID))
		return c.Update(ctx, &cur)
	}))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(sts), sts))
		require.Equal(ct, int64(u.UID), *sts.Spec.Template.Spec.SecurityContext.RunAsUser)
	}, wait, 100*time.Millisecond)
	restarted := mysqltest.Start(t, u, env, argv, secrets["owner-root"]["password"])
	assert.Contains(t, restarted.Log.String(), "holds a data directory")
}

func ptrTo[T any](v T) *T { return &v }
