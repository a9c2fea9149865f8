// Package postgres is the PostgreSQL engine of the Database controller:
// the official image, and shell scripts (embedded, so the bytes the tests
// run against a real server are the bytes the operator ships) that take
// each server's role from the primary the operator names, initialise a
// primary, clone and rewind standbys, create the app database, back it up,
// verify and restore a backup, fence writes and upgrade it to a new major
// version (docs/design/database-backup.md; the role and its changes:
// docs/design/database-failover.md). The instance agent that runs beside
// each server is the subpackage instance.
package postgres

import (
	"embed"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// Defaults.
const (
	// DefaultImage is the official PostgreSQL 17 image, pinned to a minor
	// release so a restart never changes the server's version.
	DefaultImage = "postgres:17.6"
	DefaultPort  = 5432
	// Superuser is the administrative role initdb creates.
	Superuser = "postgres"
	// ReplicationUser is the role standbys clone and stream as (LOGIN
	// REPLICATION, nothing more), with the password of
	// Cluster.ReplicationSecret; bootstrap.sh makes it on the primary.
	ReplicationUser = "deckhand_replication"
)

// Paths inside the containers.
const (
	scriptsDir = engine.ScriptsDir
	dataMount  = "/var/lib/postgresql/data"
	// pgdata is a directory below the volume's root, which may hold
	// lost+found.
	pgdata = dataMount + "/pgdata"
	// BootstrapScript and InitScript are the entry points in Scripts().
	BootstrapScript = "bootstrap.sh"
	InitScript      = "init.sh"
	BackupScript    = "backup.sh"
	RestoreScript   = "restore.sh"
	UpgradeScript   = "upgrade.sh"
	FenceScript     = "fence.sh"
	VerifyScript    = "verify.sh"
	ProbeScript     = "probe.sh"
	// backupMount is where the Jobs that use a backup mount
	// engine.BackupVolume.
	backupMount = engine.BackupMount
	// TerminationMessagePath is where Jobs write their Report.
	TerminationMessagePath = engine.TerminationMessagePath
)

// The official Debian image's postgres user, for a Cluster that names
// none; the controller always sets Cluster.RunAsUser from the spec (70 for
// the Alpine image). initdb refuses to run as a user without a name.
const debianUID = 999

//go:embed scripts/*.sh
var scriptFiles embed.FS

// Engine is PostgreSQL.
type Engine struct{}

var (
	_ engine.Engine   = Engine{}
	_ engine.Fencer   = Engine{}
	_ engine.Verifier = Engine{}
)

// scratchMount is where a verification Job mounts engine.ScratchVolume.
const scratchMount = "/deckhand/scratch"

// Name is spec.engine's value.
func (Engine) Name() string { return "PostgreSQL" }

// DefaultImage is the pinned official image.
func (Engine) DefaultImage() string { return DefaultImage }

// DefaultPort is PostgreSQL's.
func (Engine) DefaultPort() int32 { return DefaultPort }

// SuperuserName is the role initdb creates.
func (Engine) SuperuserName() string { return Superuser }

// VersionFromImage reads the version from the image's tag.
func (Engine) VersionFromImage(image string) (string, bool) { return engine.TagVersion(image) }

// Scripts are the embedded shell scripts, by file name.
func (Engine) Scripts() map[string]string {
	entries, err := scriptFiles.ReadDir("scripts")
	if err != nil {
		panic(err) // embedded at build time
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := scriptFiles.ReadFile(path.Join("scripts", e.Name()))
		if err != nil {
			panic(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// ServerPod runs bootstrap.sh: initdb or pg_basebackup on an empty volume,
// the replication role (the primary: the pod the scripts ConfigMap's
// "primary" key names) or primary_conninfo (standbys), then
// postgres in the foreground. With c.RemoveOldData it first removes
// the data directories a major upgrade kept (pgdata.old-*).
func (e Engine) ServerPod(c engine.Cluster) engine.Pod {
	// probe.sh asks the server, not just the port: "ready" also requires
	// a standby to be streaming from the primary; "live" also passes
	// while a standby's first clone makes progress.
	probe := func(mode string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
				Command: []string{"sh", path.Join(scriptsDir, ProbeScript), mode},
			}},
			PeriodSeconds: period, TimeoutSeconds: 10, FailureThreshold: failures,
		}
	}
	env := []corev1.EnvVar{
		{Name: "PGDATA", Value: pgdata},
		{Name: "PGPORT", Value: fmt.Sprint(c.Port)},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "PRIMARY_HOST", Value: c.PrimaryHost},
		{Name: "PRIMARY_PORT", Value: fmt.Sprint(c.Port)},
		{Name: "LISTEN_ADDRESSES", Value: "*"},
	}
	if c.RemoveOldData {
		// Only when asked: the pod template of every other Database stays
		// as it was, so no rollout.
		env = append(env, corev1.EnvVar{Name: "REMOVE_OLD_DATA", Value: "true"})
	}
	// The superuser's password stays: the primary gives it to initdb, and
	// every pod has the same pod template. bootstrap.sh unsets it before
	// the server starts; standbys never use it.
	env = append(env, superuserEnv(c)...)
	env = append(env, replicationEnv(c)...)
	container := corev1.Container{
		Name:    "postgres",
		Image:   c.Image,
		Command: []string{"sh", path.Join(scriptsDir, BootstrapScript)},
		Args:    serverArgs(c.Parameters),
		Env:     env,
		Ports:   []corev1.ContainerPort{{Name: "postgres", ContainerPort: c.Port, Protocol: corev1.ProtocolTCP}},
		VolumeMounts: []corev1.VolumeMount{
			{Name: engine.DataVolume, MountPath: dataMount},
			{Name: engine.ScriptsVolume, MountPath: scriptsDir, ReadOnly: true},
			{Name: "shm", MountPath: "/dev/shm"},
		},
		// A clone of a large primary takes as long as it takes: the
		// startup and liveness probes pass while it makes progress (and
		// the startup probe allows an hour for a start that shows none).
		StartupProbe:    probe("live", 10, 360),
		ReadinessProbe:  probe("ready", 5, 3),
		LivenessProbe:   probe("live", 10, 6),
		SecurityContext: containerSecurityContext(),
	}
	if c.Resources != nil {
		container.Resources = *c.Resources
	}
	pod := engine.Pod{
		Container: container,
		// Docker's 64 MiB /dev/shm is too small for parallel queries.
		Volumes: []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Gi"))},
		}}},
		SecurityContext: podSecurityContext(c.RunAsUser),
	}
	if c.TLSSecret != "" {
		// The server reads its certificate and key from a copy in memory
		// (TLS_RUN_DIR, mode 0600: PostgreSQL refuses a key others can
		// read), made at start and again by the readiness probe when the
		// Secret's files change, followed by a reload.
		pod = engine.WithServerTLS(c, pod)
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: tlsRunVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi"))},
		}})
		pod.Container.VolumeMounts = append(pod.Container.VolumeMounts, corev1.VolumeMount{Name: tlsRunVolume, MountPath: tlsRunDir})
		// Before TLS_CA_FILE, the last: running servers' pod template has
		// it there, and another order would roll them.
		env := pod.Container.Env
		pod.Container.Env = slices.Insert(env, len(env)-1, corev1.EnvVar{Name: "TLS_RUN_DIR", Value: tlsRunDir})
	}
	return pod
}

