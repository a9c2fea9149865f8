package mysql_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/mysql"
	"github.com/deckhand-dev/deckhand/operator/database/mysql/mysqltest"
)

// BenchmarkVerification times, on Debian's MariaDB with DECKHAND_BENCH_MB
// (default 1024) of rows, the backup Job (backup.sh: the dump, counted
// from its stream, fsynced and checksummed) against the bare dump tool
// writing the same data, and the verification Job (verify.sh: checksum,
// a new scratch server, the load, the row counts) against the bare client
// loading the same dump into a fresh, already running server: floors
// measured in the same run. Targets: backup ≤ 1.2 × the bare
// dump, verification ≤ 1.3 × the bare load.
//
//	go test -run '^$' -bench Verification -benchtime 1x -timeout 60m ./operator/database/mysql/
func BenchmarkVerification(b *testing.B) {
	mb := 1024
	if v := os.Getenv("DECKHAND_BENCH_MB"); v != "" {
		mb, _ = strconv.Atoi(v)
	}
	h := newHost(b)
	e := mysql.Engine{}
	primary := h.server("primary", 0, "")
	_, out, err := h.job(e.InitPod(h.cluster), map[string]string{"PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": primary.Port})
	require.NoError(b, err, out)
	db := "`name-of_database`"
	start := time.Now()
	// Rows of about 1 kB (hex digests, a few numbers), 1,000 a statement,
	// in two tables, with a secondary index.
	h.sql(primary.Port, "CREATE TABLE "+db+".events (id INT AUTO_INCREMENT PRIMARY KEY, at DATETIME NOT NULL, kind VARCHAR(10) NOT NULL, payload VARCHAR(1000), KEY (kind, at));"+
		"CREATE TABLE "+db+".notes (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)")
	for i := 0; i < mb; i++ {
		table := "events (at, kind, payload) SELECT NOW() - INTERVAL seq SECOND, ELT(1 + seq % 4, 'order', 'refund', 'login', 'logout'), REPEAT(MD5(seq + " + strconv.Itoa(i*1000) + "), 30)"
		if i%8 == 7 {
			table = "notes (note) SELECT CONCAT('it''s note ', seq, ': ', REPEAT(SHA1(seq), 24))"
		}
		h.sql(primary.Port, "INSERT INTO "+db+"."+table+" FROM "+db+".seq_1_to_1000")
	}
	generated := time.Since(start)
	h.sql(primary.Port, "ANALYZE TABLE "+db+".events, "+db+".notes")
	size, _ := strconv.ParseFloat(h.sql(primary.Port, "SELECT SUM(data_length + index_length) FROM information_schema.tables WHERE table_schema = 'name-of_database'"), 64)
	b.Logf("generated %.0f MB of tables in %v (%.1f MB/s)", size/1e6, generated.Round(time.Second), size/1e6/generated.Seconds())
	backupDir := mysqltest.Dir(b, h.u, h.root, "backup")
	scratch := mysqltest.Dir(b, h.u, h.root, "scratch")

	for i := 0; b.Loop(); i++ {
		loadBefore := loadAvg()
		file := fmt.Sprintf("bench-%d.sql", i)
		start := time.Now()
		rep, out, err := h.job(e.BackupPod(h.cluster, engine.Backup{File: file, Host: "x", ClaimName: "b"}),
			map[string]string{"SOURCE_HOST": "127.0.0.1", "SOURCE_PORT": primary.Port, "BACKUP_DIR": backupDir})
		require.NoError(b, err, out)
		backup := time.Since(start)

		raw := filepath.Join(backupDir, "bare.sql")
		start = time.Now()
		cmd := exec.Command("mariadb-dump", "--no-defaults", "-h", "127.0.0.1", "-P", primary.Port, "-uroot", "--single-transaction",
			"--routines", "--events", "--triggers", "--hex-blob", "--result-file="+raw, "--databases", "name-of_database")
		cmd.Env = []string{"MYSQL_PWD=" + rootPassword, "PATH=" + mysqltest.Path}
		out2, err := cmd.CombinedOutput()
		require.NoError(b, err, "%s", out2)
		bareDump := time.Since(start)
		require.NoError(b, os.Remove(raw))

		start = time.Now()
		vrep, out, err := h.job(e.VerifyPod(h.cluster, engine.Verify{File: file, SHA256: rep.SHA256, ClaimName: "b"}),
			map[string]string{"BACKUP_DIR": backupDir, "SCRATCH_DIR": scratch, "VERIFY_PORT": mysqltest.FreePort(b)})
		require.NoError(b, err, out)
		verify := time.Since(start)
		require.NotNil(b, vrep.Verification)
		require.Nil(b, vrep.Verification.Failed(), "%+v", *vrep.Verification)

		// The floor: a fresh server (made before the clock starts) and the
		// bare client loading the same file.
		fresh := h.server(fmt.Sprintf("fresh-%d", i), 0, "")
		f, err := os.Open(filepath.Join(backupDir, file))
		require.NoError(b, err)
		start = time.Now()
		cmd = exec.Command("mariadb", "--no-defaults", "-h", "127.0.0.1", "-P", fresh.Port, "-uroot")
		cmd.Env, cmd.Stdin = []string{"MYSQL_PWD=" + rootPassword, "PATH=" + mysqltest.Path}, f
		out2, err = cmd.CombinedOutput()
		f.Close()
		require.NoError(b, err, "%s", out2)
		bareLoad := time.Since(start)
		fresh.Stop(b)

		// The restore itself: a bare server with the scratch server's
		// settings (made before the clock starts), loading the same file.
		bare := h.bareServer(fmt.Sprintf("bare-%d", i))
		f, err = os.Open(filepath.Join(backupDir, file))
		require.NoError(b, err)
		start = time.Now()
		cmd = exec.Command("mariadb", "--no-defaults", "--socket", bare.socket, "-uroot")
		cmd.Env, cmd.Stdin = []string{"PATH=" + mysqltest.Path}, f
		out2, err = cmd.CombinedOutput()
		f.Close()
		require.NoError(b, err, "%s", out2)
		scratchLoad := time.Since(start)
		bare.stop()

		dumpMB := float64(rep.Size) / 1e6
		b.ReportMetric(dumpMB, "dump-MB")
		b.ReportMetric(backup.Seconds(), "backup-s")
		b.ReportMetric(bareDump.Seconds(), "bare-dump-s")
		b.ReportMetric(verify.Seconds(), "verify-s")
		b.ReportMetric(bareLoad.Seconds(), "bare-load-s")
		b.ReportMetric(scratchLoad.Seconds(), "bare-scratch-load-s")
		b.Logf("load %s -> %s; dump %.0f MB, %d tables, %d rows", loadBefore, loadAvg(), dumpMB, rep.Tables, rep.Rows)
		b.Logf("backup.sh %.1fs (%.1f MB/s) vs bare mariadb-dump %.1fs (%.1f MB/s): %.2f x (target <= 1.2)",
			backup.Seconds(), dumpMB/backup.Seconds(), bareDump.Seconds(), dumpMB/bareDump.Seconds(), backup.Seconds()/bareDump.Seconds())
		b.Logf("verify.sh %.1fs (%.1f MB/s) vs bare load into a fresh cluster server %.1fs (%.1f MB/s): %.2f x (target <= 1.3)",
			verify.Seconds(), dumpMB/verify.Seconds(), bareLoad.Seconds(), dumpMB/bareLoad.Seconds(), verify.Seconds()/bareLoad.Seconds())
		b.Logf("verify.sh %.1fs vs bare load into a bare server with the scratch server's settings %.1fs (%.1f MB/s): %.2f x (target <= 1.3)",
			verify.Seconds(), scratchLoad.Seconds(), dumpMB/scratchLoad.Seconds(), verify.Seconds()/scratchLoad.Seconds())
		require.NoError(b, os.Remove(filepath.Join(backupDir, file)))
	}
}

