package mysql_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/mysql"
	"github.com/deckhand-dev/deckhand/operator/database/mysql/mysqltest"
)

// verifier runs verification Jobs of one host's backups.
type verifier struct {
	h         *host
	backupDir string
	scratch   string
}

func (v verifier) run(file, sum, userCheck string) (engine.Report, string, error) {
	v.h.t.Helper()
	pod := mysql.Engine{}.VerifyPod(v.h.cluster, engine.Verify{File: file, SHA256: sum, ClaimName: "b", UserCheck: userCheck})
	return v.h.job(pod, map[string]string{"BACKUP_DIR": v.backupDir, "SCRATCH_DIR": v.scratch, "VERIFY_PORT": mysqltest.FreePort(v.h.t)})
}

// verified runs a verification that must run (exit 0) and leave nothing
// behind; its checks' outcome is the caller's.
func (v verifier) verified(file, sum, userCheck string) engine.Verification {
	v.h.t.Helper()
	rep, out, err := v.run(file, sum, userCheck)
	require.NoError(v.h.t, err, out)
	require.NotNil(v.h.t, rep.Verification, out)
	v.assertScratchEmpty()
	v.h.t.Logf("%s: %+v", file, *rep.Verification)
	return *rep.Verification
}

func (v verifier) assertScratchEmpty() {
	v.h.t.Helper()
	left, err := os.ReadDir(v.scratch)
	require.NoError(v.h.t, err)
	assert.Empty(v.h.t, left, "the scratch server's data is removed")
}

