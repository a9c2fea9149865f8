// Package mysql is the MySQL/MariaDB engine: the official MySQL 8.4 LTS
// image by default, MariaDB images recognised, and shell scripts (embedded,
// so the bytes the tests run against a real server are the bytes the
// operator ships) that start a primary, clone replicas from a consistent
// dump and replicate with GTIDs, create the app database, and take and
// load dumps.
//
// The scripts decide everything that differs between MySQL and MariaDB
// from the server's own version at run time (scripts/lib.sh), so one image
// reference is all the Go side needs to know.
package mysql

import (
	"embed"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// Defaults.
const (
	// DefaultImage is the official MySQL 8.4 LTS image, pinned to a patch
	// release so a restart never changes the server's version.
	DefaultImage = "mysql:8.4.8"
	DefaultPort  = 3306
	// Superuser is the account whose password the cluster's Secret holds.
	Superuser = "root"
	// ReplicationUser is the account replicas connect as (scripts/lib.sh).
	ReplicationUser = "deckhand_repl"
)

// Paths inside the containers.
const (
	scriptsDir = engine.ScriptsDir
	// dataMount is where both official images keep their data.
	dataMount = "/var/lib/mysql"
	// dataDir is a directory below the volume's root, which may hold
	// lost+found.
	dataDir = dataMount + "/data"
	// runDir holds the server's socket (an emptyDir).
	runDir = "/var/run/mysqld"
	socket = runDir + "/mysqld.sock"
	// backupMount is where backup, restore and upgrade Jobs mount
	// engine.BackupVolume.
	backupMount = engine.BackupMount
	// scratchMount is where a verification Job mounts
	// engine.ScratchVolume.
	scratchMount = "/deckhand/scratch"
	// TerminationMessagePath is where Jobs write their Report.
	TerminationMessagePath = engine.TerminationMessagePath
)

// Entry points in Scripts(); lib.sh is sourced by all of them.
const (
	BootstrapScript = "bootstrap.sh"
	InitScript      = "init.sh"
	BackupScript    = "backup.sh"
	RestoreScript   = "restore.sh"
	UpgradeScript   = "upgrade.sh"
	VerifyScript    = "verify.sh"
	ProbeScript     = "probe.sh"
	LibScript       = "lib.sh"
)

// The official images' mysql user (MySQL's Oracle Linux and MariaDB's
// Ubuntu images alike).
const mysqlUID = 999

//go:embed scripts/*.sh
var scriptFiles embed.FS

// Engine is MySQL or MariaDB.
type Engine struct{}

var (
	_ engine.Engine   = Engine{}
	_ engine.Verifier = Engine{}
)

// Name is the engine's name.
func (Engine) Name() string { return "MySQL" }

// DefaultImage is the pinned official MySQL image.
func (Engine) DefaultImage() string { return DefaultImage }

// DefaultPort is MySQL's.
func (Engine) DefaultPort() int32 { return DefaultPort }

// SuperuserName is root.
func (Engine) SuperuserName() string { return Superuser }

// VersionFromImage reads the version from the image's tag ("mysql:8.4.8",
// "mariadb:11.4.5-noble"); "mysql:latest" has none.
func (Engine) VersionFromImage(image string) (string, bool) { return engine.TagVersion(image) }

// Flavor is the server an image runs, from its repository name: MariaDB
// for mariadb images (docker.io/library/mariadb, quay.io/mariadb-foundation/
// mariadb-devel...), MySQL otherwise.
func Flavor(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	name := ref[strings.LastIndex(ref, "/")+1:]
	name, _, _ = strings.Cut(name, ":")
	if strings.Contains(strings.ToLower(name), "mariadb") {
		return "MariaDB"
	}
	return "MySQL"
}

// MajorVersion is the release series, which an in-place restart does not
// cross: MySQL "8.0.40" -> "8.0", "8.4.8" -> "8.4", "9.1.0" -> "9.1" (each
// innovation release is a series of its own); MariaDB "10.11.19-MariaDB"
// -> "10.11", "11.4.5" -> "11.4". Supported: MySQL 8 and 9, MariaDB 10.6
// and later; a version without a minor part ("8") names no series.
func (Engine) MajorVersion(version string) (string, bool) {
	v := version
	if i := strings.IndexFunc(v, func(r rune) bool { return r != '.' && (r < '0' || r > '9') }); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return "", false
	}
	switch {
	case major == 8 || major == 9: // MySQL
	case major == 10 && minor >= 6, major >= 11: // MariaDB
	default:
		return "", false
	}
	return fmt.Sprintf("%d.%d", major, minor), true
}

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

