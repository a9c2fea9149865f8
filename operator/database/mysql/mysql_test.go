package mysql

import (
	"net/url"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

func TestScriptsAreTheFilesInTheRepository(t *testing.T) {
	scripts := Engine{}.Scripts()
	var names []string
	for name, body := range scripts {
		names = append(names, name)
		b, err := os.ReadFile("scripts/" + name)
		require.NoError(t, err)
		assert.Equal(t, string(b), body, name)
	}
	assert.ElementsMatch(t, []string{BootstrapScript, InitScript, BackupScript, RestoreScript, UpgradeScript, VerifyScript, ProbeScript, LibScript}, names)
}

func TestMajorVersionIsTheReleaseSeries(t *testing.T) {
	for version, want := range map[string]string{
		"8.0.40": "8.0", "8.4.8": "8.4", "9.1.0": "9.1", "9.4": "9.4",
		"10.11.19-MariaDB-0+deb12u1": "10.11", "11.4.5": "11.4", "10.6.20": "10.6",
	} {
		got, ok := Engine{}.MajorVersion(version)
		assert.True(t, ok, version)
		assert.Equal(t, want, got, version)
	}
	for _, version := range []string{"", "8", "latest", "5.7.44", "10.5.27", "x.y"} {
		_, ok := Engine{}.MajorVersion(version)
		assert.False(t, ok, version)
	}
}

func TestImagesAreReadForVersionAndFlavor(t *testing.T) {
	e := Engine{}
	v, ok := e.VersionFromImage(DefaultImage)
	assert.True(t, ok)
	assert.Equal(t, "8.4.8", v)
	major, _ := e.MajorVersion(v)
	assert.Equal(t, "8.4", major, "the default is MySQL 8.4 LTS")
	_, ok = e.VersionFromImage("mysql:latest")
	assert.False(t, ok, "the seed's mysql:latest names no version")
	v, _ = e.VersionFromImage("docker.io/library/mariadb:11.4.5-noble")
	assert.Equal(t, "11.4.5", v)
	assert.Equal(t, "MariaDB", Flavor("docker.io/library/mariadb:11.4.5-noble"))
	assert.Equal(t, "MariaDB", Flavor("quay.io/mariadb-foundation/mariadb-devel:11.8@sha256:abc"))
	assert.Equal(t, "MySQL", Flavor("mysql:latest"))
	assert.Equal(t, "MySQL", Flavor("registry.local:5000/mysql:8.4.8"))
}

func cluster() engine.Cluster {
	return engine.Cluster{Name: "my-cluster", Namespace: "ns", Image: DefaultImage, Port: 3306,
		SuperuserSecret: "my-secret", ReplicationSecret: "my-cluster-replication", PrimaryHost: "my-cluster-rw"}
}

func envNames(p engine.Pod) []string {
	var out []string
	for _, e := range p.Container.Env {
		out = append(out, e.Name)
	}
	return out
}

func TestServerPodAsksTheServerAndRunsAsMySQL(t *testing.T) {
	c := cluster()
	c.Parameters = map[string]string{"max_connections": "500", "character_set_server": "utf8mb4"}
	p := Engine{}.ServerPod(c)
	assert.Equal(t, []string{"--character_set_server=utf8mb4", "--max_connections=500"}, p.Container.Args, "sorted, one argument each")
	assert.Equal(t, []string{"sh", "/deckhand/scripts/probe.sh", "ready"}, p.Container.ReadinessProbe.Exec.Command)
	assert.Equal(t, []string{"sh", "/deckhand/scripts/probe.sh", "alive"}, p.Container.LivenessProbe.Exec.Command)
	assert.Equal(t, int64(999), *p.SecurityContext.RunAsUser)
	assert.True(t, *p.SecurityContext.RunAsNonRoot)
	assert.False(t, *p.Container.SecurityContext.AllowPrivilegeEscalation)
	for _, e := range p.Container.Env {
		switch e.Name {
		case "MYSQL_PWD":
			assert.Equal(t, "my-secret", e.ValueFrom.SecretKeyRef.Name)
			assert.Equal(t, "password", e.ValueFrom.SecretKeyRef.Key, "grtl's key")
		case "REPLICATION_PASSWORD":
			assert.Equal(t, "my-cluster-replication", e.ValueFrom.SecretKeyRef.Name)
		default:
			assert.True(t, e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil, "%s holds no secret", e.Name)
		}
	}
	c.ReplicationSecret = ""
	for _, e := range (Engine{}).ServerPod(c).Container.Env {
		if e.Name == "REPLICATION_PASSWORD" {
			assert.Equal(t, "my-secret", e.ValueFrom.SecretKeyRef.Name, "without its own Secret, the superuser's")
		}
	}
}

func TestInitPodCreatesADatabaseOnlyWhenOneIsNamed(t *testing.T) {
	c := cluster()
	assert.False(t, slices.Contains(envNames(Engine{}.InitPod(c)), "APP_DATABASE"), "a MySQLCluster names no database")
	c.Database, c.AppUser, c.AppSecret = "app", "app", "my-cluster-app"
	assert.Subset(t, envNames(Engine{}.InitPod(c)), []string{"APP_DATABASE", "APP_USER", "APP_PASSWORD", "TERMINATION_MESSAGE_PATH"})
}

func TestJobsMountTheBackupVolume(t *testing.T) {
	c := cluster()
	b := Engine{}.BackupPod(c, engine.Backup{File: "f.sql", Host: "my-cluster-1.my-cluster", ClaimName: "my-cluster-backup"})
	assert.Equal(t, "my-cluster-backup", b.Volumes[0].PersistentVolumeClaim.ClaimName)
	assert.Equal(t, "/dev/termination-log", b.Container.TerminationMessagePath)
	r := Engine{}.RestorePod(c, engine.Restore{File: "f.sql", SHA256: "ab", ClaimName: "other-backup"})
	assert.Equal(t, "other-backup", r.Volumes[0].PersistentVolumeClaim.ClaimName)
	u := Engine{}.UpgradePod(c, engine.Upgrade{File: "f.sql", ClaimName: "b", DataClaimName: "data-my-cluster-0", FromVersion: "8.0", ToVersion: "8.4"})
	var claims []string
	for _, v := range u.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims = append(claims, v.PersistentVolumeClaim.ClaimName)
		}
	}
	assert.ElementsMatch(t, []string{"b", "data-my-cluster-0"}, claims)
}

