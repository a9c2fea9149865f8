package pooler

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/pooler/pgbouncer"
	"github.com/deckhand-dev/deckhand/operator/database/servertls"
	"github.com/deckhand-dev/deckhand/operator/registration"
)

// Keys of the pooler's Secrets.
const (
	// authPasswordKey is the pooler role's password; userlistKey the
	// PgBouncer auth_file made of it.
	authPasswordKey = "password"
	userlistKey     = "userlist.txt"
	// CAKey, VerifyFullURIKey and JDBCURIKey of the connection Secret
	// have the app Secret's names.
	CAKey            = "ca.crt"
	VerifyFullURIKey = "verify-full-uri"
	JDBCURIKey       = "jdbc-uri"
	// CAMountDir is where the verifying URIs expect the connection
	// Secret (its ca.crt) in the client's container: the app Secret's
	// place, so a client moves to the pooler by changing the Secret's name.
	CAMountDir = "/etc/deckhand/db"
)

// names of a Pooler's objects.
type names struct {
	Service, Connection, Auth, Config, CA, TLS, Deployment string
}

func namesOf(p *dbv1.Pooler) names {
	n := p.Name
	return names{
		Service: n, Connection: n, Deployment: n,
		Auth: n + "-auth", Config: n + "-config", CA: n + "-ca", TLS: n + "-tls",
	}
}

// Role is the pooler's own role in PostgreSQL: it may only call the
// lookup function.
func Role(p *dbv1.Pooler) string { return "deckhand_pooler_" + p.Name }

// plan is every object a Pooler should have, as computed from its spec,
// its Database and the Secrets it keeps.
type plan struct {
	secrets  []*corev1.Secret
	config   *corev1.ConfigMap
	setupJob *batchv1.Job // nil until the Database is initialized
	deploy   *appsv1.Deployment
	service  *corev1.Service
	budget   *policyv1.PodDisruptionBudget
	// tlsNext is when the pooler's certificate must be looked at again.
	tlsNext time.Time
	// tlsEvents are what changed in the pooler's certificate.
	tlsEvents []servertls.Event
}

func (pl *plan) objects() []client.Object {
	var out []client.Object
	for _, s := range pl.secrets {
		out = append(out, s)
	}
	out = append(out, pl.config)
	if pl.setupJob != nil {
		out = append(out, pl.setupJob)
	}
	return append(out, pl.deploy, pl.service, pl.budget)
}

// plan reads what the Pooler keeps (its role's password, its CA) and the
// app Secret it copies, and computes every object.
func (r *Reconciler) plan(ctx context.Context, p *dbv1.Pooler, t Target) (*plan, error) {
	n := namesOf(p)
	password, err := r.authPassword(ctx, p)
	if err != nil {
		return nil, err
	}
	tls, err := r.certificate(ctx, p)
	if err != nil {
		return nil, err
	}
	cfg := pgbouncer.Config{
		ServerHost: t.Host, ServerPort: t.Port,
		PoolMode: string(p.Spec.PgBouncer.PoolMode), DefaultPoolSize: p.Spec.PgBouncer.DefaultPoolSize,
		MaxClientConn: p.Spec.PgBouncer.MaxClientConnections,
		AuthUser:      Role(p), ServerTLS: t.ServerCASecret != "", ClientTLS: true,
	}
	ini := cfg.INI()
	pl := &plan{tlsNext: tls.Next, tlsEvents: tls.Events}
	auth := ownedSecret(p, n.Auth, map[string][]byte{
		authPasswordKey: []byte(password), userlistKey: []byte(pgbouncer.Userlist(Role(p), password)),
	})
	pl.secrets = []*corev1.Secret{auth, ownedSecret(p, n.CA, tls.Operator), tlsSecret(p, tls.Pods)}
	conn, err := r.connectionSecret(ctx, p, t, tls.Pods[servertls.BundleKey])
	if err != nil {
		return nil, err
	}
	if conn != nil {
		pl.secrets = append(pl.secrets, conn)
	}
	pl.config = &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(p, n.Config),
		Data:       map[string]string{"pgbouncer.ini": ini, "setup.sql": setupScript()},
	}
	if t.Initialized {
		pl.setupJob = setupJob(p, t, hashOf(setupScript(), Role(p), password))
	}
	pl.deploy = deployment(p, t, r.imageOf(p), hashOf(ini, password, string(tls.Pods[servertls.TLSCertKey])))
	addMetrics(p, pl.deploy, r.OperatorImage)
	pl.service = service(p)
	pl.budget = disruptionBudget(p)
	return pl, nil
}

