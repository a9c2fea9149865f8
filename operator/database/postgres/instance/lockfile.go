package instance

import (
	"os"
	"strconv"
	"strings"
)

// LockFile is what a PostgreSQL server writes into postmaster.pid and
// into each Unix socket's lock file, which share a layout: its PID on the
// first line, its port on the fourth and, in postmaster.pid, its state on
// the eighth ("ready" once it accepts connections, as pg_ctl -w reads
// it). A line the file lacks or that does not parse stays zero.
type LockFile struct {
	PID          int
	Port, Status string
}

// ReadLockFile reads the lock file at path; the error is the read's.
func ReadLockFile(path string) (LockFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return LockFile{}, err
	}
	lines := strings.Split(string(b), "\n")
	line := func(n int) string {
		if n < len(lines) {
			return strings.TrimSpace(lines[n])
		}
		return ""
	}
	var l LockFile
	if pid, err := strconv.Atoi(line(0)); err == nil && pid > 0 {
		l.PID = pid
	}
	l.Port, l.Status = line(3), line(7)
	return l, nil
}

// Runs: the process the file names is alive. A server killed with
// SIGKILL leaves its files behind, naming a dead process (or, once PIDs
// wrap, an unrelated one).
func (l LockFile) Runs() bool { return l.PID > 0 && processAlive(l.PID) }
