package database

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// The core of this package (objects, status, backups, restore, deletion)
// serves more than one API: a Database with its DatabaseBackups, and a
// MySQLCluster (operator/mysqlcluster) with its MySQLBackupInstances. It
// works on a Cluster and a Backup, which a Kind's adapters make from the
// API's objects and write back into them. Each Kind has its own label and
// finalizer keys, so two controllers' label-selected caches never see each
// other's objects, and its own metrics.

// Cluster is the cluster being reconciled, whichever API it came from.
// Spec is in the Database's terms (the larger of the two APIs); Status is
// what the core fills, and the Kind's adapter copies back.
type Cluster struct {
	metav1.ObjectMeta
	// Object is the API object: owner of what the core creates, subject of
	// its Events, holder of its finalizer.
	Object client.Object
	Kind   *Kind
	Spec   dbv1.DatabaseSpec
	// Secrets names the Secrets the servers read.
	Secrets ClusterSecrets
	Status  dbv1.DatabaseStatus
}

// ClusterSecrets are the Secrets of a cluster. The operator creates each
// one that does not exist, with a generated password.
type ClusterSecrets struct {
	// Superuser holds "password" (and "username" when the operator made
	// it).
	Superuser string
	// SuperuserNamedByUser: the user named that Secret (MySQLCluster's
	// spec.secret), so one that exists is used whoever made it.
	SuperuserNamedByUser bool
	// App holds the app role's connection details; empty: none.
	App string
	// Replication holds the replication account's "password"; empty: the
	// engine uses the superuser's.
	Replication string
}

// Backup is one backup, whichever API it came from. Status is in the
// DatabaseBackup's terms (phases Pending, Running, Completed, Failed).
type Backup struct {
	metav1.ObjectMeta
	Object client.Object
	// Cluster is the name of the cluster it backs up.
	Cluster string
	// Schedule is the schedule object that made it, for APIs with one.
	Schedule string
	// Method: a dump, or a base backup in the WAL archive (Databases
	// only).
	Method dbv1.BackupMethod
	// Keep: retention never deletes it.
	Keep   bool
	Status dbv1.DatabaseBackupStatus
}

// ClusterAPI reads and writes one API's cluster objects.
type ClusterAPI interface {
	// New is an empty object of the kind.
	New() client.Object
	// View is the core's view of obj.
	View(obj client.Object) *Cluster
	// SetStatus writes c.Status into obj's status.
	SetStatus(obj client.Object, c *Cluster)
	// List are the clusters of a namespace.
	List(ctx context.Context, r client.Reader, namespace string) ([]*Cluster, error)
}

// BackupAPI reads and writes one API's backup objects.
type BackupAPI interface {
	New() client.Object
	View(obj client.Object) *Backup
	SetStatus(obj client.Object, b *Backup)
	// List are the backups of a namespace.
	List(ctx context.Context, r client.Reader, namespace string) ([]*Backup, error)
	// ForCluster is a new backup of c (to be created) with name and
	// labels.
	ForCluster(c *Cluster, name string, labels map[string]string) client.Object
	// VolumeSize is the size (and StorageClass) of a cluster's backup
	// volume when b's Job creates it.
	VolumeSize(ctx context.Context, r client.Reader, c *Cluster, b *Backup) (string, *string, error)
}

