package database

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// Labels on everything a Database owns. The operator's cache holds only
// objects with LabelDatabase.
const (
	// LabelDatabase names the Database (its metadata.name).
	LabelDatabase = "stable.imaginedata.co/database"
	// LabelComponent is "server" on the StatefulSet's pods and volumes,
	// "init" on the init Job's pods: Services select servers only.
	LabelComponent = "stable.imaginedata.co/component"
	// LabelRole is "primary" or "standby" on server pods; the read-write
	// and read-only Services select on it.
	LabelRole = "stable.imaginedata.co/role"
	// LabelConnection on the app Secret is a hash of its connection
	// details (not the password), so a change of port is seen without
	// reading the Secret.
	LabelConnection = "stable.imaginedata.co/connection"
	// AnnotationScripts on the pod template is the scripts' hash: new
	// scripts roll the replicas.
	AnnotationScripts = "stable.imaginedata.co/scripts"
	// AnnotationDatabaseUID on the Secrets and DatabaseBackups the
	// operator makes is the UID of the Database it made them for.
	AnnotationDatabaseUID = "stable.imaginedata.co/database-uid"
	// AnnotationKeptFrom on the Secrets and volumes a Retain deletion kept
	// is the UID of the deleted Database: a new Database of the same name
	// adopts those Secrets only when they and its volume say the same.
	AnnotationKeptFrom = "stable.imaginedata.co/kept-from"

	componentServer = "server"
	componentInit   = "init"
	rolePrimary     = "primary"
	roleStandby     = "standby"
)

// names of the objects of one Database. Every one is within 63 characters
// because metadata.name is at most 52 (a CEL rule on the CRD).
type names struct {
	StatefulSet, Headless, ReadWrite, ReadOnly, Superuser, App, Replication, Scripts, InitJob, PDB string
	// PrimaryPDB is the primary's budget (drain.go).
	PrimaryPDB string
	// CA is the ConfigMap of the CA bundle clients verify the servers
	// with, for a cluster without an app Secret (which holds it
	// otherwise); "" for one with.
	CA string
}

func namesOf(db *Cluster) names {
	n := db.Name
	out := names{
		StatefulSet: n, Headless: n + "-headless", ReadWrite: n + "-rw", ReadOnly: n + "-ro",
		Superuser: db.Secrets.Superuser, App: db.Secrets.App, Replication: db.Secrets.Replication,
		Scripts: n + "-scripts", InitJob: n + "-init", PDB: n, PrimaryPDB: n + "-primary",
	}
	if db.Secrets.App == "" {
		out.CA = n + "-ca"
	}
	return out
}

// claimName is the PVC the StatefulSet creates for an ordinal.
func claimName(db *Cluster, ordinal int32) string {
	return fmt.Sprintf("%s-%s-%d", engine.DataVolume, db.Name, ordinal)
}

// podName is the StatefulSet's pod of an ordinal (currentPrimary says
// which is the primary).
func podName(db *Cluster, ordinal int32) string { return fmt.Sprintf("%s-%d", db.Name, ordinal) }

// serverResources is spec.resources; without it, the servers request
// 50m CPU and 256Mi, so their pods are not BestEffort: when a node is busy
// the kernel divides its CPU by request, and a BestEffort pod gets almost
// none beside any pod that requests some. Its probes time out and -rw
// drops the primary (seen on the real node, beside failover tests'
// Burstable servers). Small, so that a laptop's cluster schedules many; no
// limits: a memory limit kills the server when its connections grow.
// `resources: {}` asks for BestEffort pods.
func serverResources(db *Cluster) *corev1.ResourceRequirements {
	if db.Spec.Resources != nil {
		return db.Spec.Resources
	}
	return &corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("256Mi"),
	}}
}

// clusterOf is the engine's view of a Database, with defaults filled in.
func clusterOf(db *Cluster, eng engine.Engine) engine.Cluster {
	n := namesOf(db)
	return engine.Cluster{
		Name:              db.Name,
		Namespace:         db.Namespace,
		Image:             imageOf(db, eng),
		Port:              portOf(db, eng),
		Database:          db.Spec.Name,
		AppUser:           appUser(db),
		Parameters:        db.Spec.Parameters,
		Resources:         serverResources(db),
		SuperuserSecret:   n.Superuser,
		AppSecret:         n.App,
		ReplicationSecret: n.Replication,
		PrimaryHost:       n.ReadWrite,
		RunAsUser:         runAsUserOf(db),
		TLSSecret:         tlsSecretOf(db),
		ResetAppPassword:  recoveryOf(db) != nil,
	}
}

