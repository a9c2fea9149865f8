// Package sockdiag asks the kernel for one TCP connection by its addresses
// (sock_diag(7): SOCK_DIAG_BY_FAMILY without NLM_F_DUMP), which the kernel
// answers with a lookup in its table of established sockets. Reading
// /proc/<pid>/net/tcp instead walks that whole table, whose size follows
// the machine's memory and which holds every network namespace's
// sockets, at every read: about 10 ms of CPU a read on a 24 GiB machine,
// and more on larger ones.
package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// TCPState is what the kernel says of a TCP connection.
type TCPState struct {
	// State is the kernel's TCP state: TCPEstablished, ...
	State uint8
	// SendQueue is the bytes written and not yet acknowledged by the peer.
	SendQueue uint32
	// Retransmits counts the retransmission timeouts since the peer last
	// acknowledged anything (0 once it does).
	Retransmits uint8
	// Inode is the socket's inode, as a process's descriptor names it
	// ("socket:[inode]").
	Inode uint32
}

// TCPEstablished is TCPState.State of an established connection.
const TCPEstablished = 1

// ErrNotFound: the kernel holds no TCP connection with those addresses in
// the caller's network namespace.
var ErrNotFound = errors.New("no such TCP connection")

// Sizes and values of linux/inet_diag.h and linux/netlink.h.
const (
	nlmsgHeaderLen  = 16
	diagReqLen      = 56 // struct inet_diag_req_v2
	diagMsgLen      = 72 // struct inet_diag_msg
	diagInfo        = 2  // INET_DIAG_INFO: struct tcp_info follows
	tcpInfoRetrans  = 2  // offsetof(struct tcp_info, tcpi_retransmits)
	answerBufferLen = 8192
)

// LookupTCP returns the state of the connection from local to remote, an
// IPv6 socket's (the addresses as /proc/net/tcp6 shows them, IPv4 ones
// mapped) when ipv6 is set, an IPv4 socket's otherwise.
func LookupTCP(ipv6 bool, local, remote netip.AddrPort) (TCPState, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return TCPState{}, fmt.Errorf("sock_diag socket: %w", err)
	}
	defer unix.Close(fd)
	// The kernel answers at once; the bound only guards a caller that
	// runs every second against a kernel that would not.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
		return TCPState{}, err
	}
	if err := unix.Sendto(fd, request(ipv6, local, remote), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return TCPState{}, fmt.Errorf("sock_diag request: %w", err)
	}
	buf := make([]byte, answerBufferLen)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return TCPState{}, fmt.Errorf("sock_diag answer: %w", err)
	}
	return parseAnswer(buf[:n])
}

// request is a netlink message asking for the TCP connection local ->
// remote with its tcp_info.
func request(ipv6 bool, local, remote netip.AddrPort) []byte {
	b := make([]byte, nlmsgHeaderLen+diagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], 1) // sequence
	r := b[nlmsgHeaderLen:]
	r[0] = unix.AF_INET
	if ipv6 {
		r[0] = unix.AF_INET6
	}
	r[1] = unix.IPPROTO_TCP
	r[2] = 1 << (diagInfo - 1)
	ne.PutUint32(r[4:], 0xffffffff) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	putAddr(id[4:20], local.Addr(), ipv6)
	putAddr(id[20:36], remote.Addr(), ipv6)
	// id[36:40] the interface: 0; the cookie: INET_DIAG_NOCOOKIE.
	ne.PutUint32(id[40:], 0xffffffff)
	ne.PutUint32(id[44:], 0xffffffff)
	return b
}

// putAddr writes a in the 16 bytes of an inet_diag_sockid address: an
// IPv4 socket's in the first four.
func putAddr(dst []byte, a netip.Addr, ipv6 bool) {
	if ipv6 {
		b := a.As16()
		copy(dst, b[:])
		return
	}
	b := a.Unmap().As4()
	copy(dst, b[:])
}

// parseAnswer reads the kernel's answer: an inet_diag_msg and its
// attributes, or an error.
func parseAnswer(b []byte) (TCPState, error) {
	ne := binary.NativeEndian
	if len(b) < nlmsgHeaderLen {
		return TCPState{}, errors.New("sock_diag: a short answer")
	}
	msgLen, msgType := int(ne.Uint32(b[0:])), ne.Uint16(b[4:])
	if msgLen < nlmsgHeaderLen || msgLen > len(b) {
		return TCPState{}, errors.New("sock_diag: a malformed answer")
	}
	body := b[nlmsgHeaderLen:msgLen]
	switch msgType {
	case unix.NLMSG_ERROR:
		if len(body) < 4 {
			return TCPState{}, errors.New("sock_diag: a malformed error")
		}
		errno := unix.Errno(-int32(ne.Uint32(body)))
		if errno == unix.ENOENT {
			return TCPState{}, ErrNotFound
		}
		return TCPState{}, fmt.Errorf("sock_diag: %w", errno)
	case unix.SOCK_DIAG_BY_FAMILY:
	default:
		return TCPState{}, fmt.Errorf("sock_diag: an answer of type %d", msgType)
	}
	if len(body) < diagMsgLen {
		return TCPState{}, errors.New("sock_diag: a short inet_diag_msg")
	}
	st := TCPState{State: body[1], SendQueue: ne.Uint32(body[64:]), Inode: ne.Uint32(body[68:])}
	// The attributes: 4-byte aligned (length, type) headers.
	for attrs := body[diagMsgLen:]; len(attrs) >= 4; {
		l, typ := int(ne.Uint16(attrs[0:])), ne.Uint16(attrs[2:])
		if l < 4 || l > len(attrs) {
			break
		}
		if typ == diagInfo && l > 4+tcpInfoRetrans {
			st.Retransmits = attrs[4+tcpInfoRetrans]
		}
		attrs = attrs[min((l+3)&^3, len(attrs)):]
	}
	return st, nil
}
