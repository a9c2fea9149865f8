package postgres_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

// BenchmarkBackup1GB times backup.sh and restore.sh on a database of about
// 1 GB on the host's PostgreSQL, and, as floors measured in the same run,
// pg_dump and pg_restore run bare (no checksum, no fsync, no transaction
// around the restore). Not in make test:
//
//	go test -bench Backup1GB -run x -benchtime 1x ./operator/database/postgres/
func BenchmarkBackup1GB(b *testing.B) {
	h := newHost(b)
	source := h.primary("data-source")
	h.init(source.Port)
	// Rows of about 150 bytes of text that compresses as a real table's
	// does (hex digests, repeated words), with an index.
	h.sql(source.Port, h.cluster.Database, `
CREATE TABLE events (id bigserial PRIMARY KEY, at timestamptz NOT NULL, kind text NOT NULL, payload text NOT NULL);
INSERT INTO events (at, kind, payload)
SELECT now() - g * interval '1 second', (ARRAY['order', 'refund', 'login', 'logout'])[1 + g % 4],
       md5(g::text) || ' ' || md5((g * 7)::text) || ' customer ' || (g % 10007) || ' note ' || repeat('x', g % 40)
  FROM generate_series(1, 6500000) g;
ALTER TABLE events OWNER TO "name-of-database";
ANALYZE events;
`)
	size := h.sql(source.Port, h.cluster.Database, "SELECT pg_database_size(current_database())")
	b.Logf("database size: %s bytes", size)
	dir := h.volume("backup")
	for i := 0; b.Loop(); i++ {
		file := "bench-" + strconv.Itoa(i) + ".dump"
		start := time.Now()
		report, out, err := h.backup(source.Port, "backup", file)
		require.NoError(b, err, out)
		backup := time.Since(start)

		bare := filepath.Join(dir, "bare-"+file)
		start = time.Now()
		cmd := h.u.Command(map[string]string{"PGPASSWORD": h.superPassword()}, []string{filepath.Join(h.bin, "pg_dump"),
			"-h", "127.0.0.1", "-p", source.Port, "-U", postgres.Superuser, "-Fc", "-f", bare, "-d", h.cluster.Database})
		out2, err := cmd.CombinedOutput()
		require.NoError(b, err, string(out2))
		bareDump := time.Since(start)
		require.NoError(b, os.Remove(bare))

		target := h.primary("data-target-" + strconv.Itoa(i))
		start = time.Now()
		_, out, err = h.restore(target.Port, "backup", report.File, report.SHA256)
		require.NoError(b, err, out)
		restore := time.Since(start)
		target.Stop(b)

		bareTarget := h.primary("data-bare-" + strconv.Itoa(i))
		h.sql(bareTarget.Port, "postgres", `CREATE DATABASE bare`)
		start = time.Now()
		cmd = h.u.Command(map[string]string{"PGPASSWORD": h.superPassword()}, []string{filepath.Join(h.bin, "pg_restore"),
			"-h", "127.0.0.1", "-p", bareTarget.Port, "-U", postgres.Superuser, "-d", "bare", "--no-owner", filepath.Join(dir, file)})
		out2, err = cmd.CombinedOutput()
		require.NoError(b, err, string(out2))
		bareRestore := time.Since(start)
		bareTarget.Stop(b)

		b.ReportMetric(backup.Seconds(), "backup-s")
		b.ReportMetric(bareDump.Seconds(), "bare-pg_dump-s")
		b.ReportMetric(restore.Seconds(), "restore-s")
		b.ReportMetric(bareRestore.Seconds(), "bare-pg_restore-s")
		b.ReportMetric(float64(report.Size)/1e6, "dump-MB")
		b.Logf("database %s bytes, dump %d bytes: backup.sh %.1fs (bare pg_dump %.1fs), restore.sh %.1fs (bare pg_restore %.1fs)",
			size, report.Size, backup.Seconds(), bareDump.Seconds(), restore.Seconds(), bareRestore.Seconds())
	}
}