// tlsSecretOf is the pods' server TLS Secret of a Database with TLS on,
// "" without.
func tlsSecretOf(db *Cluster) string {
	if !tlsOn(db) {
		return ""
	}
	_, pods := serverTLSSecretNames(db)
	return pods
}

// DefaultRunAsUser is the UID of the official images' server user
// (postgres on Debian, mysql in MySQL's and MariaDB's images).
const DefaultRunAsUser int64 = 999

// runAsUserOf is the UID every container of the cluster runs as: the
// spec's, never a guess from the image reference (a digest, a mirror or
// another image says nothing reliable about it).
func runAsUserOf(db *Cluster) int64 {
	if t := db.Spec.PodTemplate; t != nil && t.RunAsUser != nil {
		return *t.RunAsUser
	}
	return DefaultRunAsUser
}

// appUser is the role that owns the database: it has the database's name.
func appUser(db *Cluster) string { return db.Spec.Name }

// appDatabase, initDoes and initDid say what the init Job makes, for
// messages: a database and its role, or (a MySQLCluster, which has root
// only) nothing but a check that the primary answers.
func appDatabase(db *Cluster) string {
	if db.Spec.Name == "" {
		return "the primary answers as root"
	}
	return fmt.Sprintf("database %q owned by role %q", db.Spec.Name, appUser(db))
}

func initDoes(db *Cluster) string {
	if db.Spec.Name == "" {
		return "reports the server's version"
	}
	return fmt.Sprintf("creates database %q and role %q", db.Spec.Name, appUser(db))
}

func initDid(db *Cluster) string {
	if db.Spec.Name == "" {
		return "reached the primary as root"
	}
	return fmt.Sprintf("created database %q owned by role %q (or found them)", db.Spec.Name, appUser(db))
}

func imageOf(db *Cluster, eng engine.Engine) string {
	if db.Spec.Image != "" {
		return db.Spec.Image
	}
	return eng.DefaultImage()
}

func portOf(db *Cluster, eng engine.Engine) int32 {
	if db.Spec.Port != 0 {
		return db.Spec.Port
	}
	return eng.DefaultPort()
}

func replicasOf(db *Cluster) int32 { return max(db.Spec.Replicas, 1) }

func objectLabels(db *Cluster) map[string]string {
	return map[string]string{
		db.Kind.Keys.Cluster:         db.Name,
		"app.kubernetes.io/name":     db.Kind.AppName,
		"app.kubernetes.io/instance": db.Name,
		registration.ManagedByLabel:  registration.ManagedByValue,
	}
}

func selectorLabels(db *Cluster, component string) map[string]string {
	return map[string]string{db.Kind.Keys.Cluster: db.Name, db.Kind.Keys.Component: component}
}

func withLabels(base map[string]string, more map[string]string) map[string]string {
	out := maps.Clone(base)
	maps.Copy(out, more)
	return out
}

func ownerReference(db *Cluster) metav1.OwnerReference {
	return *metav1.NewControllerRef(db, db.Kind.ClusterGVK)
}

func objectMeta(db *Cluster, name string, extraLabels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: db.Namespace,
		Labels:          withLabels(objectLabels(db), extraLabels),
		OwnerReferences: []metav1.OwnerReference{ownerReference(db)},
	}
}

// secretMeta is objectMeta with the Database's UID annotated: the
// identity a kept Secret is matched by when the Database is made again
// (labels name the Database only, and anyone can copy them).
func secretMeta(db *Cluster, name string, extraLabels map[string]string) metav1.ObjectMeta {
	m := objectMeta(db, name, extraLabels)
	m.Annotations = map[string]string{db.Kind.Keys.ClusterUID: string(db.UID)}
	return m
}