// Keys are the label, annotation and finalizer keys of one Kind's objects.
type Keys struct {
	// Cluster names the cluster on every object it owns; the owned-object
	// cache selects it.
	Cluster string
	// Component is "server", "init", "backup", ... (Services select
	// servers only).
	Component string
	// Role is "primary" or "standby" on server pods.
	Role string
	// Connection on the app Secret is a hash of its connection details.
	Connection string
	// Scripts on the pod template is the scripts' hash.
	Scripts string
	// BackupReason on backups the operator makes.
	BackupReason string
	// FinalizerDeletionPolicy on a cluster, FinalizerBackupFile on a
	// backup.
	FinalizerDeletionPolicy string
	FinalizerBackupFile     string
	// SkipFinalBackup, AllowUnknownVersion and RemoveOldData are
	// annotations a user sets on a cluster.
	SkipFinalBackup     string
	AllowUnknownVersion string
	RemoveOldData       string
	// ClusterUID on the Secrets and backups the operator makes is the UID
	// of the cluster it made them for (names are reused; UIDs are not);
	// KeptFrom on the Secrets and volumes a Retain deletion kept is the UID
	// of the cluster that kept them. A new cluster of the same name adopts
	// kept Secrets only when both agree with the kept volumes (see
	// adoptKeptSecrets).
	ClusterUID string
	KeptFrom   string
	// UpgradeAttempt (a label) and ImageChange on a pre-upgrade backup bind
	// it to the one upgrade attempt that made it.
	UpgradeAttempt string
	ImageChange    string
	// HeldBy prefixes the annotations of holds on a backup (holds.go).
	HeldBy string
	// Verify on a backup asks for one verification now; VerifyRequest on
	// a verification Job names the request it runs (verify.go).
	Verify        string
	VerifyRequest string
	// TLSDefault on a cluster records whether TLS is on when its spec
	// leaves it unset (tls.go).
	TLSDefault string
}

// KeysFor are the keys of a Kind under one prefix (its API group); the
// cluster label is prefix/cluster.
func KeysFor(prefix, cluster string) Keys {
	return Keys{
		Cluster:                 prefix + "/" + cluster,
		Component:               prefix + "/component",
		Role:                    prefix + "/role",
		Connection:              prefix + "/connection",
		Scripts:                 prefix + "/scripts",
		BackupReason:            prefix + "/backup-reason",
		FinalizerDeletionPolicy: prefix + "/deletion-policy",
		FinalizerBackupFile:     prefix + "/backup-file",
		SkipFinalBackup:         prefix + "/skip-final-backup",
		AllowUnknownVersion:     prefix + "/allow-unknown-version",
		RemoveOldData:           prefix + "/remove-old-data",
		ClusterUID:              prefix + "/" + cluster + "-uid",
		KeptFrom:                prefix + "/kept-from",
		UpgradeAttempt:          prefix + "/upgrade-attempt",
		ImageChange:             prefix + "/image-change",
		HeldBy:                  "held-by." + prefix + "/",
		Verify:                  prefix + "/verify",
		VerifyRequest:           prefix + "/verify-request",
		TLSDefault:              prefix + "/tls-default",
	}
}

// Kind is one API the core serves.
type Kind struct {
	// Name is the controller's name (in --controllers, Events' reporter,
	// metrics' prefix).
	Name         string
	FieldManager string
	// ClusterGVK and BackupGVK are the API's kinds; their Kind names appear
	// in messages.
	ClusterGVK, BackupGVK schema.GroupVersionKind
	// AppName is app.kubernetes.io/name on the objects.
	AppName string
	// MetricLabel is the label naming a cluster in the Kind's metrics
	// (whose names start deckhand_<Name>_).
	MetricLabel string
	Keys        Keys
	Clusters    ClusterAPI
	Backups     BackupAPI
	Engines     map[dbv1.Engine]engine.Engine
	// RequirePinnedImage: an image without a version in its tag keeps
	// VersionKnown False (reason ImageNotPinned) even once a server
	// reported its version, since a restart may run another.
	RequirePinnedImage bool
	// MajorUpgrades: the Kind's status keeps status.upgrade (the step a
	// major-version upgrade is at), so the core carries major upgrades
	// out; without it they are refused (UpgradeBlocked,
	// MajorUpgradeNotAutomated).
	MajorUpgrades bool
	// StandbyBackups: the Kind's engine reads a backup from a standby when
	// the backup Job finds its lag within the bound (engine.Backup.Standby);
	// without it every backup reads from the primary.
	StandbyBackups bool
	// Words translate the core's messages, written in the Database's
	// words (Database, DatabaseBackup, storage-size), into the Kind's;
	// nil for the Database. Events go through them (SetupKind), and the
	// Kind's adapters pass condition messages through Say.
	Words   *strings.Replacer
	metrics *metrics
}

// NewKind fills in what every Kind has.
func NewKind(k Kind) *Kind {
	k.metrics = newMetrics(k.Name, k.ClusterGVK.Kind, k.MetricLabel)
	return &k
}

