package mysql

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The statements scripts/lib.sh generates for each server. The MariaDB
// ones also run against a real MariaDB (mariadb_test.go); the MySQL ones
// are checked here only: Debian ships no MySQL, so they are not proven
// on a real server here (docs/design/mysqlcluster.md).

// lib runs a shell snippet with lib.sh sourced, as the scripts do (sh).
func lib(t *testing.T, snippet string, args ...string) string {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", ". ./scripts/lib.sh; " + snippet, "sh"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSuffix(string(out), "\n")
}

const (
	mysql80  = "8.0.40"
	mysql84  = "8.4.8"
	mysql9   = "9.1.0"
	maria    = "10.11.19-MariaDB-0+deb12u1"
	maria114 = "11.4.5-MariaDB-ubu2404"
)

func TestReplicationStatementsBranchOnTheServer(t *testing.T) {
	follow := func(version string) string {
		return lib(t, `sql_follow_primary "$1" db-rw.ns.svc 3306 "$2"`, version, `pa'ss\w`)
	}
	for _, v := range []string{mysql84, mysql9, "8.0.23"} {
		assert.Equal(t,
			"CHANGE REPLICATION SOURCE TO SOURCE_HOST='db-rw.ns.svc', SOURCE_PORT=3306, SOURCE_USER='deckhand_repl', SOURCE_PASSWORD='pa''ss\\\\w', SOURCE_CONNECT_RETRY=5, SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1;\nSTART REPLICA;",
			follow(v), v)
	}
	// MySQL 8.0 before 8.0.23 knows only the MASTER words.
	assert.Equal(t,
		"CHANGE MASTER TO MASTER_HOST='db-rw.ns.svc', MASTER_PORT=3306, MASTER_USER='deckhand_repl', MASTER_PASSWORD='pa''ss\\\\w', MASTER_CONNECT_RETRY=5, MASTER_AUTO_POSITION=1, GET_MASTER_PUBLIC_KEY=1;\nSTART SLAVE;",
		follow("8.0.22"))
	for _, v := range []string{maria, maria114} {
		assert.Equal(t,
			"CHANGE MASTER TO MASTER_HOST='db-rw.ns.svc', MASTER_PORT=3306, MASTER_USER='deckhand_repl', MASTER_PASSWORD='pa''ss\\\\w', MASTER_CONNECT_RETRY=5, MASTER_USE_GTID=slave_pos;\nSTART SLAVE;",
			follow(v), v)
	}
}

func TestGTIDResetBranchesOnTheServer(t *testing.T) {
	reset := func(v string) string { return lib(t, `sql_reset_gtids "$1"`, v) }
	// RESET MASTER is gone in MySQL 8.4; its replacement came in 8.2.
	assert.Equal(t, "RESET BINARY LOGS AND GTIDS;", reset(mysql84))
	assert.Equal(t, "RESET BINARY LOGS AND GTIDS;", reset(mysql9))
	assert.Equal(t, "RESET MASTER;", reset(mysql80))
	assert.Equal(t, "RESET MASTER;", reset(maria))
	assert.Equal(t, "RESET MASTER;", reset(maria114))
}

func TestReplicationAccountPluginBranchesOnTheServer(t *testing.T) {
	accounts := func(v string) string { return lib(t, `sql_accounts "$1" "$2" "$3"`, v, "ro'ot", `re\pl`) }
	my := accounts(mysql84)
	assert.Contains(t, my, "ALTER USER 'root'@'localhost' IDENTIFIED BY 'ro''ot';")
	assert.Contains(t, my, "CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY 'ro''ot';")
	assert.Contains(t, my, `CREATE USER IF NOT EXISTS 'deckhand_repl'@'%' IDENTIFIED WITH caching_sha2_password BY 're\\pl';`)
	assert.NotContains(t, my, "global_priv", "MySQL has no mysql.global_priv")
	assert.True(t, strings.HasPrefix(my, "SET SESSION sql_log_bin = 0;"), "accounts stay out of the binary log")
	mdb := accounts(maria)
	assert.Contains(t, mdb, `CREATE USER IF NOT EXISTS 'deckhand_repl'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('re\\pl');`)
	assert.Contains(t, mdb, "DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host NOT IN ('localhost', '%'));")
	for _, s := range []string{my, mdb} {
		assert.Contains(t, s, "GRANT REPLICATION SLAVE ON *.* TO 'deckhand_repl'@'%';")
		assert.True(t, strings.HasSuffix(s, "FLUSH PRIVILEGES;"))
	}
}

