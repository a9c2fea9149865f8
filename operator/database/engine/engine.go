// Package engine is what the Database controller asks of a database
// server: its image, version, scripts and the containers that run them.
// The controller (objects, status, lifecycle) knows no engine; PostgreSQL
// (operator/database/postgres, a Database's engine) and MySQL/MariaDB
// (operator/database/mysql, a MySQLCluster's) implement this interface.
package engine

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Names of the volumes an engine's containers mount; the controller
// provides them.
const (
	// DataVolume is the replica's PersistentVolumeClaim.
	DataVolume = "data"
	// ScriptsVolume is the ConfigMap holding Scripts().
	ScriptsVolume = "scripts"
	// BackupVolume is a Database's backup PersistentVolumeClaim (one per
	// Database, not owned by it), mounted by the backup, restore,
	// verification, upgrade and file-deletion Jobs.
	BackupVolume = "backup"
)

// Keys the controller adds to the scripts ConfigMap beside Scripts(), for
// the engine's scripts to read as files beside them. Mounted, they change
// in the pods without a restart; the scripts' hash (which rolls the
// servers) is of Scripts() alone, so neither rolls anything.
const (
	// ScriptsReplicasKey holds the number of replicas: PostgreSQL's
	// primary probe drops the replication slots of standbys beyond it (an
	// environment variable would restart the primary at every scale).
	ScriptsReplicasKey = "replicas"
	// ScriptsPrimaryKey holds the pod the operator names the primary
	// (status.currentPrimary): each server takes its role from it at start
	// (PostgreSQL's bootstrap script), and its readiness probe fails while
	// its role disagrees.
	ScriptsPrimaryKey = "primary"
	// ScriptsTLSKey is "required" once every server of a cluster with TLS
	// (else "offered")
	// runs with its certificate: the scripts then refuse connections
	// without TLS (PostgreSQL's hostssl, MySQL's require_secure_transport)
	// and verify the servers they connect to (sslmode=verify-full,
	// --ssl-verify-server-cert). Until then (TLS being turned on under running
	// servers, or off) they accept and ask for TLS without requiring it, so
	// a server restarted first still reaches one that is not. Changes
	// without a restart, as the other keys.
	ScriptsTLSKey = "tls"
)

// Cluster is what an engine needs to know about one set of database
// servers, whichever API asked for it (a Database or a MySQLCluster).
type Cluster struct {
	// Name prefixes every object and is the StatefulSet's name, so pods are
	// Name-0, Name-1, ...; the primary is the pod ScriptsPrimaryKey names
	// (Name-0 at creation; an engine that does not read the key keeps it
	// there).
	Name      string
	Namespace string
	// Image of the server, and of the Jobs, which must match it.
	Image string
	Port  int32
	// Database is the database the init Job creates, owned by AppUser.
	Database string
	AppUser  string
	// Parameters are engine settings.
	Parameters map[string]string
	Resources  *corev1.ResourceRequirements

	// SuperuserSecret and AppSecret hold "password" (and the superuser's
	// "username"); the containers read them through secretKeyRef.
	SuperuserSecret string
	AppSecret       string
	// ReplicationSecret holds "password" of the account replicas connect
	// as (MySQL's replication user, PostgreSQL's replication role); empty:
	// SuperuserSecret's.
	ReplicationSecret string
	// PrimaryHost is the read-write Service: where standbys and Jobs find
	// the primary.
	PrimaryHost string
	// RemoveOldData tells the servers to remove the data directories a
	// major-version upgrade kept. The controller sets it once the upgraded
	// primary has been ready; it takes effect when a server (re)starts.
	RemoveOldData bool
	// RunAsUser is the UID the server's image runs its server as (the
	// official images: 999; Alpine's postgres: 70). It comes from the
	// Database's spec (with a documented default), never from the image
	// reference: every container of the cluster runs as it.
	RunAsUser int64
	// TLSSecret is the Secret (kubernetes.io/tls, with ca.crt) the servers
	// present and the Jobs trust; "" without TLS. Only the servers mount
	// its key; Jobs get its ca.crt only.
	TLSSecret string
	// ResetAppPassword: the app role came with data recovered from
	// another Database's archive, with that Database's password; the init
	// Job gives it the app Secret's.
	ResetAppPassword bool
}

// Pod is the engine's part of a pod: its one container, the volumes it
// needs besides DataVolume and ScriptsVolume, and the pod's security
// context.
type Pod struct {
	Container       corev1.Container
	Volumes         []corev1.Volume
	SecurityContext *corev1.PodSecurityContext
}

