package instance

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// AgentImagePath is where the operator image holds the agent (built for
// the image's platform; cmd/deckhand-instance): a database pod's init
// container, running the operator image, copies it from there into an
// emptyDir with `deckhand-instance install`.
const AgentImagePath = "/usr/local/lib/deckhand/deckhand-instance"

// Names of what AddAgent adds to a pod.
const (
	InstallContainer = "deckhand-instance-install"
	AgentContainer   = "deckhand-instance"
	binVolume        = "deckhand-instance-bin"
	tlsVolume        = "deckhand-instance-tls"
	socketVolume     = "deckhand-socket"
	// binDir is not under /deckhand: that is the operator image's
	// entrypoint, a file (the init container's mount failed on it).
	binDir = "/opt/deckhand-instance"
	// TLSMountPath is where the agent reads the pods' Secret.
	TLSMountPath = "/etc/deckhand/instance-tls"
	// SocketDir is the server's unix socket directory (the official
	// image's and Debian's default), shared with the agent.
	SocketDir = "/var/run/postgresql"
)

// PodOptions say where the agent comes from and what it serves with.
type PodOptions struct {
	// OperatorImage holds the agent at AgentImagePath.
	OperatorImage string
	// TLSSecret is the pods' Secret (PodSecretData).
	TLSSecret string
	// Server is the name of the database container in the pod.
	Server string
	// ScriptsVolume is the scripts ConfigMap's volume: the agent mounts
	// it where the server does, read-only, to report the primary the pod
	// sees (Status.NamedPrimary). "": not mounted.
	ScriptsVolume string
}

// AddAgent adds the instance channel to a database pod: an init container
// (the operator image) copies the agent into an emptyDir; a sidecar of
// the server's own image (it has pg_ctl and runs as the same user) serves
// it, with the server's data volume, its socket directory (an emptyDir
// both mount) and the pods' TLS Secret; the pod shares one process
// namespace so the agent's pg_ctl can signal the postmaster. The server's
// entrypoint runs under the agent binary's supervisor (Supervise) and is
// told where to ask for its role (RoleDirEnv); its container is otherwise
// unchanged. The agent's environment takes PGDATA and PGPORT from the
// server's.
func AddAgent(spec *corev1.PodSpec, opts PodOptions) error {
	server := container(spec, opts.Server)
	if server == nil {
		return fmt.Errorf("the pod has no container %q", opts.Server)
	}
	server.VolumeMounts = append(server.VolumeMounts,
		corev1.VolumeMount{Name: socketVolume, MountPath: SocketDir},
		corev1.VolumeMount{Name: binVolume, MountPath: binDir, ReadOnly: true})
	// The entrypoint runs under the agent binary's supervisor, which
	// starts it again after a fence instead of ending the container
	// (supervise.go).
	server.Command = append(slices.Clone(supervisor), server.Command...)
	// Its entrypoint asks the operator, through the agent, before it
	// starts as the primary (role.go).
	server.Env = append(server.Env, corev1.EnvVar{Name: RoleDirEnv, Value: SocketDir})
	// A standby replies every second, so its primary's isolation check
	// (isolation.go) sees within seconds that it stopped; unless the
	// Database's parameters set it.
	if !setsParameter(server.Args, statusIntervalParameter) {
		server.Args = append(server.Args, "-c", statusIntervalParameter+"=1s")
	}
	spec.ShareProcessNamespace = ptr.To(true)
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: binVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}}},
		corev1.Volume{Name: socketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))}}},
		// 0440 and the pod's fsGroup: readable by the servers' user only.
		corev1.Volume{Name: tlsVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: opts.TLSSecret, DefaultMode: ptr.To(int32(0o440))}}},
	)
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:            InstallContainer,
		Image:           opts.OperatorImage,
		Command:         []string{AgentImagePath, "install", binDir + "/deckhand-instance"},
		VolumeMounts:    []corev1.VolumeMount{{Name: binVolume, MountPath: binDir}},
		SecurityContext: server.SecurityContext.DeepCopy(),
		Resources:       smallResources(),
	})
	agent := agentContainer(server, opts.ScriptsVolume)
	if err := askReadinessThroughAgent(server, &agent); err != nil {
		return err
	}
	spec.Containers = append(spec.Containers, agent)
	return nil
}

// supervisor is what AddAgent puts before the server's command.
var supervisor = []string{binDir + "/deckhand-instance", "supervise", "--"}

// WithoutSupervisor is the server's command as it was before AddAgent put
// the supervisor before it (for a test that runs the entrypoint on a host,
// where the pod's binary is not).
func WithoutSupervisor(command []string) []string {
	if len(command) >= len(supervisor) && slices.Equal(command[:len(supervisor)], supervisor) {
		return command[len(supervisor):]
	}
	return command
}

