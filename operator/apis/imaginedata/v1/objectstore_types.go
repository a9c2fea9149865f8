package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ObjectStore is an S3-compatible object store that a Database's primary
// archives every WAL segment into (continuous archiving, with Barman
// Cloud in a sidecar of each server pod: docs/guides/database-backup.md,
// Continuous WAL archiving). The archive of a Database is
// s3://<bucket>/<path>/<Database name>/. The keys are read by the pods
// from the Secrets named, never by the operator.
type ObjectStore struct {
	// Endpoint is the store's https:// URL (https://s3.example.com:9000);
	// empty: AWS S3 itself, found from the region. Plain http is refused:
	// the keys and the WAL would cross the network unencrypted.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self == '' || (isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != '')",messageExpression="'backup.storage.objectStore.endpoint must be an https:// URL such as https://s3.example.com:9000 (or empty for AWS S3), not \"' + self + '\"'"
	// +kubebuilder:validation:XValidation:rule="self == '' || !isURL(self) || (url(self).getQuery().size() == 0 && !self.contains('#') && !self.contains('@'))",message="backup.storage.objectStore.endpoint must have no user, query or fragment: put the bucket in bucket and the prefix in path"
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// Bucket is the bucket's name (S3's rules: 3 to 63 lower-case
	// letters, digits, '.' and '-', starting and ending with a letter or
	// digit). It must exist: the operator does not create it.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="backup.storage.objectStore.bucket must not be empty: name the bucket to archive into"
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || (self.matches('^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$') && !self.contains('..') && !self.matches('^[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+$'))",messageExpression="'backup.storage.objectStore.bucket must be an S3 bucket name (3 to 63 lower-case letters, digits, \\'.\\' and \\'-\\', starting and ending with a letter or digit, not like an IP address), not \"' + self + '\"'"
	Bucket string `json:"bucket"`

	// Path is a prefix inside the bucket (clusters/production); the
	// archive is <path>/<Database name>/ under it. Empty: the bucket's
	// top.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/?$')",messageExpression="'backup.storage.objectStore.path must be a key prefix of letters, digits, \\'.\\', \\'_\\', \\'-\\' and \\'/\\' with no leading \\'/\\' and no empty part (e.g. clusters/production), not \"' + self + '\"'"
	// +optional
	Path string `json:"path,omitempty"`

	// Region of the bucket; default us-east-1 (what most S3-compatible
	// stores accept).
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9][a-z0-9-]*$')",messageExpression="'backup.storage.objectStore.region must be a region name such as eu-west-1, not \"' + self + '\"'"
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
	// +kubebuilder:validation:XValidation:rule="self in ['gzip', 'bzip2', 'none']",messageExpression="'backup.storage.objectStore.compression must be gzip, bzip2 or none, not \"' + self + '\"'"
	// +kubebuilder:default=gzip
	// +optional
	Compression ObjectStoreCompression `json:"compression,omitempty"`

	// ArchiveTimeout is PostgreSQL's archive_timeout: a segment that is
	// not full is switched and archived after this long, which bounds how
	// much committed work a lost primary and volume can take with them
	// while writes are rare. Between 10s and 1h; default 60s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('1h')",message="backup.storage.objectStore.archiveTimeout must be between 10s and 1h (each switch archives a whole 16 MiB segment, mostly empty when writes are rare)"
	// +kubebuilder:default="60s"
	// +optional
	ArchiveTimeout *metav1.Duration `json:"archiveTimeout,omitempty"`
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
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) != has(self.configMapKeyRef)",message="backup.storage.objectStore.caBundle needs exactly one of secretKeyRef or configMapKeyRef"
type CABundleSource struct {
	// +optional
	SecretKeyRef *KeyRef `json:"secretKeyRef,omitempty"`
	// +optional
	ConfigMapKeyRef *KeyRef `json:"configMapKeyRef,omitempty"`
}
