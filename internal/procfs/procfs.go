// Package procfs reads what the kernel says of processes under /proc
// (proc(5)).
package procfs

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// StatFields are the fields of <proc>/<pid>/stat that follow the command
// name, which is in parentheses and may itself hold spaces and
// parentheses: [0] is the state (proc(5)'s field 3), [1] the parent's pid
// (field 4), [19] the start time (field 22).
func StatFields(proc string, pid int) ([]string, bool) {
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(raw[i+1:])), true
}

// Tree is root and every process descended from it, root first, as
// <proc> lists them now.
func Tree(proc string, root int) []int {
	entries, _ := os.ReadDir(proc)
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fields, ok := StatFields(proc, pid)
		if !ok || len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	tree := []int{root}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}

// TCPConn is a TCP socket as <proc>/<pid>/net/tcp and tcp6 show it
// (proc(5)).
type TCPConn struct {
	// State is the kernel's TCP state: 1 is established.
	State uint64
	// TxQueue is the bytes written and not yet acknowledged by the peer.
	TxQueue uint64
	// Retransmits counts the retransmission timeouts since the peer last
	// acknowledged anything (0 once it does).
	Retransmits uint64
	Inode       uint64
	// Local and Remote are its addresses; IPv6 says it is an IPv6
	// socket (net/tcp6), whose IPv4 peers show as mapped addresses.
	Local, Remote netip.AddrPort
	IPv6          bool
}

// TCPEstablished is TCPConn.State of an established connection.
const TCPEstablished = 1

// TCPConns are the TCP sockets (IPv4 and IPv6) of pid's network
// namespace.
func TCPConns(proc string, pid int) []TCPConn {
	var out []TCPConn
	for _, name := range []string{"tcp", "tcp6"} {
		raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "net", name))
		if err != nil {
			continue
		}
		conns := parseTCP(string(raw))
		for i := range conns {
			conns[i].IPv6 = name == "tcp6"
		}
		out = append(out, conns...)
	}
	return out
}

// parseTCP reads the lines of a net/tcp file: sl, local and remote
// address, st, tx_queue:rx_queue, tr:tm->when, retrnsmt, uid, timeout,
// inode (the header and lines it cannot read are left out).
func parseTCP(text string) []TCPConn {
	var out []TCPConn
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		tx, _, _ := strings.Cut(f[4], ":")
		var c TCPConn
		var errs [4]error
		c.State, errs[0] = strconv.ParseUint(f[3], 16, 64)
		c.TxQueue, errs[1] = strconv.ParseUint(tx, 16, 64)
		c.Retransmits, errs[2] = strconv.ParseUint(f[6], 16, 64)
		c.Inode, errs[3] = strconv.ParseUint(f[9], 10, 64)
		if errs != [4]error{} {
			continue
		}
		c.Local, _ = parseAddrPort(f[1])
		c.Remote, _ = parseAddrPort(f[2])
		out = append(out, c)
	}
	return out
}

// parseAddrPort reads an address of net/tcp or net/tcp6: the address's
// 32-bit words, each printed in hex as the host's byte order holds it,
// a colon, the port in hex.
func parseAddrPort(s string) (netip.AddrPort, bool) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if !ok || err != nil || (len(hexAddr) != 8 && len(hexAddr) != 32) {
		return netip.AddrPort{}, false
	}
	b := make([]byte, len(hexAddr)/2)
	for i := 0; i < len(hexAddr); i += 8 {
		w, err := strconv.ParseUint(hexAddr[i:i+8], 16, 32)
		if err != nil {
			return netip.AddrPort{}, false
		}
		binary.NativeEndian.PutUint32(b[i/2:], uint32(w))
	}
	addr, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(addr, uint16(port)), true
}

// SocketInodes are the inodes of the sockets pid holds open (its
// descriptors' links read "socket:[inode]"); empty when its descriptors
// cannot be read (another user's process, or gone).
func SocketInodes(proc string, pid int) map[uint64]bool {
	dir := filepath.Join(proc, strconv.Itoa(pid), "fd")
	entries, _ := os.ReadDir(dir)
	out := map[uint64]bool{}
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if n, ok := strings.CutPrefix(link, "socket:["); ok {
			if inode, err := strconv.ParseUint(strings.TrimSuffix(n, "]"), 10, 64); err == nil {
				out[inode] = true
			}
		}
	}
	return out
}
