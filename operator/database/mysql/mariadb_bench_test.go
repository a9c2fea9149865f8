package mysql_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/mysql"
	"github.com/deckhand-dev/deckhand/operator/database/mysql/mysqltest"
)

// BenchmarkBackupAndRestore times backup.sh and restore.sh on Debian's
// MariaDB with DECKHAND_BENCH_MB (default 256) of rows, against a floor
// measured in the same run: the bare dump tool writing the same file, and
// the bare client loading it. The difference is what the scripts add
// (fsync, checksum, rename; the checksum check before a load).
//
//	go test -run '^$' -bench BackupAndRestore -benchtime 1x ./operator/database/mysql/
func BenchmarkBackupAndRestore(b *testing.B) {
	mb := 256
	if v := os.Getenv("DECKHAND_BENCH_MB"); v != "" {
		mb, _ = strconv.Atoi(v)
	}
	h := newHost(b)
	e := mysql.Engine{}
	primary := h.server("primary", 0, "")
	h.sql(primary.Port, "CREATE DATABASE bench; CREATE TABLE bench.t (id INT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(1000))")
	for i := 0; i < mb; i++ {
		h.sql(primary.Port, "INSERT INTO bench.t (pad) SELECT REPEAT(MD5(seq), 31) FROM bench.seq_1_to_1000")
	}
	backupDir := mysqltest.Dir(b, h.u, h.root, "backup")
	target := h.server("target", 0, "")

	var backup, dump, restore, load time.Duration
	var size int64
	for i := 0; i < b.N; i++ {
		file := fmt.Sprintf("bench-%d.sql", i)
		start := time.Now()
		rep, out, err := h.job(e.BackupPod(h.cluster, engine.Backup{File: file, Host: "x", ClaimName: "b"}),
			map[string]string{"SOURCE_HOST": "127.0.0.1", "SOURCE_PORT": primary.Port, "BACKUP_DIR": backupDir})
		require.NoError(b, err, out)
		backup += time.Since(start)
		size = rep.Size

		raw := filepath.Join(backupDir, "raw.sql")
		start = time.Now()
		cmd := exec.Command("mariadb-dump", "--no-defaults", "-h", "127.0.0.1", "-P", primary.Port, "-uroot", "--single-transaction",
			"--routines", "--events", "--triggers", "--hex-blob", "--result-file="+raw, "--databases", "bench")
		cmd.Env = []string{"MYSQL_PWD=" + rootPassword, "PATH=" + mysqltest.Path}
		out2, err := cmd.CombinedOutput()
		require.NoError(b, err, "%s", out2)
		dump += time.Since(start)

		h.sql(target.Port, "DROP DATABASE IF EXISTS bench")
		start = time.Now()
		_, out, err = h.job(e.RestorePod(h.cluster, engine.Restore{File: file, SHA256: rep.SHA256, ClaimName: "b"}),
			map[string]string{"PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": target.Port, "BACKUP_DIR": backupDir})
		require.NoError(b, err, out)
		restore += time.Since(start)

		h.sql(target.Port, "DROP DATABASE bench")
		start = time.Now()
		f, err := os.Open(raw)
		require.NoError(b, err)
		cmd = exec.Command("mariadb", "--no-defaults", "-h", "127.0.0.1", "-P", target.Port, "-uroot")
		cmd.Env, cmd.Stdin = []string{"MYSQL_PWD=" + rootPassword, "PATH=" + mysqltest.Path}, f
		out2, err = cmd.CombinedOutput()
		f.Close()
		require.NoError(b, err, "%s", out2)
		load += time.Since(start)
		require.NoError(b, os.Remove(filepath.Join(backupDir, file)))
	}
	n := float64(b.N)
	b.ReportMetric(float64(size)/1e6, "dumpMB")
	b.ReportMetric(backup.Seconds()/n, "backup-s")
	b.ReportMetric(dump.Seconds()/n, "bare-dump-s")
	b.ReportMetric(restore.Seconds()/n, "restore-s")
	b.ReportMetric(load.Seconds()/n, "bare-load-s")
}