func TestConnectionURIQuotesWhatNeedsIt(t *testing.T) {
	uri := Engine{}.ConnectionURI("app", "p@ss:w/rd", "my-cluster-rw.ns.svc", 3306, "name-of-database")
	u, err := url.Parse(uri)
	require.NoError(t, err)
	assert.Equal(t, "mysql", u.Scheme)
	pw, _ := u.User.Password()
	assert.Equal(t, "p@ss:w/rd", pw)
	assert.Equal(t, "my-cluster-rw.ns.svc:3306", u.Host)
	assert.Equal(t, "/name-of-database", u.Path)
}

func TestOldDataIsRemovedOnlyWhenAsked(t *testing.T) {
	c := cluster()
	assert.NotContains(t, envNames(Engine{}.ServerPod(c)), "REMOVE_OLD_DATA", "no change to the template of other clusters")
	c.RemoveOldData = true
	for _, e := range (Engine{}).ServerPod(c).Container.Env {
		if e.Name == "REMOVE_OLD_DATA" {
			assert.Equal(t, "true", e.Value)
			return
		}
	}
	t.Fatal("no REMOVE_OLD_DATA with RemoveOldData")
}

// TestEveryPodRunsAsTheClustersRunAsUser: the UID comes from
// engine.Cluster.RunAsUser (the spec); unset, the official images' 999.
func TestEveryPodRunsAsTheClustersRunAsUser(t *testing.T) {
	c := engine.Cluster{Name: "db", Image: "mariadb:10.11", Port: 3306, RunAsUser: 1001}
	for name, pod := range map[string]engine.Pod{
		"server": Engine{}.ServerPod(c),
		"init":   Engine{}.InitPod(c),
		"backup": Engine{}.BackupPod(c, engine.Backup{File: "f", Host: "h", ClaimName: "b"}),
		"verify": Engine{}.VerifyPod(c, engine.Verify{File: "f", SHA256: "ab", ClaimName: "b"}),
	} {
		assert.Equal(t, int64(1001), *pod.SecurityContext.RunAsUser, name)
		assert.Equal(t, int64(1001), *pod.SecurityContext.FSGroup, name)
	}
	c.RunAsUser = 0
	assert.Equal(t, int64(999), *Engine{}.ServerPod(c).SecurityContext.RunAsUser)
}

// TestVerifyPodReadsTheBackupAndHoldsNoSecret: a verification Job mounts
// the backup claim read-only and the scratch volume the operator
// supplies, and carries no Secret of the cluster (its scratch server's
// accounts are its own); the user check is passed only when set.
func TestVerifyPodReadsTheBackupAndHoldsNoSecret(t *testing.T) {
	c := cluster()
	c.Database, c.AppUser, c.AppSecret = "app", "app", "my-cluster-app"
	p := Engine{}.VerifyPod(c, engine.Verify{File: "f.sql", SHA256: "ab", ClaimName: "my-cluster-backup", UserCheck: "SELECT 1"})
	require.Len(t, p.Volumes, 1)
	assert.Equal(t, "my-cluster-backup", p.Volumes[0].PersistentVolumeClaim.ClaimName)
	mounts := map[string]bool{}
	for _, m := range p.Container.VolumeMounts {
		mounts[m.Name] = m.ReadOnly
	}
	assert.Equal(t, map[string]bool{engine.ScriptsVolume: true, engine.BackupVolume: true, engine.ScratchVolume: false}, mounts)
	for _, e := range p.Container.Env {
		assert.Nil(t, e.ValueFrom, "%s: no Secret", e.Name)
	}
	assert.Subset(t, envNames(p), []string{"BACKUP_FILE", "BACKUP_SHA256", "SCRATCH_DIR", "VERIFY_PORT", "APP_DATABASE", "APP_USER", "USER_CHECK"})
	assert.Equal(t, []string{"sh", "/deckhand/scripts/verify.sh"}, p.Container.Command)
	assert.NotContains(t, envNames(Engine{}.VerifyPod(c, engine.Verify{File: "f.sql", SHA256: "ab", ClaimName: "b"})), "USER_CHECK")
}
