package postgres

import (
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// A base backup's verification (docs/design/database-backup.md,
// Verification of base backups): a Job pod that restores the base backup
// onto its scratch volume and recovers it to the restore point
// base-backup.sh made right after it, then checks the marker row,
// pg_amcheck and a write. Three containers share the scratch volume,
// each in the image that has its tools:
//   - the init container restore (the archiver image, Barman Cloud):
//     verify-base-restore.sh checks that the archive holds every segment
//     from the backup's start on, and restores the backup with recover.sh;
//   - the sidecar archiver (the archiver image; an init container that
//     keeps running, so the Job ends when the verification does): serves
//     the server's restore_command from the archive, as in a recovering
//     server's pod;
//   - the container verify (the Database's image): verify-base.sh replays
//     and checks, and writes the Report.
const (
	// VerifyBaseScript is the verify container's script (scripts/).
	VerifyBaseScript = "verify-base.sh"
	// VerifyBaseRestoreScript is the restore container's (archive/).
	VerifyBaseRestoreScript = "verify-base-restore.sh"
	// VerifyBaseRestoreContainer is the init container's name.
	VerifyBaseRestoreContainer = "restore"

	verifyBaseData    = scratchMount + "/pgdata"
	verifyBaseResults = scratchMount + "/verify-result"
)

// BaseBackupVerify is one base backup's verification.
type BaseBackupVerify struct {
	// Image is the archiver image.
	Image string
	// Store is the archive (its Server the Database's name).
	Store ArchiverOptions
	// BackupID is Barman's ID of the backup; BackupName its name, which
	// is also its restore point's and its marker row's.
	BackupID, BackupName string
}

// VerifyBasePod is the verification Job's pod for the base backup o
// names: engine.Pod's container verify, in c's image, and the init
// containers (the restore and the archiver sidecar) and volumes the
// caller adds to the pod spec with it. The scratch volume
// (engine.ScratchVolume) is the caller's, as for a dump's verification.
func VerifyBasePod(c engine.Cluster, o BaseBackupVerify) (engine.Pod, []corev1.Container) {
	env := []corev1.EnvVar{
		{Name: "PGDATA", Value: verifyBaseData},
		{Name: "RESULT_DIR", Value: verifyBaseResults},
		{Name: "SCRATCH_DIR", Value: scratchMount},
		{Name: "BACKUP_NAME", Value: o.BackupName},
		{Name: "PGUSER", Value: Superuser},
	}
	pod := engine.JobPod(c, "verify", VerifyBaseScript, env, nil, "", nil, podSecurityContext(c.RunAsUser))
	scratch := corev1.VolumeMount{Name: engine.ScratchVolume, MountPath: scratchMount}
	queue := corev1.VolumeMount{Name: ArchiveQueueVolume, MountPath: ArchiveQueueDir}
	pod.Container.VolumeMounts = append(pod.Container.VolumeMounts, scratch, queue)

	storeEnv, storeVolume := storeSettings("STORE_", ArchiveStoreVolume, ArchiveStoreDir, o.Store)
	sourceEnv, _ := storeSettings("SOURCE_STORE_", ArchiveStoreVolume, ArchiveStoreDir, o.Store)
	mounts := []corev1.VolumeMount{
		scratch,
		{Name: engine.ScriptsVolume, MountPath: scriptsDir, ReadOnly: true},
		{Name: ArchiveStoreVolume, MountPath: ArchiveStoreDir, ReadOnly: true},
		{Name: archiveTmpVolume, MountPath: "/tmp"},
	}
	common := []corev1.EnvVar{
		{Name: "PGDATA", Value: verifyBaseData},
		{Name: "TMPDIR", Value: "/tmp"},
		{Name: "HOME", Value: "/tmp"},
	}
	restore := corev1.Container{
		Name:    VerifyBaseRestoreContainer,
		Image:   o.Image,
		Command: []string{"sh", path.Join(scriptsDir, VerifyBaseRestoreScript)},
		Env: slices.Concat(common, []corev1.EnvVar{
			{Name: "RESULT_DIR", Value: verifyBaseResults},
			{Name: "BACKUP_ID", Value: o.BackupID},
			{Name: "RECOVERY_TARGET_NAME", Value: o.BackupName},
			{Name: "RESTORE_COMMAND", Value: RestoreCommand()},
		}, storeEnv),
		VolumeMounts:             mounts,
		SecurityContext:          containerSecurityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
		}},
	}
	sidecar := corev1.Container{
		Name:          ArchiverContainer,
		Image:         o.Image,
		Command:       []string{"sh", path.Join(scriptsDir, ArchiverScript)},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env: slices.Concat(common, []corev1.EnvVar{
			{Name: "ARCHIVE_QUEUE", Value: ArchiveQueueDir},
			// Stop at once when the verification ends: this server is a
			// scratch copy that archives nothing.
			{Name: "ARCHIVER_STOP_GRACE", Value: "0"},
		}, sourceEnv),
		VolumeMounts:    slices.Concat(mounts, []corev1.VolumeMount{queue}),
		SecurityContext: containerSecurityContext(),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
		}},
	}
	pod.Volumes = append(pod.Volumes, storeVolume,
		corev1.Volume{Name: ArchiveQueueVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))},
		}},
		corev1.Volume{Name: archiveTmpVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("256Mi"))},
		}},
	)
	return pod, []corev1.Container{restore, sidecar}
}
