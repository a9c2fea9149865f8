package instance

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// watchReceiverLink is one look at the WAL receiver's connection, at
// each status read and each tick of the guard (GuardRole), so the stall
// is followed every second whoever asks the status and whenever: the
// standby named first in a failover, for one, is asked nothing between
// the choice and the detach. It returns how long it has stalled.
func (a *Agent) watchReceiverLink() time.Duration {
	pid := receiverProcess("/proc", a.postmasterPID())
	return a.stall.observe(pid, receiverStalled("/proc", pid), a.cfg.Now())
}

// receiverProcess is the WAL receiver among the postmaster's children
// (<proc>/<pid>/task/<pid>/children; its process title, which PostgreSQL
// sets, names it), 0 when none runs or they cannot be read.
func receiverProcess(proc string, postmaster int) int {
	if postmaster <= 0 {
		return 0
	}
	pm := strconv.Itoa(postmaster)
	children, err := os.ReadFile(filepath.Join(proc, pm, "task", pm, "children"))
	if err != nil {
		return 0
	}
	for _, child := range strings.Fields(string(children)) {
		title, err := os.ReadFile(filepath.Join(proc, child, "cmdline"))
		if err == nil && strings.Contains(string(title), "walreceiver") {
			pid, _ := strconv.Atoi(child)
			return pid
		}
	}
	return 0
}

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
	// that found it stalled (zero: not stalled); last the latest read.
	pid         int
	since, last time.Time
}

// stallReadGap is the longest gap between two reads across which a stall
// counts as one: between reads further apart the connection may have
// recovered and stalled again unseen.
const stallReadGap = 3 * time.Second

// observe returns how long the receiver pid's connection has stalled,
// as reads one after another found it (0: not stalled at this read). A
// new receiver (another pid), or a read long after the last, starts
// afresh.
func (w *stallWatch) observe(pid int, stalled bool, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	gap := now.Sub(w.last)
	w.last = now
	if !stalled {
		w.pid, w.since = 0, time.Time{}
		return 0
	}
	if w.since.IsZero() || w.pid != pid || gap > stallReadGap {
		w.pid, w.since = pid, now
	}
	return now.Sub(w.since)
}
