package instance

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/procfs"
)

// A WAL receiver's connection counts as stalled when the kernel holds
// bytes of it the peer has not acknowledged through a retransmission
// timeout; a connection of another process, one whose peer acknowledges,
// or a receiver whose descriptors cannot be read does not.
func TestAReceiverStallsWhenItsConnectionRetransmitsUnacknowledgedReplies(t *testing.T) {
	proc := t.TempDir()
	receiver := func(pid string, table string, sockets ...string) {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "fd"), 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "net"), 0o755))
		for i, s := range sockets {
			require.NoError(t, os.Symlink(s, filepath.Join(proc, pid, "fd", string(rune('3'+i)))))
		}
		require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "net", "tcp"), []byte(
			"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"+table), 0o644))
	}
	// inode 500: established, 60 bytes unacknowledged, 4 timeouts; 501
	// established, acknowledged; 502 a listener.
	table := "   0: 0300A8C6:C350 0A0013C6:1538 01 0000003C:00000000 01:000004E2 00000004   999        0 500 2 0 1600 4 1 10 -1\n" +
		"   1: 0300A8C6:C351 0A0013C6:1538 01 00000000:00000000 00:00000000 00000000   999        0 501 2 0 20 4 1 10 -1\n" +
		"   2: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 502 1 0 100 0 0 10 0\n"
	receiver("10", table, "socket:[500]", "/dev/null")
	receiver("11", table, "socket:[501]", "socket:[502]", "pipe:[9]")
	receiver("12", table)

	stalled := func(pid int) bool { return (&receiverLink{}).stalled(proc, pid) }
	assert.True(t, stalled(10), "its connection retransmits")
	assert.False(t, stalled(11), "acknowledged, and a listener")
	assert.False(t, stalled(12), "no descriptors read")
	assert.False(t, stalled(0), "no receiver")
	assert.False(t, stalled(13), "gone")
}

// Found once in net/tcp, the receiver's connection is then asked of the
// kernel by its addresses, and net/tcp is not read again while the
// kernel knows it; once it is gone, the next look searches net/tcp anew.
func TestTheReceiversConnectionIsFoundOnceAndThenAskedByItsAddresses(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial("tcp4", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s, err := l.Accept()
	require.NoError(t, err)
	defer s.Close()
	local, remote := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	var inode uint64
	for _, conn := range procfs.TCPConns("/proc", os.Getpid()) {
		if conn.Local == local && conn.Remote == remote {
			inode = conn.Inode
		}
	}
	require.NotZero(t, inode, "the dialled end in /proc/self/net/tcp")

	// A /proc whose process 42 holds that socket, net/tcp as the kernel
	// shows it.
	proc := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "42", "fd"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "42", "net"), 0o755))
	require.NoError(t, os.Symlink(fmt.Sprintf("socket:[%d]", inode), filepath.Join(proc, "42", "fd", "3")))
	netTCP := filepath.Join(proc, "42", "net", "tcp")
	require.NoError(t, os.WriteFile(netTCP, []byte("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"+
		fmt.Sprintf("   0: %s %s 01 00000000:00000000 00:00000000 00000000     0        0 %d 2 0 20 4 1 10 -1\n", procAddr(local), procAddr(remote), inode)), 0o644))

	var link receiverLink
	assert.False(t, link.stalled(proc, 42), "acknowledged")
	assert.Equal(t, 42, link.pid, "found")
	require.NoError(t, os.Remove(netTCP))
	assert.False(t, link.stalled(proc, 42))
	assert.Equal(t, 42, link.pid, "asked of the kernel: net/tcp, gone, was not read")

	require.NoError(t, c.(*net.TCPConn).SetLinger(0))
	require.NoError(t, c.Close())
	assert.False(t, link.stalled(proc, 42))
	assert.Zero(t, link.pid, "the connection gone, searched for again, and not found")
}

// procAddr is an IPv4 address and port as net/tcp prints them.
func procAddr(a netip.AddrPort) string {
	b := a.Addr().As4()
	return fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(b[:]), a.Port())
}

// The stall watch says for how long reads one after another found the
// receiver's connection stalled; a read that finds it flowing, another
// receiver, or a read long after the last starts it over.
func TestTheStallWatchSaysHowLongTheReceiversConnectionHasStalled(t *testing.T) {
	var w stallWatch
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

	assert.Zero(t, w.observe(10, false, at(0)))
	assert.Zero(t, w.observe(10, true, at(1)), "first seen")
	for s := 2; s < 6; s++ {
		w.observe(10, true, at(s))
	}
	assert.Equal(t, 5*time.Second, w.observe(10, true, at(6)), "read every second")
	assert.Zero(t, w.observe(10, false, at(7)), "acknowledged again")
	assert.Zero(t, w.observe(10, true, at(8)))
	assert.Equal(t, 2*time.Second, w.observe(10, true, at(10)))
	assert.Zero(t, w.observe(11, true, at(11)), "a new receiver")
	assert.Equal(t, time.Second, w.observe(11, true, at(12)))
	assert.Zero(t, w.observe(11, true, at(20)), "unread for 8 s: it may have flowed meanwhile")
	assert.Equal(t, 2*time.Second, w.observe(11, true, at(22)))
}

// The WAL receiver is found among the postmaster's children by its
// process title.
func TestTheReceiverIsThePostmastersChildTitledWalreceiver(t *testing.T) {
	proc := t.TempDir()
	process := func(pid, title, children string) {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "task", pid), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "cmdline"), []byte(title), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "task", pid, "children"), []byte(children), 0o644))
	}
	process("100", "postgres\x00-D\x00/data", "101 102 103 ")
	process("101", "postgres: checkpointer ", "")
	process("102", "postgres: startup recovering 000000010000000000000003", "")
	process("103", "postgres: walreceiver streaming 0/3000148", "")
	process("200", "postgres\x00-D\x00/other", "201 ")
	process("201", "postgres: walwriter ", "")

	assert.Equal(t, 103, receiverProcess(proc, 100))
	assert.Zero(t, receiverProcess(proc, 200), "a primary: no receiver")
	assert.Zero(t, receiverProcess(proc, 300), "no such postmaster")
	assert.Zero(t, receiverProcess(proc, 0))
}
