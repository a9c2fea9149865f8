package postgres_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
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
	size := h.fill(source.Port, benchRows(b))
	dir := h.volume("backup")
	for i := 0; b.Loop(); i++ {
		file := "bench-" + strconv.Itoa(i) + ".dump"
		start := time.Now()
		report, out, err := h.backup(source.Port, "backup", file)
		require.NoError(b, err, out)
		backup := time.Since(start)

		bareDump := h.barePgDump(source.Port, filepath.Join(dir, "bare-"+file))

		target := h.primary("data-target-" + strconv.Itoa(i))
		start = time.Now()
		_, out, err = h.restore(target.Port, "backup", report.File, report.SHA256)
		require.NoError(b, err, out)
		restore := time.Since(start)
		target.Stop(b)

		bareRestore, _ := h.barePgRestore("data-bare-"+strconv.Itoa(i), filepath.Join(dir, file))

		b.ReportMetric(backup.Seconds(), "backup-s")
		b.ReportMetric(bareDump.Seconds(), "bare-pg_dump-s")
		b.ReportMetric(restore.Seconds(), "restore-s")
		b.ReportMetric(bareRestore.Seconds(), "bare-pg_restore-s")
		b.ReportMetric(float64(report.Size)/1e6, "dump-MB")
		b.Logf("database %s bytes, dump %d bytes: backup.sh %.1fs (bare pg_dump %.1fs), restore.sh %.1fs (bare pg_restore %.1fs)",
			size, report.Size, backup.Seconds(), bareDump.Seconds(), restore.Seconds(), bareRestore.Seconds())
	}
}

// barePgDump times a bare pg_dump -Fc of the app database on port into
// file, which it removes.
func (h *host) barePgDump(port, file string) time.Duration {
	h.t.Helper()
	start := time.Now()
	cmd := h.u.Command(map[string]string{"PGPASSWORD": h.superPassword()}, []string{filepath.Join(h.bin, "pg_dump"),
		"-h", "127.0.0.1", "-p", port, "-U", postgres.Superuser, "-Fc", "-f", file, "-d", h.cluster.Database})
	out, err := cmd.CombinedOutput()
	require.NoError(h.t, err, string(out))
	took := time.Since(start)
	require.NoError(h.t, os.Remove(file))
	return took
}

// barePgRestore times a bare pg_restore of file into a fresh cluster on
// dataVolume (a new database of it), and returns too how long making that
// cluster took (before the clock of the restore starts).
func (h *host) barePgRestore(dataVolume, file string) (restore, fresh time.Duration) {
	h.t.Helper()
	start := time.Now()
	target := h.primary(dataVolume)
	h.sql(target.Port, "postgres", `CREATE DATABASE bare`)
	fresh = time.Since(start)
	start = time.Now()
	cmd := h.u.Command(map[string]string{"PGPASSWORD": h.superPassword()}, []string{filepath.Join(h.bin, "pg_restore"),
		"-h", "127.0.0.1", "-p", target.Port, "-U", postgres.Superuser, "-d", "bare", "--no-owner", file})
	out, err := cmd.CombinedOutput()
	require.NoError(h.t, err, string(out))
	restore = time.Since(start)
	target.Stop(h.t)
	return restore, fresh
}

// BenchmarkPrimaryStart times a primary's start on an existing data
// directory, until it accepts connections: with the current bootstrap.sh,
// which first makes the replication role in single-user mode and checks
// pg_hba.conf, and, as the floor measured in the same run, with the
// previous release's (testdata/previous), which starts the server straight
// away. Medians of starts taken in turns:
//
//	go test -bench PrimaryStart -run x -benchtime 1x ./operator/database/postgres/
func BenchmarkPrimaryStart(b *testing.B) {
	h := newHost(b)
	previous := h.u.WriteScripts(b, h.u.Dir(b, h.root, "previous"), previousScriptFiles(b))
	h.primary("data-0").Stop(b)
	pod := postgres.Engine{}.ServerPod(h.cluster)
	start := func(scripts string) time.Duration {
		env := h.serverEnv(pod, 0, "data-0", "")
		cmd := h.u.Command(env, pgtest.HostCommand(b, pod.Container, scripts))
		began := time.Now()
		require.NoError(b, cmd.Start())
		for exec.Command(filepath.Join(h.bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", env["PGPORT"]).Run() != nil {
			require.Less(b, time.Since(began), time.Minute, "the server never accepted connections")
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(began)
		require.NoError(b, cmd.Process.Signal(syscall.SIGINT))
		_ = cmd.Wait()
		return took
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	for b.Loop() {
		var current, floor []time.Duration
		for range 7 {
			floor = append(floor, start(previous))
			current = append(current, start(h.scripts))
		}
		b.ReportMetric(median(current).Seconds()*1000, "current-ms")
		b.ReportMetric(median(floor).Seconds()*1000, "previous-ms")
		b.Logf("primary start to accepting connections, median of 7: current bootstrap.sh %v, previous release's %v (floor)",
			median(current).Round(time.Millisecond), median(floor).Round(time.Millisecond))
	}
}