func (r *Reconciler) imageOf(p *dbv1.Pooler) string {
	if p.Spec.Image != "" {
		return p.Spec.Image
	}
	return r.Image
}

// authPassword is the pooler role's password: the one its Secret keeps,
// or a new one when the Secret does not exist yet. Read live: Secrets'
// contents stay out of the cache.
func (r *Reconciler) authPassword(ctx context.Context, p *dbv1.Pooler) (string, error) {
	var s corev1.Secret
	err := r.API.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: namesOf(p).Auth}, &s)
	if err == nil && len(s.Data[authPasswordKey]) > 0 {
		return string(s.Data[authPasswordKey]), nil
	}
	if client.IgnoreNotFound(err) != nil {
		return "", err
	}
	return randomPassword()
}

func randomPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// certificate is the plan for the pooler's own CA and the certificate
// PgBouncer presents to clients (every name of its Service), renewed as
// a Database's server certificate is.
func (r *Reconciler) certificate(ctx context.Context, p *dbv1.Pooler) (*servertls.Result, error) {
	n := namesOf(p)
	operator, err := r.secretData(ctx, p.Namespace, n.CA)
	if err != nil {
		return nil, err
	}
	pods, err := r.secretData(ctx, p.Namespace, n.TLS)
	if err != nil {
		return nil, err
	}
	hosts := []string{n.Service, n.Service + "." + p.Namespace, n.Service + "." + p.Namespace + ".svc", n.Service + "." + p.Namespace + ".svc.cluster.local"}
	return servertls.Generated(operator, pods, p.Namespace, "pooler "+p.Name, hosts, r.Now())
}

// secretData is a Secret's data, nil when it does not exist.
func (r *Reconciler) secretData(ctx context.Context, ns, name string) (map[string][]byte, error) {
	var s corev1.Secret
	err := r.API.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s)
	if client.IgnoreNotFound(err) == nil && err != nil {
		return nil, nil
	}
	return s.Data, err
}

// connectionSecret is the app Secret's keys with the pooler as the host:
// nil until the app Secret exists.
func (r *Reconciler) connectionSecret(ctx context.Context, p *dbv1.Pooler, t Target, bundle []byte) (*corev1.Secret, error) {
	app, err := r.secretData(ctx, p.Namespace, t.AppSecret)
	if err != nil || app == nil {
		return nil, err
	}
	host := fmt.Sprintf("%s.%s.svc", namesOf(p).Service, p.Namespace)
	user, password, dbname := string(app["user"]), string(app["password"]), string(app["dbname"])
	port := fmt.Sprint(pgbouncer.Port)
	uri := (&url.URL{Scheme: "postgresql", User: url.UserPassword(user, password), Host: host + ":" + port, Path: "/" + dbname}).String()
	ca := CAMountDir + "/" + CAKey
	jdbc := url.Values{"user": {user}, "password": {password}, "sslmode": {"verify-full"}, "sslrootcert": {ca}}
	if p.Spec.PgBouncer.PoolMode == dbv1.PoolModeTransaction {
		// pgjdbc prepares a statement on the server after 5 runs; in
		// transaction mode the next transaction may get another server
		// connection, which lacks it.
		jdbc.Set("prepareThreshold", "0")
	}
	data := map[string][]byte{
		"host": []byte(host), "port": []byte(port), "dbname": []byte(dbname), "user": []byte(user), "password": []byte(password),
		"uri":            []byte(uri),
		CAKey:            bundle,
		VerifyFullURIKey: []byte(uri + "?" + url.Values{"sslmode": {"verify-full"}, "sslrootcert": {ca}}.Encode()),
		JDBCURIKey:       []byte(fmt.Sprintf("jdbc:postgresql://%s:%s/%s?", host, port, url.PathEscape(dbname)) + jdbc.Encode()),
	}
	return ownedSecret(p, namesOf(p).Connection, data), nil
}

