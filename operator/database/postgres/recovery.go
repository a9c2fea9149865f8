package postgres

import (
	"fmt"
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// Point-in-time recovery of a new Database from an archive
// (docs/design/database-backup.md, Point-in-time recovery): the init
// container recover (recover-primary.sh, in the archiver image) fills the
// primary's empty volume with a base backup and the recovery settings;
// bootstrap.sh replays the archive to the target and promotes before the
// server serves, its restore_command handing each file to the archiver
// sidecar, which fetches it from the source archive.
const (
	// RecoverContainer is the init container's name.
	RecoverContainer = "recover"
	// RecoverPrimaryScript is its entry point.
	RecoverPrimaryScript = "recover-primary.sh"
	// ScriptsRecoveryKey is the scripts ConfigMap's key that says whether
	// the recovery is still to be done: RecoveryPending or RecoveryDone.
	ScriptsRecoveryKey = "recovery"
	RecoveryPending    = "pending"
	RecoveryDone       = "done"

	// RecoveryStoreVolume holds the source archive's keys and CA bundle,
	// mounted in the init container and the sidecar at RecoveryStoreDir.
	RecoveryStoreVolume = "recovery-store"
	RecoveryStoreDir    = "/deckhand/recovery-store"
)

// RecoveryOptions are the archive a new Database recovers from and the
// point it recovers to.
type RecoveryOptions struct {
	// Image is the archiver image (Barman Cloud, pg_waldump).
	Image string
	// Source is the archive's store; its Server is the name the archive
	// was written under (the source Database's).
	Source ArchiverOptions
	// At most one target (none: the end of the archive): a time (RFC
	// 3339), an LSN, a restore point's name, a transaction ID, or
	// Immediate (as soon as the base backup is consistent).
	TargetTime, TargetLSN, TargetName, TargetXID string
	TargetImmediate                              bool
	// Exclusive stops just before the target.
	Exclusive bool
	// Timeline is latest (the default), current or a number.
	Timeline string
	// BackupID is the base backup to start from; empty: chosen for the
	// target.
	BackupID string
}

// RestoreCommand is restore_command while a server recovers: the hand-off
// of each file to the archiver sidecar.
func RestoreCommand() string {
	return fmt.Sprintf("sh %s --restore %s %%f %%p", path.Join(scriptsDir, HandoffScript), ArchiveQueueDir)
}

// AddRecovery makes a server pod (its server is the container named
// server) recover from the archive o names when it is the primary and its
// volume is empty: the init container, and the archiver sidecar with the
// source archive's settings.
func AddRecovery(spec *corev1.PodSpec, server string, o RecoveryOptions) error {
	sidecar, err := ensureSidecar(spec, server, o.Image)
	if err != nil {
		return err
	}
	sourceEnv, volume := storeSettings("SOURCE_STORE_", RecoveryStoreVolume, RecoveryStoreDir, o.Source)
	sidecar.Env = append(sidecar.Env, sourceEnv...)
	storeMount := corev1.VolumeMount{Name: RecoveryStoreVolume, MountPath: RecoveryStoreDir, ReadOnly: true}
	sidecar.VolumeMounts = append(sidecar.VolumeMounts, storeMount)
	spec.Volumes = append(spec.Volumes, volume)

	initEnv, _ := storeSettings("STORE_", RecoveryStoreVolume, RecoveryStoreDir, o.Source)
	initEnv = append([]corev1.EnvVar{
		{Name: "PGDATA", Value: pgdata},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "TMPDIR", Value: "/tmp"},
		{Name: "HOME", Value: "/tmp"},
		{Name: "RESTORE_COMMAND", Value: RestoreCommand()},
	}, initEnv...)
	for _, kv := range []struct{ name, value string }{
		{"RECOVERY_TARGET_TIME", o.TargetTime},
		{"RECOVERY_TARGET_LSN", o.TargetLSN},
		{"RECOVERY_TARGET_NAME", o.TargetName},
		{"RECOVERY_TARGET_XID", o.TargetXID},
		{"RECOVERY_TARGET_IMMEDIATE", strconv.FormatBool(o.TargetImmediate)},
		{"RECOVERY_TARGET_EXCLUSIVE", strconv.FormatBool(o.Exclusive)},
		{"RECOVERY_TARGET_TIMELINE", o.Timeline},
		{"BACKUP_ID", o.BackupID},
	} {
		if kv.value != "" {
			initEnv = append(initEnv, corev1.EnvVar{Name: kv.name, Value: kv.value})
		}
	}
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:    RecoverContainer,
		Image:   o.Image,
		Command: []string{"sh", path.Join(scriptsDir, RecoverPrimaryScript)},
		Env:     initEnv,
		VolumeMounts: []corev1.VolumeMount{
			{Name: engine.DataVolume, MountPath: dataMount},
			{Name: engine.ScriptsVolume, MountPath: scriptsDir, ReadOnly: true},
			storeMount,
			{Name: archiveTmpVolume, MountPath: "/tmp"},
		},
		SecurityContext: containerSecurityContext(),
		// The operator reads why a recovery was refused (the window of
		// the archive, say) from the end of its log.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// barman-cloud-restore downloads and decompresses the base backup.
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
		}},
	})
	return nil
}