// copyBackup writes a copy of file (and its counts) under name, changed by
// edit and counts, and returns the copy's SHA-256.
func (v verifier) copyBackup(file, name string, edit func([]byte) []byte, counts func(string) string) string {
	v.h.t.Helper()
	b, err := os.ReadFile(filepath.Join(v.backupDir, file))
	require.NoError(v.h.t, err)
	c, err := os.ReadFile(filepath.Join(v.backupDir, file+engine.CountsSuffix))
	require.NoError(v.h.t, err)
	b = edit(append([]byte{}, b...))
	require.NoError(v.h.t, os.WriteFile(filepath.Join(v.backupDir, name), b, 0o644))
	require.NoError(v.h.t, os.WriteFile(filepath.Join(v.backupDir, name+engine.CountsSuffix), []byte(counts(string(c))), 0o644))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func checkNames(v engine.Verification) []string {
	var names []string
	for _, c := range v.Checks {
		names = append(names, fmt.Sprintf("%s=%t", c.Name, c.Passed))
	}
	return names
}

// TestVerificationRestoresABackupAndChecksIt: verify.sh, run as the
// verification Job's pod on Debian's MariaDB, restores a real backup into
// a scratch server of its own and passes all four checks; a corrupted
// file, a truncated one, altered counts and a failing user check each
// fail verification with that check named and why. The user check runs
// as the app user with the grants it has (not root); whatever the
// outcome, the scratch server's data is gone afterwards.
func TestVerificationRestoresABackupAndChecksIt(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	e := mysql.Engine{}
	primary := h.server("primary", 0, "")
	_, out, err := h.job(e.InitPod(h.cluster), map[string]string{"PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": primary.Port})
	require.NoError(t, err, out)
	h.sql(primary.Port, "CREATE TABLE `name-of_database`.orders (id INT PRIMARY KEY, item VARCHAR(50));"+
		"INSERT INTO `name-of_database`.orders SELECT seq, CONCAT('item ', seq) FROM `name-of_database`.seq_1_to_1200;"+
		"CREATE DATABASE other; CREATE TABLE other.t (v INT); INSERT INTO other.t VALUES (1);"+
		// Neither a sequence nor a view holds rows of a table of its own.
		"CREATE SEQUENCE other.s; CREATE VIEW other.v AS SELECT v FROM other.t")
	backupDir := mysqltest.Dir(t, h.u, h.root, "backup")
	rep, out, err := h.job(e.BackupPod(h.cluster, engine.Backup{File: "c/good.sql", Host: "x", ClaimName: "b"}),
		map[string]string{"SOURCE_HOST": "127.0.0.1", "SOURCE_PORT": primary.Port, "BACKUP_DIR": backupDir})
	require.NoError(t, err, out)
	v := verifier{h: h, backupDir: backupDir, scratch: mysqltest.Dir(t, h.u, h.root, "scratch")}

	// A good backup passes every check.
	// The check runs as the app user, who sees its own database only.
	good := v.verified("c/good.sql", rep.SHA256, "SELECT COUNT(*) = 1200 AND CURRENT_USER() = 'app''user@%' AND "+
		"(SELECT GROUP_CONCAT(schema_name ORDER BY schema_name) FROM information_schema.schemata) = 'information_schema,name-of_database' FROM orders")
	assert.Nil(t, good.Failed())
	assert.Equal(t, []string{"checksum=true", "restore=true", "rowCounts=true", "userCheck=true"}, checkNames(good))
	assert.Equal(t, 2, good.Tables)
	assert.Equal(t, int64(1201), good.Rows)

	same := func(s string) string { return s }
	keep := func(b []byte) []byte { return b }
	failedCheck := func(v engine.Verification) engine.Check {
		t.Helper()
		f := v.Failed()
		require.NotNil(t, f, "verification passed: %v", checkNames(v))
		return *f
	}

	// A corrupted file: one byte changed after the checksum was recorded.
	v.copyBackup("c/good.sql", "c/corrupted.sql", func(b []byte) []byte {
		i := strings.Index(string(b), "item 600")
		b[i+5] = '7'
		return b
	}, same)
	f := failedCheck(v.verified("c/corrupted.sql", rep.SHA256, ""))
	assert.Equal(t, engine.CheckChecksum, f.Name)
	assert.Contains(t, f.Message, "but the backup recorded "+rep.SHA256)

	// A truncated file fails its checksum; truncated with a checksum of
	// its own (the file was short when it was recorded), the restore.
	truncate := func(b []byte) []byte { return b[:len(b)/2] }
	v.copyBackup("c/good.sql", "c/truncated.sql", truncate, same)
	assert.Equal(t, engine.CheckChecksum, failedCheck(v.verified("c/truncated.sql", rep.SHA256, "")).Name)
	sum := v.copyBackup("c/good.sql", "c/short.sql", truncate, same)
	f = failedCheck(v.verified("c/short.sql", sum, ""))
	assert.Equal(t, engine.CheckRestore, f.Name)
	assert.Regexp(t, `^ERROR 1064 \(42000\) at line [0-9]+: You have an error in your SQL syntax`, f.Message, "the client's own error")

	// Counts that do not match the dump.
	v.copyBackup("c/good.sql", "c/altered.sql", keep, func(c string) string {
		return strings.Replace(c, "name-of_database.orders\t1200", "name-of_database.orders\t1199", 1)
	})
	altered := v.verified("c/altered.sql", rep.SHA256, "")
	f = failedCheck(altered)
	assert.Equal(t, []string{"checksum=true", "restore=true", "rowCounts=false"}, checkNames(altered), "the checks stop at the first that fails")
	assert.Contains(t, f.Message, "name-of_database.orders: 1199 recorded, 1200 restored")

	// User checks that fail: false, and a write (the check reads only).
	for query, want := range map[string]string{
		"SELECT COUNT(*) = 0 FROM orders": `the query returned "0", not true (1)`,
		"DELETE FROM orders; SELECT 1":    "ERROR 1792 (25006) at line 1: Cannot execute statement in a READ ONLY transaction",
	} {
		f = failedCheck(v.verified("c/good.sql", rep.SHA256, query))
		assert.Equal(t, engine.CheckUser, f.Name, query)
		assert.Contains(t, f.Message, want, query)
	}

	// A file that is not there.
	f = failedCheck(v.verified("c/missing.sql", rep.SHA256, ""))
	assert.Equal(t, engine.CheckChecksum, f.Name)
	assert.Contains(t, f.Message, "not found")
}

// TestAVerificationThatCannotStartItsServerFailsAndCleansUp: a scratch
// server that cannot listen (its port is taken) is a Job that could not
// verify: it exits non-zero, reports no verification, and leaves the
// scratch volume empty.
func TestAVerificationThatCannotStartItsServerFailsAndCleansUp(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	backupDir := mysqltest.Dir(t, h.u, h.root, "backup")
	dump := "CREATE DATABASE d;\n-- Dump completed on now\n"
	require.NoError(t, os.WriteFile(filepath.Join(backupDir, "x.sql"), []byte(dump), 0o644))
	sum := sha256.Sum256([]byte(dump))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	v := verifier{h: h, backupDir: backupDir, scratch: mysqltest.Dir(t, h.u, h.root, "scratch")}
	pod := mysql.Engine{}.VerifyPod(h.cluster, engine.Verify{File: "x.sql", SHA256: hex.EncodeToString(sum[:]), ClaimName: "b"})
	rep, out, err := h.job(pod, map[string]string{"BACKUP_DIR": backupDir, "SCRATCH_DIR": v.scratch, "VERIFY_PORT": port})
	require.Error(t, err, out)
	assert.Contains(t, out, "did not start")
	assert.Nil(t, rep.Verification)
	v.assertScratchEmpty()
}
