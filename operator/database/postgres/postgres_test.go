package postgres

import (
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

func TestScriptsAreTheFilesInTheRepository(t *testing.T) {
	scripts := Engine{}.Scripts()
	require.ElementsMatch(t, []string{BootstrapScript, InitScript, BackupScript, RestoreScript, UpgradeScript, FenceScript, ProbeScript, VerifyScript,
		VerifyBaseScript, "lib.sh"}, keys(scripts))
	for name, body := range scripts {
		b, err := os.ReadFile("scripts/" + name)
		require.NoError(t, err)
		assert.Equal(t, string(b), body, name)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestConnectionURIQuotesWhatNeedsIt(t *testing.T) {
	uri := Engine{}.ConnectionURI("name of/db", "p@ss:w/rd", "db-rw.ns.svc", 5432, "name of/db")
	u, err := url.Parse(uri)
	require.NoError(t, err)
	assert.Equal(t, "name of/db", u.User.Username())
	pw, _ := u.User.Password()
	assert.Equal(t, "p@ss:w/rd", pw)
	assert.Equal(t, "db-rw.ns.svc:5432", u.Host)
	assert.Equal(t, "/name of/db", u.Path)
	assert.Equal(t, "postgresql://name-of-database:X@h:1/name-of-database", Engine{}.ConnectionURI("name-of-database", "X", "h", 1, "name-of-database"))
}

func TestServerArgsAreSortedSingleArguments(t *testing.T) {
	assert.Equal(t, []string{"-c", "hot_standby_feedback=on", "-c", "max_connections=50", "-c", "search_path=\"$user\", public", "-c", "wal_keep_size=512MB"},
		serverArgs(map[string]string{"search_path": `"$user", public`, "max_connections": "50"}))
	assert.Equal(t, []string{"-c", "hot_standby_feedback=off", "-c", "wal_keep_size=1GB"}, serverArgs(map[string]string{"wal_keep_size": "1GB", "hot_standby_feedback": "off"}))
}

func TestPodsRunAsTheClustersUserNotOneGuessedFromTheImage(t *testing.T) {
	// A digest-only reference says nothing of the user: the spec's is used.
	c := engine.Cluster{Name: "db", Image: "registry.example/pg@sha256:" + strings.Repeat("a", 64), Port: 5432, PrimaryHost: "db-rw", RunAsUser: 26}
	for _, pod := range []engine.Pod{Engine{}.ServerPod(c), Engine{}.InitPod(c)} {
		assert.Equal(t, int64(26), *pod.SecurityContext.RunAsUser)
		assert.Equal(t, int64(26), *pod.SecurityContext.FSGroup)
	}
	c.Image, c.RunAsUser = "postgres:17.6-alpine", 999
	assert.Equal(t, int64(999), *Engine{}.ServerPod(c).SecurityContext.RunAsUser, "alpine in the name decides nothing")
	c.RunAsUser = 0
	p := Engine{}.ServerPod(c)
	assert.Equal(t, int64(999), *p.SecurityContext.RunAsUser)
	assert.True(t, *p.SecurityContext.RunAsNonRoot)
	assert.Equal(t, []string{"ALL"}, []string{string(p.Container.SecurityContext.Capabilities.Drop[0])})
}

func TestMajorVersionIsTheFirstNumber(t *testing.T) {
	for version, want := range map[string]string{
		"17.6": "17", "15": "15", "10.23": "10", "9.6.24": "9.6", "9": "", "18beta1": "", "": "", "latest": "", ".5": "", "17.": "",
	} {
		got, ok := Engine{}.MajorVersion(version)
		assert.Equal(t, want, got, version)
		assert.Equal(t, want != "", ok, version)
	}
}

var jobCluster = engine.Cluster{
	Name: "db", Namespace: "ns", Image: "postgres:17.6", Port: 5433, Database: "name-of-database", AppUser: "app",
	SuperuserSecret: "db-superuser", AppSecret: "db-app", PrimaryHost: "db-rw.ns.svc",
}

// envOf is a container's environment: values, and secretKeyRefs as
// "secret:<name>/<key>".
func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			continue
		}
		out[e.Name] = e.Value
	}
	return out
}

func mounts(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		out[m.Name] = m.MountPath
	}
	return out
}