func objectMeta(p *dbv1.Pooler, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: p.Namespace, Labels: labelsOf(p),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(p, dbv1.GroupVersion.WithKind("Pooler"))},
	}
}

func labelsOf(p *dbv1.Pooler) map[string]string {
	return map[string]string{
		LabelPooler: p.Name, registration.ManagedByLabel: registration.ManagedByValue,
		"app.kubernetes.io/name": "pooler", "app.kubernetes.io/instance": p.Name,
	}
}

// Pod roles of a Pooler: PgBouncer, or its setup Job. The Deployment,
// the Service and the disruption budget select the PgBouncer pods only.
const (
	labelComponent   = "stable.imaginedata.co/component"
	componentBouncer = "pgbouncer"
	componentSetup   = "pooler-setup"
)

func selectorOf(p *dbv1.Pooler) map[string]string {
	return map[string]string{LabelPooler: p.Name, labelComponent: componentBouncer}
}

// podLabels are the labels of a Pooler's pods of a component.
func podLabels(p *dbv1.Pooler, component string) map[string]string {
	l := labelsOf(p)
	l[labelComponent] = component
	return l
}

func ownedSecret(p *dbv1.Pooler, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(p, name),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

func tlsSecret(p *dbv1.Pooler, data map[string][]byte) *corev1.Secret {
	s := ownedSecret(p, namesOf(p).TLS, data)
	s.Type = corev1.SecretTypeTLS
	return s
}

func hashOf(parts ...string) string {
	h := sha256.New()
	for _, part := range parts {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:10]
}

// Volumes of the PgBouncer pod.
const (
	configVolume   = "config"
	authVolume     = "auth"
	serverCAVolume = "server-ca"
	tlsVolume      = "tls"
	// AnnotationConfig on the pod template is the hash of the settings
	// and keys the pods read at start: a change rolls them.
	AnnotationConfig = "stable.imaginedata.co/pooler-config"
)

// UID PgBouncer runs as, whatever the image's user: it reads only what
// the pod mounts (group-readable through fsGroup) and writes nothing.
const UID int64 = 65532

func deployment(p *dbv1.Pooler, t Target, image, configHash string) *appsv1.Deployment {
	n := namesOf(p)
	volumes := []corev1.Volume{
		{Name: configVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: n.Config},
			Items:                []corev1.KeyToPath{{Key: "pgbouncer.ini", Path: "pgbouncer.ini"}},
		}}},
		{Name: authVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: n.Auth, DefaultMode: ptr.To[int32](0o400),
			Items: []corev1.KeyToPath{{Key: userlistKey, Path: userlistKey}},
		}}},
		{Name: tlsVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: n.TLS, DefaultMode: ptr.To[int32](0o400),
			Items: []corev1.KeyToPath{{Key: servertls.TLSCertKey, Path: "tls.crt"}, {Key: servertls.TLSKeyKey, Path: "tls.key"}},
		}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: configVolume, MountPath: pgbouncer.ConfigDir, ReadOnly: true},
		{Name: authVolume, MountPath: pgbouncer.AuthDir, ReadOnly: true},
		{Name: tlsVolume, MountPath: pgbouncer.ClientTLSDir, ReadOnly: true},
	}
	if t.ServerCASecret != "" {
		volumes = append(volumes, corev1.Volume{Name: serverCAVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: t.ServerCASecret, DefaultMode: ptr.To[int32](0o444),
			Items: []corev1.KeyToPath{{Key: servertls.BundleKey, Path: "ca.crt"}},
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: serverCAVolume, MountPath: pgbouncer.ServerCADir, ReadOnly: true})
	}
	probe := func(period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(pgbouncer.Port)}},
			PeriodSeconds: period, FailureThreshold: 3,
		}
	}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: objectMeta(p, n.Deployment),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(instancesOf(p)),
			Selector: &metav1.LabelSelector{MatchLabels: selectorOf(p)},
			// One pod at a time, the new one ready first: the Service
			// never loses every pod during a roll.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels(p, componentBouncer), Annotations: map[string]string{AnnotationConfig: configHash}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "pgbouncer", Image: image,
						Args:         []string{pgbouncer.ConfigDir + "/pgbouncer.ini"},
						Ports:        []corev1.ContainerPort{{Name: "pgbouncer", ContainerPort: pgbouncer.Port}},
						VolumeMounts: mounts,
						// The image stops PgBouncer with SIGINT, its safe
						// shutdown: it pauses and exits once every server
						// connection is back in its pool, within the
						// grace period; the Service drops the pod meanwhile.
						ReadinessProbe:  probe(2),
						LivenessProbe:   probe(10),
						SecurityContext: restrictedContainer(),
						Resources:       resourcesOf(p),
					}},
					Volumes:                       volumes,
					SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(UID), RunAsGroup: ptr.To(UID), FSGroup: ptr.To(UID), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					EnableServiceLinks:            ptr.To(false),
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](30),
				},
			},
		},
	}
	spec := &d.Spec.Template.Spec
	p.Spec.PodTemplate.Place(spec)
	// One node's loss leaves the pooler serving.
	p.Spec.PodTemplate.SpreadApart(spec, selectorOf(p))
	return d
}

