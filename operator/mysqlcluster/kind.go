package mysqlcluster

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/mysql"
)

// EngineMySQL is the core's name of the MySQL/MariaDB engine.
const EngineMySQL dbv1.Engine = "MySQL"

// Label, annotation and finalizer keys of a MySQLCluster's objects: under
// its own group, so the Database controller's cache (which selects
// stable.imaginedata.co/database) never holds them, nor this one's a
// Database's.
var Keys = database.KeysFor(grtlv1.GroupVersion.Group, "cluster")

// Kind is the MySQLCluster API (with MySQLBackupInstance) on the Database
// core: the same code makes its objects, backups, restore and deletion,
// with the MySQL engine.
var Kind = database.NewKind(database.Kind{
	Name:         Name,
	FieldManager: FieldManager,
	ClusterGVK:   grtlv1.GroupVersion.WithKind("MySQLCluster"),
	BackupGVK:    grtlv1.GroupVersion.WithKind("MySQLBackupInstance"),
	AppName:      "mysqlcluster",
	MetricLabel:  "cluster",
	Keys:         Keys,
	Clusters:     clusters{},
	Backups:      instances{},
	Engines:      map[dbv1.Engine]engine.Engine{EngineMySQL: mysql.Engine{}},
	// grtl's example runs mysql:latest: reported, for good.
	RequirePinnedImage: true,
	// The core speaks of Databases; a MySQLCluster's user reads of
	// MySQLClusters, MySQLBackupInstances and spec.storage.
	Words: strings.NewReplacer(
		"DatabaseBackups", "MySQLBackupInstances", "DatabaseBackup", "MySQLBackupInstance",
		"Databases", "MySQLClusters", "Database", "MySQLCluster",
		"storage-size", "storage", "is Running", "is Started", "is Pending", "is Scheduled",
		"spec.podTemplate.runAsUser", "spec.runAsUser",
	),
})

// replicationSecret is the cluster's own Secret for the replication
// account, so the root Secret the user named holds root's password only.
func replicationSecret(name string) string { return name + "-replication" }

// clusters adapts MySQLClusters to the core.
type clusters struct{}

func (clusters) New() client.Object { return &grtlv1.MySQLCluster{} }

func (clusters) View(obj client.Object) *database.Cluster {
	mc := obj.(*grtlv1.MySQLCluster)
	st := mc.Status
	var backups *dbv1.BackupStatus
	if st.PreUpgradeBackup != "" || st.LastVerifiedBackup != "" {
		backups = &dbv1.BackupStatus{
			PreUpgradeBackup:       st.PreUpgradeBackup,
			LastVerifiedBackup:     st.LastVerifiedBackup,
			LastVerifiedBackupTime: st.LastVerifiedBackupTime,
		}
	}
	var backupSpec *dbv1.BackupSpec
	if mc.Spec.Backup != nil && mc.Spec.Backup.Verify != nil {
		backupSpec = &dbv1.BackupSpec{Verify: mc.Spec.Backup.Verify.DeepCopy()}
	}
	return &database.Cluster{
		ObjectMeta: *mc.ObjectMeta.DeepCopy(),
		Object:     mc,
		Kind:       Kind,
		Spec: dbv1.DatabaseSpec{
			// No app database: grtl's cluster had root only.
			Port:           mc.Spec.Port,
			StorageSize:    mc.Spec.Storage,
			Image:          mc.Spec.Image,
			Replicas:       mc.Spec.Replicas,
			Engine:         EngineMySQL,
			FromBackup:     mc.Spec.FromBackup,
			DeletionPolicy: dbv1.DeletionPolicy(mc.Spec.DeletionPolicy),
			// grtl's spec has no pod template: its pod settings (runAsUser,
			// nodeSelector, tolerations) sit in the spec itself, with a
			// Database's names and meaning.
			PodTemplate: podTemplateOf(mc),
			Backup:      backupSpec,
			TLS:         mc.Spec.TLS.DeepCopy(),
		},
		Secrets: database.ClusterSecrets{
			Superuser:            mc.Spec.Secret,
			SuperuserNamedByUser: true,
			Replication:          replicationSecret(mc.Name),
		},
		Status: dbv1.DatabaseStatus{
			ObservedGeneration: st.ObservedGeneration,
			Phase:              dbv1.Phase(st.Phase),
			Replicas:           st.Replicas,
			ReadyReplicas:      st.ReadyReplicas,
			Ready:              st.Ready,
			Primary:            st.Primary,
			CurrentImage:       st.CurrentImage,
			CurrentVersion:     st.CurrentVersion,
			Backup:             backups,
			Conditions:         cloneConditions(st.Conditions),
		},
	}
}

func (clusters) SetStatus(obj client.Object, c *database.Cluster) {
	mc := obj.(*grtlv1.MySQLCluster)
	image := c.Status.CurrentImage
	if image == "" {
		image = imageOf(mc)
	}
	var backups dbv1.BackupStatus
	if c.Status.Backup != nil {
		backups = *c.Status.Backup
	}
	mc.Status = grtlv1.MySQLClusterStatus{
		ObservedGeneration:     c.Status.ObservedGeneration,
		Phase:                  grtlv1.Phase(c.Status.Phase),
		Replicas:               c.Status.Replicas,
		ReadyReplicas:          c.Status.ReadyReplicas,
		Ready:                  c.Status.Ready,
		Primary:                c.Status.Primary,
		Flavor:                 mysql.Flavor(image),
		CurrentImage:           c.Status.CurrentImage,
		CurrentVersion:         c.Status.CurrentVersion,
		PreUpgradeBackup:       backups.PreUpgradeBackup,
		LastVerifiedBackup:     backups.LastVerifiedBackup,
		LastVerifiedBackupTime: backups.LastVerifiedBackupTime,
		Conditions:             Kind.SayConditions(c.Status.Conditions),
	}
}

