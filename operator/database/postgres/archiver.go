package postgres

import (
	"fmt"
	"path"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// Continuous archiving in a server pod (docs/design/database-backup.md,
// Continuous archiving): the server's archive_command (wal-handoff.sh,
// plain sh) hands each segment to the archiver sidecar (archiver.sh, in
// an image with Barman Cloud) through a directory both mount; the sidecar
// runs wal-archive.sh, which ships through the sidecar's resident Barman
// Cloud process (wal-resident.sh). The server's image needs no archiver.
const (
	// HandoffScript is archive_command: sh wal-handoff.sh <queue> %p.
	HandoffScript = "wal-handoff.sh"
	// ArchiverScript is the sidecar's loop.
	ArchiverScript = "archiver.sh"
	// ResidentScript is the sidecar's resident Barman Cloud process
	// (modes archive and restore), which wal-archive.sh and
	// wal-restore.sh hand their files to.
	ResidentScript = "wal-resident.sh"

	// ArchiverContainer is the sidecar's name.
	ArchiverContainer = "archiver"
	// ArchiveQueueVolume is the directory the server and the sidecar
	// share, mounted at ArchiveQueueDir in both.
	ArchiveQueueVolume = "archive-queue"
	ArchiveQueueDir    = "/deckhand/archive-queue"
	// ArchiveStoreVolume holds the store's keys and CA bundle (a
	// projected volume of the Secrets and ConfigMap named), mounted in
	// the sidecar only, at ArchiveStoreDir.
	ArchiveStoreVolume = "archive-store"
	ArchiveStoreDir    = "/deckhand/archive-store"
	archiveTmpVolume   = "archive-tmp"

	// The files of ArchiveStoreVolume.
	accessKeyFile = "access-key-id"
	secretKeyFile = "secret-access-key"
	caFile        = "ca.crt"
	// superuserPasswordFile is the superuser's password, for the base
	// backups the primary's sidecar takes.
	superuserPasswordFile = "superuser-password"
)

// KeyRef is a key of a Secret or ConfigMap.
type KeyRef struct{ Name, Key string }

// ArchiverOptions are what the sidecar needs: the store (store.sh's
// settings) and its image.
type ArchiverOptions struct {
	Image string
	// Endpoint, Bucket, Prefix, Server, Region: STORE_*.
	Endpoint, Bucket, Prefix, Server, Region string
	PathStyle                                bool
	// Compression: gzip, bzip2 or none.
	Compression string
	// AccessKey and SecretKey are Secret keys; CASecret or CAConfigMap
	// (at most one) the CA bundle.
	AccessKey, SecretKey  KeyRef
	CASecret, CAConfigMap *KeyRef
	// SkipEmptyCheck: STORE_SKIP_EMPTY_CHECK=true (a Database continuing
	// the archive it was restored from).
	SkipEmptyCheck bool
	// BaseBackupEvery: the primary's sidecar takes a base backup when the
	// archive's newest is this old (at once when it has none); 0: none.
	BaseBackupEvery time.Duration
	// RetentionPolicy is Barman's retention policy ("RECOVERY WINDOW OF
	// 30 DAYS"), applied after each base backup; empty: keep everything.
	RetentionPolicy string
	// MaxParallel: WAL segments archived at once (ARCHIVE_MAX_PARALLEL,
	// archiver.sh); 0 or 1: one at a time.
	MaxParallel int32
}

// ArchiveParameters are the server settings that archive through the
// sidecar: archive_mode on (a primary archives; a standby, in recovery,
// does not), archive_command the hand-off, archive_timeout.
func ArchiveParameters(timeout time.Duration) map[string]string {
	return map[string]string{
		"archive_mode":    "on",
		"archive_command": fmt.Sprintf("sh %s %s %%p", path.Join(scriptsDir, HandoffScript), ArchiveQueueDir),
		"archive_timeout": strconv.Itoa(int(timeout.Round(time.Second).Seconds())) + "s",
	}
}

// AddArchiver adds the archiver sidecar to a server pod (its server is
// the container named server), archiving into the store o names.
func AddArchiver(spec *corev1.PodSpec, server string, o ArchiverOptions) error {
	sidecar, err := ensureSidecar(spec, server, o.Image)
	if err != nil {
		return err
	}
	env, volume := storeSettings("STORE_", ArchiveStoreVolume, ArchiveStoreDir, o)
	if o.SkipEmptyCheck {
		env = append(env, corev1.EnvVar{Name: "STORE_SKIP_EMPTY_CHECK", Value: "true"})
	}
	if o.MaxParallel > 1 {
		// Only when asked: the pods of every other Database keep their
		// template, so no rollout.
		env = append(env, corev1.EnvVar{Name: "ARCHIVE_MAX_PARALLEL", Value: strconv.Itoa(int(o.MaxParallel))})
	}
	if o.BaseBackupEvery > 0 {
		superuser, err := superuserOf(spec, server)
		if err != nil {
			return err
		}
		volume.Projected.Sources = append(volume.Projected.Sources, superuser.password)
		env = append(env,
			corev1.EnvVar{Name: "BASE_BACKUP_EVERY", Value: strconv.Itoa(int(o.BaseBackupEvery.Seconds()))},
			corev1.EnvVar{Name: "PGPORT", Value: superuser.port},
			corev1.EnvVar{Name: "PGUSER", Value: Superuser},
			corev1.EnvVar{Name: "SUPERUSER_PASSWORD_FILE", Value: ArchiveStoreDir + "/" + superuserPasswordFile},
		)
		if o.RetentionPolicy != "" {
			env = append(env, corev1.EnvVar{Name: "RETENTION_POLICY", Value: o.RetentionPolicy})
		}
	}
	sidecar.Env = append(sidecar.Env, env...)
	sidecar.VolumeMounts = append(sidecar.VolumeMounts, corev1.VolumeMount{Name: ArchiveStoreVolume, MountPath: ArchiveStoreDir, ReadOnly: true})
	spec.Volumes = append(spec.Volumes, volume)
	return nil
}

// superuser is how the sidecar reaches the server in its pod as the
// superuser: the port, and its Secret's password as a file.
type superuser struct {
	port     string
	password corev1.VolumeProjection
}

// superuserOf reads the superuser's settings from the server container's
// environment (PGPORT, PGPASSWORD from a Secret).
func superuserOf(spec *corev1.PodSpec, server string) (superuser, error) {
	var su superuser
	for _, c := range spec.Containers {
		if c.Name != server {
			continue
		}
		for _, e := range c.Env {
			switch {
			case e.Name == "PGPORT":
				su.port = e.Value
			case e.Name == "PGPASSWORD" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
				ref := e.ValueFrom.SecretKeyRef
				su.password = projectedKey(KeyRef{Name: ref.Name, Key: ref.Key}, superuserPasswordFile)
			}
		}
	}
	if su.port == "" || su.password.Secret == nil {
		return su, fmt.Errorf("the server container %q has no PGPORT or no PGPASSWORD from a Secret", server)
	}
	return su, nil
}

// ensureSidecar is the pod's archiver sidecar, added with the queue
// directory (mounted in the server too) and its temporary directory when
// the pod has none yet.
func ensureSidecar(spec *corev1.PodSpec, server, image string) (*corev1.Container, error) {
	var srv *corev1.Container
	for i := range spec.Containers {
		switch spec.Containers[i].Name {
		case ArchiverContainer:
			return &spec.Containers[i], nil
		case server:
			srv = &spec.Containers[i]
		}
	}
	if srv == nil {
		return nil, fmt.Errorf("the pod has no container %q", server)
	}
	srv.VolumeMounts = append(srv.VolumeMounts, corev1.VolumeMount{Name: ArchiveQueueVolume, MountPath: ArchiveQueueDir})
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: ArchiveQueueVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))},
		}},
		corev1.Volume{Name: archiveTmpVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("256Mi"))},
		}},
	)
	spec.Containers = append(spec.Containers, corev1.Container{
		Name:    ArchiverContainer,
		Image:   image,
		Command: []string{"sh", path.Join(scriptsDir, ArchiverScript)},
		Env: []corev1.EnvVar{
			{Name: "PGDATA", Value: pgdata},
			{Name: "ARCHIVE_QUEUE", Value: ArchiveQueueDir},
			{Name: "TMPDIR", Value: "/tmp"},
			{Name: "HOME", Value: "/tmp"},
		},
		VolumeMounts: []corev1.VolumeMount{
			// The data directory at the server's path: the segments' paths
			// are the server's, wal-archive.sh records its check there, and
			// restored segments are written there.
			{Name: engine.DataVolume, MountPath: dataMount},
			{Name: engine.ScriptsVolume, MountPath: scriptsDir, ReadOnly: true},
			{Name: ArchiveQueueVolume, MountPath: ArchiveQueueDir},
			{Name: archiveTmpVolume, MountPath: "/tmp"},
		},
		SecurityContext: containerSecurityContext(),
		// At rest: a resident Barman Cloud process (Python, boto3: about
		// 70 MiB; two while a Database recovers from another's archive);
		// gzip of a 16 MiB segment is short.
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("96Mi"),
		}},
	})
	return &spec.Containers[len(spec.Containers)-1], nil
}