// Engine knows one database server.
type Engine interface {
	// Name is the engine's name in spec.engine.
	Name() string
	// DefaultImage is a pinned image, used when none is given.
	DefaultImage() string
	// DefaultPort is the server's usual port.
	DefaultPort() int32
	// SuperuserName is the administrative user the operator generates a
	// password for.
	SuperuserName() string
	// VersionFromImage reads the server version from an image reference
	// ("postgres:17.6" -> "17.6"); false when the tag holds none.
	VersionFromImage(image string) (string, bool)
	// Scripts are the files of the scripts ConfigMap, by name.
	Scripts() map[string]string
	// ServerPod runs one replica: the primary or a standby. Engines that
	// read the scripts ConfigMap's "primary" key (PostgreSQL) take the
	// role from it; the others (MySQL) still from the ordinal (0 is the
	// primary).
	ServerPod(c Cluster) Pod
	// InitPod runs the init Job: it waits for the primary, creates the
	// database and its owning role if missing, and writes a Report as its
	// termination message.
	InitPod(c Cluster) Pod
	// ConnectionURI is the URI a client uses to reach database as user.
	ConnectionURI(user, password, host string, port int32, database string) string

	// MajorVersion is the part of a version that an in-place restart
	// cannot cross ("17.6" -> "17" for PostgreSQL; "8.4.3" -> "8.4" for
	// MySQL); false when version is not one of the engine's.
	MajorVersion(version string) (string, bool)
	// BackupPod runs a backup Job: the engine's own dump tool, from the
	// Cluster's own image, reading from b.Host, writing b.File on
	// BackupVolume under a temporary name, fsynced, checksummed and then
	// renamed, so a file named b.File is always complete. Its Report
	// carries File, Size, SHA256 and ServerVersion.
	BackupPod(c Cluster, b Backup) Pod
	// RestorePod runs a restore Job into the Cluster's primary (reached at
	// PrimaryHost, already up, before the init Job): it checks the file's
	// checksum against r.SHA256 first and refuses a mismatch. Its Report
	// carries ServerVersion.
	RestorePod(c Cluster, r Restore) Pod
	// UpgradePod runs a major-version upgrade Job with the new image
	// (c.Image) while no server runs (the StatefulSet at zero replicas): it
	// mounts the primary's data volume and BackupVolume, initialises a new
	// data directory beside the old one, restores u.File into it and swaps
	// them, keeping the old directory (the engine documents where, and
	// when it is removed: never before the new primary is ready).
	// With u.Rollback it runs with the OLD image (c.Image) instead, after
	// a failed upgrade, while no server runs: it puts the kept old
	// directory back in place, whichever step the upgrade reached, and
	// keeps a directory the new version served beside it. Its Report
	// carries ServerVersion (the old image's).
	UpgradePod(c Cluster, u Upgrade) Pod
}

// Fencer is an engine whose writes can be fenced before a major upgrade's
// dump. The major-upgrade path needs it; an engine without it has no
// automated major upgrades.
type Fencer interface {
	// FencePod runs a fence Job against the primary (PrimaryHost, up):
	// the app user can no longer log in and every session of it is ended,
	// so no client writes after the dump starts; the superuser still
	// works. With lift it lets the app user log in again. Both are
	// idempotent. Its Report carries ServerVersion and SessionsEnded.
	FencePod(c Cluster, lift bool) Pod
	// LiftByHand is what a person runs as the superuser to let appUser log
	// in again when the lifting Job cannot (the way out a LiftFailed
	// condition gives).
	LiftByHand(appUser string) string
}

// Verifier is an engine whose backups can be proven by restoring them.
// A verification Job restores a dump into a scratch server of
// its own, inside the Job's pod, listening on 127.0.0.1 only, and checks
// it.
type Verifier interface {
	// VerifyPod runs a verification Job with the Cluster's image: it
	// mounts BackupVolume (read-only) and a volume named ScratchVolume
	// (the operator supplies its source, sized from the dump), then runs
	// the checks in the order of the Check* names below, stopping at the
	// first failure. A check that fails is a verification that ran: the
	// Job exits 0 and its Report's Verification says which check failed
	// and why. A Job that fails (non-zero exit) could not verify at all.
	VerifyPod(c Cluster, v Verify) Pod
}

// ScratchVolume is the volume a verification Job restores into.
const ScratchVolume = "scratch"

// The checks of a verification, in the order they run.
const (
	// CheckChecksum: the file's SHA-256 equals Verify.SHA256.
	CheckChecksum = "checksum"
	// CheckRestore: the engine's own restore tool loads the whole dump
	// into the scratch server without an error.
	CheckRestore = "restore"
	// CheckRowCounts: each table's row count in the scratch server equals
	// the count the backup Job recorded inside the dump's own snapshot
	// (the file File+CountsSuffix beside the dump).
	CheckRowCounts = "rowCounts"
	// CheckUser: Verify.UserCheck, run as the app's role (never a
	// superuser) in the restored database, returns true. Skipped (not
	// listed) when UserCheck is empty.
	CheckUser = "userCheck"
)

