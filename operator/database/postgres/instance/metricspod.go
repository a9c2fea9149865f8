package instance

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// Names of what AddMetrics adds to a pod.
const (
	// MetricsContainer serves the metrics alone (no agent in the pod).
	MetricsContainer = "deckhand-metrics"
	// MetricsPortName names the port, as the chart's PodMonitor selects it.
	MetricsPortName = "metrics"
	queriesVolume   = "deckhand-metrics-queries"
	queriesDir      = "/etc/deckhand/metrics-queries"
	// QueriesFile is the file the ConfigMap's key is mounted as.
	QueriesFile = "queries.yaml"
)

// MetricsOptions say what the collector serves with.
type MetricsOptions struct {
	// OperatorImage holds the agent (used when the pod has no agent yet).
	OperatorImage string
	// Server is the name of the database container in the pod.
	Server string
	// AppUser and AppDatabase run the user's queries.
	AppUser, AppDatabase string
	// QueriesConfigMap and QueriesKey: the user's queries; "" name: none.
	QueriesConfigMap, QueriesKey string
}

// AddMetrics makes the pod serve PostgreSQL's metrics on MetricsPort.
// A pod with the agent (AddAgent first) gets the collector in it: the
// agent serves it on a second port. A pod without gets what the agent
// needs and no more: the init container that copies it, the server's
// socket directory shared through an emptyDir, and a sidecar of the
// server's image running `deckhand-instance metrics` (no certificate, no
// data volume). The user's ConfigMap is
// mounted optional: a missing one stops no pod, and the collector
// reports it.
func AddMetrics(spec *corev1.PodSpec, opts MetricsOptions) error {
	server := container(spec, opts.Server)
	if server == nil {
		return fmt.Errorf("the pod has no container %q", opts.Server)
	}
	flags := []string{"--metrics-listen", ":" + strconv.Itoa(MetricsPort)}
	if opts.AppUser != "" {
		flags = append(flags, "--app-user", opts.AppUser, "--app-database", opts.AppDatabase)
	}
	var mount *corev1.VolumeMount
	if opts.QueriesConfigMap != "" {
		key := opts.QueriesKey
		if key == "" {
			key = QueriesFile
		}
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: queriesVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: opts.QueriesConfigMap},
			Items:                []corev1.KeyToPath{{Key: key, Path: QueriesFile}},
			Optional:             ptr.To(true),
		}}})
		mount = &corev1.VolumeMount{Name: queriesVolume, MountPath: queriesDir, ReadOnly: true}
		flags = append(flags, "--queries", queriesDir+"/"+QueriesFile)
	}
	port := corev1.ContainerPort{Name: MetricsPortName, ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP}
	if agent := container(spec, AgentContainer); agent != nil {
		agent.Command = append(agent.Command, flags...)
		agent.Ports = append(agent.Ports, port)
		if mount != nil {
			agent.VolumeMounts = append(agent.VolumeMounts, *mount)
		}
		return nil
	}
	server.VolumeMounts = append(server.VolumeMounts, corev1.VolumeMount{Name: socketVolume, MountPath: SocketDir})
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: binVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))}}},
		corev1.Volume{Name: socketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))}}},
	)
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:            InstallContainer,
		Image:           opts.OperatorImage,
		Command:         []string{AgentImagePath, "install", binDir + "/deckhand-instance"},
		VolumeMounts:    []corev1.VolumeMount{{Name: binVolume, MountPath: binDir}},
		SecurityContext: server.SecurityContext.DeepCopy(),
		Resources:       smallResources(),
	})
	var env []corev1.EnvVar
	for _, e := range server.Env {
		if e.Name == "PGPORT" {
			env = append(env, e)
		}
	}
	mounts := []corev1.VolumeMount{
		{Name: binVolume, MountPath: binDir, ReadOnly: true},
		{Name: socketVolume, MountPath: SocketDir},
	}
	if mount != nil {
		mounts = append(mounts, *mount)
	}
	spec.Containers = append(spec.Containers, corev1.Container{
		Name:            MetricsContainer,
		Image:           server.Image,
		Command:         append([]string{binDir + "/deckhand-instance", "metrics", "--socket-dir", SocketDir}, flags...),
		Env:             env,
		Ports:           []corev1.ContainerPort{port},
		VolumeMounts:    mounts,
		SecurityContext: server.SecurityContext.DeepCopy(),
		Resources:       smallResources(),
	})
	return nil
}
