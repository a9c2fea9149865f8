package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// BenchmarkArchiveLag measures the recovery point continuous archiving
// keeps: how long each committed write waits until the archive holds it,
// which is what losing every server (the archive left) loses at most.
// Under a steady load (a write every 100 ms), each write's WAL position
// after its commit is recorded with its time, the archive's progress
// (pg_stat_archiver's last archived segment) is read every 100 ms, and a
// write counts as archived once a segment holding its position is. The
// writes of the last seconds are waited for, not left out.
//
// The pod as AddArchiver builds it, on the host (startSidecarPodWith: the
// handoff, the sidecar, its resident Barman Cloud process, versitygw on
// 127.0.0.1 over TLS, gzip) and, at the same time under the same load, the
// floor: a server archiving with cp into a local directory, the fastest
// archive_command there is. Both with a Database's default
// archive_timeout (60 s), each probed once for readiness, as the kubelet
// does; the goal is p99 ≤ archive_timeout + 5 s.
// Loads: "rows", one small row per write (the segments are ended by
// archive_timeout); "bulk", a thousand rows per write, about 3 MB/s of WAL
// (the writes fill a segment every few seconds, so shipping must keep up).
//
//	go test -run '^$' -bench ArchiveLag -benchtime 1x -timeout 30m ./operator/database/postgres/
func BenchmarkArchiveLag(b *testing.B) {
	loads := []struct {
		name string
		rows int
		run  time.Duration
	}{
		{"rows", 1, 4 * time.Minute},
		{"bulk", 1000, 2 * time.Minute},
	}
	for _, load := range loads {
		b.Run("load="+load.name, func(b *testing.B) {
			for b.Loop() {
				p := startSidecarPodWith(b, postgres.ArchiverOptions{})
				floor := startCopyArchivingServer(b, p.h)
				// The kubelet runs a primary's readiness probe within
				// seconds of its start, and the probe's first pass wakes
				// the checkpointer (probe.sh wake_checkpointer).
				ready := postgres.Engine{}.ServerPod(p.h.cluster).Container.ReadinessProbe
				for _, volume := range []string{"data-source", "data-floor"} {
					out, ok := p.h.probe(ready, 0, volume, "", nil)
					require.True(b, ok, "the readiness probe of %s: %s", volume, out)
				}
				ports := []string{p.source.Port, floor.Port}
				lags := make([][]time.Duration, len(ports))
				errs := make([]error, len(ports))
				var wg sync.WaitGroup
				for i, port := range ports {
					wg.Go(func() { lags[i], errs[i] = measureArchiveLag(p.h, port, load.rows, load.run) })
				}
				wg.Wait()
				for i, name := range []string{"sidecar", "floor (cp)"} {
					require.NoError(b, errs[i], name)
					q := quantiles(lags[i])
					b.Logf("%s, load %s: %d writes; archived after p50 %.1f s, p99 %.1f s, worst %.1f s",
						name, load.name, len(lags[i]), q[0].Seconds(), q[1].Seconds(), q[2].Seconds())
				}
				side, base := quantiles(lags[0]), quantiles(lags[1])
				b.ReportMetric(side[0].Seconds(), "p50-s")
				b.ReportMetric(side[1].Seconds(), "p99-s")
				b.ReportMetric(side[2].Seconds(), "max-s")
				b.ReportMetric(base[1].Seconds(), "floor-p99-s")
			}
		})
	}
}

// startCopyArchivingServer starts a primary on h (its own volume) that
// archives with cp into a local directory, with a Database's
// archive_timeout.
func startCopyArchivingServer(t testing.TB, h *host) *pgtest.Server {
	return h.archivingServer(t, 0, "data-floor", "", archiveCommand("cp %p "+h.u.TempDir(t)+"/%f"), nil)
}

// measureArchiveLag writes rows rows every 100 ms into the server on port
// for run, then waits until the archive holds the last write; it returns
// each write's wait.
func measureArchiveLag(h *host, port string, rows int, run time.Duration) ([]time.Duration, error) {
	db, err := h.superuserDB(port)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ctx := context.Background()
	var segmentSize uint64
	if err := db.QueryRowContext(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size'").Scan(&segmentSize); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE lag (id bigserial PRIMARY KEY, payload text NOT NULL)"); err != nil {
		return nil, err
	}
	progress := watchArchive(db, segmentSize)
	defer progress.stop()

	type write struct {
		at  time.Time
		lsn uint64
	}
	var writes []write
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(run); time.Now().Before(end); <-tick.C {
		if _, err := db.ExecContext(ctx, "INSERT INTO lag (payload) SELECT repeat(md5(random()::text), 8) FROM generate_series(1, $1)", rows); err != nil {
			return nil, err
		}
		at := time.Now()
		var lsn string
		// At or past the commit's record: the wait counted is never
		// shorter than the commit's.
		if err := db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
			return nil, err
		}
		pos, err := instance.ParseLSN(lsn)
		if err != nil {
			return nil, err
		}
		writes = append(writes, write{at, uint64(pos)})
	}
	last := writes[len(writes)-1].lsn
	// archive_timeout ends the last segment within a minute; its shipping
	// gets another.
	if err := progress.waitPast(last, 2*time.Minute); err != nil {
		return nil, err
	}
	seen := progress.snapshot()
	lags := make([]time.Duration, 0, len(writes))
	i := 0
	for _, w := range writes {
		for seen[i].end <= w.lsn-1 {
			i++
		}
		lags = append(lags, max(seen[i].at.Sub(w.at), 0))
	}
	return lags, nil
}

// archiveProgress is when the archive was first seen holding WAL up to
// each end position (the end of its last archived segment).
type archiveProgress struct {
	mu     sync.Mutex
	seen   []archivedUpTo
	cancel context.CancelFunc
	done   chan struct{}
}

type archivedUpTo struct {
	at  time.Time
	end uint64
}

// watchArchive reads pg_stat_archiver every 100 ms until stopped.
func watchArchive(db *sql.DB, segmentSize uint64) *archiveProgress {
	ctx, cancel := context.WithCancel(context.Background())
	p := &archiveProgress{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for ; ctx.Err() == nil; <-tick.C {
			var name string
			if db.QueryRowContext(ctx, "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver").Scan(&name) != nil {
				continue
			}
			segno, ok := walSegmentNo(name, segmentSize)
			end := (segno + 1) * segmentSize
			p.mu.Lock()
			if ok && (len(p.seen) == 0 || end > p.seen[len(p.seen)-1].end) {
				p.seen = append(p.seen, archivedUpTo{time.Now(), end})
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *archiveProgress) stop() {
	p.cancel()
	<-p.done
}

func (p *archiveProgress) snapshot() []archivedUpTo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

// waitPast waits until the archive holds the WAL at lsn.
func (p *archiveProgress) waitPast(lsn uint64, within time.Duration) error {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if s := p.snapshot(); len(s) > 0 && s[len(s)-1].end > lsn-1 {
			return nil
		}
	}
	return fmt.Errorf("the archive did not reach %X/%X within %s", lsn>>32, uint32(lsn), within)
}

// quantiles are the median, the 99th percentile and the largest of d.
func quantiles(d []time.Duration) [3]time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(int(q*float64(len(s))), len(s)-1)] }
	return [3]time.Duration{at(0.5), at(0.99), s[len(s)-1]}
}