// CountsSuffix names the row counts a backup Job writes beside its dump:
// one line per table, "<schema>.<table>\t<rows>", sorted, counted inside
// the same snapshot the dump reads. Written and fsynced before the dump
// is renamed to its final name, so a dump always has its counts.
const CountsSuffix = ".counts"

// OwnerSuffix names the record a backup Job writes beside its dump before
// it: the Job that wrote the file, so a file a retried Job finds is
// reported only when it wrote it.
const OwnerSuffix = ".owner"

// BackupFiles are the files one backup's file leaves on BackupVolume: the
// dump, its owner record and its row counts. Deleting a backup's file
// deletes them all.
func BackupFiles(file string) []string {
	return []string{file, file + OwnerSuffix, file + CountsSuffix}
}

// Verify is one verification for VerifyPod.
type Verify struct {
	// File and SHA256 as recorded in the DatabaseBackup's status;
	// ClaimName is the backup PersistentVolumeClaim holding File and
	// File+CountsSuffix.
	File      string
	SHA256    string
	ClaimName string
	// UserCheck is an optional SQL query that must return true.
	UserCheck string
}

// Verification is what a verification Job found.
type Verification struct {
	// Checks ran in order; the last one is the one that failed, if any.
	Checks []Check `json:"checks"`
	// Tables and Rows are what the restored database holds.
	Tables int   `json:"tables,omitempty"`
	Rows   int64 `json:"rows,omitempty"`
}

// Check is one check of a verification.
type Check struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	// Message says why a check failed (the tool's own error, or which
	// table's count differed: "public.orders: 1200 recorded, 1199 restored").
	Message string `json:"message,omitempty"`
}

// Failed is the first check that failed, or nil when all passed.
func (v Verification) Failed() *Check {
	for i := range v.Checks {
		if !v.Checks[i].Passed {
			return &v.Checks[i]
		}
	}
	return nil
}

// Backup is one dump for BackupPod.
type Backup struct {
	// File is the dump's path relative to BackupVolume's root. It names
	// the DatabaseBackup's UID, so a file is bound to the one object that
	// asked for it; a script never reports a file it did not write.
	File string
	// Host is the primary (the read-write Service).
	Host string
	// Standby, when set, is a standby the Job may read from instead: the
	// Job itself measures the standby's replay lag (the primary's current
	// WAL position against the standby's replay position) before the dump
	// starts and uses the standby only when it is streaming and the lag is
	// at most MaxLagBytes; otherwise it reads from Host. Empty: Host
	// always (the final backup before a deletion, the backup before an
	// upgrade).
	Standby     string
	MaxLagBytes int64
	// ClaimName is the backup PersistentVolumeClaim mounted as BackupVolume.
	ClaimName string
}

// Restore is one dump for RestorePod; the file may be on another
// Database's backup volume (ClaimName).
type Restore struct {
	File      string
	SHA256    string
	ClaimName string
}

// Upgrade is one major-version upgrade for UpgradePod.
type Upgrade struct {
	// File is the pre-upgrade dump on ClaimName. A rollback reads no dump:
	// ClaimName is empty and the pod mounts no BackupVolume (on node-local
	// storage the backup volume may be on another node than the data).
	File      string
	SHA256    string
	ClaimName string
	// DataClaimName is the primary's data PersistentVolumeClaim.
	DataClaimName string
	FromVersion   string
	ToVersion     string
	// Rollback undoes the upgrade from FromVersion to ToVersion (see
	// Engine.UpgradePod).
	Rollback bool
}

