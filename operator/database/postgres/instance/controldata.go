package instance

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// shutdownCheckpoint is the location of the stopped server's shutdown
// checkpoint, read with pg_controldata: the last WAL record a cleanly
// stopped primary wrote. A standby that has replayed up to it holds every
// transaction the primary committed (a switchover promotes it only then).
// 0 when the server was not stopped cleanly (or pg_controldata failed).
func (a *Agent) shutdownCheckpoint(ctx context.Context) LSN {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	controldata := "pg_controldata"
	if dir := filepath.Dir(a.cfg.PgCtl); dir != "." {
		controldata = filepath.Join(dir, controldata)
	}
	out, err := exec.CommandContext(ctx, controldata, "-D", a.cfg.DataDir).Output()
	if err != nil {
		a.cfg.Log.Warn("pg_controldata failed", "pod", a.cfg.Pod, "error", err.Error())
		return 0
	}
	return parseShutdownCheckpoint(string(out))
}

// parseShutdownCheckpoint reads pg_controldata's output (the C locale's
// labels): the latest checkpoint's location when the cluster state is
// "shut down".
func parseShutdownCheckpoint(out string) LSN {
	var state, location string
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		label, value, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(label) {
		case "Database cluster state":
			state = strings.TrimSpace(value)
		case "Latest checkpoint location":
			location = strings.TrimSpace(value)
		}
	}
	if state != "shut down" {
		return 0
	}
	lsn, err := ParseLSN(location)
	if err != nil {
		return 0
	}
	return lsn
}