func claims(p engine.Pod) map[string]string {
	out := map[string]string{}
	for _, v := range p.Volumes {
		if v.PersistentVolumeClaim != nil {
			out[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	return out
}

func assertRestrictedJob(t *testing.T, p engine.Pod, script string) {
	t.Helper()
	assert.Equal(t, []string{"sh", "/deckhand/scripts/" + script}, p.Container.Command)
	assert.Equal(t, jobCluster.Image, p.Container.Image, "a Job runs the server's own image")
	assert.Equal(t, "/dev/termination-log", p.Container.TerminationMessagePath)
	assert.Equal(t, corev1.TerminationMessageFallbackToLogsOnError, p.Container.TerminationMessagePolicy)
	assert.Equal(t, int64(999), *p.SecurityContext.RunAsUser)
	assert.True(t, *p.SecurityContext.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, p.SecurityContext.SeccompProfile.Type)
	assert.False(t, *p.Container.SecurityContext.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"ALL"}, p.Container.SecurityContext.Capabilities.Drop)
	env := envOf(p.Container)
	assert.Equal(t, "secret:db-superuser/username", env["PGUSER"])
	assert.Equal(t, "secret:db-superuser/password", env["PGPASSWORD"])
	assert.Equal(t, "/deckhand/backup", env["BACKUP_DIR"])
	assert.Equal(t, "/dev/termination-log", env["TERMINATION_MESSAGE_PATH"])
}

func TestBackupPodDumpsFromTheGivenHostIntoTheBackupVolume(t *testing.T) {
	p := Engine{}.BackupPod(jobCluster, engine.Backup{File: "db/2026.dump", Host: "db-1.db.ns.svc", ClaimName: "db-backup"})
	assertRestrictedJob(t, p, BackupScript)
	env := envOf(p.Container)
	assert.Equal(t, "db-1.db.ns.svc", env["SOURCE_HOST"])
	assert.Equal(t, "5433", env["SOURCE_PORT"])
	assert.Equal(t, "name-of-database", env["APP_DATABASE"])
	assert.Equal(t, "db/2026.dump", env["BACKUP_FILE"])
	assert.Equal(t, ReplicationUser, env["REPLICATION_USER"], "the operator's own role, which the warning about roles leaves out")
	assert.NotContains(t, env, "REPLICATION_PASSWORD")
	assert.Equal(t, map[string]string{engine.ScriptsVolume: "/deckhand/scripts", engine.BackupVolume: "/deckhand/backup"}, mounts(p.Container))
	assert.Equal(t, map[string]string{engine.BackupVolume: "db-backup"}, claims(p))
	assert.True(t, p.Container.VolumeMounts[0].ReadOnly, "scripts are read-only")
}

func TestRestorePodRestoresIntoThePrimaryWithTheChecksum(t *testing.T) {
	p := Engine{}.RestorePod(jobCluster, engine.Restore{File: "other/x.dump", SHA256: "abc", ClaimName: "other-backup"})
	assertRestrictedJob(t, p, RestoreScript)
	env := envOf(p.Container)
	assert.Equal(t, "db-rw.ns.svc", env["PRIMARY_HOST"])
	assert.Equal(t, "5433", env["PRIMARY_PORT"])
	assert.Equal(t, "app", env["APP_USER"])
	assert.Equal(t, "other/x.dump", env["BACKUP_FILE"])
	assert.Equal(t, "abc", env["BACKUP_SHA256"])
	assert.NotContains(t, env, "APP_PASSWORD", "the init Job gives the role its password")
	assert.Equal(t, map[string]string{engine.BackupVolume: "other-backup"}, claims(p))
}

func TestUpgradePodMountsTheDataVolumeWhereTheServerDoes(t *testing.T) {
	u := engine.Upgrade{File: "x.dump", SHA256: "abc", ClaimName: "db-backup", DataClaimName: "data-db-0", FromVersion: "16.4", ToVersion: "17.6"}
	p := Engine{}.UpgradePod(jobCluster, u)
	assertRestrictedJob(t, p, UpgradeScript)
	env := envOf(p.Container)
	server := Engine{}.ServerPod(jobCluster)
	assert.Equal(t, envOf(server.Container)["PGDATA"], env["PGDATA"])
	assert.Equal(t, mounts(server.Container)[engine.DataVolume], mounts(p.Container)[engine.DataVolume])
	assert.Equal(t, "16.4", env["FROM_VERSION"])
	assert.Equal(t, "17.6", env["TO_VERSION"])
	assert.Equal(t, "secret:db-app/password", env["APP_PASSWORD"])
	assert.Equal(t, "5433", env["PGPORT"])
	assert.Equal(t, map[string]string{engine.BackupVolume: "db-backup", engine.DataVolume: "data-db-0"}, claims(p))
}

func TestRollbackPodMountsTheDataVolumeOnly(t *testing.T) {
	// The controller gives the image the upgrade started from as c.Image.
	u := engine.Upgrade{DataClaimName: "data-db-0", FromVersion: "16.4", ToVersion: "17.6", Rollback: true}
	p := Engine{}.UpgradePod(jobCluster, u)
	assertRestrictedJob(t, p, UpgradeScript)
	assert.Equal(t, "rollback", p.Container.Name)
	env := envOf(p.Container)
	assert.Equal(t, "true", env["ROLLBACK"])
	assert.Equal(t, "16.4", env["FROM_VERSION"])
	assert.Equal(t, map[string]string{engine.DataVolume: "data-db-0"}, claims(p), "no backup volume: it may be on another node")
	assert.NotContains(t, mounts(p.Container), engine.BackupVolume)
	assert.NotContains(t, envOf(Engine{}.UpgradePod(jobCluster, engine.Upgrade{ClaimName: "b", DataClaimName: "d"}).Container), "ROLLBACK")
}

func TestServerPodAsksForRemovalOfOldDataOnlyWhenTold(t *testing.T) {
	assert.NotContains(t, envOf(Engine{}.ServerPod(jobCluster).Container), "REMOVE_OLD_DATA", "no change to the template of other Databases")
	c := jobCluster
	c.RemoveOldData = true
	assert.Equal(t, "true", envOf(Engine{}.ServerPod(c).Container)["REMOVE_OLD_DATA"])
}

// TestEveryPodRunsAsTheClustersRunAsUser: the UID comes from
// engine.Cluster.RunAsUser (the spec), not from the image reference: a
// digest-only reference or another image's user (26, 1001) is honoured.
func TestEveryPodRunsAsTheClustersRunAsUser(t *testing.T) {
	for _, uid := range []int64{26, 1001} {
		c := engine.Cluster{Name: "db", Image: "registry.example/pg@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Port: 5432, RunAsUser: uid}
		for name, pod := range map[string]engine.Pod{
			"server":  Engine{}.ServerPod(c),
			"init":    Engine{}.InitPod(c),
			"backup":  Engine{}.BackupPod(c, engine.Backup{File: "f", Host: "h", ClaimName: "b"}),
			"restore": Engine{}.RestorePod(c, engine.Restore{File: "f", SHA256: "s", ClaimName: "b"}),
			"upgrade": Engine{}.UpgradePod(c, engine.Upgrade{File: "f", ClaimName: "b", DataClaimName: "d"}),
		} {
			sc := pod.SecurityContext
			assert.Equal(t, uid, *sc.RunAsUser, name)
			assert.Equal(t, uid, *sc.RunAsGroup, name)
			assert.Equal(t, uid, *sc.FSGroup, name)
		}
	}
	// Unset (a caller that does not pass it): the official Debian-based
	// images' user, whatever the image's name says.
	assert.Equal(t, int64(999), *Engine{}.ServerPod(engine.Cluster{Image: "postgres:17.6"}).SecurityContext.RunAsUser)
	assert.Equal(t, int64(999), *Engine{}.ServerPod(engine.Cluster{Image: "postgres:17.6-alpine"}).SecurityContext.RunAsUser)
}

func TestFencePodReachesThePrimaryAsTheSuperuserWithNoVolumeButItsScripts(t *testing.T) {
	for _, lift := range []bool{false, true} {
		p := Engine{}.FencePod(jobCluster, lift)
		assertRestrictedJob(t, p, FenceScript)
		env := envOf(p.Container)
		assert.Equal(t, jobCluster.PrimaryHost, env["PRIMARY_HOST"])
		assert.Equal(t, jobCluster.AppUser, env["APP_USER"])
		assert.Equal(t, strconv.FormatBool(lift), env["LIFT"])
		assert.Empty(t, p.Volumes, "no backup or data volume: it only talks to the primary")
	}
}
