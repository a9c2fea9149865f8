// Package freeport hands tests TCP ports of 127.0.0.1 for the servers they
// start (PostgreSQL, MariaDB, a JVM), so that tests running side by side,
// in one test binary or in several (go test runs packages at once), never
// start two servers on one port.
//
// Asking the kernel for a free port (listening on port 0 and closing it)
// is not enough: the port is free again the moment it is closed, so
// another test asking next may be given it before the first test's server
// binds it, or while that server is stopped between two runs on "its"
// port (a restarted pod keeps its port). A port handed out here stays
// reserved until the end of the test that asked: a lock file per port
// (flock, which the kernel releases when the process ends, however it
// ends) tells every deckhand test process on the machine that it is
// taken.
//
// The ports come from 20000-29999: below Linux's ephemeral range
// (32768-60999 by default), where the kernel picks the local ports of
// outgoing connections and the ports of "listen on port 0", and where
// kwok's clusters pick their components' ports (from 32767 down), so
// neither ever lands on a port handed out here.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

const (
	first = 20000
	last  = 29999
)

// lockDir holds one lock file per port handed out (the files stay; only
// their locks matter).
var lockDir = filepath.Join(os.TempDir(), "deckhand-ports")

// Get is a port of 127.0.0.1 that nothing listens on and that no other
// test on this machine holds; it stays the test's until the test ends.
func Get(t testing.TB) int {
	t.Helper()
	port, release, err := reserve(first, last)
	if err != nil {
		t.Fatalf("freeport: %v", err)
	}
	t.Cleanup(release)
	return port
}

// String is Get as a string, as environments and addresses want it.
func String(t testing.TB) string {
	t.Helper()
	return strconv.Itoa(Get(t))
}

// reserve finds a port of [lo, hi] that no one holds and nothing listens
// on, and holds it until release is called.
func reserve(lo, hi int) (port int, release func(), err error) {
	if err := os.MkdirAll(lockDir, 0o777); err != nil {
		return 0, nil, err
	}
	n := hi - lo + 1
	start := rand.IntN(n)
	for i := range n {
		port := lo + (start+i)%n
		release, err := hold(port)
		if errors.Is(err, errTaken) {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		return port, release, nil
	}
	return 0, nil, fmt.Errorf("no free port in %d-%d: every one is held by a test or listened on", lo, hi)
}

var errTaken = errors.New("port taken")

// hold locks port's file, then checks that nothing listens on the port
// (a process that is not a deckhand test, or a server a crashed test left
// behind).
func hold(port int) (func(), error) {
	f, err := os.OpenFile(filepath.Join(lockDir, strconv.Itoa(port)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	// flock locks belong to the open file: a second open of the file, in
	// this process or another, cannot take the lock while f holds it.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errTaken
		}
		return nil, fmt.Errorf("locking port %d: %w", port, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		f.Close()
		return nil, errTaken
	}
	l.Close()
	return func() { f.Close() }, nil
}
