package sockdiag

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// socketInode is the inode the kernel gives c's socket.
func socketInode(t *testing.T, c *net.TCPConn) uint32 {
	t.Helper()
	raw, err := c.SyscallConn()
	require.NoError(t, err)
	var ino uint64
	require.NoError(t, raw.Control(func(fd uintptr) {
		link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(fd)))
		require.NoError(t, err)
		ino, err = strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"), 10, 32)
		require.NoError(t, err)
	}))
	return uint32(ino)
}

// dial connects to a listener on network's loopback and returns both ends.
func dial(t *testing.T, network, addr string) (client, server *net.TCPConn) {
	t.Helper()
	l, err := net.Listen(network, addr)
	require.NoError(t, err)
	defer l.Close()
	c, err := net.Dial(network, l.Addr().String())
	require.NoError(t, err)
	s, err := l.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// The kernel finds a live connection by its addresses, each end its own
// socket: established, nothing unacknowledged, no timeout.
func TestLookupTCPFindsAnEstablishedConnectionByItsAddresses(t *testing.T) {
	client, server := dial(t, "tcp4", "127.0.0.1:0")
	_, err := client.Write([]byte("hello"))
	require.NoError(t, err)
	buf := make([]byte, 5)
	_, err = server.Read(buf)
	require.NoError(t, err)

	local, remote := client.LocalAddr().(*net.TCPAddr).AddrPort(), client.RemoteAddr().(*net.TCPAddr).AddrPort()
	st, err := LookupTCP(false, local, remote)
	require.NoError(t, err)
	assert.Equal(t, uint8(TCPEstablished), st.State)
	assert.Equal(t, socketInode(t, client), st.Inode)
	assert.Zero(t, st.SendQueue, "the peer acknowledged what was written")
	assert.Zero(t, st.Retransmits)

	st, err = LookupTCP(false, remote, local)
	require.NoError(t, err)
	assert.Equal(t, socketInode(t, server), st.Inode, "the other end is the server's socket")
}

// An IPv6 socket is asked as one.
func TestLookupTCPFindsAnIPv6Connection(t *testing.T) {
	client, _ := dial(t, "tcp6", "[::1]:0")
	st, err := LookupTCP(true, client.LocalAddr().(*net.TCPAddr).AddrPort(), client.RemoteAddr().(*net.TCPAddr).AddrPort())
	require.NoError(t, err)
	assert.Equal(t, uint8(TCPEstablished), st.State)
	assert.Equal(t, socketInode(t, client), st.Inode)
}

// No connection of those addresses: ErrNotFound, which callers take for
// "find it again".
func TestLookupTCPSaysWhenNoSuchConnectionExists(t *testing.T) {
	client, _ := dial(t, "tcp4", "127.0.0.1:0")
	local := client.LocalAddr().(*net.TCPAddr).AddrPort()
	_, err := LookupTCP(false, local, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 1))
	assert.ErrorIs(t, err, ErrNotFound)

	remote := client.RemoteAddr().(*net.TCPAddr).AddrPort()
	require.NoError(t, client.SetLinger(0))
	require.NoError(t, client.Close()) // a reset: no TIME_WAIT left behind
	_, err = LookupTCP(false, local, remote)
	assert.True(t, errors.Is(err, ErrNotFound), "a closed connection: %v", err)
}

// The answer's parts: an error other than "not found" is said as it is.
func TestParseAnswerReadsAnErrorAndTheRetransmitsOfTCPInfo(t *testing.T) {
	errAnswer := make([]byte, nlmsgHeaderLen+4)
	putHeader(errAnswer, 2) // NLMSG_ERROR
	eperm := int32(syscall.EPERM)
	binaryPut32(errAnswer[nlmsgHeaderLen:], uint32(-eperm))
	_, err := parseAnswer(errAnswer)
	assert.ErrorIs(t, err, syscall.EPERM)

	// An inet_diag_msg, then an INET_DIAG_INFO attribute whose
	// tcpi_retransmits is 4.
	msg := make([]byte, nlmsgHeaderLen+diagMsgLen+8)
	putHeader(msg, 20) // SOCK_DIAG_BY_FAMILY
	body := msg[nlmsgHeaderLen:]
	body[1] = TCPEstablished
	binaryPut32(body[64:], 60)
	binaryPut32(body[68:], 500)
	attr := body[diagMsgLen:]
	binaryPut16(attr[0:], 8)
	binaryPut16(attr[2:], diagInfo)
	attr[4+tcpInfoRetrans] = 4
	st, err := parseAnswer(msg)
	require.NoError(t, err)
	assert.Equal(t, TCPState{State: TCPEstablished, SendQueue: 60, Retransmits: 4, Inode: 500}, st)
}

func putHeader(b []byte, typ uint16) {
	binaryPut32(b[0:], uint32(len(b)))
	binaryPut16(b[4:], typ)
}

func binaryPut32(b []byte, v uint32) { binary.NativeEndian.PutUint32(b, v) }
func binaryPut16(b []byte, v uint16) { binary.NativeEndian.PutUint16(b, v) }