func (c clusters) List(ctx context.Context, r client.Reader, namespace string) ([]*database.Cluster, error) {
	var list grtlv1.MySQLClusterList
	if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	out := make([]*database.Cluster, len(list.Items))
	for i := range list.Items {
		out[i] = c.View(&list.Items[i])
	}
	return out, nil
}

// podTemplateOf is the Database pod template a MySQLCluster's spec says.
func podTemplateOf(mc *grtlv1.MySQLCluster) *dbv1.PodTemplate {
	t := &dbv1.PodTemplate{RunAsUser: mc.Spec.RunAsUser, Tolerations: mc.Spec.Tolerations}
	if len(mc.Spec.NodeSelector) > 0 {
		t.NodeSelector = make(map[string]dbv1.LabelValue, len(mc.Spec.NodeSelector))
		for k, v := range mc.Spec.NodeSelector {
			t.NodeSelector[k] = dbv1.LabelValue(v)
		}
	}
	return t
}

func imageOf(mc *grtlv1.MySQLCluster) string {
	if mc.Spec.Image != "" {
		return mc.Spec.Image
	}
	return mysql.DefaultImage
}

func cloneConditions(in []metav1.Condition) []metav1.Condition {
	if in == nil {
		return nil
	}
	return append([]metav1.Condition(nil), in...)
}

// instances adapts MySQLBackupInstances to the core, whose phases are a
// DatabaseBackup's: grtl's Scheduled is Pending, Started is Running.
type instances struct{}

var (
	toCore = map[grtlv1.BackupPhase]dbv1.BackupPhase{
		grtlv1.BackupScheduled: dbv1.BackupPending, grtlv1.BackupStarted: dbv1.BackupRunning,
		grtlv1.BackupCompleted: dbv1.BackupCompleted, grtlv1.BackupFailed: dbv1.BackupFailed,
	}
	toGrtl = map[dbv1.BackupPhase]grtlv1.BackupPhase{
		dbv1.BackupPending: grtlv1.BackupScheduled, dbv1.BackupRunning: grtlv1.BackupStarted,
		dbv1.BackupCompleted: grtlv1.BackupCompleted, dbv1.BackupFailed: grtlv1.BackupFailed,
	}
)

func (instances) New() client.Object { return &grtlv1.MySQLBackupInstance{} }

func (instances) View(obj client.Object) *database.Backup {
	b := obj.(*grtlv1.MySQLBackupInstance)
	st := b.Status
	return &database.Backup{
		ObjectMeta: *b.ObjectMeta.DeepCopy(),
		Object:     b,
		Cluster:    b.Spec.Cluster,
		Schedule:   b.Spec.Schedule,
		Status: dbv1.DatabaseBackupStatus{
			Phase:          toCore[st.Phase],
			StartTime:      st.StartTime,
			CompletionTime: st.CompletionTime,
			ClaimName:      st.ClaimName,
			File:           st.File,
			Size:           st.Size,
			SHA256:         st.SHA256,
			Image:          st.Image,
			Engine:         EngineMySQL,
			RunAsUser:      st.RunAsUser,
			Version:        st.Version,
			Source:         st.Source,
			LagBytes:       st.LagBytes,
			Tables:         st.Tables,
			Rows:           st.Rows,
			Verification:   st.Verification.DeepCopy(),
			Conditions:     cloneConditions(st.Conditions),
		},
	}
}

func (instances) SetStatus(obj client.Object, v *database.Backup) {
	b := obj.(*grtlv1.MySQLBackupInstance)
	st := v.Status
	b.Status = grtlv1.MySQLBackupInstanceStatus{
		Phase:          toGrtl[st.Phase],
		StartTime:      st.StartTime,
		CompletionTime: st.CompletionTime,
		ClaimName:      st.ClaimName,
		File:           st.File,
		Size:           st.Size,
		SHA256:         st.SHA256,
		Image:          st.Image,
		RunAsUser:      st.RunAsUser,
		Version:        st.Version,
		Source:         st.Source,
		LagBytes:       st.LagBytes,
		Tables:         st.Tables,
		Rows:           st.Rows,
		Verification:   st.Verification,
		Conditions:     Kind.SayConditions(st.Conditions),
	}
}

func (i instances) List(ctx context.Context, r client.Reader, namespace string) ([]*database.Backup, error) {
	var list grtlv1.MySQLBackupInstanceList
	if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	out := make([]*database.Backup, len(list.Items))
	for j := range list.Items {
		out[j] = i.View(&list.Items[j])
	}
	return out, nil
}

func (instances) ForCluster(c *database.Cluster, name string, labels map[string]string) client.Object {
	return &grtlv1.MySQLBackupInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: labels},
		Spec:       grtlv1.MySQLBackupInstanceSpec{Cluster: c.Name},
	}
}

// VolumeSize: the schedule's storage when the backup came from a schedule
// that names one, else the cluster's.
func (instances) VolumeSize(ctx context.Context, r client.Reader, c *database.Cluster, b *database.Backup) (string, *string, error) {
	if b.Schedule != "" {
		var s grtlv1.MySQLBackupSchedule
		err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Schedule}, &s)
		if client.IgnoreNotFound(err) != nil {
			return "", nil, err
		}
		if err == nil && s.Spec.Storage != "" {
			return s.Spec.Storage, nil, nil
		}
	}
	return c.Spec.StorageSize, nil, nil
}
