package postgres

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// DeleteBaseScript deletes one base backup from an archive (archive/).
const DeleteBaseScript = "delete-base.sh"

// DeleteBasePod is the pod of the Job that deletes the base backup
// backupID from the archive o names, with Barman Cloud in the archiver
// image: delete-base.sh, as uid, reading the store's keys from their
// Secrets. The scripts volume (engine.ScriptsVolume) is the caller's: a
// ConfigMap holding ArchiveScripts, since the Database whose scripts
// ConfigMap would hold them may be gone.
func DeleteBasePod(image string, uid int64, o ArchiverOptions, backupID string) engine.Pod {
	env, store := storeSettings("STORE_", ArchiveStoreVolume, ArchiveStoreDir, o)
	env = append(env,
		corev1.EnvVar{Name: "BACKUP_ID", Value: backupID},
		corev1.EnvVar{Name: "TMPDIR", Value: "/tmp"},
		corev1.EnvVar{Name: "HOME", Value: "/tmp"},
	)
	c := engine.Cluster{Image: image, RunAsUser: uid}
	pod := engine.JobPod(c, "delete", DeleteBaseScript, env, nil, "", nil, podSecurityContext(uid))
	pod.Container.VolumeMounts = slices.Concat(pod.Container.VolumeMounts, []corev1.VolumeMount{
		{Name: ArchiveStoreVolume, MountPath: ArchiveStoreDir, ReadOnly: true},
		{Name: archiveTmpVolume, MountPath: "/tmp"},
	})
	pod.Container.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("96Mi"),
	}}
	pod.Volumes = append(pod.Volumes, store, corev1.Volume{Name: archiveTmpVolume, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))},
	}})
	return pod
}