// MetricsContainer serves PgBouncer's metrics in each PgBouncer pod, on
// the port named MetricsPortName (the chart's PodMonitor selects it).
const (
	MetricsContainer = "metrics"
	MetricsPortName  = "metrics"
)

// addMetrics adds to the PgBouncer pods the operator image's `deckhand
// pooler-metrics`, which reads PgBouncer's admin console as the pooler's
// role at each scrape. Without the operator's image nothing is added.
func addMetrics(p *dbv1.Pooler, d *appsv1.Deployment, operatorImage string) {
	if operatorImage == "" {
		return
	}
	spec := &d.Spec.Template.Spec
	spec.Containers = append(spec.Containers, corev1.Container{
		Name:  MetricsContainer,
		Image: operatorImage,
		Args:  []string{"pooler-metrics", "--listen", fmt.Sprintf(":%d", pgbouncer.MetricsPort)},
		Env: []corev1.EnvVar{
			{Name: "PGBOUNCER_USER", Value: Role(p)},
			{Name: "PGBOUNCER_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: namesOf(p).Auth}, Key: authPasswordKey,
			}}},
		},
		Ports: []corev1.ContainerPort{{Name: MetricsPortName, ContainerPort: pgbouncer.MetricsPort, Protocol: corev1.ProtocolTCP}},
		// No readiness probe: metrics that do not answer must not take
		// the pod out of the pooler's Service.
		SecurityContext: restrictedContainer(),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("96Mi")},
		},
	})
}

// resourcesOf is spec.resources; without it, PgBouncer requests a little
// (it is single-threaded and holds a few kilobytes per connection), so
// that its pods are not BestEffort, the first a busy node starves.
func resourcesOf(p *dbv1.Pooler) corev1.ResourceRequirements {
	if p.Spec.Resources != nil {
		return *p.Spec.Resources
	}
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("50m"),
		corev1.ResourceMemory: resource.MustParse("64Mi"),
	}}
}

func instancesOf(p *dbv1.Pooler) int32 {
	if p.Spec.Instances == nil {
		return 2
	}
	return *p.Spec.Instances
}