// MetricNames are the names of the Kind's metrics (the chart's alerts and
// dashboard may use only these).
func (k *Kind) MetricNames() []string { return k.metrics.names }

// Say is msg in the Kind's words.
func (k *Kind) Say(msg string) string {
	if k.Words == nil {
		return msg
	}
	return k.Words.Replace(msg)
}

// SayConditions translates condition reasons and messages (see Words).
func (k *Kind) SayConditions(conds []metav1.Condition) []metav1.Condition {
	if k.Words == nil || conds == nil {
		return conds
	}
	out := make([]metav1.Condition, len(conds))
	for i, c := range conds {
		c.Reason, c.Message = k.Say(c.Reason), k.Say(c.Message)
		out[i] = c
	}
	return out
}

// wordsRecorder sends Events in a Kind's words.
type wordsRecorder struct {
	events.EventRecorder
	kind *Kind
}

func (w wordsRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	w.EventRecorder.Eventf(regarding, related, eventtype, w.kind.Say(reason), action, "%s", w.kind.Say(fmt.Sprintf(note, args...)))
}

// clusterKind and backupKind name the API's kinds in messages.
func (k *Kind) clusterKind() string { return k.ClusterGVK.Kind }
func (k *Kind) backupKind() string  { return k.BackupGVK.Kind }

// getCluster reads one cluster.
func (k *Kind) getCluster(ctx context.Context, r client.Reader, key client.ObjectKey) (*Cluster, error) {
	obj := k.Clusters.New()
	if err := r.Get(ctx, key, obj); err != nil {
		return nil, err
	}
	return k.Clusters.View(obj), nil
}

// getBackup reads one backup.
func (k *Kind) getBackup(ctx context.Context, r client.Reader, key client.ObjectKey) (*Backup, error) {
	obj := k.Backups.New()
	if err := r.Get(ctx, key, obj); err != nil {
		return nil, err
	}
	return k.Backups.View(obj), nil
}

// backupsOf are the dumps of one cluster: what its schedule, retention,
// verification and restores work with.
func (k *Kind) backupsOf(ctx context.Context, r client.Reader, c *Cluster) ([]*Backup, error) {
	return k.backupsOfMethod(ctx, r, c, dbv1.BackupMethodDump)
}

// baseBackupsOf are the base backup objects of one cluster
// (basebackups.go).
func (k *Kind) baseBackupsOf(ctx context.Context, r client.Reader, c *Cluster) ([]*Backup, error) {
	return k.backupsOfMethod(ctx, r, c, dbv1.BackupMethodBaseBackup)
}

func (k *Kind) backupsOfMethod(ctx context.Context, r client.Reader, c *Cluster, m dbv1.BackupMethod) ([]*Backup, error) {
	all, err := k.Backups.List(ctx, r, c.Namespace)
	if err != nil {
		return nil, err
	}
	var out []*Backup
	for _, b := range all {
		if b.Cluster == c.Name && methodOf(b) == m {
			out = append(out, b)
		}
	}
	return out, nil
}

// methodOf is b's method; an object written before methods existed is a
// dump.
func methodOf(b *Backup) dbv1.BackupMethod {
	if b.Method == "" {
		return dbv1.BackupMethodDump
	}
	return b.Method
}

// createBackup creates a backup of c for a reason (scheduled, final,
// pre-upgrade), with the cluster's UID and any extra labels and
// annotations; one that exists already is not an error.
func (r *Reconciler) createBackup(ctx context.Context, db *Cluster, name, reason string, labels, annotations map[string]string) (bool, error) {
	l := withLabels(map[string]string{db.Kind.Keys.Cluster: db.Name, db.Kind.Keys.BackupReason: reason}, labels)
	obj := db.Kind.Backups.ForCluster(db, name, l)
	obj.SetAnnotations(withLabels(map[string]string{db.Kind.Keys.ClusterUID: string(db.UID)}, annotations))
	err := r.Client.Create(ctx, obj)
	if err != nil {
		if client.IgnoreAlreadyExists(err) == nil {
			return false, nil
		}
		return false, fmt.Errorf("creating %s %s: %w", db.Kind.backupKind(), name, err)
	}
	return true, nil
}
