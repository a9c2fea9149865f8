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

// BenchmarkBaseBackup1GB times continuous archiving at the scale of a real
// database, on the host's PostgreSQL archiving into a versitygw on
// 127.0.0.1 (TLS, gzip, as a Database's sidecar does):
//
//   - wal-catchup-s: after about 1 GB of rows is written, until the archive
//     holds every segment of it (one barman-cloud-wal-archive per segment);
//   - base-backup-s: base-backup.sh (barman-cloud-backup, two uploads at a
//     time), against the floor measured in the same run: tar and gzip of
//     the same data directory to a local file (the bytes read and
//     compressed, without the store);
//   - recover-s: recover.sh into an empty directory to the backup's end
//     (immediate), the server started and promoted, against the floor of
//     untarring the floor's file.
//
// Not in make test:
//
//	go test -bench BaseBackup1GB -run x -benchtime 1x ./operator/database/postgres/
//
// DECKHAND_BENCH_ROWS=10000 checks the benchmark's code in seconds.
func BenchmarkBaseBackup1GB(b *testing.B) {
	a := startArchiving(b)
	h := a.h
	h.init(a.source.Port)
	size, err := strconv.ParseFloat(h.fill(a.source.Port, benchRows(b)), 64)
	require.NoError(b, err)
	start := time.Now()
	a.switchAndWait(a.source.Port, 30*time.Minute)
	catchup := time.Since(start)
	pgdata := h.sql(a.source.Port, "postgres", "SHOW data_directory")

	for i := 0; b.Loop(); i++ {
		start = time.Now()
		a.baseBackup("bench-" + strconv.Itoa(i))
		backup := time.Since(start)

		tarball := filepath.Join(h.u.TempDir(b), "floor.tar.gz")
		bareTar := a.timed("tar", "-C", pgdata, "--exclude=./pg_wal", "--exclude=./postmaster.pid", "-czf", tarball, ".")
		tarSize := fileSize(b, tarball)

		start = time.Now()
		r, err := a.recover(b, map[string]string{"RECOVERY_TARGET_IMMEDIATE": "true"})
		require.NoError(b, err, r.out)
		recovered := time.Since(start)
		r.server.Stop(b)

		untarTo := h.u.TempDir(b)
		bareUntar := a.timed("tar", "-C", untarTo, "-xzf", tarball)

		b.ReportMetric(catchup.Seconds(), "wal-catchup-s")
		b.ReportMetric(backup.Seconds(), "base-backup-s")
		b.ReportMetric(bareTar.Seconds(), "floor-tar-gzip-s")
		b.ReportMetric(recovered.Seconds(), "recover-s")
		b.ReportMetric(bareUntar.Seconds(), "floor-untar-s")
		b.Logf("database %.0f MB (gzipped tar %.0f MB): WAL archived %.1f s after the load; base-backup.sh %.1f s (floor tar+gzip %.1f s); recover.sh to promoted %.1f s (floor untar %.1f s)",
			size/1e6, float64(tarSize)/1e6, catchup.Seconds(), backup.Seconds(), bareTar.Seconds(),
			recovered.Seconds(), bareUntar.Seconds())
	}
}

// timed runs argv as the server user and returns how long it took.
func (a *archiving) timed(argv ...string) time.Duration {
	a.t.Helper()
	start := time.Now()
	out, err := a.h.u.Command(nil, argv).CombinedOutput()
	require.NoError(a.t, err, string(out))
	return time.Since(start)
}

func fileSize(t testing.TB, name string) int64 {
	fi, err := os.Stat(name)
	require.NoError(t, err)
	return fi.Size()
}

// BenchmarkWALArchivingInParallel times how long the sidecar takes to
// archive the WAL of a bulk load (a quarter of BaseBackup1GB's rows: about
// 300 MB of table) with objectStore.maxParallel 1, the floor measured in
// the same run, and 4: from the load's end until the archive holds every
// segment, and the WAL's rate over that time. The pod as AddArchiver
// builds it, on the host (startSidecarPodWith).
//
//	go test -run '^$' -bench WALArchivingInParallel -benchtime 1x -timeout 40m ./operator/database/postgres/
func BenchmarkWALArchivingInParallel(b *testing.B) {
	rows := benchRows(b) / 4
	for _, n := range []int32{1, 4} {
		b.Run("maxParallel="+strconv.Itoa(int(n)), func(b *testing.B) {
			for b.Loop() {
				p := startSidecarPodWith(b, postgres.ArchiverOptions{MaxParallel: n})
				a, h := p.archiving, p.h
				a.switchAndWait(a.source.Port, time.Minute)
				from := h.sql(a.source.Port, "postgres", "SELECT pg_current_wal_lsn()")
				h.init(a.source.Port)
				h.fill(a.source.Port, rows)
				wal, err := strconv.ParseFloat(h.sql(a.source.Port, "postgres", "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '"+from+"')"), 64)
				require.NoError(b, err)
				start := time.Now()
				a.switchAndWait(a.source.Port, 30*time.Minute)
				catchup := time.Since(start)
				b.ReportMetric(catchup.Seconds(), "wal-catchup-s")
				b.ReportMetric(wal/1e6/catchup.Seconds(), "wal-MB/s")
				b.Logf("maxParallel %d: %.0f MB of WAL archived %.1f s after the load (%.1f MB/s)", n, wal/1e6, catchup.Seconds(), wal/1e6/catchup.Seconds())
			}
		})
	}
}
