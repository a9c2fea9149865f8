package engine

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TLS: where the servers mount the server TLS Secret (Cluster.TLSSecret),
// and the Jobs that connect to them its ca.crt alone.
const (
	TLSVolume = "server-tls"
	TLSDir    = "/deckhand/tls"
	// TLSCAFile is the CA bundle the scripts verify the servers with.
	TLSCAFile = TLSDir + "/ca.crt"
)

// WithServerTLS gives a server's pod the cluster's server TLS Secret
// (tls.crt, tls.key, ca.crt) at TLSDir, readable by the pod's group only
// (its fsGroup), and sets TLS_DIR and TLS_CA_FILE. Without TLS
// (c.TLSSecret empty) the pod is returned as it is.
func WithServerTLS(c Cluster, pod Pod) Pod {
	if c.TLSSecret == "" {
		return pod
	}
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: TLSVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: c.TLSSecret, DefaultMode: ptr.To[int32](0o440),
	}}})
	pod.Container.VolumeMounts = append(pod.Container.VolumeMounts, corev1.VolumeMount{Name: TLSVolume, MountPath: TLSDir, ReadOnly: true})
	pod.Container.Env = append(pod.Container.Env,
		corev1.EnvVar{Name: "TLS_DIR", Value: TLSDir},
		corev1.EnvVar{Name: "TLS_CA_FILE", Value: TLSCAFile},
	)
	return pod
}

// WithCA gives a Job's pod that connects to the servers the CA bundle of
// a cluster with TLS (the ca.crt of its TLS Secret, never the key) and
// TLS_CA_FILE: its scripts verify the servers' certificates. Jobs that
// start servers of their own on 127.0.0.1 (upgrade, verification) need
// none.
func WithCA(c Cluster, pod Pod) Pod {
	if c.TLSSecret == "" {
		return pod
	}
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: TLSVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: c.TLSSecret, DefaultMode: ptr.To[int32](0o444),
		Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
	}}})
	pod.Container.VolumeMounts = append(pod.Container.VolumeMounts, corev1.VolumeMount{Name: TLSVolume, MountPath: TLSDir, ReadOnly: true})
	pod.Container.Env = append(pod.Container.Env, corev1.EnvVar{Name: "TLS_CA_FILE", Value: TLSCAFile})
	return pod
}
