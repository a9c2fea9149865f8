package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
)

// A claim of the default StorageClass gets a volume that a real container
// writes, and that a second pod, after the first is deleted, reads back.
func TestRealNodeVolumeOutlivesItsPod(t *testing.T) {
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := namespace(ctx, t, cs)
	claim(ctx, t, cs, ns, "data")

	token := rand.String(12)
	writer := startPodWithClaim(ctx, t, cs, ns, "writer", "data", `echo "$TOKEN" >/data/token && exec sleep 3600`,
		corev1.EnvVar{Name: "TOKEN", Value: token})
	assert.Contains(t, eventually(ctx, t, cfg, cs, writer, "cat /data/token", token), token)
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, writer.Name, metav1.DeleteOptions{}))

	reader := startPodWithClaim(ctx, t, cs, ns, "reader", "data", "exec sleep 3600")
	assert.Contains(t, execIn(ctx, t, cfg, cs, reader, "cat", "/data/token"), token)
}

// claim makes a 1Mi claim of the default StorageClass.
func claim(ctx context.Context, t testing.TB, cs clientset, ns, name string) {
	t.Helper()
	_, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Mi"),
			}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// startPodWithClaim is startPod with the claim mounted at /data.
func startPodWithClaim(ctx context.Context, t testing.TB, cs clientset, ns, name, claim, script string, env ...corev1.EnvVar) *corev1.Pod {
	t.Helper()
	pod := busyboxPod(t, ns, name, nil, script, env...)
	withClaim(pod, claim)
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	return runningPod(ctx, t, cs, ns, name)
}

// withClaim mounts the claim at /data in the pod's container.
func withClaim(pod *corev1.Pod, claim string) {
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
}

// A new volume is writable by a server that runs as a user of its own,
// as PostgreSQL's (UID 999) does: hostPath volumes ignore fsGroup, so the
// provisioner makes each directory 0777, as kind's local-path does.
// Without that, the directory is root's, 0755, and the write below fails
// with "Permission denied".
func TestRealNodeVolumeIsWritableByANonRootUser(t *testing.T) {
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := namespace(ctx, t, cs)
	claim(ctx, t, cs, ns, "data")
	pod := busyboxPod(t, ns, "server", nil, "exec sleep 3600")
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsUser: ptr.To[int64](999), RunAsGroup: ptr.To[int64](999), FSGroup: ptr.To[int64](999),
		RunAsNonRoot: ptr.To(true),
	}
	withClaim(pod, "data")
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	runningPod(ctx, t, cs, ns, pod.Name)

	out, err := tryExec(ctx, cfg, cs, pod, "/bin/sh", "-c", "mkdir /data/pgdata && chmod 700 /data/pgdata && echo ok >/data/pgdata/f && ls -ln /data 2>&1")
	require.NoError(t, err, "a non-root user writing to a new volume:\n%s", out)
	assert.Contains(t, out, " 999 ", "the directory it made is its own:\n%s", out)
}
