package engine

import "time"

// CloneReporter is an engine whose standbys start by cloning the primary
// with a tool that cannot resume (pg_basebackup), and whose server
// container logs the clone's progress while it runs. The operator reads
// the end of a standby's log while the standby is not ready, to show in
// the cluster's status and Events how far a clone has got: on a large
// primary it is the step a user waits on for hours.
type CloneReporter interface {
	// CloneProgress reads the end of a server container's log. ok: the
	// log says a clone is under way (progress is zero until its first
	// progress line); false: no clone runs, or it ended.
	CloneProgress(log string) (progress CloneProgress, ok bool)
}

// CloneProgress is how far a clone has got, as its last progress line
// said.
type CloneProgress struct {
	// CopiedBytes of TotalBytes (the tool's estimate of the primary's
	// size, which may grow while it copies).
	CopiedBytes, TotalBytes int64
	// At is when the line was logged (zero before the first).
	At time.Time
}
