package instance

import (
	"sync"
	"time"
)

// WALFlushStallAfter is how long a primary's WAL may wait to be flushed,
// its flush position not moving, before the primary counts as unhealthy
// (Status.WALFlushStalled). Its storage then takes no writes (a stalled
// disk, a frozen file system): no commit can be acknowledged, yet the
// server still answers every read-only query, its status among them. A
// disk that works flushes the WAL writer's buffers within
// wal_writer_delay (200 ms) and a commit's at once.
const WALFlushStallAfter = 5 * time.Second

// walPositions are a primary's pg_current_wal_insert_lsn() and
// pg_current_wal_flush_lsn() (both 0 on a standby), and whether a process
// of the server waits on writing or syncing WAL (pg_stat_activity's
// wait_event WALWrite, WALSync, WALInitWrite or WALInitSync). WAL
// inserted beyond the flush position alone is no stall: an idle server
// may keep a partial page of records that need no flush (the WAL writer
// flushes only whole pages and commits) for minutes, and a position at a
// page's start reads past the page header.
type walPositions struct {
	insert, flush LSN
	waiting       bool
}

// flushWatch follows a primary's WAL flush position from one status read
// to the next.
type flushWatch struct {
	mu    sync.Mutex
	flush LSN
	// since is the first read that found WAL waiting to be flushed at
	// the flush position flush (zero: none waits).
	since time.Time
}

// observe returns since when WAL has waited to be flushed, a process
// waiting on it, with the flush position not moving (nil: nothing waits,
// or the position moved since the last read, or the server is not a
// primary).
func (w *flushWatch) observe(p walPositions, primary bool, now time.Time) *time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !primary || !p.waiting || p.insert <= p.flush {
		w.since = time.Time{}
		return nil
	}
	if w.since.IsZero() || p.flush != w.flush {
		w.flush, w.since = p.flush, now
		return nil
	}
	since := w.since
	return &since
}

// WALFlushStalled: at the status's time the primary's WAL had waited to
// be flushed, the flush position not moving, for WALFlushStallAfter or
// more.
func (s Status) WALFlushStalled() bool {
	return s.WALFlushStalledSince != nil && s.Time.Sub(*s.WALFlushStalledSince) >= WALFlushStallAfter
}
