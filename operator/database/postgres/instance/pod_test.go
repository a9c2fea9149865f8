package instance_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

func mountsOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		out[m.Name] = m.MountPath
	}
	return out
}

// The agent joins the engine's server pod, its entrypoint run by the
// agent binary's supervisor and told where to ask for its role: the same
// image (pg_ctl, the same user), the data volume and the socket shared,
// the agent copied from the operator image.
func TestAddAgentToTheServerPod(t *testing.T) {
	pod := postgres.Engine{}.ServerPod(engine.Cluster{Name: "db", Namespace: "ns", Image: "postgres:17.6", Port: 5432})
	spec := corev1.PodSpec{Containers: []corev1.Container{pod.Container}, Volumes: pod.Volumes, SecurityContext: pod.SecurityContext}
	before := pod.Container.DeepCopy()
	require.NoError(t, instance.AddAgent(&spec, instance.PodOptions{OperatorImage: "deckhand:1.2.3", TLSSecret: "db-instance-tls", Server: "postgres"}))

	assert.True(t, *spec.ShareProcessNamespace, "pg_ctl in the sidecar signals the postmaster")
	server := spec.Containers[0]
	assert.Equal(t, append([]string{"/opt/deckhand-instance/deckhand-instance", "supervise", "--"}, before.Command...), server.Command,
		"the server's entrypoint, under the supervisor that starts it again after a fence")
	assert.Equal(t, instance.SocketDir, mountsOf(server)["deckhand-socket"])
	assert.Equal(t, "/opt/deckhand-instance", mountsOf(server)["deckhand-instance-bin"], "the supervisor's binary")
	assert.Contains(t, server.Env, corev1.EnvVar{Name: instance.RoleDirEnv, Value: instance.SocketDir},
		"the entrypoint asks for its role where the agent answers")
	assert.Equal(t, append(before.Args, "-c", "wal_receiver_status_interval=1s"), server.Args,
		"a standby replies every second, for its primary's isolation check")

	require.Len(t, spec.InitContainers, 1)
	install := spec.InitContainers[0]
	assert.Equal(t, "deckhand:1.2.3", install.Image)
	assert.Equal(t, []string{instance.AgentImagePath, "install", "/opt/deckhand-instance/deckhand-instance"}, install.Command)

	require.Len(t, spec.Containers, 2)
	agent := spec.Containers[1]
	assert.Equal(t, "postgres:17.6", agent.Image, "the server's image: its pg_ctl")
	assert.Equal(t, "/opt/deckhand-instance/deckhand-instance", agent.Command[0])
	assert.Equal(t, map[string]string{
		"deckhand-instance-bin": "/opt/deckhand-instance", "deckhand-instance-tls": instance.TLSMountPath,
		engine.DataVolume: mountsOf(server)[engine.DataVolume], "deckhand-socket": instance.SocketDir,
		engine.ScriptsVolume: "/deckhand/scripts",
	}, mountsOf(agent), "the scripts, for the readiness probe; no /dev/shm, no password")
	var env []string
	for _, e := range agent.Env {
		env = append(env, e.Name)
		assert.True(t, e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil, e.Name)
	}
	assert.ElementsMatch(t, []string{"POD_NAME", "PGDATA", "PGPORT", "PRIMARY_HOST", "PRIMARY_PORT", "LISTEN_ADDRESSES",
		"REPLICATION_USER", instance.RoleDirEnv}, env, "the server's environment but no Secret in the agent's")
	assert.Equal(t, int32(instance.DefaultPort), agent.Ports[0].ContainerPort)

	// The kubelet asks the agent for the server's readiness; the agent
	// runs the server's own readiness command; liveness and startup stay
	// the server's exec probes.
	require.NotNil(t, server.ReadinessProbe.HTTPGet)
	assert.Nil(t, server.ReadinessProbe.Exec)
	assert.Equal(t, instance.ReadyPath, server.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, int32(instance.DefaultProbePort), server.ReadinessProbe.HTTPGet.Port.IntVal)
	assert.Equal(t, before.ReadinessProbe.PeriodSeconds, server.ReadinessProbe.PeriodSeconds)
	assert.Equal(t, before.ReadinessProbe.FailureThreshold, server.ReadinessProbe.FailureThreshold)
	assert.Equal(t, before.LivenessProbe, server.LivenessProbe)
	assert.Equal(t, before.StartupProbe, server.StartupProbe)
	assert.Equal(t, []string{"--probe-listen", ":8011", "--readiness-command", `["sh","/deckhand/scripts/probe.sh","ready"]`,
		"--readiness-timeout", "9s"}, agent.Command[len(agent.Command)-6:])
	assert.Equal(t, int32(instance.DefaultProbePort), agent.Ports[1].ContainerPort)
	assert.Equal(t, int32(instance.DefaultProbePort), agent.ReadinessProbe.TCPSocket.Port.IntVal,
		"the agent's own readiness: its plain port, where a TCP check leaves no TLS handshake error in its log")
	assert.Equal(t, false, *agent.SecurityContext.AllowPrivilegeEscalation)

	for _, v := range spec.Volumes {
		if v.Name == "deckhand-instance-tls" {
			assert.Equal(t, "db-instance-tls", v.Secret.SecretName)
			assert.Equal(t, int32(0o440), *v.Secret.DefaultMode)
		}
	}
	assert.Error(t, instance.AddAgent(&corev1.PodSpec{}, instance.PodOptions{Server: "postgres"}), "no server container")

	// With TLS the readiness check installs a renewed certificate: the
	// agent mounts the server's certificate and its copy in memory, as
	// the server does, and still no Secret comes into its environment.
	pod = postgres.Engine{}.ServerPod(engine.Cluster{Name: "db", Namespace: "ns", Image: "postgres:17.6", Port: 5432, TLSSecret: "db-tls"})
	spec = corev1.PodSpec{Containers: []corev1.Container{pod.Container}, Volumes: pod.Volumes}
	require.NoError(t, instance.AddAgent(&spec, instance.PodOptions{OperatorImage: "deckhand:1.2.3", TLSSecret: "db-instance-tls", Server: "postgres"}))
	for name, path := range mountsOf(spec.Containers[0]) {
		if name != "shm" {
			assert.Equal(t, path, mountsOf(spec.Containers[1])[name], "the agent mounts %s where the server does", name)
		}
	}
	assert.NotContains(t, mountsOf(spec.Containers[1]), "shm")
	for _, e := range spec.Containers[1].Env {
		assert.True(t, e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil, e.Name)
	}

	// The Database's own setting stands.
	pod = postgres.Engine{}.ServerPod(engine.Cluster{Name: "db", Namespace: "ns", Image: "postgres:17.6", Port: 5432,
		Parameters: map[string]string{"wal_receiver_status_interval": "5s"}})
	spec = corev1.PodSpec{Containers: []corev1.Container{pod.Container}, Volumes: pod.Volumes}
	require.NoError(t, instance.AddAgent(&spec, instance.PodOptions{OperatorImage: "deckhand:1.2.3", TLSSecret: "db-instance-tls", Server: "postgres"}))
	assert.Equal(t, pod.Container.Args, spec.Containers[0].Args)
	assert.Contains(t, spec.Containers[0].Args, "wal_receiver_status_interval=5s")
}
