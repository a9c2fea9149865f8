package testenv_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// TestTheHostRunnerRunsAJobsPodAndWritesItsEndBack: a Job whose pod
// selects the runner is run on the host, not by kwok: its command sees
// its Secret and ConfigMap values, its ConfigMap volume and a Service the
// test serves as 127.0.0.1; its exit code and termination message reach
// the pod's status, and the Job controller fails the Job (kwok would have
// completed it with exit 0 and no message). A pod whose command fails
// without a message gets the end of its output (FallbackToLogsOnError).
func TestTheHostRunnerRunsAJobsPodAndWritesItsEndBack(t *testing.T) {
	c := testenv.Client(t)
	ctx := context.Background()
	ns := testenv.Namespace(t, c)
	runner, _ := plainHostRunner(t, c, ns)
	runner.Serve("db-rw", "127.0.0.1:15432")
	require.NoError(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}, StringData: map[string]string{"greeting": "hello"}}))
	require.NoError(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: ns}, Data: map[string]string{"who": "world", "file": "from a file"}}))

	job := func(name, script string) *batchv1.Job {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: batchv1.JobSpec{BackoffLimit: ptr.To(int32(0)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				NodeSelector:  runner.NodeSelector(),
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}},
				}}},
				Containers: []corev1.Container{{
					Name: "c", Image: "busybox", Command: []string{"sh", "-c", script},
					Env: []corev1.EnvVar{
						{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "greeting"}}},
						{Name: "WHO", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "who"}}},
						{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						{Name: "DB_HOST", Value: "db-rw." + ns + ".svc"},
						{Name: "DB_PORT", Value: "5432"},
						{Name: "CONFIG", Value: "/config/file"},
					},
					VolumeMounts:             []corev1.VolumeMount{{Name: "config", MountPath: "/config"}},
					TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				}},
			}}},
		}
		require.NoError(t, c.Create(ctx, j))
		return j
	}
	terminated := func(j *batchv1.Job) *corev1.ContainerStateTerminated {
		var state *corev1.ContainerStateTerminated
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var pods corev1.PodList
			require.NoError(ct, c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"job-name": j.Name}))
			require.Len(ct, pods.Items, 1)
			require.Len(ct, pods.Items[0].Status.ContainerStatuses, 1)
			state = pods.Items[0].Status.ContainerStatuses[0].State.Terminated
			require.NotNil(ct, state)
		}, time.Minute, 100*time.Millisecond, "the pod of Job %s never ended", j.Name)
		return state
	}
	jobCondition := func(j *batchv1.Job, kind batchv1.JobConditionType) {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(j), j))
			found := false
			for _, cond := range j.Status.Conditions {
				found = found || (cond.Type == kind && cond.Status == corev1.ConditionTrue)
			}
			require.True(ct, found, "conditions: %+v", j.Status.Conditions)
		}, time.Minute, 100*time.Millisecond)
	}

	failing := job("failing", `printf '%s %s, %s, %s:%s, %s' "$GREETING" "$WHO" "$(cat "$CONFIG")" "$DB_HOST" "$DB_PORT" "${POD%-*}" >"$TERMINATION_MESSAGE_PATH"; exit 3`)
	state := terminated(failing)
	assert.Equal(t, int32(3), state.ExitCode)
	assert.Equal(t, "hello world, from a file, 127.0.0.1:15432, failing", state.Message)
	jobCondition(failing, batchv1.JobFailed)

	quiet := job("quiet", `echo "the last words"; exit 1`)
	assert.Equal(t, "the last words", terminated(quiet).Message)

	ok := job("ok", `exit 0`)
	assert.Equal(t, int32(0), terminated(ok).ExitCode)
	jobCondition(ok, batchv1.JobComplete)
}

// TestTheHostRunnerStopsTheCommandOfAPodThatIsGone: an unbound pod is
// removed at once when deleted, so the runner never sees it terminating;
// its command is stopped all the same once the pod is gone, as a kubelet
// stops a deleted pod's containers (a Job made again under the same name
// must not run beside the old one's command).
func TestTheHostRunnerStopsTheCommandOfAPodThatIsGone(t *testing.T) {
	c := testenv.Client(t)
	ctx := context.Background()
	ns := testenv.Namespace(t, c)
	runner, root := plainHostRunner(t, c, ns)
	pidFile := filepath.Join(root, "pid")
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "long", Namespace: ns},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To(int32(0)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  runner.NodeSelector(),
			Containers: []corev1.Container{{
				Name: "c", Image: "busybox", Command: []string{"sh", "-c", `echo $$ >"$PID_FILE"; exec sleep 600`},
				Env: []corev1.EnvVar{{Name: "PID_FILE", Value: pidFile}},
			}},
		}}},
	}
	require.NoError(t, c.Create(ctx, j))
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || len(b) == 0 || b[len(b)-1] != '\n' {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, time.Minute, 100*time.Millisecond, "the pod's command never ran")
	require.NoError(t, syscall.Kill(pid, 0), "the command runs")

	require.NoError(t, c.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	require.Eventually(t, func() bool {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}, time.Minute, 100*time.Millisecond, "the command of the gone pod still runs")
}

// plainHostRunner runs ns's pods that select it as the test's own user,
// with only the environment the pod gives, under a temporary root.
func plainHostRunner(t *testing.T, c client.Client, ns string) (*testenv.HostRunner, string) {
	root, err := os.MkdirTemp("", "deckhand-runner-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	return testenv.NewHostRunner(t, c, ns, root, testenv.HostOptions{
		Command: func(env map[string]string, argv []string) *exec.Cmd {
			cmd := exec.Command(argv[0], argv[1:]...)
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			return cmd
		},
		Dir: func(parts ...string) string {
			dir := filepath.Join(parts...)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			return dir
		},
		Path: "/usr/bin:/bin",
	}), root
}
