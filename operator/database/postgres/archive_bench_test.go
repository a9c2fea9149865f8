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
//     time, gzip), against floors measured in the same run: the same
//     barman-cloud-backup run bare with the same options into an archive
//     of its own (the tool without deckhand's marker row, restore point
//     and catalogue reads); pg_basebackup of the same server to a local
//     gzipped tar (-Ft -z, WAL fetched, no store), as the replication role; tar and gzip of the
//     data directory to a local file (the bytes read and compressed);
//   - recover-s: recover.sh into an empty directory to the backup's end
//     (immediate), the server started and promoted, against the floors of
//     barman-cloud-restore run bare of the bare backup (the download and
//     extraction, without a server) and of untarring the floor's file.
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

		bare := a.storeEnv("bare")
		bare["PGHOST"], bare["PGPORT"], bare["PGUSER"], bare["PGPASSWORD"] = "127.0.0.1", a.source.Port, postgres.Superuser, h.superPassword()
		bare["SCRIPTS"], bare["NAME"] = a.scripts, "bare-"+strconv.Itoa(i)
		bareBackup := a.timedWith(bare, "sh", "-c", `. "$SCRIPTS/store.sh"; store_setup; `+
			`barman-cloud-backup $store_endpoint $store_compress --immediate-checkpoint --jobs 2 --name "$NAME" "$store_url" "$STORE_SERVER"`)
		restoreTo := h.u.TempDir(b)
		bare["RESTORE_TO"] = filepath.Join(restoreTo, "data")
		bareRestore := a.timedWith(bare, "sh", "-c", `. "$SCRIPTS/store.sh"; store_setup; `+
			`barman-cloud-restore $store_endpoint "$store_url" "$STORE_SERVER" "$NAME" "$RESTORE_TO"`)
		basebackupTo := filepath.Join(h.u.TempDir(b), "pg_basebackup")
		// As the replication role: the servers' pg_hba.conf lets only it
		// connect for replication, as a standby's clone does.
		repl := map[string]string{"PGHOST": "127.0.0.1", "PGPORT": a.source.Port, "PGUSER": postgres.ReplicationUser, "PGPASSWORD": h.replicationPassword()}
		bareBasebackup := a.timedWith(repl, filepath.Join(h.bin, "pg_basebackup"), "-D", basebackupTo, "-Ft", "-z", "-X", "fetch", "-c", "fast")

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
		b.ReportMetric(bareBackup.Seconds(), "floor-barman-backup-s")
		b.ReportMetric(bareBasebackup.Seconds(), "floor-pg_basebackup-s")
		b.ReportMetric(bareTar.Seconds(), "floor-tar-gzip-s")
		b.ReportMetric(recovered.Seconds(), "recover-s")
		b.ReportMetric(bareRestore.Seconds(), "floor-barman-restore-s")
		b.ReportMetric(bareUntar.Seconds(), "floor-untar-s")
		b.ReportMetric(size/1e6/backup.Seconds(), "base-backup-MB/s")
		b.Logf("database %.0f MB (gzipped tar %.0f MB): WAL archived %.1f s after the load; base-backup.sh %.1f s (%.1f MB/s; %.2f × bare barman-cloud-backup %.1f s; bare pg_basebackup -Ft -z %.1f s; floor tar+gzip %.1f s); recover.sh to promoted %.1f s (%.2f × bare barman-cloud-restore %.1f s; floor untar %.1f s)",
			size/1e6, float64(tarSize)/1e6, catchup.Seconds(), backup.Seconds(), size/1e6/backup.Seconds(),
			backup.Seconds()/bareBackup.Seconds(), bareBackup.Seconds(), bareBasebackup.Seconds(), bareTar.Seconds(),
			recovered.Seconds(), recovered.Seconds()/bareRestore.Seconds(), bareRestore.Seconds(), bareUntar.Seconds())
	}
}

// timed runs argv as the server user and returns how long it took.
func (a *archiving) timed(argv ...string) time.Duration {
	a.t.Helper()
	return a.timedWith(nil, argv...)
}

// timedWith is timed with env.
func (a *archiving) timedWith(env map[string]string, argv ...string) time.Duration {
	a.t.Helper()
	start := time.Now()
	out, err := a.h.u.Command(env, argv).CombinedOutput()
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