func TestServerSettingsBranchOnTheServer(t *testing.T) {
	args := func(v, ordinal string) []string {
		return strings.Split(lib(t, `server_args "$1" "$2"`, v, ordinal), "\n")
	}
	assert.Equal(t, []string{"--server-id=1", "--log-bin=binlog", "--skip-name-resolve", "--gtid-mode=ON", "--enforce-gtid-consistency=ON"}, args(mysql84, "0"))
	assert.Equal(t, []string{"--server-id=3", "--log-bin=binlog", "--skip-name-resolve", "--gtid-mode=ON", "--enforce-gtid-consistency=ON", "--read-only=ON", "--super-read-only=ON"}, args(mysql84, "2"))
	assert.Equal(t, []string{"--server-id=2", "--log-bin=binlog", "--skip-name-resolve", "--log-slave-updates=ON", "--gtid-strict-mode=ON", "--read-only=ON"}, args(maria, "1"))
	assert.Equal(t, "--set-gtid-purged=ON --ignore-table=mysql.gtid_executed --ignore-table=mysql.innodb_index_stats --ignore-table=mysql.innodb_table_stats\n--single-transaction --routines --events --triggers --hex-blob", lib(t, `clone_dump_args "$1"`, mysql84))
	assert.Equal(t, "--system=users --insert-ignore --master-data=1 --gtid\n--single-transaction --routines --events --triggers --hex-blob", lib(t, `clone_dump_args "$1"`, maria))
}

func TestVersionComparison(t *testing.T) {
	check := func(v, maj, min, patch string) bool {
		cmd := exec.Command("sh", "-c", `. ./scripts/lib.sh; version_at_least "$@"`, "sh", v, maj, min, patch)
		return cmd.Run() == nil
	}
	assert.True(t, check("8.0.23", "8", "0", "23"))
	assert.False(t, check("8.0.22", "8", "0", "23"))
	assert.True(t, check("8.4.8", "8", "2", "0"))
	assert.True(t, check("9.0.1", "8", "2", "0"))
	assert.False(t, check("8.1.0", "8", "2", "0"))
	assert.True(t, check("10.11.19-MariaDB-0+deb12u1", "10", "11", "19"))
	assert.False(t, check("10.6.1-MariaDB", "10", "11", "0"))
	assert.Equal(t, "8.4", lib(t, `series "$1"`, mysql84))
	assert.Equal(t, "10.11", lib(t, `series "$1"`, maria))
	assert.Equal(t, "mariadb", lib(t, `flavor "$1"`, maria114))
	assert.Equal(t, "mysql", lib(t, `flavor "$1"`, mysql9))
}

func TestQuotingOfNamesAndValues(t *testing.T) {
	assert.Equal(t, "`we``ird-db`", lib(t, `sql_ident "$1"`, "we`ird-db"))
	assert.Equal(t, `'a''b\\c"d$(e)'`, lib(t, `sql_string "$1"`, `a'b\c"d$(e)`))
	// In a grant, _ and % are wildcards: escaped so the grant is the database's only.
	assert.Equal(t, "GRANT ALL PRIVILEGES ON `name-of\\_data\\%base`.* TO 'app''user'@'%';",
		lib(t, `sql_grant_database "$1" "$2"`, "name-of_data%base", "app'user"))
}

func TestCommandNamesOfMariaDB11AndMySQL(t *testing.T) {
	names := func(commands ...string) string {
		dir := t.TempDir()
		for _, c := range commands {
			require.NoError(t, os.WriteFile(filepath.Join(dir, c), []byte("#!/bin/sh\n"), 0o755))
		}
		cmd := exec.Command("/bin/sh", "-c", `. ./scripts/lib.sh; pick_commands; say "$CLIENT $DUMP $ADMIN $SERVER $INSTALL_DB"`)
		cmd.Env = []string{"PATH=" + dir}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	// MariaDB 11 images have only the mariadb* names.
	assert.Equal(t, "mariadb mariadb-dump mariadb-admin mariadbd mariadb-install-db",
		names("mariadb", "mariadb-dump", "mariadb-admin", "mariadbd", "mariadb-install-db"))
	assert.Equal(t, "mysql mysqldump mysqladmin mysqld", names("mysql", "mysqldump", "mysqladmin", "mysqld"))
}

// TestRowCountsReadMySQLsOneLineInserts: mysqldump (MySQL 8.4) writes an
// extended INSERT on one line, a column list for a table with invisible
// columns, "Temporary view structure" for a view's stand-in, and trigger
// bodies between DELIMITER lines; count_rows counts the tuples, with
// both awks the images carry (gawk in MySQL's, mawk in MariaDB's).
func TestRowCountsReadMySQLsOneLineInserts(t *testing.T) {
	dump := strings.Join([]string{
		"USE `shop`;",
		"-- Table structure for table `notes`",
		"CREATE TABLE `notes` (`id` int, `note` text);",
		`INSERT INTO ` + "`notes`" + ` VALUES (1,'a),(b'),(2,'it\'s \\'),(3,'(\')'),(4,NULL);`,
		"INSERT INTO `notes` VALUES (5,'x');",
		"-- Table structure for table `empty`",
		"-- Table structure for table `hidden`",
		"INSERT INTO `hidden` (`a`, `b``c`) VALUES (1,0x2829),(2,NULL);",
		"-- Temporary view structure for view `v`",
		"CREATE TABLE `v` (`id` int);",
		"DELIMITER ;;",
		"/*!50003 CREATE*/ /*!50003 TRIGGER `t` AFTER INSERT ON `empty` FOR EACH ROW",
		"INSERT INTO `notes` VALUES (9,'no'),(9,'no') */;;",
		"DELIMITER ;",
		"USE `other db`;",
		"-- Table structure for table `t`",
		"INSERT INTO `t` VALUES (1);",
		"-- Dump completed on 2026-11-25 14:00:00",
	}, "\n") + "\n"
	want := "other db.t\t1\nshop.empty\t0\nshop.hidden\t2\nshop.notes\t5"
	for _, awk := range []string{"gawk", "mawk"} {
		_, err := exec.LookPath(awk)
		require.NoError(t, err, "%s is not installed: run hack/test-deps.sh", awk)
		cmd := exec.Command("sh", "-c", `. ./scripts/lib.sh; printf '%s' "$1" | count_rows | LC_ALL=C sort`, "sh", dump)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "AWK=" + awk}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Equal(t, want, strings.TrimSuffix(string(out), "\n"), awk)
	}
}