// storeSettings are a store's settings as store.sh reads them, each name
// prefixed with prefix (STORE_, or SOURCE_STORE_ for the archive a
// Database recovers from), and the projected volume named volume of its
// keys and CA bundle, whose files the settings name under dir.
func storeSettings(prefix, volume, dir string, o ArchiverOptions) ([]corev1.EnvVar, corev1.Volume) {
	sources := []corev1.VolumeProjection{projectedKey(o.AccessKey, accessKeyFile), projectedKey(o.SecretKey, secretKeyFile)}
	env := []corev1.EnvVar{
		{Name: prefix + "ENDPOINT", Value: o.Endpoint},
		{Name: prefix + "BUCKET", Value: o.Bucket},
		{Name: prefix + "PREFIX", Value: o.Prefix},
		{Name: prefix + "SERVER", Value: o.Server},
		{Name: prefix + "REGION", Value: o.Region},
		{Name: prefix + "PATH_STYLE", Value: strconv.FormatBool(o.PathStyle)},
		{Name: prefix + "COMPRESSION", Value: o.Compression},
		{Name: prefix + "ACCESS_KEY_FILE", Value: dir + "/" + accessKeyFile},
		{Name: prefix + "SECRET_KEY_FILE", Value: dir + "/" + secretKeyFile},
	}
	if ca := caBundle(o); ca != nil {
		sources = append(sources, *ca)
		env = append(env, corev1.EnvVar{Name: prefix + "CA_FILE", Value: dir + "/" + caFile})
	}
	// 0440: the files' group is the pod's fsGroup, the servers' own
	// group; nobody else reads the keys.
	return env, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: sources, DefaultMode: ptr.To[int32](0o440)},
	}}
}

// The store's files are projected optional: a Secret or ConfigMap missing
// or misnamed must not keep the server from starting; the sidecar says
// what it cannot read, and the file appears when its source does.

// projectedKey projects one key of a Secret as the file path.
func projectedKey(ref KeyRef, path string) corev1.VolumeProjection {
	return corev1.VolumeProjection{Secret: &corev1.SecretProjection{
		LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name},
		Items:                []corev1.KeyToPath{{Key: ref.Key, Path: path}},
		Optional:             ptr.To(true),
	}}
}

// caBundle projects the store's CA bundle, from a Secret or a ConfigMap;
// nil without one.
func caBundle(o ArchiverOptions) *corev1.VolumeProjection {
	switch {
	case o.CASecret != nil:
		p := projectedKey(*o.CASecret, caFile)
		return &p
	case o.CAConfigMap != nil:
		return &corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.CAConfigMap.Name},
			Items:                []corev1.KeyToPath{{Key: o.CAConfigMap.Key, Path: caFile}},
			Optional:             ptr.To(true),
		}}
	}
	return nil
}
