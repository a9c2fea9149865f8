package testenv

import (
	"context"
	"errors"
	"net"
	"sync"
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
	conn, err := (&net.Dialer{}).DialContext(ctx, network, local)
	if err != nil {
		return nil, err
	}
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