func TestTLSStatementsAndClientOptionsBranchOnTheServerAndTheClient(t *testing.T) {
	replicationTLS := func(version, verify string) string {
		return lib(t, `TLS_CA_FILE=/deckhand/tls/ca.crt; sql_replication_tls "$1" "$2"`, version, verify)
	}
	assert.Equal(t,
		"STOP REPLICA;\nCHANGE REPLICATION SOURCE TO SOURCE_SSL=1, SOURCE_SSL_CA='/deckhand/tls/ca.crt', SOURCE_SSL_VERIFY_SERVER_CERT=1;\nSTART REPLICA;",
		replicationTLS(mysql84, "1"))
	assert.Equal(t,
		"STOP REPLICA;\nCHANGE REPLICATION SOURCE TO SOURCE_SSL=0, SOURCE_SSL_CA='', SOURCE_SSL_VERIFY_SERVER_CERT=0;\nSTART REPLICA;",
		replicationTLS(mysql84, "0"))
	assert.Equal(t,
		"STOP SLAVE;\nCHANGE MASTER TO MASTER_SSL=1, MASTER_SSL_CA='/deckhand/tls/ca.crt', MASTER_SSL_VERIFY_SERVER_CERT=1;\nSTART SLAVE;",
		replicationTLS("8.0.22", "1"))
	assert.Equal(t,
		"STOP SLAVE;\nCHANGE MASTER TO MASTER_SSL=0, MASTER_SSL_CA='', MASTER_SSL_VERIFY_SERVER_CERT=0;\nSTART SLAVE;",
		replicationTLS(maria, "0"))

	assert.Equal(t, "ALTER INSTANCE RELOAD TLS;", lib(t, `sql_reload_tls "$1"`, mysql84))
	assert.Equal(t, "FLUSH SSL;", lib(t, `sql_reload_tls "$1"`, maria114))

	// The clients verify the server's name only once TLS is required (the
	// file "tls" beside the scripts), each family with its own options.
	dir := t.TempDir()
	libSh, err := os.ReadFile("scripts/lib.sh")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lib.sh"), libSh, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "run.sh"), []byte(`. "$(dirname "$0")/lib.sh"; tls_client_args`), 0o644))
	clientArgs := func(client, caFile, tls string) string {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "client"), []byte("#!/bin/sh\necho '"+client+"'\n"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tls"), []byte(tls), 0o644))
		cmd := exec.Command("sh", filepath.Join(dir, "run.sh"))
		cmd.Env = []string{"PATH=/usr/bin:/bin", "CLIENT=" + filepath.Join(dir, "client"), "TLS_CA_FILE=" + caFile}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	mariadbClient := "mariadb  Ver 15.1 Distrib 10.11.19-MariaDB, for debian-linux-gnu (x86_64)"
	mysqlClient := "mysql  Ver 8.4.8 for Linux on x86_64 (MySQL Community Server - GPL)"
	assert.Equal(t, "--ssl-ca=/ca.crt\n--ssl-verify-server-cert", clientArgs(mariadbClient, "/ca.crt", "required"))
	assert.Equal(t, "--ssl-mode=VERIFY_IDENTITY\n--ssl-ca=/ca.crt", clientArgs(mysqlClient, "/ca.crt", "required"))
	assert.Empty(t, clientArgs(mysqlClient, "/ca.crt", "offered"), "TLS being turned on or off: nothing verified")
	assert.Empty(t, clientArgs(mariadbClient, "", "required"), "a cluster without TLS")
}
