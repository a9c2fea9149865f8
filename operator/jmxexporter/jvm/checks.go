package jvm

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// CheckPort fails when the agent could not listen on port: a port already
// in use (in the pod's network namespace) or a privileged port. The agent
// calls System.exit(1) when it cannot bind, taking the application down,
// so this is checked before loading it.
//
// The check is a snapshot, not a reservation: between the test bind (and
// its close) and the agent's own bind, another process may take the port
// (an application opening it during its start, a sidecar), and for the
// moment of the test bind the helper itself holds the port, so a process
// of the pod that binds it just then fails. Both windows are a few
// milliseconds; the first still ends with the agent exiting the JVM.
// Choose a port nothing else in the pod uses.
func CheckPort(port int) *Result {
	if owner := listening(port); owner != "" {
		r := failed(ReasonPortInUse, fmt.Sprintf("port %d is already in use in the pod (%s); choose another spec.port", port, owner), true)
		return &r
	}
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		r := failed(ReasonPortInUse, fmt.Sprintf("port %d is already in use in the pod; choose another spec.port", port), true)
		return &r
	case errors.Is(err, syscall.EACCES):
		r := failed(ReasonPortNotAllowed, fmt.Sprintf("port %d is privileged and the container may not bind it; choose a port above 1023", port), false)
		return &r
	case err != nil:
		r := failed(ReasonPortInUse, fmt.Sprintf("cannot listen on port %d: %v", port, err), true)
		return &r
	}
	_ = l.Close()
	return nil
}

// listening names a listening socket on port from /proc/net/tcp{,6}, which
// sees ports whatever address they are bound to.
func listening(port int) string {
	for _, file := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(Proc, "net", file))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			// sl local_address rem_address st ...; st 0A is LISTEN.
			if len(fields) < 4 || fields[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
				f.Close()
				return "a socket listens on " + file
			}
		}
		f.Close()
	}
	return ""
}
