package postgres_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/s3test"
)

// BenchmarkBaseBackup1GB times continuous archiving at the scale of a real
// database, on the host's PostgreSQL archiving into a versitygw on
// 127.0.0.1 (TLS, gzip, as a Database's sidecar does):
//
//   - wal-catchup-s: after about 1 GB of rows is written, until the archive
//     holds every segment of it (through a resident Barman Cloud process,
//     one segment at a time);
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
//     extraction, without a server), of untarring the floor's file, and,
//     like for like, of the bare tools' whole recovery of the same base
//     backup (floor-recover-s: barman-cloud-restore, the recovery settings
//     written by hand, barman-cloud-wal-restore as restore_command, the
//     server started until it is promoted).
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
		bareRecovery := a.bareRecovery(b, "bench-"+strconv.Itoa(i))

		b.ReportMetric(catchup.Seconds(), "wal-catchup-s")
		b.ReportMetric(backup.Seconds(), "base-backup-s")
		b.ReportMetric(bareBackup.Seconds(), "floor-barman-backup-s")
		b.ReportMetric(bareBasebackup.Seconds(), "floor-pg_basebackup-s")
		b.ReportMetric(bareTar.Seconds(), "floor-tar-gzip-s")
		b.ReportMetric(recovered.Seconds(), "recover-s")
		b.ReportMetric(bareRestore.Seconds(), "floor-barman-restore-s")
		b.ReportMetric(bareUntar.Seconds(), "floor-untar-s")
		b.ReportMetric(bareRecovery.Seconds(), "floor-recover-s")
		b.ReportMetric(size/1e6/backup.Seconds(), "base-backup-MB/s")
		b.Logf("database %.0f MB (gzipped tar %.0f MB): WAL archived %.1f s after the load; base-backup.sh %.1f s (%.1f MB/s; %.2f × bare barman-cloud-backup %.1f s; bare pg_basebackup -Ft -z %.1f s; floor tar+gzip %.1f s); recover.sh to promoted %.1f s (%.2f × the bare tools' recovery of the same backup to promoted %.1f s; bare barman-cloud-restore alone %.1f s; floor untar %.1f s)",
			size/1e6, float64(tarSize)/1e6, catchup.Seconds(), backup.Seconds(), size/1e6/backup.Seconds(),
			backup.Seconds()/bareBackup.Seconds(), bareBackup.Seconds(), bareBasebackup.Seconds(), bareTar.Seconds(),
			recovered.Seconds(), recovered.Seconds()/bareRecovery.Seconds(), bareRecovery.Seconds(), bareRestore.Seconds(), bareUntar.Seconds())
	}
}

// bareRecovery recovers base backup name as its tools alone would, and
// returns how long it took until the server was promoted: Barman Cloud's
// barman-cloud-restore, then the settings recover.sh writes, written by
// hand (restore_command wal-restore.sh with no resident process, so one
// barman-cloud-wal-restore per file; the backup's end as the target), then
// the server started as recover does. What recover.sh adds (reading the
// catalogue to choose the backup, the resident process) is what the
// comparison shows.
func (a *archiving) bareRecovery(t testing.TB, name string) time.Duration {
	t.Helper()
	h := a.h
	dir := h.u.TempDir(t)
	pgdata := filepath.Join(dir, "pgdata")
	env := a.storeEnv(a.server)
	env["SCRIPTS"], env["NAME"], env["PGDATA"] = a.scripts, name, pgdata
	start := time.Now()
	a.timedWith(env, "sh", "-c", `. "$SCRIPTS/store.sh"; store_setup; `+
		`barman-cloud-restore $store_endpoint "$store_url" "$STORE_SERVER" "$NAME" "$PGDATA" && `+
		`chmod 700 "$PGDATA" && mkdir -p "$PGDATA/pg_wal" && `+
		`printf '%s\n' "restore_command = 'sh $SCRIPTS/`+postgres.WALRestoreScript+` %f %p'" "recovery_target = 'immediate'" "recovery_target_action = 'promote'" >>"$PGDATA/postgresql.auto.conf" && `+
		`touch "$PGDATA/recovery.signal"`)
	_, server := a.startUntilPromoted(t, dir, pgdata, a.storeEnv(a.server), 10*time.Minute)
	elapsed := time.Since(start)
	server.Stop(t)
	return elapsed
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

// BenchmarkWALSegmentUpload measures the CPU one WAL segment costs to ship
// through the archiver sidecar's resident Barman Cloud process
// (wal-resident.sh archive, handed each segment by wal-archive.sh),
// against the floor measured in the same run: wal-archive.sh with no
// resident process, one
// barman-cloud-wal-archive per segment. Same store (versitygw on
// 127.0.0.1, TLS), gzip, as a Database's sidecar ships them. Each 16 MiB
// segment's 8 KiB pages are 3 KiB of random bytes and zeros after them,
// about as compressible as the WAL of small rows. cpu-s/segment counts
// wal-archive.sh and what it runs, and the resident's CPU over the loop
// (its first segment, when it connects, apart: first-cpu-s).
//
//	go test -bench WALSegmentUpload -run x -benchtime 20x ./operator/database/postgres/
func BenchmarkWALSegmentUpload(b *testing.B) {
	h := newHost(b)
	a := &archiving{t: b, h: h, store: s3test.Start(b, "deckhand"), prefix: "bench", server: "segments"}
	a.scripts = h.u.WriteScripts(b, filepath.Join(h.root, "archive"), postgres.ArchiveScripts())
	env := a.storeEnv(a.server)
	env["PGDATA"], env["STORE_SKIP_EMPTY_CHECK"] = h.u.TempDir(b), "true"
	walDir := h.u.TempDir(b)
	page := make([]byte, 8<<10)
	rnd := rand.New(rand.NewPCG(1, 2))
	var segment []byte
	for range (16 << 20) / len(page) {
		for i := range 3 << 10 {
			page[i] = byte(rnd.Uint32())
		}
		segment = append(segment, page...)
	}
	n := 0
	// ship archives a new segment through wal-archive.sh with env; the
	// CPU it and its children used.
	ship := func(b *testing.B, env map[string]string) time.Duration {
		n++
		wal := filepath.Join(walDir, fmt.Sprintf("00000001%08X%08X", n/0x100, n%0x100))
		require.NoError(b, os.WriteFile(wal, segment, 0o644))
		cmd := h.u.Command(env, []string{"sh", filepath.Join(a.scripts, postgres.WALArchiveScript), wal})
		out, err := cmd.CombinedOutput()
		require.NoError(b, err, string(out))
		require.NoError(b, os.Remove(wal))
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}

	b.Run("floor=barman-cloud-wal-archive", func(b *testing.B) {
		var cpu time.Duration
		for b.Loop() {
			cpu += ship(b, env)
		}
		b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/segment")
	})
	b.Run("resident", func(b *testing.B) {
		dir := a.resident("archive", a.server)
		pid := residentPID(b, dir, 0)
		withResident := maps.Clone(env)
		withResident["WAL_ARCHIVE_RESIDENT"] = dir
		first := ship(b, withResident) + processCPU(b, pid)
		var cpu time.Duration
		before := processCPU(b, pid)
		for b.Loop() {
			cpu += ship(b, withResident)
		}
		cpu += processCPU(b, pid) - before
		b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/segment")
		b.ReportMetric(first.Seconds(), "first-cpu-s")
	})
}

// processCPU is the user and system CPU process pid has used (Linux's
// /proc/<pid>/stat, in clock ticks of 10 ms).
func processCPU(t testing.TB, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The fields after the command's name, which is in parentheses.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
