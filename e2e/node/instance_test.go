package node

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// AgentImageEnv names an operator image, imported into the node, to copy
// the instance agent from instead of the installed operator's (a
// worktree's `make image`, imported by hand, while the node's operator
// runs another build).
const AgentImageEnv = "DECKHAND_NODE_AGENT_IMAGE"

// agentImage is the operator image the init container copies the agent
// from: the installed operator's, as the StatefulSet will use.
func agentImage(ctx context.Context, t testing.TB) string {
	t.Helper()
	if img := os.Getenv(AgentImageEnv); img != "" {
		return img
	}
	_, cs := clientFor(t)
	return operatorDeployment(ctx, t, cs).Spec.Template.Spec.Containers[0].Image
}

// standInEntrypoint is the server container's command in this test: what
// bootstrap.sh does with the fence marker (wait while it is there), then
// initdb on an empty volume and the server in the foreground.
const standInEntrypoint = `set -eu
marker=$(dirname "$PGDATA")/` + instance.FenceMarker + `
while [ -e "$marker" ]; do echo "fenced: not starting"; sleep 1; done
[ -s "$PGDATA/PG_VERSION" ] || initdb -D "$PGDATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 >/dev/null
exec postgres -D "$PGDATA" -c listen_addresses=''`

// The instance channel in a real pod: the agent copied out of the
// operator image by the init container, run as a sidecar of the
// PostgreSQL image (instance.AddAgent), asked from this machine over
// mutual TLS at the pod's address with the certificate checked against
// the pod's name under the headless Service. The status reports the
// primary; the fence stops the server from the sidecar (one process
// namespace) cleanly, and the supervisor starts the entrypoint again,
// which, the marker on its volume, does not serve; neither container is
// restarted; lifting the fence brings the server back, three times in a
// row without a restart; a primary is not promoted; a client without the
// operator's certificate is refused. The namespace enforces the
// restricted Pod Security Standard.
func TestRealNodeRunsTheInstanceAgentBesideAServer(t *testing.T) {
	parallel(t, 30*time.Second) // see the package comment: its own namespace, the shared operator
	_, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := namespace(ctx, t, cs)
	// The pod passes the restricted Pod Security Standard, as the
	// Database's pods do (one process namespace is allowed there).
	_, err := cs.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	const pod, headless = "db-0", "db-headless"

	creds, err := instance.IssueCredentials(ns, "db", []instance.Instance{{Pod: pod, Hosts: instance.PodHosts(pod, headless, ns)}}, time.Now())
	require.NoError(t, err)
	_, err = cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db-instance-tls"},
		Data:       creds.PodSecretData(),
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	spec := corev1.PodSpec{
		Hostname: pod, Subdomain: headless,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(999)), RunAsGroup: ptr.To(int64(999)), FSGroup: ptr.To(int64(999)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:         "postgres",
			Image:        imageRef(t, "postgres"),
			Command:      []string{"sh", "-c", standInEntrypoint},
			Env:          []corev1.EnvVar{{Name: "PGDATA", Value: "/var/lib/postgresql/data/pgdata"}, {Name: "PGPORT", Value: "5432"}},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/postgresql/data"}},
			Resources:    testPodResources(),
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		}},
		Volumes:                       []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		TerminationGracePeriodSeconds: ptr.To(int64(5)),
	}
	require.NoError(t, instance.AddAgent(&spec, instance.PodOptions{OperatorImage: agentImage(ctx, t), TLSSecret: "db-instance-tls", Server: "postgres"}))
	_, err = cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod}, Spec: spec}, metav1.CreateOptions{})
	require.NoError(t, err)
	ip := runningPod(ctx, t, cs, ns, pod).Status.PodIP
	require.True(t, podRange.Contains(net.ParseIP(ip)), "pod address %s", ip)

	// The operator's side, at the pod's address, for the pod's name.
	op := creds.OperatorSecretData()
	tlsConfig, err := instance.ClientTLSConfig(op[instance.CACertKey], op[instance.ClientCertKey], op[instance.ClientKeyKey])
	require.NoError(t, err)
	toPod := instance.WithDialContext(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(ip, strconv.Itoa(instance.DefaultPort)))
	})
	client := instance.NewClient(tlsConfig, instance.DefaultPort, toPod)
	host := instance.PodHosts(pod, headless, ns)[0]
	status := func(want func(instance.Status) bool, what string) instance.Status {
		t.Helper()
		var st instance.Status
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var err error
			st, err = client.Status(ctx, host)
			assert.NoError(ct, err)
			assert.True(ct, want(st), "%s: %+v", what, st)
		}, 3*time.Minute, 500*time.Millisecond, what)
		return st
	}

	st := status(func(s instance.Status) bool { return s.ServerUp }, "the server answers through the agent")
	assert.Equal(t, instance.RolePrimary, st.Role)
	assert.Equal(t, int64(1), st.Timeline)
	assert.NotZero(t, st.CurrentLSN)
	assert.Equal(t, pod, st.Pod)

	_, err = client.Promote(ctx, host)
	require.ErrorIs(t, err, instance.ErrAlreadyPrimary)

	fenceAndLift := func(round int) {
		t.Helper()
		res, err := client.Fence(ctx, host)
		require.NoError(t, err)
		assert.True(t, res.WasRunning)
		assert.True(t, res.CleanShutdown, "pg_ctl stop -m fast from the sidecar")
		assert.False(t, res.Status.ServerUp)
		assert.True(t, res.Status.Fenced)

		// The entrypoint ends with its server; its supervisor starts it
		// again, and the marker on the volume keeps it from serving. The
		// kubelet restarts neither container: a restart would grow its
		// back-off with every demotion.
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			logs, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "postgres"}).DoRaw(ctx)
			assert.NoError(ct, err)
			text := string(logs)
			assert.Equal(ct, round, strings.Count(text, "supervise: the server's entrypoint ended"), "the supervisor's line, once per fence")
			if last := strings.LastIndex(text, "supervise:"); assert.GreaterOrEqual(ct, last, 0) {
				assert.Contains(ct, text[last:], "fenced: not starting", "the entrypoint waits on the marker")
			}
		}, time.Minute, 500*time.Millisecond)
		st, err := client.Status(ctx, host)
		require.NoError(t, err)
		assert.False(t, st.ServerUp, "a fenced server does not serve after its entrypoint's new start")
		assert.True(t, st.Fenced)
		assertNoRestart(ctx, t, cs, ns, pod)

		lifted := time.Now()
		_, err = client.Unfence(ctx, host)
		require.NoError(t, err)
		st = status(func(s instance.Status) bool { return s.ServerUp && !s.Fenced }, "the server is back once the fence is lifted")
		assert.Equal(t, instance.RolePrimary, st.Role)
		logf(t, "fence %d lifted: the server answered %.1f s later, its container not restarted", round, time.Since(lifted).Seconds())
		assertNoRestart(ctx, t, cs, ns, pod)
	}
	for round := 1; round <= 3; round++ {
		fenceAndLift(round)
	}

	// Without the operator's certificate: refused.
	bare := instance.NewClient(&tls.Config{RootCAs: tlsConfig.RootCAs, MinVersion: tls.VersionTLS13}, instance.DefaultPort, toPod)
	_, err = bare.Status(ctx, host)
	require.Error(t, err)
}

// assertNoRestart: the kubelet has restarted no container of the pod.
func assertNoRestart(ctx context.Context, t *testing.T, cs clientset, ns, name string) {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	for _, c := range p.Status.ContainerStatuses {
		assert.Zero(t, c.RestartCount, "container %s restarted", c.Name)
		assert.NotNil(t, c.State.Running, "container %s runs", c.Name)
	}
}
