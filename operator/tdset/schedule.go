package tdset

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
)

// window is one parsed schedule window, in minutes of the local day.
type window struct {
	index    int
	start    int // 0..1439
	end      int // 0..1440; end <= start wraps past midnight
	replicas int32
	days     map[time.Weekday]bool // nil: every day
}

// Schedule is a TDSet's windows in its time zone.
type Schedule struct {
	windows  []window
	fallback int32
	loc      *time.Location
}

// Decision is what the schedule asks for at one instant.
type Decision struct {
	// Replicas is the count in force: the highest of the active windows, or
	// the default when none is active.
	Replicas int32
	// Window is the index of the window that set Replicas, -1 for the default.
	Window int
	// Next is the next instant Replicas changes; zero when it never does.
	Next time.Time
	// NextReplicas is the count from Next on.
	NextReplicas int32
}

var weekdays = map[schedulev1.Weekday]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// NewSchedule parses a spec; its error names what is wrong (admission has
// already rejected malformed times, so this is mostly the time zone).
func NewSchedule(spec schedulev1.TDSetSpec) (*Schedule, error) {
	zone := spec.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q: use an IANA name such as Europe/Berlin", zone)
	}
	s := &Schedule{fallback: spec.DefaultReplica, loc: loc}
	for i, w := range spec.SchedulingConfig {
		start, err := minuteOfDay(w.StartTime, false)
		if err != nil {
			return nil, fmt.Errorf("window %d startTime: %w", i, err)
		}
		end, err := minuteOfDay(w.EndTime, true)
		if err != nil {
			return nil, fmt.Errorf("window %d endTime: %w", i, err)
		}
		if start == end {
			return nil, fmt.Errorf("window %d: startTime and endTime are equal", i)
		}
		parsed := window{index: i, start: start, end: end, replicas: w.Replica}
		for _, d := range w.Days {
			wd, ok := weekdays[d]
			if !ok {
				return nil, fmt.Errorf("window %d: unknown day %q", i, d)
			}
			if parsed.days == nil {
				parsed.days = map[time.Weekday]bool{}
			}
			parsed.days[wd] = true
		}
		s.windows = append(s.windows, parsed)
	}
	return s, nil
}

// minuteOfDay reads an hour (0-23) or "HH:MM"; "24:00" only as an end.
func minuteOfDay(v intstr.IntOrString, isEnd bool) (int, error) {
	if v.Type == intstr.Int {
		if v.IntVal < 0 || v.IntVal > 23 {
			return 0, fmt.Errorf("hour %d is not in 0-23", v.IntVal)
		}
		return int(v.IntVal) * 60, nil
	}
	h, m, ok := strings.Cut(v.StrVal, ":")
	hour, err1 := strconv.Atoi(h)
	minute, err2 := strconv.Atoi(m)
	switch {
	// Atoi takes a sign ("-1", "+2"): admission allows digits only.
	case !ok || err1 != nil || err2 != nil || !twoDigits(h) || !twoDigits(m):
		return 0, fmt.Errorf("%q is not HH:MM", v.StrVal)
	case isEnd && hour == 24 && minute == 0:
		return 24 * 60, nil
	case hour > 23 || minute > 59:
		return 0, fmt.Errorf("%q is not a time of day", v.StrVal)
	}
	return hour*60 + minute, nil
}

func twoDigits(s string) bool {
	return len(s) == 2 && s[0] >= '0' && s[0] <= '9' && s[1] >= '0' && s[1] <= '9'
}

// covers reports whether the window is in force at local wall time
// (weekday, minute of day).
func (w window) covers(day time.Weekday, minute int) bool {
	onDay := func(d time.Weekday) bool { return w.days == nil || w.days[d] }
	if w.start < w.end {
		return onDay(day) && minute >= w.start && minute < w.end
	}
	// Wraps past midnight: the evening part belongs to today, the morning
	// part to the window that started yesterday.
	return (onDay(day) && minute >= w.start) || (onDay((day+6)%7) && minute < w.end)
}