// bare is a server started by hand, without deckhand's scripts.
type bare struct {
	socket string
	stop   func()
}

// bareServer starts a new data directory's server as verify.sh starts its
// scratch server (listening on 127.0.0.1, no binary log, the redo log
// flushed once a second), root without a password on its socket.
func (h *host) bareServer(name string) bare {
	h.t.Helper()
	dir := mysqltest.Dir(h.t, h.u, h.root, name)
	env := map[string]string{"PATH": mysqltest.Path, "HOME": dir, "TMPDIR": dir}
	out, err := mysqltest.Run(h.u, env, []string{"mariadb-install-db", "--no-defaults", "--datadir=" + filepath.Join(dir, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"})
	require.NoError(h.t, err, out)
	socket := filepath.Join(dir, "mysqld.sock")
	s := &mysqltest.Server{Cmd: mysqltest.Cmd(h.u, env, []string{"mariadbd", "--no-defaults", "--datadir=" + filepath.Join(dir, "data"),
		"--socket=" + socket, "--port=" + mysqltest.FreePort(h.t), "--bind-address=127.0.0.1", "--skip-name-resolve",
		"--innodb-flush-log-at-trx-commit=2", "--pid-file=" + filepath.Join(dir, "pid")}), Log: &syncbuf.Buffer{}}
	s.Cmd.Stdout, s.Cmd.Stderr = s.Log, s.Log
	require.NoError(h.t, s.Cmd.Start())
	done := make(chan error, 1)
	go func() { done <- s.Cmd.Wait() }()
	stop := func() {
		_ = s.Cmd.Process.Signal(syscall.SIGTERM)
		<-done
	}
	h.t.Cleanup(func() {
		if s.Cmd.ProcessState == nil {
			stop()
		}
	})
	for exec.Command("mariadb-admin", "--no-defaults", "--socket="+socket, "-uroot", "ping").Run() != nil {
		select {
		case err := <-done:
			h.t.Fatalf("the bare server exited (%v):\n%s", err, s.Log.String())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return bare{socket: socket, stop: stop}
}

// loadAvg is the 1-, 5- and 15-minute load of the machine.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