// Report is what a Job found, written as JSON to its container's
// termination message (the operator never connects to a database server:
// what needs SQL runs in a Job, and reports this way).
type Report struct {
	// ServerVersion is the server's own version string.
	ServerVersion string `json:"serverVersion,omitempty"`
	// File, Size (bytes) and SHA256 (hex) describe the dump a backup Job
	// wrote, after it was renamed to its final name.
	File   string `json:"file,omitempty"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Source is the host a backup Job dumped from (Backup.Host or
	// Backup.Standby) and LagBytes the replay lag it measured for a
	// standby source (nil when it read from the primary).
	Source   string `json:"source,omitempty"`
	LagBytes *int64 `json:"lagBytes,omitempty"`
	// SourceReason says why a backup Job given a standby read where it
	// did (the standby's lag, or what made it read the primary instead:
	// the database's unlogged tables or sequences, a lag over the bound, a
	// standby that does not stream).
	SourceReason string `json:"sourceReason,omitempty"`
	// SessionsEnded is how many sessions of the app user a fence Job
	// ended.
	SessionsEnded int `json:"sessionsEnded,omitempty"`
	// Tables and Rows are what a backup Job counted inside the dump's
	// snapshot (also written to File+CountsSuffix).
	Tables int   `json:"tables,omitempty"`
	Rows   int64 `json:"rows,omitempty"`
	// Verification is what a verification Job found.
	Verification *Verification `json:"verification,omitempty"`
}

// ParseReport decodes a termination message; an empty one is an empty
// Report.
func ParseReport(message string) (Report, error) {
	var r Report
	message = strings.TrimSpace(message)
	if message == "" {
		return r, nil
	}
	if err := json.Unmarshal([]byte(message), &r); err != nil {
		return Report{}, fmt.Errorf("termination message is not a report: %w", err)
	}
	return r, nil
}

// Version is the leading version number of a server version string
// ("15.14 (Debian 15.14-0+deb12u1)" -> "15.14").
func (r Report) Version() string {
	v, _, _ := strings.Cut(strings.TrimSpace(r.ServerVersion), " ")
	return v
}

var tagVersion = regexp.MustCompile(`^v?([0-9]+(\.[0-9]+)*)`)

// TagVersion reads the version an image's tag starts with:
// "docker.io/library/postgres:17.6-bookworm@sha256:..." -> "17.6". An image
// without a tag, or whose tag does not start with a number ("latest"),
// has none.
func TagVersion(image string) (string, bool) {
	ref, _, _ := strings.Cut(image, "@")
	// The tag follows the last colon after the last slash (a colon before
	// it belongs to a registry's port).
	name := ref[strings.LastIndex(ref, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok {
		return "", false
	}
	m := tagVersion.FindStringSubmatch(tag)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Paths every engine's containers share.
const (
	// ScriptsDir is where the scripts volume is mounted.
	ScriptsDir = "/deckhand/scripts"
	// BackupMount is where the Jobs that use a backup (backup, restore,
	// verification, upgrade, file deletion) mount BackupVolume.
	BackupMount = "/deckhand/backup"
	// TerminationMessagePath is where Jobs write their Report.
	TerminationMessagePath = "/dev/termination-log"
)

// JobPod is the shape every engine's Jobs but init share: one container
// running script from the scripts volume with env and the engine's
// credentials, the backup volume of backupClaim mounted at BackupMount
// (none when backupClaim is empty) and extra, when given, a Report written
// to the termination message.
func JobPod(c Cluster, name, script string, env, credentials []corev1.EnvVar, backupClaim string, extra *corev1.Volume, pod *corev1.PodSecurityContext) Pod {
	env = append(env,
		corev1.EnvVar{Name: "BACKUP_DIR", Value: BackupMount},
		corev1.EnvVar{Name: "TERMINATION_MESSAGE_PATH", Value: TerminationMessagePath},
	)
	env = append(env, credentials...)
	var volumes []corev1.Volume
	mounts := []corev1.VolumeMount{{Name: ScriptsVolume, MountPath: ScriptsDir, ReadOnly: true}}
	if backupClaim != "" {
		volumes = append(volumes, corev1.Volume{Name: BackupVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: backupClaim},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: BackupVolume, MountPath: BackupMount})
	}
	if extra != nil {
		volumes = append(volumes, *extra)
	}
	p := Pod{
		Container: corev1.Container{
			Name:                     name,
			Image:                    c.Image,
			Command:                  []string{"sh", path.Join(ScriptsDir, script)},
			Env:                      env,
			VolumeMounts:             mounts,
			TerminationMessagePath:   TerminationMessagePath,
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			SecurityContext:          RestrictedContainer(),
		},
		Volumes:         volumes,
		SecurityContext: pod,
	}
	if c.Resources != nil {
		p.Container.Resources = *c.Resources
	}
	return p
}

// RestrictedContainer is the container security context of Pod Security
// "restricted": no privilege escalation, no capabilities.
func RestrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// JobUIDLabel is the label the Job controller puts on each pod of a Job:
// the Job's UID, the same for every retry of one Job and different for
// every new Job (also one made again under the same name).
const JobUIDLabel = "batch.kubernetes.io/controller-uid"

// JobUIDEnv is BACKUP_JOB_UID, the UID of the Job a backup pod belongs
// to (from JobUIDLabel through the downward API; empty outside a Job). A
// backup script writes it beside the file it completes and, when the file
// is already there, reports it only if this Job wrote it: a retry of the
// same Job reports its own file, anything else is refused.
func JobUIDEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "BACKUP_JOB_UID", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + JobUIDLabel + "']"},
	}}
}
