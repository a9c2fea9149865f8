package procfs_test

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/procfs"
)

func TestStatFieldsReadTheParentAfterACommandNameWithSpacesAndParentheses(t *testing.T) {
	fields, ok := procfs.StatFields("/proc", os.Getpid())
	require.True(t, ok)
	assert.Equal(t, strconv.Itoa(os.Getppid()), fields[1])

	dir := t.TempDir()
	proc := dir + "/42"
	require.NoError(t, os.Mkdir(proc, 0o755))
	require.NoError(t, os.WriteFile(proc+"/stat", []byte("42 (a) b (c) S 7 42 42 0"), 0o644))
	fields, ok = procfs.StatFields(dir, 42)
	require.True(t, ok)
	assert.Equal(t, []string{"S", "7", "42", "42", "0"}, fields)
	_, ok = procfs.StatFields(dir, 43)
	assert.False(t, ok, "no such process")
}

// A shell and the sleep it started are the test process's tree, the
// test process first.
func TestTreeIsTheProcessAndEveryDescendant(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var tree []int
	require.Eventually(t, func() bool {
		tree = procfs.Tree("/proc", os.Getpid())
		return len(tree) >= 3
	}, 10*1e9, 50*1e6, "the shell's sleep never appeared")
	assert.Equal(t, os.Getpid(), tree[0])
	assert.Contains(t, tree, cmd.Process.Pid)
	assert.Equal(t, []int{42}, procfs.Tree(t.TempDir(), 42), "no /proc: the root alone")
}

// A connection this process holds is found among its sockets and in its
// network namespace's TCP table, established.
func TestTCPConnsFindAnOwnEstablishedConnectionByItsSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()

	inodes := procfs.SocketInodes("/proc", os.Getpid())
	var found []procfs.TCPConn
	for _, conn := range procfs.TCPConns("/proc", os.Getpid()) {
		if inodes[conn.Inode] && conn.State == procfs.TCPEstablished {
			found = append(found, conn)
		}
	}
	// The dialled end and, once accepted or not, the listener's end.
	require.NotEmpty(t, found, "no established connection among this process's sockets")
	assert.Zero(t, found[0].Retransmits)
	var locals []netip.AddrPort
	for _, conn := range found {
		locals = append(locals, conn.Local)
	}
	assert.Contains(t, locals, c.LocalAddr().(*net.TCPAddr).AddrPort(), "the dialled end, by its address")
	assert.Empty(t, procfs.SocketInodes("/proc", 1<<30), "no such process")
}

// The kernel's table as proc(5) shows it: the header left out, the
// queues, retransmission count and inode read (hex, hex, hex, decimal).
func TestParseTCPReadsQueuesRetransmitsAndInodes(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(dir+"/7/net", 0o755))
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 41234 1 0000000000000000 100 0 0 10 0
   1: 0300A8C6:C350 0A0013C6:1538 01 0000003C:00000000 01:000004E2 00000005   999        0 41240 2 0000000000000000 1600 4 1 10 -1
garbage
`
	require.NoError(t, os.WriteFile(dir+"/7/net/tcp", []byte(table), 0o644))
	require.NoError(t, os.WriteFile(dir+"/7/net/tcp6", []byte(`  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:1538 0000000000000000FFFF00000300A8C6:C350 01 00000000:00000000 00:00000000 00000000   999        0 41250 1 0000000000000000 20 4 30 10 -1
`), 0o644))
	addr := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	assert.Equal(t, []procfs.TCPConn{
		{State: 0x0A, Inode: 41234, Local: addr("127.0.0.1:5432"), Remote: addr("0.0.0.0:0")},
		{State: procfs.TCPEstablished, TxQueue: 60, Retransmits: 5, Inode: 41240, Local: addr("198.168.0.3:50000"), Remote: addr("198.19.0.10:5432")},
		{State: procfs.TCPEstablished, Inode: 41250, Local: addr("[::ffff:127.0.0.1]:5432"), Remote: addr("[::ffff:198.168.0.3]:50000"), IPv6: true},
	}, procfs.TCPConns(dir, 7))
}