// askReadinessThroughAgent makes the kubelet ask the agent for the
// server's readiness (probe.go) instead of running the server's exec
// probe in its container: the agent runs the same command, with the
// server's environment less its Secrets (the command connects over the
// socket) and the server's mounts that environment names (its TLS
// files), so the check sees what the server's container sees.
func askReadinessThroughAgent(server, agent *corev1.Container) error {
	ready := server.ReadinessProbe
	if ready == nil || ready.Exec == nil {
		return nil
	}
	command, err := json.Marshal(ready.Exec.Command)
	if err != nil {
		return err
	}
	timeout := ready.TimeoutSeconds
	if timeout < 2 {
		timeout = 2
	}
	agent.Command = append(agent.Command,
		"--probe-listen", ":"+strconv.Itoa(DefaultProbePort),
		"--readiness-command", string(command),
		"--readiness-timeout", (time.Duration(timeout)*time.Second - time.Second).String())
	agent.Ports = append(agent.Ports, corev1.ContainerPort{Name: "probe", ContainerPort: DefaultProbePort, Protocol: corev1.ProtocolTCP})
	// The agent's own readiness checks the plain port, which it opens
	// after its TLS port: a TCP check of the TLS port left a handshake
	// error in its log every period.
	agent.ReadinessProbe.TCPSocket.Port = intstr.FromInt32(DefaultProbePort)
	for _, e := range server.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil || hasEnv(agent, e.Name) {
			continue
		}
		agent.Env = append(agent.Env, e)
	}
	// The command's own files (the scripts) and those the environment
	// names.
	paths := append(plainValues(server), ready.Exec.Command...)
	for _, m := range server.VolumeMounts {
		if mountHolds(m, paths...) && !hasMount(agent, m.Name) {
			agent.VolumeMounts = append(agent.VolumeMounts, m)
		}
	}
	probe := ready.DeepCopy()
	probe.Exec = nil
	probe.HTTPGet = &corev1.HTTPGetAction{Path: ReadyPath, Port: intstr.FromInt32(DefaultProbePort), Scheme: corev1.URISchemeHTTP}
	server.ReadinessProbe = probe
	return nil
}

func hasEnv(c *corev1.Container, name string) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
}

func hasMount(c *corev1.Container, name string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == name })
}

// plainValues are the values of the server's environment that come from
// no Secret or field (paths among them: PGDATA, TLS_DIR, TLS_RUN_DIR,
// TLS_CA_FILE).
func plainValues(server *corev1.Container) []string {
	var out []string
	for _, e := range server.Env {
		if e.ValueFrom == nil {
			out = append(out, e.Value)
		}
	}
	return out
}

// mountHolds: one of paths is m's mount path or under it.
func mountHolds(m corev1.VolumeMount, paths ...string) bool {
	for _, p := range paths {
		if p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return true
		}
	}
	return false
}

// agentContainer is the sidecar: the server's image, user and data
// mounts, the agent from the emptyDir.
func agentContainer(server *corev1.Container, scriptsVolume string) corev1.Container {
	env := []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	for _, e := range server.Env {
		if e.Name == "PGDATA" || e.Name == "PGPORT" {
			env = append(env, e)
		}
	}
	mounts := []corev1.VolumeMount{
		{Name: binVolume, MountPath: binDir, ReadOnly: true},
		{Name: tlsVolume, MountPath: TLSMountPath, ReadOnly: true},
	}
	command := []string{binDir + "/deckhand-instance", "serve", "--tls-dir", TLSMountPath, "--socket-dir", SocketDir, "--listen", ":" + strconv.Itoa(DefaultPort)}
	for _, m := range server.VolumeMounts {
		// The data (pg_ctl, the fence marker), the socket, and the
		// scripts (read-only: the primary's name the pod sees); not
		// /dev/shm.
		switch {
		case m.MountPath == SocketDir || isDataMount(server, m):
			mounts = append(mounts, m)
		case scriptsVolume != "" && m.Name == scriptsVolume:
			m.ReadOnly = true
			mounts = append(mounts, m)
			command = append(command, "--scripts-dir", m.MountPath)
		}
	}
	return corev1.Container{
		Name:    AgentContainer,
		Image:   server.Image,
		Command: command,
		Env:     env,
		Ports:   []corev1.ContainerPort{{Name: "instance", ContainerPort: DefaultPort, Protocol: corev1.ProtocolTCP}},
		// Ready once it serves TLS (a TCP check: the agent answers only
		// clients with the operator's certificate).
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(DefaultPort)}},
			PeriodSeconds: 10,
		},
		VolumeMounts:    mounts,
		SecurityContext: server.SecurityContext.DeepCopy(),
		Resources:       smallResources(),
	}
}

// statusIntervalParameter is how often a standby replies to its primary.
const statusIntervalParameter = "wal_receiver_status_interval"

// setsParameter: args (-c name=value pairs) set the server parameter name.
func setsParameter(args []string, name string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// isDataMount: m holds the server's PGDATA.
func isDataMount(server *corev1.Container, m corev1.VolumeMount) bool {
	for _, e := range server.Env {
		if e.Name == "PGDATA" && mountHolds(m, e.Value) {
			return true
		}
	}
	return false
}

func container(spec *corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

// smallResources: the agent idles between a status a second; its memory
// is a Go binary's (the limit leaves room for a TLS burst).
func smallResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
}