// ServerPod runs bootstrap.sh: a new data directory (the primary) or a
// clone of the primary (replicas) on an empty volume, then the server in
// the foreground. With c.RemoveOldData it first removes the data
// directories a major upgrade kept (data.deckhand-old-*).
//
// Environment: DATA_DIR, PORT, BIND_ADDRESS (empty: every address),
// MYSQL_UNIX_PORT, MYSQL_PWD (root's password), REPLICATION_PASSWORD,
// POD_NAME, PRIMARY_HOST, PRIMARY_PORT, PRIMARY_WAIT_SECONDS;
// REMOVE_OLD_DATA; with TLS, TLS_DIR and TLS_CA_FILE (engine.WithServerTLS).
func (e Engine) ServerPod(c engine.Cluster) engine.Pod {
	probe := func(mode string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
				// A query as root, not just the port (probe.sh).
				Command: []string{"sh", path.Join(scriptsDir, ProbeScript), mode},
			}},
			PeriodSeconds: period, TimeoutSeconds: 5, FailureThreshold: failures,
		}
	}
	env := []corev1.EnvVar{
		{Name: "DATA_DIR", Value: dataDir},
		{Name: "PORT", Value: fmt.Sprint(c.Port)},
		{Name: "BIND_ADDRESS", Value: ""},
		{Name: "MYSQL_UNIX_PORT", Value: socket},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "PRIMARY_HOST", Value: c.PrimaryHost},
		{Name: "PRIMARY_PORT", Value: fmt.Sprint(c.Port)},
		// A replica waits for its primary as long as it takes.
		{Name: "PRIMARY_WAIT_SECONDS", Value: "0"},
	}
	if c.RemoveOldData {
		// Only when asked: the pod template of every other cluster stays
		// as it was, so no rollout.
		env = append(env, corev1.EnvVar{Name: "REMOVE_OLD_DATA", Value: "true"})
	}
	env = append(env, rootEnv(c)...)
	env = append(env, corev1.EnvVar{Name: "REPLICATION_PASSWORD", ValueFrom: secretKey(replicationSecret(c), "password")})
	container := corev1.Container{
		Name:    "mysql",
		Image:   c.Image,
		Command: []string{"sh", path.Join(scriptsDir, BootstrapScript)},
		Args:    serverArgs(c.Parameters),
		Env:     env,
		Ports:   []corev1.ContainerPort{{Name: "mysql", ContainerPort: c.Port, Protocol: corev1.ProtocolTCP}},
		VolumeMounts: []corev1.VolumeMount{
			{Name: engine.DataVolume, MountPath: dataMount},
			{Name: engine.ScriptsVolume, MountPath: scriptsDir, ReadOnly: true},
			{Name: "run", MountPath: runDir},
		},
		// A clone of a large primary takes as long as its dump and load:
		// the startup probe allows an hour before liveness applies.
		StartupProbe:    probe("alive", 10, 360),
		ReadinessProbe:  probe("ready", 5, 3),
		LivenessProbe:   probe("alive", 10, 6),
		SecurityContext: containerSecurityContext(),
	}
	if c.Resources != nil {
		container.Resources = *c.Resources
	}
	// With TLS the server reads its certificate and key from the mounted
	// Secret (readable through the pod's fsGroup); the readiness probe
	// reloads them when the Secret's files change.
	return engine.WithServerTLS(c, engine.Pod{
		Container: container,
		Volumes: []corev1.Volume{{Name: "run", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory},
		}}},
		SecurityContext: podSecurityContext(c.RunAsUser),
	})
}

