package mysql_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/mysql"
	"github.com/deckhand-dev/deckhand/operator/database/mysql/mysqltest"
)

// readCounts reads a counts file (engine.CountsSuffix's format).
func readCounts(t testing.TB, file string) (map[string]int64, []string) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err, "the counts beside the dump")
	counts := map[string]int64{}
	var order []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		name, n, ok := strings.Cut(line, "\t")
		require.True(t, ok, "a counts line is <database>.<table>\\t<rows>: %q", line)
		v, err := strconv.ParseInt(n, 10, 64)
		require.NoError(t, err, line)
		counts[name] = v
		order = append(order, name)
	}
	return counts, order
}

// tableCounts counts each base table's rows on a server, as root.
func (h *host) tableCounts(port, password string) map[string]int64 {
	h.t.Helper()
	list, err := mysqltest.SQL(port, "root", password, "", "SELECT CONCAT(table_schema, '.', table_name), CONCAT('`', REPLACE(table_schema, '`', '``'), '`.`', REPLACE(table_name, '`', '``'), '`') "+
		"FROM information_schema.tables WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('mysql', 'sys', 'information_schema', 'performance_schema')")
	require.NoError(h.t, err, list)
	counts := map[string]int64{}
	for _, line := range strings.Split(list, "\n") {
		if line == "" {
			continue
		}
		name, ident, _ := strings.Cut(line, "\t")
		n, err := mysqltest.SQL(port, "root", password, "", "SELECT COUNT(*) FROM "+ident)
		require.NoError(h.t, err, n)
		counts[name], _ = strconv.ParseInt(n, 10, 64)
	}
	return counts
}

// TestBackupCountsTheRowsItsDumpHolds: the backup Job writes FILE.counts
// beside the dump, each table's rows as the dump holds them: values that
// look like tuple separators, escapes, an empty table, a column list, an
// INSERT inside a trigger's body and a view are read for what they are,
// and a table written to while the dump runs is counted as the dump
// (its snapshot) holds it, not as it is at some other moment: a restore
// of the file has exactly the recorded counts.
func TestBackupCountsTheRowsItsDumpHolds(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	e := mysql.Engine{}
	primary := h.server("primary", 0, "")
	h.sql(primary.Port, "CREATE DATABASE shop; CREATE DATABASE `we``ird db`;"+
		"CREATE TABLE shop.notes (id INT PRIMARY KEY, note TEXT, raw BLOB);"+
		`INSERT INTO shop.notes VALUES (1, 'a),(b', x'292c28'), (2, 'it''s \\', NULL), (3, 'line\nbreak\ttab', x'27'), (4, '''),(''', x'5c27')`+";"+
		"CREATE TABLE shop.empty (id INT);"+
		"CREATE TABLE shop.gen (a INT, b INT AS (a * 2) VIRTUAL);"+
		"INSERT INTO shop.gen (a) VALUES (1), (2), (3);"+
		"CREATE TABLE shop.audit (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(20));"+
		"CREATE VIEW shop.v AS SELECT id FROM shop.notes;"+
		"CREATE TABLE `we``ird db`.`t 1` (v INT); INSERT INTO `we``ird db`.`t 1` VALUES (1), (2);"+
		"CREATE TABLE shop.big (id INT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(200));"+
		"INSERT INTO shop.big (pad) SELECT REPEAT('x', 200) FROM shop.seq_1_to_30000;"+
		"CREATE TABLE shop.busy (id INT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(200))")
	// A trigger whose body has an INSERT line of its own.
	h.sql(primary.Port, "CREATE TRIGGER shop.logged AFTER INSERT ON shop.empty FOR EACH ROW\nINSERT INTO `audit` VALUES (NULL, 'x'),(NULL, 'y')")

	// Writers add rows while the dump runs.
	stop := make(chan struct{})
	var writers sync.WaitGroup
	writers.Add(1)
	go func() {
		defer writers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = mysqltest.SQL(primary.Port, "root", rootPassword, "", "INSERT INTO shop.busy (pad) SELECT REPEAT('y', 200) FROM shop.seq_1_to_2000")
		}
	}()
	backupDir := mysqltest.Dir(t, h.u, h.root, "backup")
	h.sql(primary.Port, "INSERT INTO shop.busy (pad) SELECT REPEAT('y', 200) FROM shop.seq_1_to_2000")
	rep, out, err := h.job(e.BackupPod(h.cluster, engine.Backup{File: "c/counted.sql", Host: "x", ClaimName: "b"}),
		map[string]string{"SOURCE_HOST": "127.0.0.1", "SOURCE_PORT": primary.Port, "BACKUP_DIR": backupDir})
	close(stop)
	writers.Wait()
	require.NoError(t, err, out)

	counts, order := readCounts(t, filepath.Join(backupDir, "c/counted.sql.counts"))
	assert.IsNonDecreasing(t, order, "sorted")
	for table, want := range map[string]int64{
		"shop.notes": 4, "shop.empty": 0, "shop.gen": 3, "shop.audit": 0, "shop.big": 30000, "we`ird db.t 1": 2,
	} {
		assert.Equal(t, want, counts[table], table)
	}
	assert.NotContains(t, counts, "shop.v", "a view is not a table")
	assert.Contains(t, counts, "shop.busy")
	var rows int64
	for _, n := range counts {
		rows += n
	}
	assert.Equal(t, len(counts), rep.Tables, "the report's tables are the counts'")
	assert.Equal(t, rows, rep.Rows, "the report's rows are the counts'")

	// The file restored elsewhere holds exactly the recorded rows.
	h.secrets["other-secret"] = map[string]string{"password": "other-root"}
	saved := h.cluster
	h.cluster.SuperuserSecret = "other-secret"
	restored := h.server("restored", 0, "")
	h.cluster = saved
	f, err := os.ReadFile(filepath.Join(backupDir, "c/counted.sql"))
	require.NoError(t, err)
	sum := sha256.Sum256(f)
	other := saved
	other.SuperuserSecret = "other-secret"
	_, out, err = h.job(e.RestorePod(other, engine.Restore{File: "c/counted.sql", SHA256: hex.EncodeToString(sum[:]), ClaimName: "b"}),
		map[string]string{"PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": restored.Port, "BACKUP_DIR": backupDir})
	require.NoError(t, err, out)
	assert.Equal(t, counts, h.tableCounts(restored.Port, "other-root"), "recorded counts = restored counts")
	t.Logf("shop.busy: %d rows in the dump", counts["shop.busy"])
}
