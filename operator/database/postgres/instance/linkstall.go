package instance

import (
	"sync"
	"time"

	"github.com/deckhand-dev/deckhand/internal/procfs"
)

// A standby's WAL receiver sends its primary a reply every second
// (wal_receiver_status_interval=1s), whether WAL arrives or not. When the
// primary's node loses its power or its network, those replies stop
// being acknowledged: the connection's send queue holds them, and the
// kernel retransmits after each timeout, backing off. A primary that
// acknowledges nothing of the connection receives none of the replies
// after the first unacknowledged one (TCP sends past a lost segment only
// within a window that a timeout closes), so for the primary's isolation
// check (isolation.go) that standby has stopped replying. The agent
// reports how long its receiver's connection has been so (the operator
// asks every second); the failover uses it to skip the wait it would
// otherwise give the old primary to notice its standbys' silence
// (failover.Steps.awaitName). A lull in the WAL says nothing here: the
// replies flow either way.

// receiverStalled: some connection the WAL receiver process pid holds is
// established with bytes its peer has not acknowledged through at least
// one retransmission timeout. False when it cannot be read (no receiver,
// another user's process).
func receiverStalled(proc string, pid int) bool {
	if pid <= 0 {
		return false
	}
	sockets := procfs.SocketInodes(proc, pid)
	if len(sockets) == 0 {
		return false
	}
	for _, c := range procfs.TCPConns(proc, pid) {
		if sockets[c.Inode] && c.State == procfs.TCPEstablished && c.TxQueue > 0 && c.Retransmits > 0 {
			return true
		}
	}
	return false
}

// stallWatch follows the receiver's connection from one status read to
// the next.
type stallWatch struct {
	mu sync.Mutex
	// pid is the receiver the stall was seen on; since the first read
	// that found it stalled (zero: not stalled).
	pid   int
	since time.Time
}

// observe returns how long the receiver pid's connection has stalled,
// as reads one after another found it (0: not stalled at this read). A
// new receiver (another pid) starts afresh.
func (w *stallWatch) observe(pid int, stalled bool, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !stalled {
		w.pid, w.since = 0, time.Time{}
		return 0
	}
	if w.since.IsZero() || w.pid != pid {
		w.pid, w.since = pid, now
	}
	return now.Sub(w.since)
}