// InitPod runs init.sh against the primary.
//
// Environment: PRIMARY_HOST, PRIMARY_PORT, MYSQL_PWD, APP_DATABASE,
// APP_USER, APP_PASSWORD (the last three only when c.Database is set),
// TERMINATION_MESSAGE_PATH.
func (e Engine) InitPod(c engine.Cluster) engine.Pod {
	env := []corev1.EnvVar{
		{Name: "PRIMARY_HOST", Value: c.PrimaryHost},
		{Name: "PRIMARY_PORT", Value: fmt.Sprint(c.Port)},
		{Name: "TERMINATION_MESSAGE_PATH", Value: TerminationMessagePath},
	}
	if c.Database != "" {
		env = append(env,
			corev1.EnvVar{Name: "APP_DATABASE", Value: c.Database},
			corev1.EnvVar{Name: "APP_USER", Value: c.AppUser},
			corev1.EnvVar{Name: "APP_PASSWORD", ValueFrom: secretKey(c.AppSecret, "password")},
		)
	}
	env = append(env, rootEnv(c)...)
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
			// A failure that wrote no report shows the log's last lines.
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			SecurityContext:          containerSecurityContext(),
		},
		SecurityContext: podSecurityContext(c.RunAsUser),
	})
}

// BackupPod runs backup.sh.
//
// Environment: SOURCE_HOST, SOURCE_PORT, MYSQL_PWD, BACKUP_DIR,
// BACKUP_FILE, TERMINATION_MESSAGE_PATH.
func (e Engine) BackupPod(c engine.Cluster, b engine.Backup) engine.Pod {
	env := []corev1.EnvVar{
		{Name: "SOURCE_HOST", Value: b.Host},
		{Name: "SOURCE_PORT", Value: fmt.Sprint(c.Port)},
		{Name: "BACKUP_FILE", Value: b.File},
		engine.JobUIDEnv(),
	}
	return engine.WithCA(c, jobPod(c, "backup", BackupScript, env, b.ClaimName, nil))
}

// RestorePod runs restore.sh.
//
// Environment: PRIMARY_HOST, PRIMARY_PORT, MYSQL_PWD, BACKUP_DIR,
// BACKUP_FILE, BACKUP_SHA256, TERMINATION_MESSAGE_PATH.
func (e Engine) RestorePod(c engine.Cluster, r engine.Restore) engine.Pod {
	env := []corev1.EnvVar{
		{Name: "PRIMARY_HOST", Value: c.PrimaryHost},
		{Name: "PRIMARY_PORT", Value: fmt.Sprint(c.Port)},
		{Name: "BACKUP_FILE", Value: r.File},
		{Name: "BACKUP_SHA256", Value: r.SHA256},
	}
	return engine.WithCA(c, jobPod(c, "restore", RestoreScript, env, r.ClaimName, nil))
}

// UpgradePod runs upgrade.sh with the primary's data volume mounted where
// the server mounts it.
//
// Environment: DATA_DIR, MYSQL_UNIX_PORT, MYSQL_PWD, REPLICATION_PASSWORD,
// BACKUP_DIR, BACKUP_FILE, BACKUP_SHA256, FROM_VERSION, TO_VERSION,
// TERMINATION_MESSAGE_PATH.
func (e Engine) UpgradePod(c engine.Cluster, u engine.Upgrade) engine.Pod {
	env := []corev1.EnvVar{
		{Name: "DATA_DIR", Value: dataDir},
		{Name: "MYSQL_UNIX_PORT", Value: socket},
		{Name: "REPLICATION_PASSWORD", ValueFrom: secretKey(replicationSecret(c), "password")},
		{Name: "BACKUP_FILE", Value: u.File},
		{Name: "BACKUP_SHA256", Value: u.SHA256},
		{Name: "FROM_VERSION", Value: u.FromVersion},
		{Name: "TO_VERSION", Value: u.ToVersion},
	}
	data := corev1.Volume{Name: engine.DataVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: u.DataClaimName},
	}}
	run := corev1.Volume{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	pod := jobPod(c, "upgrade", UpgradeScript, env, u.ClaimName, &data)
	pod.Volumes = append(pod.Volumes, run)
	pod.Container.VolumeMounts = append(pod.Container.VolumeMounts,
		corev1.VolumeMount{Name: engine.DataVolume, MountPath: dataMount},
		corev1.VolumeMount{Name: "run", MountPath: runDir},
	)
	return pod
}

