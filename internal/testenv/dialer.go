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
	return (&net.Dialer{}).DialContext(ctx, network, local)
}
