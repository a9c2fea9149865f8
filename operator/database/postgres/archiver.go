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
// runs wal-archive.sh. The server's image needs no archiver.
const (
	// HandoffScript is archive_command: sh wal-handoff.sh <queue> %p.
	HandoffScript = "wal-handoff.sh"
	// ArchiverScript is the sidecar's loop.
	ArchiverScript = "archiver.sh"

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
// the container named server) and the queue directory to both.
func AddArchiver(spec *corev1.PodSpec, server string, o ArchiverOptions) error {
	var srv *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == server {
			srv = &spec.Containers[i]
		}
	}
	if srv == nil {
		return fmt.Errorf("the pod has no container %q", server)
	}
	srv.VolumeMounts = append(srv.VolumeMounts, corev1.VolumeMount{Name: ArchiveQueueVolume, MountPath: ArchiveQueueDir})

	sources := []corev1.VolumeProjection{projectedKey(o.AccessKey, accessKeyFile), projectedKey(o.SecretKey, secretKeyFile)}
	env := []corev1.EnvVar{
		{Name: "PGDATA", Value: pgdata},
		{Name: "ARCHIVE_QUEUE", Value: ArchiveQueueDir},
		{Name: "TMPDIR", Value: "/tmp"},
		{Name: "HOME", Value: "/tmp"},
		{Name: "STORE_ENDPOINT", Value: o.Endpoint},
		{Name: "STORE_BUCKET", Value: o.Bucket},
		{Name: "STORE_PREFIX", Value: o.Prefix},
		{Name: "STORE_SERVER", Value: o.Server},
		{Name: "STORE_REGION", Value: o.Region},
		{Name: "STORE_PATH_STYLE", Value: strconv.FormatBool(o.PathStyle)},
		{Name: "STORE_COMPRESSION", Value: o.Compression},
		{Name: "STORE_ACCESS_KEY_FILE", Value: ArchiveStoreDir + "/" + accessKeyFile},
		{Name: "STORE_SECRET_KEY_FILE", Value: ArchiveStoreDir + "/" + secretKeyFile},
	}
	if ca := caBundle(o); ca != nil {
		sources = append(sources, *ca)
		env = append(env, corev1.EnvVar{Name: "STORE_CA_FILE", Value: ArchiveStoreDir + "/" + caFile})
	}
	if o.SkipEmptyCheck {
		env = append(env, corev1.EnvVar{Name: "STORE_SKIP_EMPTY_CHECK", Value: "true"})
	}
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: ArchiveQueueVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))},
		}},
		// 0440: the files' group is the pod's fsGroup, the servers' own
		// group; nobody else reads the keys.
		corev1.Volume{Name: ArchiveStoreVolume, VolumeSource: corev1.VolumeSource{
			Projected: &corev1.ProjectedVolumeSource{Sources: sources, DefaultMode: ptr.To[int32](0o440)},
		}},
		corev1.Volume{Name: archiveTmpVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("256Mi"))},
		}},
	)
	spec.Containers = append(spec.Containers, corev1.Container{
		Name:    ArchiverContainer,
		Image:   o.Image,
		Command: []string{"sh", path.Join(scriptsDir, ArchiverScript)},
		Env:     env,
		VolumeMounts: []corev1.VolumeMount{
			// The data directory at the server's path: the segments' paths
			// are the server's, and wal-archive.sh records its check there.
			{Name: engine.DataVolume, MountPath: dataMount},
			{Name: engine.ScriptsVolume, MountPath: scriptsDir, ReadOnly: true},
			{Name: ArchiveQueueVolume, MountPath: ArchiveQueueDir},
			{Name: ArchiveStoreVolume, MountPath: ArchiveStoreDir, ReadOnly: true},
			{Name: archiveTmpVolume, MountPath: "/tmp"},
		},
		SecurityContext: containerSecurityContext(),
		// Python and boto3 at rest; gzip of a 16 MiB segment is short.
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
		}},
	})
	return nil
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