// Where a server keeps the copy of its certificate and key it serves.
const (
	tlsRunVolume = "tls-run"
	tlsRunDir    = "/deckhand/tls-run"
)

// InitPod runs init.sh against the primary.
func (e Engine) InitPod(c engine.Cluster) engine.Pod {
	env := []corev1.EnvVar{
		{Name: "PRIMARY_HOST", Value: c.PrimaryHost},
		{Name: "PRIMARY_PORT", Value: fmt.Sprint(c.Port)},
		{Name: "APP_DATABASE", Value: c.Database},
		{Name: "APP_USER", Value: c.AppUser},
		{Name: "APP_PASSWORD", ValueFrom: secretKey(c.AppSecret, "password")},
		{Name: "TERMINATION_MESSAGE_PATH", Value: TerminationMessagePath},
	}
	if c.ResetAppPassword {
		env = append(env, corev1.EnvVar{Name: "APP_PASSWORD_RESET", Value: "true"})
	}
	env = append(env, superuserEnv(c)...)
	return engine.WithCA(c, engine.Pod{
		Container: corev1.Container{
			Name:    "init",
			Image:   c.Image,
			Command: []string{"sh", path.Join(scriptsDir, InitScript)},
			Env:     env,
			VolumeMounts: []corev1.VolumeMount{
				{Name: engine.ScriptsVolume, MountPath: scriptsDir, ReadOnly: true},
			},
			TerminationMessagePath: TerminationMessagePath,
			// A failure that wrote no report shows the log's last lines
			// (an image without sh or psql, a primary that never came).
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			SecurityContext:          containerSecurityContext(),
		},
		SecurityContext: podSecurityContext(c.RunAsUser),
	})
}