// superuserSecret holds the engine's superuser and a new random password.
func superuserSecret(db *Cluster, eng engine.Engine, password string) *corev1.Secret {
	if db.Secrets.SuperuserNamedByUser {
		// grtl's Secret: the password under "password", nothing else.
		return passwordSecret(db, namesOf(db).Superuser, password)
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: secretMeta(db, namesOf(db).Superuser, nil),
		Type:       corev1.SecretTypeBasicAuth,
		StringData: map[string]string{"username": eng.SuperuserName(), "password": password},
	}
}

// passwordSecret holds a new random password under "password" only (the
// replication account's, or a MySQLCluster's root).
func passwordSecret(db *Cluster, name, password string) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: secretMeta(db, name, nil),
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{"password": password},
	}
}

// connection is what the app Secret tells a client, but the password.
type connection struct {
	Host, Port, Database, User string
	// CA is the CA bundle of a Database with TLS on ("" without).
	CA string
	// Instances are every instance's host:port (multihost.go), nil for
	// an engine without multi-host strings.
	Instances []string
}

func connectionOf(db *Cluster, eng engine.Engine, bundle string) connection {
	port := fmt.Sprint(portOf(db, eng))
	return connection{
		Host:      fmt.Sprintf("%s.%s.svc", namesOf(db).ReadWrite, db.Namespace),
		Port:      port,
		Database:  db.Spec.Name,
		User:      appUser(db),
		CA:        bundle,
		Instances: multiHostInstances(db, port),
	}
}

func (c connection) hash() string {
	parts := c.Host + "\x00" + c.Port + "\x00" + c.Database + "\x00" + c.User
	if c.CA != "" {
		// Only with TLS: the hash of a Database without stays as it was.
		parts += "\x00" + c.CA
	}
	if len(c.Instances) > 0 {
		// A scale-out or scale-in rewrites the multi-host keys.
		parts += "\x00instances\x00" + strings.Join(c.Instances, ",")
	}
	sum := sha256.Sum256([]byte(parts))
	return hex.EncodeToString(sum[:8])
}

// Keys of the app Secret with TLS on: the CA bundle, and the URIs that
// verify the server against it (libpq and pgx; pgjdbc). Both name the
// bundle by CAFile: mount the app Secret at CAMountDir.
const (
	AppCAKey            = "ca.crt"
	AppVerifyFullURIKey = "verify-full-uri"
	AppJDBCURIKey       = "jdbc-uri"
	// CAMountDir is where the verifying URIs expect the app Secret (its
	// ca.crt key) to be mounted in the client's container.
	CAMountDir = "/etc/deckhand/db"
)

// tlsAppKeys are the keys a Database without TLS does not have.
var tlsAppKeys = map[string]bool{AppCAKey: true, AppVerifyFullURIKey: true, AppJDBCURIKey: true}

// appData is the app Secret's content for a password.
func (c connection) appData(eng engine.Engine, password string) map[string]string {
	port := int32(0)
	fmt.Sscan(c.Port, &port)
	uri := eng.ConnectionURI(c.User, password, c.Host, port, c.Database)
	data := map[string]string{
		"host": c.Host, "port": c.Port, "dbname": c.Database, "user": c.User, "password": password,
		"uri": uri,
	}
	if c.CA != "" {
		ca := CAMountDir + "/" + AppCAKey
		data[AppCAKey] = c.CA
		data[AppVerifyFullURIKey] = uri + "?" + url.Values{"sslmode": {"verify-full"}, "sslrootcert": {ca}}.Encode()
		data[AppJDBCURIKey] = fmt.Sprintf("jdbc:postgresql://%s:%s/%s?", c.Host, c.Port, url.PathEscape(c.Database)) +
			url.Values{"user": {c.User}, "password": {password}, "sslmode": {"verify-full"}, "sslrootcert": {ca}}.Encode()
	}
	maps.Copy(data, c.multiHostData(password))
	return data
}

func appSecret(db *Cluster, eng engine.Engine, password, bundle string) *corev1.Secret {
	conn := connectionOf(db, eng, bundle)
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: secretMeta(db, namesOf(db).App, map[string]string{db.Kind.Keys.Connection: conn.hash()}),
		Type:       corev1.SecretTypeOpaque,
		StringData: conn.appData(eng, password),
	}
}