// VerifyPod runs verify.sh: the dump restored into a scratch server of the
// Job's own (a new data directory in the scratch volume, listening on
// 127.0.0.1 only) and checked. The pod carries no Secret: the scratch
// server's accounts get passwords the script makes, and the user check
// runs as the app user there, not on the cluster's servers. The backup
// volume is mounted read-only; the operator adds the ScratchVolume.
//
// Environment: BACKUP_DIR, BACKUP_FILE, BACKUP_SHA256, SCRATCH_DIR,
// VERIFY_PORT, APP_DATABASE, APP_USER, USER_CHECK (only when set),
// TERMINATION_MESSAGE_PATH.
func (e Engine) VerifyPod(c engine.Cluster, v engine.Verify) engine.Pod {
	env := []corev1.EnvVar{
		{Name: "BACKUP_FILE", Value: v.File},
		{Name: "BACKUP_SHA256", Value: v.SHA256},
		{Name: "SCRATCH_DIR", Value: scratchMount},
		{Name: "VERIFY_PORT", Value: fmt.Sprint(c.Port)},
		{Name: "APP_DATABASE", Value: c.Database},
		{Name: "APP_USER", Value: c.AppUser},
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
	pod.Container.VolumeMounts = append(pod.Container.VolumeMounts,
		corev1.VolumeMount{Name: engine.ScratchVolume, MountPath: scratchMount})
	return pod
}

// jobPod is engine.JobPod with this engine's credentials and pod
// security context.
func jobPod(c engine.Cluster, name, script string, env []corev1.EnvVar, backupClaim string, extra *corev1.Volume) engine.Pod {
	return engine.JobPod(c, name, script, env, rootEnv(c), backupClaim, extra, podSecurityContext(c.RunAsUser))
}

// ConnectionURI is a mysql:// URI (as Go's and JDBC's MySQL drivers read
// it, after their own prefix).
func (Engine) ConnectionURI(user, password, host string, port int32, database string) string {
	u := url.URL{
		Scheme: "mysql",
		User:   url.UserPassword(user, password),
		Host:   fmt.Sprintf("%s:%d", host, port),
		Path:   "/" + database,
	}
	return u.String()
}

// rootEnv gives the clients root's password through MYSQL_PWD (which
// both MySQL's and MariaDB's clients read), never a command line.
func rootEnv(c engine.Cluster) []corev1.EnvVar {
	return []corev1.EnvVar{{Name: "MYSQL_PWD", ValueFrom: secretKey(c.SuperuserSecret, "password")}}
}

// replicationSecret holds the replication account's password: its own
// Secret when the Cluster names one, else the superuser's.
func replicationSecret(c engine.Cluster) string {
	if c.ReplicationSecret != "" {
		return c.ReplicationSecret
	}
	return c.SuperuserSecret
}

func secretKey(secret, key string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
	}}
}

// serverArgs passes the parameters as --name=value, sorted so the pod
// template (and so the rollout) depends only on their content. Each is one
// argument: no shell ever splits or expands it.
func serverArgs(params map[string]string) []string {
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	slices.Sort(names)
	args := make([]string, 0, len(names))
	for _, k := range names {
		args = append(args, "--"+k+"="+params[k])
	}
	return args
}

func podSecurityContext(uid int64) *corev1.PodSecurityContext {
	if uid == 0 {
		// A Cluster made without one (engine tests): the official image's.
		uid = mysqlUID
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