// MajorVersion is the first number: PostgreSQL 10 and later number their
// major releases 10, 11, ... ("17.6" -> "17"); before 10 it was the first
// two ("9.6.24" -> "9.6").
func (Engine) MajorVersion(version string) (string, bool) {
	parts := strings.Split(version, ".")
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return "", false
		}
	}
	if n, _ := strconv.Atoi(parts[0]); n < 10 {
		if len(parts) < 2 {
			return "", false
		}
		return parts[0] + "." + parts[1], true
	}
	return parts[0], true
}

// BackupPod runs backup.sh.
//
// Environment: SOURCE_HOST, SOURCE_PORT (b.Host), PGUSER and PGPASSWORD
// (the superuser), APP_DATABASE, BACKUP_DIR (the backup volume's mount),
// BACKUP_FILE (relative to BACKUP_DIR), BACKUP_JOB_UID,
// TERMINATION_MESSAGE_PATH, REPLICATION_USER; with b.Standby,
// STANDBY_HOST, STANDBY_PORT and MAX_LAG_BYTES: the script dumps from the
// standby only when the database holds no unlogged table or sequence (a
// dump taken on a standby holds none of their contents) and the standby
// streams with a replay lag, measured before the dump, of at most
// MAX_LAG_BYTES; the Report's SourceReason says why it read where it did.
func (e Engine) BackupPod(c engine.Cluster, b engine.Backup) engine.Pod {
	env := []corev1.EnvVar{
		{Name: "SOURCE_HOST", Value: b.Host},
		{Name: "SOURCE_PORT", Value: fmt.Sprint(c.Port)},
		{Name: "APP_DATABASE", Value: c.Database},
		{Name: "BACKUP_FILE", Value: b.File},
		engine.JobUIDEnv(),
		// Its name only: the Job's warning about roles a backup does not
		// hold leaves the operator's own out.
		{Name: "REPLICATION_USER", Value: ReplicationUser},
	}
	if b.Standby != "" {
		env = append(env,
			corev1.EnvVar{Name: "STANDBY_HOST", Value: b.Standby},
			corev1.EnvVar{Name: "STANDBY_PORT", Value: fmt.Sprint(c.Port)},
			corev1.EnvVar{Name: "MAX_LAG_BYTES", Value: fmt.Sprint(b.MaxLagBytes)},
		)
	}
	return engine.WithCA(c, jobPod(c, "backup", BackupScript, env, b.ClaimName, nil))
}

// RestorePod runs restore.sh.
//
// Environment: PRIMARY_HOST, PRIMARY_PORT, PGUSER and PGPASSWORD (the
// superuser), APP_DATABASE, APP_USER, BACKUP_DIR, BACKUP_FILE,
// BACKUP_SHA256, TERMINATION_MESSAGE_PATH.
func (e Engine) RestorePod(c engine.Cluster, r engine.Restore) engine.Pod {
	env := []corev1.EnvVar{
		{Name: "PRIMARY_HOST", Value: c.PrimaryHost},
		{Name: "PRIMARY_PORT", Value: fmt.Sprint(c.Port)},
		{Name: "APP_DATABASE", Value: c.Database},
		{Name: "APP_USER", Value: c.AppUser},
		{Name: "BACKUP_FILE", Value: r.File},
		{Name: "BACKUP_SHA256", Value: r.SHA256},
	}
	return engine.WithCA(c, jobPod(c, "restore", RestoreScript, env, r.ClaimName, nil))
}

