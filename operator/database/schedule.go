package database

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

// cronParser reads schedules as a Kubernetes CronJob does: five fields or
// a descriptor such as @daily.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseSchedule reads a cron schedule in a time zone (empty: UTC).
func parseSchedule(schedule, timeZone string) (cron.Schedule, *time.Location, error) {
	loc := time.UTC
	if timeZone != "" {
		l, err := time.LoadLocation(timeZone)
		if err != nil {
			return nil, nil, fmt.Errorf("timeZone %q is not a known IANA time zone: %w", timeZone, err)
		}
		loc = l
	}
	s, err := cronParser.Parse(schedule)
	if err != nil {
		return nil, nil, fmt.Errorf("schedule %q: %w", schedule, err)
	}
	return s, loc, nil
}

// catchUpWindow bounds how far back missed schedules are looked for: one
// backup makes up for any number of them, so older ones do not matter.
const catchUpWindow = 366 * 24 * time.Hour

// lastDue is the most recent schedule time after last and not after now:
// whatever was missed since last (the operator down, say) gives one
// backup, not one per missed time.
func lastDue(s cron.Schedule, loc *time.Location, last, now time.Time) (time.Time, bool) {
	if start := now.Add(-catchUpWindow); last.Before(start) {
		last = start
	}
	var due time.Time
	for t := s.Next(last.In(loc)); !t.IsZero() && !t.After(now); t = s.Next(t) {
		due = t
	}
	return due, !due.IsZero()
}

// timesDue counts the schedule times after last and not after now (within
// the catch-up window).
func timesDue(s cron.Schedule, loc *time.Location, last, now time.Time) int64 {
	if start := now.Add(-catchUpWindow); last.Before(start) {
		last = start
	}
	var n int64
	for t := s.Next(last.In(loc)); !t.IsZero() && !t.After(now); t = s.Next(t) {
		n++
	}
	return n
}

// scheduleTimeLayout is how a scheduled backup's name carries the
// schedule time it was made for (UTC, to the minute, as cron's are).
const scheduleTimeLayout = "20060102-1504"

// ScheduledName is the name of the backup a schedule (prefix: the
// Database or the MySQLBackupSchedule) makes for the time at: the same for
// one time, so a pass that runs twice makes one backup.
func ScheduledName(prefix string, at time.Time) string {
	return prefix + "-" + at.UTC().Format(scheduleTimeLayout)
}

// LastMade is the schedule time missed times are counted from: last, the
// one the status records, or the time of the unfinished scheduled backup
// waiting when that is later. A waiting backup newer than the status says
// was made by a pass whose status write was lost (or this read of the
// status is older than the backup): its time was made, not missed, and
// counting from last would report it missed too, or take it for a time
// still to make. Every due time is then after the waiting backup's.
func LastMade(last time.Time, prefix, waiting string) time.Time {
	stamp, ok := strings.CutPrefix(waiting, prefix+"-")
	if !ok {
		return last
	}
	at, err := time.ParseInLocation(scheduleTimeLayout, stamp, time.UTC)
	if err != nil || !at.After(last) {
		return last
	}
	return at
}

// Unfinished names the first of backups that has neither completed nor
// failed and is not being deleted ("" when none). A schedule makes no
// new backup while one of its own is unfinished: that one stands for
// every time missed meanwhile, so an outage ends with one backup, not a
// burst of them.
func Unfinished(backups []*Backup) string {
	for _, b := range backups {
		finished := b.Status.Phase == dbv1.BackupCompleted || b.Status.Phase == dbv1.BackupFailed
		if !finished && b.DeletionTimestamp.IsZero() {
			return b.Name
		}
	}
	return ""
}

// backupRecord is what retention needs to know of one backup, whichever
// API made it.
type backupRecord struct {
	Name string
	// Finished: completed or failed. Pending and running backups are never
	// pruned.
	Finished, Completed bool
	// Time is when it finished; Created when it was made. Both have a
	// resolution of a second: backups finishing in the same second are
	// ordered by creation, then by name.
	Time, Created time.Time
	// InUse: a restore needs its file.
	InUse bool
}

// toPrune names the backups retention deletes: completed ones beyond the
// keepLast newest or older than maxAge, and failed ones that are older
// than maxAge or than the keepLast-th newest completed backup. The newest
// completed backup is always kept, and so is one in use.
func toPrune(backups []backupRecord, keepLast int32, maxAge time.Duration, now time.Time) []string {
	finished := make([]backupRecord, 0, len(backups))
	for _, b := range backups {
		if b.Finished {
			finished = append(finished, b)
		}
	}
	// Newest first. The list comes from a cache, in no set order, so ties
	// are broken by creation time and name, never by chance.
	slices.SortFunc(finished, func(a, b backupRecord) int {
		return cmp.Or(b.Time.Compare(a.Time), b.Created.Compare(a.Created), strings.Compare(b.Name, a.Name))
	})
	var out []string
	completed := int32(0)
	for _, b := range finished {
		tooOld := maxAge > 0 && now.Sub(b.Time) > maxAge
		beyondCount := keepLast > 0 && completed >= keepLast
		if b.Completed {
			completed++
			if completed == 1 {
				continue // the newest completed backup
			}
		}
		if !b.InUse && (tooOld || beyondCount) {
			out = append(out, b.Name)
		}
	}
	return out
}

// NextBackup reads a cron schedule (in UTC) and returns the most recent
// schedule time after last and not after now (ok false: none), and the
// next one after now. It is how every schedule, whichever API it is in,
// catches up: one backup for any number of missed times.
// missed counts the schedule times in (last, now].
func NextBackup(schedule string, last, now time.Time) (due time.Time, ok bool, missed int64, next time.Time, err error) {
	s, loc, err := parseSchedule(schedule, "")
	if err != nil {
		return time.Time{}, false, 0, time.Time{}, err
	}
	due, ok = lastDue(s, loc, last, now)
	return due, ok, timesDue(s, loc, last, now), s.Next(now.In(loc)), nil
}
