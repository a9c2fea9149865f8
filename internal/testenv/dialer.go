package testenv

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// LocalDialer sends connections for a host name to a local address: an
// operator's dial seam pointed at servers run on 127.0.0.1, since kwok's
// pods have no reachable addresses. Its zero value routes nothing.
type LocalDialer struct {
	mu    sync.Mutex
	addrs map[string]string // host -> 127.0.0.1:port
	// conns are the connections made to each host, which Cut closes
	// (a client keeps its connections open across requests).
	conns map[string][]net.Conn
	// delays are the hosts made slow (Slow): what each read of their
	// connections waits once its bytes have come.
	delays map[string]time.Duration
}

// Route sends connections for host to local.
func (d *LocalDialer) Route(host, local string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.addrs == nil {
		d.addrs = map[string]string{}
	}
	d.addrs[host] = local
}

// NoPodDial is the dialler of an operator run on the kwok cluster by a
// test that gives none: kwok's pod addresses are fake and must never be
// connected to, so it routes nothing and every dial is refused, as an
// unreachable pod's would be.
var NoPodDial = (&LocalDialer{}).DialContext

// DialContext dials the local address routed for addr's host.
func (d *LocalDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	local, ok := d.addrs[host]
	d.mu.Unlock()
	if !ok {
		return nil, errors.New("no agent for " + host)
	}
	raw, err := (&net.Dialer{}).DialContext(ctx, network, local)
	if err != nil {
		return nil, err
	}
	conn := &slowConn{Conn: raw, dialer: d, host: host}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conns == nil {
		d.conns = map[string][]net.Conn{}
	}
	d.conns[host] = append(d.conns[host], conn)
	return conn, nil
}

// Cut makes host unreachable (as a network that drops its packets would,
// for this dialer's clients only) until restore routes it back.
func (d *LocalDialer) Cut(host string) (restore func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	local := d.addrs[host]
	delete(d.addrs, host)
	for _, c := range d.conns[host] {
		_ = c.Close()
	}
	delete(d.conns, host)
	return func() { d.Route(host, local) }
}

// Slow makes every answer from host come delay late (the first bytes a
// connection of it reads after each write come delay after they came, as
// from a server whose node is short of CPU), until restore.
func (d *LocalDialer) Slow(host string, delay time.Duration) (restore func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.delays == nil {
		d.delays = map[string]time.Duration{}
	}
	d.delays[host] = delay
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.delays, host)
	}
}

// slowConn is a connection LocalDialer made, which answers as slowly as
// Slow said of its host.
type slowConn struct {
	net.Conn
	dialer *LocalDialer
	host   string
	// asked: written to since the last read; the next read is an answer.
	asked atomic.Bool
}

func (c *slowConn) Write(b []byte) (int, error) {
	c.asked.Store(true)
	return c.Conn.Write(b)
}

func (c *slowConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.asked.Swap(false) {
		c.dialer.mu.Lock()
		delay := c.dialer.delays[c.host]
		c.dialer.mu.Unlock()
		time.Sleep(delay)
	}
	return n, err
}