// UpgradePod runs upgrade.sh with the primary's data volume mounted where
// the server mounts it.
//
// Environment: PGDATA (the current data directory), PGPORT (a port for a
// server only the Job reaches, on 127.0.0.1), PGUSER and PGPASSWORD (the
// superuser), APP_DATABASE, APP_USER and APP_PASSWORD (the new directory
// gets the app role as init.sh makes it: a backup holds no roles),
// BACKUP_DIR, BACKUP_FILE, BACKUP_SHA256, FROM_VERSION, TO_VERSION,
// TERMINATION_MESSAGE_PATH.
//
// The old directory is kept beside PGDATA as pgdata.old-<FromVersion>
// until the server runs with Cluster.RemoveOldData. With u.Rollback (and
// the old image) ROLLBACK=true puts it back instead.
func (e Engine) UpgradePod(c engine.Cluster, u engine.Upgrade) engine.Pod {
	env := []corev1.EnvVar{
		{Name: "PGDATA", Value: pgdata},
		{Name: "PGPORT", Value: fmt.Sprint(c.Port)},
		{Name: "APP_DATABASE", Value: c.Database},
		{Name: "APP_USER", Value: c.AppUser},
		{Name: "APP_PASSWORD", ValueFrom: secretKey(c.AppSecret, "password")},
		{Name: "BACKUP_FILE", Value: u.File},
		{Name: "BACKUP_SHA256", Value: u.SHA256},
		{Name: "FROM_VERSION", Value: u.FromVersion},
		{Name: "TO_VERSION", Value: u.ToVersion},
	}
	name := "upgrade"
	if u.Rollback {
		name = "rollback"
		env = append(env, corev1.EnvVar{Name: "ROLLBACK", Value: "true"})
	}
	data := corev1.Volume{Name: engine.DataVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: u.DataClaimName},
	}}
	pod := jobPod(c, name, UpgradeScript, env, u.ClaimName, &data)
	pod.Container.VolumeMounts = append(pod.Container.VolumeMounts, corev1.VolumeMount{Name: engine.DataVolume, MountPath: dataMount})
	return pod
}

// FencePod runs fence.sh against the primary: the app role NOLOGIN and
// its sessions ended, or with lift, LOGIN again.
//
// Environment: PRIMARY_HOST, PRIMARY_PORT, PGUSER and PGPASSWORD (the
// superuser), APP_USER, LIFT, TERMINATION_MESSAGE_PATH.
func (e Engine) FencePod(c engine.Cluster, lift bool) engine.Pod {
	name := "fence"
	if lift {
		name = "unfence"
	}
	env := []corev1.EnvVar{
		{Name: "PRIMARY_HOST", Value: c.PrimaryHost},
		{Name: "PRIMARY_PORT", Value: fmt.Sprint(c.Port)},
		{Name: "APP_USER", Value: c.AppUser},
		{Name: "LIFT", Value: strconv.FormatBool(lift)},
	}
	return engine.WithCA(c, jobPod(c, name, FenceScript, env, "", nil))
}

// LiftByHand is fence.sh's lift, as SQL a person can paste.
func (Engine) LiftByHand(appUser string) string {
	return "ALTER ROLE " + quoteIdent(appUser) + " LOGIN"
}

// quoteIdent quotes a PostgreSQL identifier (format's %I, always quoted).
func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// VerifyPod runs verify.sh: the dump restored into a scratch cluster of
// the Job's own (initdb in the scratch volume, served on 127.0.0.1 only)
// and checked. The pod carries no Secret: the scratch cluster's roles get
// passwords the script makes, and the user check runs as the app role
// there, not on the Database's servers.
//
// Environment: APP_DATABASE, APP_USER, BACKUP_DIR (read-only), BACKUP_FILE,
// BACKUP_SHA256, SCRATCH_DIR, PGPORT (the scratch server's), USER_CHECK,
// TERMINATION_MESSAGE_PATH. The operator adds the ScratchVolume.
func (e Engine) VerifyPod(c engine.Cluster, v engine.Verify) engine.Pod {
	env := []corev1.EnvVar{
		{Name: "APP_DATABASE", Value: c.Database},
		{Name: "APP_USER", Value: c.AppUser},
		{Name: "BACKUP_FILE", Value: v.File},
		{Name: "BACKUP_SHA256", Value: v.SHA256},
		{Name: "SCRATCH_DIR", Value: scratchMount},
		{Name: "PGPORT", Value: fmt.Sprint(c.Port)},
	}
	if v.UserCheck != "" {
		env = append(env, corev1.EnvVar{Name: "USER_CHECK", Value: v.UserCheck})
	}
	pod := engine.JobPod(c, "verify", VerifyScript, env, nil, v.ClaimName, nil, podSecurityContext(c.RunAsUser))
	for i := range pod.Container.VolumeMounts {
		if pod.Container.VolumeMounts[i].Name == engine.BackupVolume {
			pod.Container.VolumeMounts[i].ReadOnly = true
		}
	}
	pod.Container.VolumeMounts = append(pod.Container.VolumeMounts, corev1.VolumeMount{Name: engine.ScratchVolume, MountPath: scratchMount})
	return pod
}