func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func service(p *dbv1.Pooler) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(p, namesOf(p).Service),
		Spec: corev1.ServiceSpec{
			Selector: selectorOf(p),
			Ports:    []corev1.ServicePort{{Name: "pgbouncer", Port: pgbouncer.Port, TargetPort: intstr.FromString("pgbouncer")}},
		},
	}
}

// disruptionBudget lets a drain evict one PgBouncer pod at a time, so the
// Service keeps a pod (with one instance the drain may take it: a single
// pod is no promise of availability).
func disruptionBudget(p *dbv1.Pooler) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: objectMeta(p, namesOf(p).Deployment),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: selectorOf(p)},
		},
	}
}

// setupScript is what the setup Job's psql runs: the pooler role's name
// and password come from the environment through psql's backquotes, so
// the password is on no command line and in no log.
func setupScript() string {
	return "\\set role `printf '%s' \"$POOLER_ROLE\"`\n" +
		"\\set password `printf '%s' \"$POOLER_PASSWORD\"`\n" +
		pgbouncer.SetupSQL()
}

// setupJob creates (or updates) the pooler's role and the lookup function
// in the app database, as the superuser, through the -rw Service. Its
// name carries the hash of what it does: a new password or a new
// function runs a new Job.
func setupJob(p *dbv1.Pooler, t Target, hash string) *batchv1.Job {
	n := namesOf(p)
	secretKey := func(secret, key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}
	}
	sslmode := "prefer"
	volumes := []corev1.Volume{{Name: configVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: n.Config},
		Items:                []corev1.KeyToPath{{Key: "setup.sql", Path: "setup.sql"}},
	}}}}
	mounts := []corev1.VolumeMount{{Name: configVolume, MountPath: "/setup", ReadOnly: true}}
	env := []corev1.EnvVar{
		{Name: "PGHOST", Value: t.PrimaryHost},
		{Name: "PGPORT", Value: fmt.Sprint(t.Port)},
		{Name: "PGDATABASE", Value: t.AppDatabase},
		{Name: "PGUSER", ValueFrom: secretKey(t.SuperuserSecret, "username")},
		{Name: "PGPASSWORD", ValueFrom: secretKey(t.SuperuserSecret, "password")},
		{Name: "PGCONNECT_TIMEOUT", Value: "5"},
		{Name: "POOLER_ROLE", Value: Role(p)},
		{Name: "POOLER_PASSWORD", ValueFrom: secretKey(n.Auth, authPasswordKey)},
	}
	if t.ServerCASecret != "" {
		sslmode = "verify-full"
		volumes = append(volumes, corev1.Volume{Name: serverCAVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: t.ServerCASecret, Items: []corev1.KeyToPath{{Key: servertls.BundleKey, Path: "ca.crt"}},
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: serverCAVolume, MountPath: pgbouncer.ServerCADir, ReadOnly: true})
		env = append(env, corev1.EnvVar{Name: "PGSSLROOTCERT", Value: pgbouncer.ServerCADir + "/ca.crt"})
	}
	env = append(env, corev1.EnvVar{Name: "PGSSLMODE", Value: sslmode})
	meta := objectMeta(p, fmt.Sprintf("%s-setup-%s", p.Name, hash[:8]))
	j := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: meta,
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](6),
			ActiveDeadlineSeconds: ptr.To[int64](600),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels(p, componentSetup)},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "setup", Image: t.Image,
						Command:                  []string{"psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "/setup/setup.sql"},
						Env:                      env,
						VolumeMounts:             mounts,
						SecurityContext:          restrictedContainer(),
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
					}},
					Volumes:                      volumes,
					SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(t.RunAsUser), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					EnableServiceLinks:           ptr.To(false),
					AutomountServiceAccountToken: ptr.To(false),
				},
			},
		},
	}
	p.Spec.PodTemplate.Place(&j.Spec.Template.Spec)
	return j
}