// scriptsConfigMap is the scripts and their keys; tls is the value of
// engine.ScriptsTLSKey ("": "offered"), holds that of
// postgres.BaseBackupHoldsKey (baseBackupHolds; written for a Database
// with an object store). The TLS key is always written: a key left out
// would stay on the live ConfigMap (apply writes only what differs).
func scriptsConfigMap(db *Cluster, eng engine.Engine, tls, holds string) *corev1.ConfigMap {
	data := eng.Scripts()
	maps.Copy(data, archiveScripts(db))
	if objectStoreOf(db) != nil {
		data[postgres.BaseBackupHoldsKey] = holds
	}
	data[engine.ScriptsReplicasKey] = strconv.Itoa(int(replicasOf(db)))
	data[engine.ScriptsPrimaryKey] = namedPrimary(db)
	if tls == "" {
		tls = "offered"
	}
	data[engine.ScriptsTLSKey] = tls
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(db, namesOf(db).Scripts, nil),
		Data:       data,
	}
}

// caConfigMap holds the CA bundle (ca.crt) clients verify the servers
// with, for a cluster with TLS and no app Secret: public, as the
// cluster's kube-root-ca.crt, so any pod may mount it.
func caConfigMap(db *Cluster, bundle string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(db, namesOf(db).CA, nil),
		Data:       map[string]string{AppCAKey: bundle},
	}
}

// scriptsHash changes whenever a script does.
func scriptsHash(eng engine.Engine) string { return hashScripts(eng.Scripts()) }

// hashScripts is a short hash of scripts by name and content: a pod
// template annotation that changes, and so restarts the pods, when they do.
func hashScripts(scripts map[string]string) string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(scripts)) {
		fmt.Fprintf(h, "%s\x00%s\x00", name, scripts[name])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// services: headless (the StatefulSet's, every replica, ready or not),
// read-write (the primary) and read-only (the standbys).
func services(db *Cluster, eng engine.Engine) []*corev1.Service {
	n := namesOf(db)
	port := portOf(db, eng)
	servers := selectorLabels(db, componentServer)
	svc := func(name string, selector map[string]string, headless bool) *corev1.Service {
		s := &corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: objectMeta(db, name, nil),
			Spec: corev1.ServiceSpec{
				Selector: selector,
				Ports: []corev1.ServicePort{{
					Name: "db", Port: port, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP,
				}},
			},
		}
		if headless {
			s.Spec.ClusterIP = corev1.ClusterIPNone
			// Standbys find each other and the primary before they are ready.
			s.Spec.PublishNotReadyAddresses = true
		}
		return s
	}
	return []*corev1.Service{
		svc(n.Headless, servers, true),
		svc(n.ReadWrite, withLabels(servers, map[string]string{db.Kind.Keys.Role: rolePrimary}), false),
		svc(n.ReadOnly, withLabels(servers, map[string]string{db.Kind.Keys.Role: roleStandby}), false),
	}
}

// statefulSet runs the replicas. claims are the live StatefulSet's volume
// claim templates, which cannot change once created (storage grows by
// patching the PVCs); nil on creation.
func statefulSet(db *Cluster, eng engine.Engine, claims []corev1.PersistentVolumeClaim) *appsv1.StatefulSet {
	return statefulSetRunning(db, eng, claims, serverPlan{Image: imageOf(db, eng), Replicas: replicasOf(db)})
}