// jobPod is engine.JobPod with this engine's credentials and pod
// security context.
func jobPod(c engine.Cluster, name, script string, env []corev1.EnvVar, backupClaim string, extra *corev1.Volume) engine.Pod {
	return engine.JobPod(c, name, script, env, superuserEnv(c), backupClaim, extra, podSecurityContext(c.RunAsUser))
}

// ConnectionURI is a libpq URI.
func (Engine) ConnectionURI(user, password, host string, port int32, database string) string {
	u := url.URL{
		Scheme: "postgresql",
		User:   url.UserPassword(user, password),
		Host:   fmt.Sprintf("%s:%d", host, port),
		Path:   "/" + database,
	}
	return u.String()
}

func superuserEnv(c engine.Cluster) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "PGUSER", ValueFrom: secretKey(c.SuperuserSecret, "username")},
		{Name: "PGPASSWORD", ValueFrom: secretKey(c.SuperuserSecret, "password")},
	}
}

// replicationEnv is the role standbys replicate as and its password:
// Cluster.ReplicationSecret's, or the superuser Secret's when the Kind gives
// no replication Secret (still a role of its own, not the superuser).
func replicationEnv(c engine.Cluster) []corev1.EnvVar {
	secret := c.ReplicationSecret
	if secret == "" {
		secret = c.SuperuserSecret
	}
	return []corev1.EnvVar{
		{Name: "REPLICATION_USER", Value: ReplicationUser},
		{Name: "REPLICATION_PASSWORD", ValueFrom: secretKey(secret, "password")},
	}
}

func secretKey(secret, key string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
	}}
}

// serverDefaults are the settings deckhand gives every server unless the
// parameters set them (bootstrap.sh adds max_slot_wal_keep_size, which
// depends on the volume).
var serverDefaults = map[string]string{
	// Standbys stream through slots (bootstrap.sh); wal_keep_size is a
	// floor for a standby whose slot is not made yet.
	"wal_keep_size": "512MB",
	// A standby tells the primary which rows its queries still read, so a
	// long dump on a standby is not cancelled by a recovery conflict. The
	// cost: the primary's vacuum keeps those rows meanwhile.
	"hot_standby_feedback": "on",
}

// serverArgs passes the parameters as -c name=value, sorted so the pod
// template (and so the rollout) depends only on their content. Each is one
// argument: no shell ever splits or expands it.
func serverArgs(params map[string]string) []string {
	names := make([]string, 0, len(params)+1)
	for k := range params {
		names = append(names, k)
	}
	for k := range serverDefaults {
		if _, ok := params[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	args := make([]string, 0, 2*len(names))
	for _, k := range names {
		v, ok := params[k]
		if !ok {
			v = serverDefaults[k]
		}
		args = append(args, "-c", k+"="+v)
	}
	return args
}

func podSecurityContext(uid int64) *corev1.PodSecurityContext {
	if uid == 0 {
		// A Cluster made without one (engine tests): the official image's.
		uid = debianUID
	}
	return &corev1.PodSecurityContext{
		RunAsNonRoot:        ptr.To(true),
		RunAsUser:           ptr.To(uid),
		RunAsGroup:          ptr.To(uid),
		FSGroup:             ptr.To(uid),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func containerSecurityContext() *corev1.SecurityContext { return engine.RestrictedContainer() }