// at is the replica count and deciding window at instant t.
func (s *Schedule) at(t time.Time) (int32, int) {
	local := t.In(s.loc)
	minute := local.Hour()*60 + local.Minute()
	replicas, from := s.fallback, -1
	for _, w := range s.windows {
		if w.covers(local.Weekday(), minute) && (from == -1 || w.replicas > replicas) {
			replicas, from = w.replicas, w.index
		}
	}
	return replicas, from
}

// Decide is what the schedule asks for at now, and when that changes.
func (s *Schedule) Decide(now time.Time) Decision {
	replicas, from := s.at(now)
	d := Decision{Replicas: replicas, Window: from}
	for _, c := range s.boundariesAfter(now) {
		if r, _ := s.at(c); r != replicas {
			d.Next, d.NextReplicas = c.UTC(), r
			break
		}
	}
	return d
}

// boundariesAfter lists, in order, every instant within the next 8 days
// at which the wall clock crosses a window edge or jumps (daylight saving):
// the only instants where the replica count can change.
func (s *Schedule) boundariesAfter(now time.Time) []time.Time {
	local := now.In(s.loc)
	edges := map[int]bool{}
	for _, w := range s.windows {
		edges[w.start] = true
		edges[w.end%1440] = true
	}
	seen := map[int64]bool{}
	var out []time.Time
	add := func(t time.Time) {
		if t.After(now) && !seen[t.UnixNano()] {
			seen[t.UnixNano()] = true
			out = append(out, t)
		}
	}
	for day := 0; day <= 8; day++ {
		y, m, d := local.AddDate(0, 0, day).Date()
		for edge := range edges {
			t := time.Date(y, m, d, edge/60, edge%60, 0, 0, s.loc)
			add(t)
			// In a repeated (autumn) hour the same wall time occurs twice.
			for _, other := range []time.Time{t.Add(-time.Hour), t.Add(time.Hour)} {
				if l := other.In(s.loc); l.Hour()*60+l.Minute() == edge && l.Day() == d {
					add(other)
				}
			}
		}
		// The instant the clocks change, if that day has one.
		midnight := time.Date(y, m, d, 0, 0, 0, 0, s.loc)
		if _, end := midnight.ZoneBounds(); !end.IsZero() && end.Before(midnight.Add(24*time.Hour)) {
			add(end)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// Overlaps lists pairs of windows that can be in force at the same time.
func (s *Schedule) Overlaps() [][2]int {
	spans := make([][][2]int, len(s.windows))
	for i, w := range s.windows {
		spans[i] = w.weekSpans()
	}
	var out [][2]int
	for i := range s.windows {
		for j := i + 1; j < len(s.windows); j++ {
			if spansOverlap(spans[i], spans[j]) {
				out = append(out, [2]int{s.windows[i].index, s.windows[j].index})
			}
		}
	}
	return out
}

// overlap compares the windows' spans within a week: a few interval
// intersections instead of a walk over the week's 10,080 minutes.
func overlap(a, b window) bool { return spansOverlap(a.weekSpans(), b.weekSpans()) }

func spansOverlap(a, b [][2]int) bool {
	for _, x := range a {
		for _, y := range b {
			if x[0] < y[1] && y[0] < x[1] {
				return true
			}
		}
	}
	return false
}

const minutesPerWeek = 7 * 1440

// weekSpans are the half-open minute-of-week intervals the window covers;
// a window wrapping past Saturday midnight is split in two.
func (w window) weekSpans() [][2]int {
	var spans [][2]int
	for day := time.Sunday; day <= time.Saturday; day++ {
		if w.days != nil && !w.days[day] {
			continue
		}
		start, end := int(day)*1440+w.start, int(day)*1440+w.end
		if w.end <= w.start {
			end += 1440
		}
		if end <= minutesPerWeek {
			spans = append(spans, [2]int{start, end})
			continue
		}
		spans = append(spans, [2]int{start, minutesPerWeek}, [2]int{0, end - minutesPerWeek})
	}
	return spans
}

// Describe renders a window as people write it, for events and messages.
func (s *Schedule) Describe(index int) string {
	if index < 0 || index >= len(s.windows) {
		return "defaultReplica"
	}
	w := s.windows[index]
	return fmt.Sprintf("schedulingConfig[%d] (%02d:%02d-%02d:%02d)", index, w.start/60, w.start%60, w.end/60, w.end%60)
}
