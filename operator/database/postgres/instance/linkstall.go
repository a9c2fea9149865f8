package instance

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deckhand-dev/deckhand/internal/procfs"
	"github.com/deckhand-dev/deckhand/internal/sockdiag"
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
	return a.stall.observe(pid, a.link.stalled("/proc", pid), a.cfg.Now())
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

// receiverLink is the WAL receiver's connection, found once in
// <proc>/<pid>/net/tcp and then asked of the kernel by its addresses
// (sockdiag): reading net/tcp walks the kernel's whole table of
// established sockets, of every network namespace, and at two looks a
// second it was most of a standby's agent's CPU.
type receiverLink struct {
	mu sync.Mutex
	// pid and inode: the receiver and its socket, as last found (pid 0:
	// none); conn its addresses.
	pid   int
	inode uint64
	conn  procfs.TCPConn
}

// stalled: the connection the WAL receiver process pid holds is
// established with bytes its peer has not acknowledged through at least
// one retransmission timeout. False when it cannot be read (no receiver,
// another user's process).
func (l *receiverLink) stalled(proc string, pid int) bool {
	if pid <= 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pid == pid {
		st, err := sockdiag.LookupTCP(l.conn.IPv6, l.conn.Local, l.conn.Remote)
		if err == nil && uint64(st.Inode) == l.inode {
			return st.State == sockdiag.TCPEstablished && st.SendQueue > 0 && st.Retransmits > 0
		}
	}
	// First look, another receiver, or its connection replaced or gone.
	l.pid = 0
	c, ok := receiverConn(proc, pid)
	if !ok {
		return false
	}
	l.pid, l.inode, l.conn = pid, c.Inode, c
	return c.TxQueue > 0 && c.Retransmits > 0
}

// receiverConn is the established TCP connection the process pid holds
// (a WAL receiver holds one, to its primary), as <proc> shows it.
func receiverConn(proc string, pid int) (procfs.TCPConn, bool) {
	sockets := procfs.SocketInodes(proc, pid)
	if len(sockets) == 0 {
		return procfs.TCPConn{}, false
	}
	for _, c := range procfs.TCPConns(proc, pid) {
		if sockets[c.Inode] && c.State == procfs.TCPEstablished {
			return c, true
		}
	}
	return procfs.TCPConn{}, false
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
