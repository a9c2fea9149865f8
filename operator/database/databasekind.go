package database

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// DatabaseKind is the Database API (with DatabaseBackup) on the core.
var DatabaseKind = NewKind(Kind{
	Name:         Name,
	FieldManager: FieldManager,
	ClusterGVK:   dbv1.GroupVersion.WithKind("Database"),
	BackupGVK:    dbv1.GroupVersion.WithKind("DatabaseBackup"),
	AppName:      "database",
	MetricLabel:  "database",
	Keys: Keys{
		Cluster: LabelDatabase, Component: LabelComponent, Role: LabelRole, Connection: LabelConnection,
		Scripts: AnnotationScripts, BackupReason: LabelBackupReason,
		FinalizerDeletionPolicy: FinalizerDeletionPolicy, FinalizerBackupFile: FinalizerBackupFile,
		SkipFinalBackup: AnnotationSkipFinalBackup, AllowUnknownVersion: AnnotationAllowUnknownVersion,
		RemoveOldData: AnnotationRemoveOldData,
		ClusterUID:    AnnotationDatabaseUID, KeptFrom: AnnotationKeptFrom,
		UpgradeAttempt: LabelUpgradeAttempt, ImageChange: AnnotationImageChange,
		HeldBy: AnnotationPrefixHeldBy, Verify: AnnotationVerify, VerifyRequest: AnnotationVerifyRequest,
		TLSDefault: AnnotationTLSDefault,
	},
	Clusters: databases{},
	Backups:  databaseBackups{},
	Engines:  Engines,
	// status.upgrade is the Database's own.
	MajorUpgrades: true,
	// backup.sh measures a standby's replay lag (engine.Backup.Standby).
	StandbyBackups: true,
})

// databases adapts Databases to the core.
type databases struct{}

func (databases) New() client.Object { return &dbv1.Database{} }

func (databases) View(obj client.Object) *Cluster {
	db := obj.(*dbv1.Database)
	return &Cluster{
		ObjectMeta: *db.ObjectMeta.DeepCopy(),
		Object:     db,
		Kind:       DatabaseKind,
		Spec:       *db.Spec.DeepCopy(),
		Secrets: ClusterSecrets{
			Superuser: db.Name + "-superuser", App: db.Name + "-app",
			// The password of the role standbys replicate as.
			Replication: db.Name + "-replication",
		},
		Status: *db.Status.DeepCopy(),
	}
}

func (databases) SetStatus(obj client.Object, c *Cluster) {
	obj.(*dbv1.Database).Status = c.Status
}

func (d databases) List(ctx context.Context, r client.Reader, namespace string) ([]*Cluster, error) {
	var list dbv1.DatabaseList
	if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	out := make([]*Cluster, len(list.Items))
	for i := range list.Items {
		out[i] = d.View(&list.Items[i])
	}
	return out, nil
}

// databaseBackups adapts DatabaseBackups to the core.
type databaseBackups struct{}

func (databaseBackups) New() client.Object { return &dbv1.DatabaseBackup{} }

func (databaseBackups) View(obj client.Object) *Backup {
	b := obj.(*dbv1.DatabaseBackup)
	return &Backup{
		ObjectMeta: *b.ObjectMeta.DeepCopy(),
		Object:     b,
		Cluster:    b.Spec.Database,
		Method:     b.Spec.Method,
		Keep:       b.Spec.Keep,
		Status:     *b.Status.DeepCopy(),
	}
}

func (databaseBackups) SetStatus(obj client.Object, b *Backup) {
	obj.(*dbv1.DatabaseBackup).Status = b.Status
}

func (d databaseBackups) List(ctx context.Context, r client.Reader, namespace string) ([]*Backup, error) {
	var list dbv1.DatabaseBackupList
	if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	out := make([]*Backup, len(list.Items))
	for i := range list.Items {
		out[i] = d.View(&list.Items[i])
	}
	return out, nil
}

func (databaseBackups) ForCluster(c *Cluster, name string, labels map[string]string) client.Object {
	return &dbv1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: labels},
		Spec:       dbv1.DatabaseBackupSpec{Database: c.Name},
	}
}

// VolumeSize: the data volume's size unless spec.backup.storage says
// otherwise, on the default StorageClass unless it names one.
func (databaseBackups) VolumeSize(_ context.Context, _ client.Reader, db *Cluster, _ *Backup) (string, *string, error) {
	size := db.Spec.StorageSize
	var class *string
	if b := db.Spec.Backup; b != nil && b.Storage != nil && b.Storage.Volume != nil {
		if b.Storage.Volume.Size != "" {
			size = b.Storage.Volume.Size
		}
		class = b.Storage.Volume.StorageClassName
	}
	return size, class, nil
}
