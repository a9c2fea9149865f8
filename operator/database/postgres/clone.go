package postgres

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

var _ engine.CloneReporter = Engine{}

// The lines bootstrap.sh logs (lib.sh's log: "<UTC time> bootstrap:
// <message>") around a standby's first clone.
var (
	bootstrapLine = regexp.MustCompile(`^(\S+) bootstrap: (.*)$`)
	cloneProgress = regexp.MustCompile(`^clone progress: (\d+) of (\d+) kB$`)
)

// cloneStarted, cloneWaiting: the clone begins, or waits for the primary
// (or makes its slot) before pg_basebackup starts; any other line of
// bootstrap.sh's after them says the clone ended (finished or failed).
func cloneStarted(msg string) bool { return strings.Contains(msg, "cloning the primary into") }

func cloneWaiting(msg string) bool {
	return strings.HasPrefix(msg, "waiting for the primary at ") || strings.HasPrefix(msg, "replication slot ")
}

// CloneProgress reads the end of a server container's log: a clone is
// under way when bootstrap.sh's last line about it is its start, a wait
// for the primary, or a "clone progress" line (which bootstrap.sh logs
// every CLONE_PROGRESS_SECONDS while pg_basebackup runs).
func (Engine) CloneProgress(log string) (engine.CloneProgress, bool) {
	var p engine.CloneProgress
	cloning := false
	for _, line := range strings.Split(log, "\n") {
		m := bootstrapLine.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil {
			continue // the server's or pg_basebackup's own lines
		}
		at, msg := m[1], m[2]
		switch {
		case cloneStarted(msg):
			cloning, p = true, engine.CloneProgress{}
		case cloneProgress.MatchString(msg):
			kb := cloneProgress.FindStringSubmatch(msg)
			done, _ := strconv.ParseInt(kb[1], 10, 64)
			total, _ := strconv.ParseInt(kb[2], 10, 64)
			when, _ := time.Parse(time.RFC3339, at)
			cloning, p = true, engine.CloneProgress{CopiedBytes: done << 10, TotalBytes: total << 10, At: when}
		case cloneWaiting(msg):
		default:
			cloning, p = false, engine.CloneProgress{}
		}
	}
	return p, cloning
}
