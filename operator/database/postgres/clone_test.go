package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// CloneProgress follows bootstrap.sh's lines about a clone to the end of
// the log: a start, waits and progress lines keep it under way; any other
// line of bootstrap.sh's (the clone finished or failed, the server starts)
// ends it; the server's and pg_basebackup's own lines change nothing.
func TestCloneProgressFollowsTheLastClone(t *testing.T) {
	const (
		start    = "2026-11-25T14:00:00Z bootstrap: empty volume on standby ordinal 1: cloning the primary into /var/lib/postgresql/data/pgdata"
		waiting  = "2026-11-25T14:00:01Z bootstrap: waiting for the primary at db-rw:5432"
		slot     = "2026-11-25T14:00:02Z bootstrap: replication slot deckhand_standby_1 on the primary"
		progress = "2026-11-25T14:00:32Z bootstrap: clone progress: 1024 of 4096 kB"
		finished = "2026-11-25T14:01:00Z bootstrap: clone finished: the primary is copied; starting the standby"
		failed   = "2026-11-25T14:01:00Z bootstrap: pg_basebackup could not clone the primary (above)"
		lost     = "2026-11-25T15:00:00Z bootstrap: the primary reports replication slot deckhand_standby_1 lost: this standby cannot catch up; moving it aside and cloning the primary again"
		server   = "2026-11-25 14:01:05.000 UTC [42] LOG:  database system is ready to accept read-only connections"
		basebkp  = "pg_basebackup: error: connection to server failed"
	)
	at := time.Date(2026, 11, 25, 14, 0, 32, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		lines   []string
		cloning bool
		copied  int64
	}{
		{"an empty log", nil, false, 0},
		{"a server's log", []string{server}, false, 0},
		{"a clone that starts", []string{start, waiting, slot}, true, 0},
		{"a clone under way", []string{start, slot, progress}, true, 1 << 20},
		{"only progress lines (the start scrolled away)", []string{progress, progress}, true, 1 << 20},
		{"a clone that finished", []string{start, progress, finished, server}, false, 0},
		{"a clone that failed", []string{start, progress, basebkp, failed}, false, 0},
		{"a lost slot's new clone", []string{server, lost, start, progress}, true, 1 << 20},
		{"carriage returns", []string{start + "\r", progress + "\r"}, true, 1 << 20},
	} {
		p, cloning := Engine{}.CloneProgress(strings.Join(tc.lines, "\n") + "\n")
		assert.Equal(t, tc.cloning, cloning, tc.name)
		assert.Equal(t, tc.copied, p.CopiedBytes, tc.name)
		if tc.copied > 0 {
			assert.Equal(t, int64(4<<20), p.TotalBytes, tc.name)
			assert.Equal(t, at, p.At, tc.name)
		}
	}
}