// statefulSetRunning is the StatefulSet as plan says, which differs from
// the spec while an image change waits for its backup or is refused, and
// while a major upgrade stops the servers.
func statefulSetRunning(db *Cluster, eng engine.Engine, claims []corev1.PersistentVolumeClaim, plan serverPlan) *appsv1.StatefulSet {
	n := namesOf(db)
	c := clusterOf(db, eng)
	c.Image = plan.Image
	c.RemoveOldData = plan.RemoveOldData
	c.Parameters = archiveParameters(db, c.Parameters)
	pod := eng.ServerPod(c)
	podLabels := withLabels(objectLabels(db), selectorLabels(db, componentServer))
	if claims == nil {
		claims = []corev1.PersistentVolumeClaim{{
			ObjectMeta: metav1.ObjectMeta{Name: engine.DataVolume, Labels: podLabels},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: db.Spec.StorageClassName,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: resource.MustParse(db.Spec.StorageSize),
				}},
			},
		}}
	}
	spec := corev1.PodSpec{
		Containers:      []corev1.Container{pod.Container},
		SecurityContext: pod.SecurityContext,
		Volumes:         append(scriptsVolumes(db), pod.Volumes...),
		// The pods need no Service environment variables, and a namespace
		// with many Services would make them long.
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(60)),
		// The sandbox is the pod's PID 1, not the server: a process the
		// kubelet starts in the container (a probe timed out, an exec)
		// whose parent exits is re-parented to PID 1. The PostgreSQL
		// postmaster takes any child it reaps that died by a signal for
		// a crashed backend and restarts the server, ending every
		// session; the sandbox just reaps it.
		ShareProcessNamespace: ptr.To(true),
	}
	db.Spec.PodTemplate.Place(&spec)
	db.Spec.PodTemplate.SpreadApart(&spec, selectorLabels(db, componentServer))
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: objectMeta(db, n.StatefulSet, nil),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(plan.Replicas),
			ServiceName: n.Headless,
			Selector:    &metav1.LabelSelector{MatchLabels: selectorLabels(db, componentServer)},
			// Ordinal 0, the primary at creation, is ready before a standby
			// clones it; updates roll from the highest ordinal down.
			// (A primary at another ordinal, after a failover, will need
			// Parallel: a standby below it waits for it, and OrderedReady
			// would never start it. The field cannot change in place.)
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			// No data is deleted with a scale-down or the StatefulSet.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      podLabels,
					Annotations: map[string]string{db.Kind.Keys.Scripts: scriptsHash(eng)},
				},
				Spec: spec,
			},
			VolumeClaimTemplates: claims,
		},
	}
}

func scriptsVolumes(db *Cluster) []corev1.Volume {
	return []corev1.Volume{{Name: engine.ScriptsVolume, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: namesOf(db).Scripts},
			DefaultMode:          ptr.To(int32(0o444)),
		},
	}}}
}

// initJob runs the engine's init script once.
func initJob(db *Cluster, eng engine.Engine) *batchv1.Job {
	pod := eng.InitPod(clusterOf(db, eng))
	spec := corev1.PodSpec{
		RestartPolicy:      corev1.RestartPolicyNever,
		Containers:         []corev1.Container{pod.Container},
		SecurityContext:    pod.SecurityContext,
		Volumes:            append(scriptsVolumes(db), pod.Volumes...),
		EnableServiceLinks: ptr.To(false),
	}
	db.Spec.PodTemplate.Place(&spec)
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: objectMeta(db, namesOf(db).InitJob, map[string]string{db.Kind.Keys.Component: componentInit}),
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(6)),
			// An image that never pulls or never becomes a server fails the
			// Job (and so shows in Initialized) instead of leaving it
			// pending forever.
			ActiveDeadlineSeconds: ptr.To(int64(1800)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: withLabels(objectLabels(db), selectorLabels(db, componentInit))},
				Spec:       spec,
			},
		},
	}
}

// podDisruptionBudget lets at most one replica be evicted at a time.
// podDisruptionBudget lets one server pod be evicted at a time. With the
// primary's own budget (drain.go) it covers the standbys only, since the
// eviction API refuses to evict a pod that two budgets select, and says
// it as the standbys that must stay (replicas - 2): a maxUnavailable over
// part of a StatefulSet's pods is counted against all its replicas, and
// the one standby of two replicas could never be evicted. A standby that
// is not ready may always go (AlwaysAllow): with minAvailable 0 the
// eviction API otherwise refuses a pod that is not ready, and a drain
// waited on a standby restarting after the switchover it had caused.
func podDisruptionBudget(db *Cluster, standbysOnly bool) *policyv1.PodDisruptionBudget {
	spec := policyv1.PodDisruptionBudgetSpec{
		MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(db, componentServer)},
	}
	if standbysOnly {
		spec = policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(max(replicasOf(db)-2, 0))),
			Selector: &metav1.LabelSelector{MatchLabels: withLabels(selectorLabels(db, componentServer),
				map[string]string{db.Kind.Keys.Role: roleStandby})},
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		}
	}
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: objectMeta(db, namesOf(db).PDB, nil),
		Spec:       spec,
	}
}
