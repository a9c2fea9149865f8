package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ObjectStore is an S3-compatible object store that a Database's primary
// archives every WAL segment and its base backups into (continuous
// archiving, with Barman Cloud in a sidecar of each server pod:
// docs/guides/database-backup.md, Continuous WAL archiving), or that a
// new Database recovers from (recovery.source). The archive of a Database is
// s3://<bucket>/<path>/<Database name>/. The keys are read by the pods
// from the Secrets named, never by the operator.
type ObjectStore struct {
	// Endpoint is the store's https:// URL (https://s3.example.com:9000);
	// empty: AWS S3 itself, found from the region. Plain http is refused:
	// the keys and the WAL would cross the network unencrypted.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self == '' || (isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != '')",messageExpression="'objectStore.endpoint must be an https:// URL such as https://s3.example.com:9000 (or empty for AWS S3), not \"' + self + '\"'"
	// +kubebuilder:validation:XValidation:rule="self == '' || !isURL(self) || (url(self).getQuery().size() == 0 && !self.contains('#') && !self.contains('@'))",message="objectStore.endpoint must have no user, query or fragment: put the bucket in bucket and the prefix in path"
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// Bucket is the bucket's name (S3's rules: 3 to 63 lower-case
	// letters, digits, '.' and '-', starting and ending with a letter or
	// digit). It must exist: the operator does not create it.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="objectStore.bucket must not be empty: name the bucket that holds the archive"
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || (self.matches('^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$') && !self.contains('..') && !self.matches('^[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+$'))",messageExpression="'objectStore.bucket must be an S3 bucket name (3 to 63 lower-case letters, digits, \\'.\\' and \\'-\\', starting and ending with a letter or digit, not like an IP address), not \"' + self + '\"'"
	Bucket string `json:"bucket"`

	// Path is a prefix inside the bucket (clusters/production); the
	// archive is <path>/<Database name>/ under it. Empty: the bucket's
	// top.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/?$')",messageExpression="'objectStore.path must be a key prefix of letters, digits, \\'.\\', \\'_\\', \\'-\\' and \\'/\\' with no leading \\'/\\' and no empty part (e.g. clusters/production), not \"' + self + '\"'"
	// +optional
	Path string `json:"path,omitempty"`

	// Region of the bucket; default us-east-1 (what most S3-compatible
	// stores accept).
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9][a-z0-9-]*$')",messageExpression="'objectStore.region must be a region name such as eu-west-1, not \"' + self + '\"'"
	// +optional
	Region string `json:"region,omitempty"`

	// PathStyle addresses the bucket in the URL's path
	// (https://endpoint/bucket/key), as a store without a DNS name per
	// bucket needs; false: virtual-hosted
	// (https://bucket.endpoint/key). Default true.
	// +kubebuilder:default=true
	// +optional
	PathStyle *bool `json:"pathStyle,omitempty"`

	// Credentials are the store's keys, each a key of a Secret in the
	// Database's namespace. They are mounted as files into the archiver
	// of each server pod; the operator never reads them.
	Credentials ObjectStoreCredentials `json:"credentials"`

	// CABundle is a PEM bundle of the CAs to trust for the endpoint (a
	// store with a certificate of a private CA); absent: the archiver
	// image's system CAs.
	// +optional
	CABundle *CABundleSource `json:"caBundle,omitempty"`

	// Compression of the archived WAL: gzip (the default), bzip2 (smaller,
	// about three times the CPU), or none.
	// +kubebuilder:validation:XValidation:rule="self in ['gzip', 'bzip2', 'none']",messageExpression="'objectStore.compression must be gzip, bzip2 or none, not \"' + self + '\"'"
	// +kubebuilder:default=gzip
	// +optional
	Compression ObjectStoreCompression `json:"compression,omitempty"`

	// ArchiveTimeout is PostgreSQL's archive_timeout: a segment that is
	// not full is switched and archived after this long, which bounds how
	// much committed work a lost primary and volume can take with them
	// while writes are rare. Between 10s and 1h; default 60s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('1h')",message="objectStore.archiveTimeout must be between 10s and 1h (each switch archives a whole 16 MiB segment, mostly empty when writes are rare)"
	// +kubebuilder:default="60s"
	// +optional
	ArchiveTimeout *metav1.Duration `json:"archiveTimeout,omitempty"`

	// MaxParallel is how many WAL segments the archiver ships at once: the
	// one PostgreSQL asks for, and up to maxParallel-1 finished segments
	// after it, which PostgreSQL then finds archived (CloudNativePG's
	// wal.maxParallel). One upload at a time carries about 5 MB/s of WAL
	// with gzip (docs/performance.md): a primary that writes faster for
	// long builds a backlog in pg_wal, and more uploads at once shorten
	// it, for as much more CPU in the archiver. Between 1 and 16; default
	// 1. Not used in recovery.source.
	// +kubebuilder:validation:XValidation:rule="self >= 1 && self <= 16",message="objectStore.maxParallel must be between 1 and 16 (WAL segments archived at once)"
	// +kubebuilder:default=1
	// +optional
	MaxParallel int32 `json:"maxParallel,omitempty"`

	// BaseBackupInterval: the primary takes a physical base backup into
	// the archive whenever the archive's newest is this old, and at once
	// when it archives into an archive that has none (WAL alone recovers
	// nothing). A recovery replays the WAL from the base backup it starts
	// from, so a shorter interval makes recoveries shorter and the archive
	// larger. Between 1h and 720h (30 days); default 24h. Not used in
	// recovery.source.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h') && duration(self) <= duration('720h')",message="objectStore.baseBackupInterval must be between 1h and 720h (30 days)"
	// +kubebuilder:default="24h"
	// +optional
	BaseBackupInterval *metav1.Duration `json:"baseBackupInterval,omitempty"`

	// RetentionPolicy is how far back the archive must recover, as
	// CloudNativePG writes it: a number of days, weeks or months (30d,
	// 4w, 6m). After each base backup, the base backups no recovery to a
	// point in that window needs are deleted, with the WAL only they
	// needed (Barman's RECOVERY WINDOW). Empty: nothing is deleted. Not
	// used in recovery.source.
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule="self.matches('^[1-9][0-9]{0,3}[dwm]$')",messageExpression="'objectStore.retentionPolicy must be a number of days, weeks or months such as 30d, 4w or 6m, not \"' + self + '\"'"
	// +optional
	RetentionPolicy string `json:"retentionPolicy,omitempty"`
}

// ObjectStoreCompression is how archived WAL is compressed.
type ObjectStoreCompression string

// Compressions.
const (
	CompressionGzip  ObjectStoreCompression = "gzip"
	CompressionBzip2 ObjectStoreCompression = "bzip2"
	CompressionNone  ObjectStoreCompression = "none"
)

// ObjectStoreCredentials are the keys of an S3-compatible store.
type ObjectStoreCredentials struct {
	// AccessKeyID: the Secret key holding the access key ID.
	AccessKeyID KeyRef `json:"accessKeyID"`
	// SecretAccessKey: the Secret key holding the secret access key.
	SecretAccessKey KeyRef `json:"secretAccessKey"`
}

// KeyRef is a key of a Secret (the store's keys) or of a ConfigMap (a CA
// bundle may be either) in the Database's namespace.
type KeyRef struct {
	// Name of the Secret or ConfigMap.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",messageExpression="'name must be the name of a Secret or ConfigMap (lower-case letters, digits, \\'-\\' and \\'.\\'), not \"' + self + '\"'"
	Name string `json:"name"`
	// Key in its data.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",messageExpression="'key must be a key of the Secret or ConfigMap (letters, digits, \\'-\\', \\'_\\' and \\'.\\'), not \"' + self + '\"'"
	Key string `json:"key"`
}

// CABundleSource is where a CA bundle is: exactly one of a Secret's key
// or a ConfigMap's key.
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) != has(self.configMapKeyRef)",message="objectStore.caBundle needs exactly one of secretKeyRef or configMapKeyRef"
type CABundleSource struct {
	// +optional
	SecretKeyRef *KeyRef `json:"secretKeyRef,omitempty"`
	// +optional
	ConfigMapKeyRef *KeyRef `json:"configMapKeyRef,omitempty"`
}
