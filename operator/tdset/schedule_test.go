package tdset

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
)

// seedSpec is seed 001's example, read from the file users apply.
func seedSpec(t *testing.T) schedulev1.TDSetSpec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "tdset.yaml"))
	require.NoError(t, err)
	var td schedulev1.TDSet
	require.NoError(t, yaml.UnmarshalStrict(b, &td))
	return td.Spec
}

func mustSchedule(t *testing.T, spec schedulev1.TDSetSpec) *Schedule {
	t.Helper()
	s, err := NewSchedule(spec)
	require.NoError(t, err)
	return s
}

func hours(start, end, replicas int) schedulev1.Scheduling {
	return schedulev1.Scheduling{StartTime: intstr.FromInt32(int32(start)), EndTime: intstr.FromInt32(int32(end)), Replica: int32(replicas)}
}

func clock(start, end string, replicas int, days ...schedulev1.Weekday) schedulev1.Scheduling {
	return schedulev1.Scheduling{StartTime: intstr.FromString(start), EndTime: intstr.FromString(end), Replica: int32(replicas), Days: days}
}

func TestSeedExampleAtEveryHourGivesTheSeedsTable(t *testing.T) {
	s := mustSchedule(t, seedSpec(t))
	want := map[int]int32{}
	for h := 0; h < 24; h++ {
		switch {
		case h >= 9 && h < 17:
			want[h] = 5
		case h >= 17 && h < 19:
			want[h] = 3
		case h >= 19:
			want[h] = 2 // 19 -> 0 wraps: 19:00-24:00
		case h < 1:
			want[h] = 3 // no window: defaultReplica
		case h < 7:
			want[h] = 2
		default:
			want[h] = 3
		}
	}
	day := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	for h := 0; h < 24; h++ {
		for _, m := range []int{0, 30, 59} {
			at := day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
			assert.Equal(t, want[h], s.Decide(at).Replicas, "at %s", at.Format("15:04"))
		}
	}
	assert.Empty(t, s.Overlaps(), "the seed's windows do not overlap")
}

func TestNextTransitionIsTheNextChange(t *testing.T) {
	s := mustSchedule(t, seedSpec(t))
	d := s.Decide(time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC))
	assert.Equal(t, int32(5), d.Replicas)
	assert.Equal(t, 0, d.Window)
	assert.Equal(t, time.Date(2026, 11, 22, 17, 0, 0, 0, time.UTC), d.Next)
	assert.Equal(t, int32(3), d.NextReplicas)

	// 19:00-24:00 (2) then the default (3) at midnight, then 2 again at 01:00.
	d = s.Decide(time.Date(2026, 11, 22, 23, 59, 59, 0, time.UTC))
	assert.Equal(t, time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), d.Next)
	assert.Equal(t, int32(3), d.NextReplicas)

	// 1-7 (2) and 19-0 (2) never differ at 19:00 -> skip to the next real change.
	d = s.Decide(time.Date(2026, 11, 22, 18, 0, 0, 0, time.UTC))
	assert.Equal(t, time.Date(2026, 11, 22, 19, 0, 0, 0, time.UTC), d.Next)
	assert.Equal(t, int32(2), d.NextReplicas)
}

func TestConstantScheduleHasNoNextTransition(t *testing.T) {
	s := mustSchedule(t, schedulev1.TDSetSpec{DefaultReplica: 2, SchedulingConfig: []schedulev1.Scheduling{clock("00:00", "24:00", 2)}})
	assert.True(t, s.Decide(time.Now()).Next.IsZero())
}

func TestWrapAroundAndMinutes(t *testing.T) {
	s := mustSchedule(t, schedulev1.TDSetSpec{DefaultReplica: 1, SchedulingConfig: []schedulev1.Scheduling{clock("22:30", "06:15", 4)}})
	at := func(h, m int) int32 { return s.Decide(time.Date(2026, 3, 4, h, m, 0, 0, time.UTC)).Replicas }
	assert.Equal(t, int32(1), at(22, 29))
	assert.Equal(t, int32(4), at(22, 30))
	assert.Equal(t, int32(4), at(0, 0))
	assert.Equal(t, int32(4), at(6, 14))
	assert.Equal(t, int32(1), at(6, 15))
	assert.Equal(t, int32(1), at(12, 0))
}

func TestEndOfDayAs2400(t *testing.T) {
	s := mustSchedule(t, schedulev1.TDSetSpec{DefaultReplica: 0, SchedulingConfig: []schedulev1.Scheduling{clock("23:00", "24:00", 7)}})
	assert.Equal(t, int32(7), s.Decide(time.Date(2026, 3, 4, 23, 59, 0, 0, time.UTC)).Replicas, "23:00-24:00 is schedulable")
	assert.Equal(t, int32(0), s.Decide(time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)).Replicas, "defaultReplica may be 0")
}

func TestWeekdays(t *testing.T) {
	s := mustSchedule(t, schedulev1.TDSetSpec{DefaultReplica: 1, SchedulingConfig: []schedulev1.Scheduling{
		clock("09:00", "17:00", 5, "Mon", "Tue", "Wed", "Thu", "Fri"),
		clock("22:00", "02:00", 3, "Fri"),
	}})
	friday := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	require.Equal(t, time.Friday, friday.Weekday())
	assert.Equal(t, int32(5), s.Decide(friday.Add(10*time.Hour)).Replicas)
	assert.Equal(t, int32(1), s.Decide(friday.Add(24*time.Hour+10*time.Hour)).Replicas, "Saturday is not a weekday")
	assert.Equal(t, int32(3), s.Decide(friday.Add(23*time.Hour)).Replicas)
	assert.Equal(t, int32(3), s.Decide(friday.Add(25*time.Hour)).Replicas, "Friday's night window runs into Saturday")
	assert.Equal(t, int32(1), s.Decide(friday.Add(-time.Hour)).Replicas, "Thursday night has no window")
	// The weekend: next change is Monday 09:00.
	d := s.Decide(friday.Add(30 * time.Hour))
	assert.Equal(t, time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC), d.Next)
}

func TestTimeZone(t *testing.T) {
	spec := schedulev1.TDSetSpec{DefaultReplica: 1, TimeZone: "Asia/Tokyo", SchedulingConfig: []schedulev1.Scheduling{hours(9, 17, 5)}}
	s := mustSchedule(t, spec)
	// 09:00 in Tokyo is 00:00 UTC.
	assert.Equal(t, int32(5), s.Decide(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)).Replicas)
	assert.Equal(t, int32(1), s.Decide(time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)).Replicas)

	_, err := NewSchedule(schedulev1.TDSetSpec{TimeZone: "Mars/Olympus_Mons"})
	require.ErrorContains(t, err, `unknown time zone "Mars/Olympus_Mons"`)
}

func TestDaylightSavingInBerlin(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	spec := schedulev1.TDSetSpec{DefaultReplica: 1, TimeZone: "Europe/Berlin", SchedulingConfig: []schedulev1.Scheduling{clock("02:30", "04:00", 6)}}
	s := mustSchedule(t, spec)

	// Spring forward, 2026-03-29: 02:00 CET jumps to 03:00 CEST. 02:30 never
	// happens, so the window starts when the clocks jump.
	jump := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC) // 02:00 CET == 03:00 CEST
	d := s.Decide(jump.Add(-time.Minute))
	assert.Equal(t, int32(1), d.Replicas)
	assert.Equal(t, jump, d.Next, "a window starting in the skipped hour starts at the jump")
	assert.Equal(t, int32(6), s.Decide(jump).Replicas)
	assert.Equal(t, "03:00", jump.In(berlin).Format("15:04"))

	// Fall back, 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens
	// twice. The window follows the wall clock: it starts at the first 02:30
	// and is in force during both.
	first := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)  // 02:30 CEST
	second := time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC) // 02:30 CET
	assert.Equal(t, "02:30", first.In(berlin).Format("15:04"))
	assert.Equal(t, "02:30", second.In(berlin).Format("15:04"))
	assert.Equal(t, first, s.Decide(first.Add(-time.Minute)).Next)
	assert.Equal(t, int32(6), s.Decide(first).Replicas)
	assert.Equal(t, int32(6), s.Decide(second).Replicas)
	// Between the jump back (01:00 UTC, wall 02:00) and the second 02:30 the
	// wall clock is before 02:30 again: the default applies for that half hour.
	assert.Equal(t, int32(1), s.Decide(time.Date(2026, 10, 25, 1, 10, 0, 0, time.UTC)).Replicas)
	assert.Equal(t, second, s.Decide(time.Date(2026, 10, 25, 1, 10, 0, 0, time.UTC)).Next)
}

func TestOverlapsResolveToTheHighestCount(t *testing.T) {
	s := mustSchedule(t, schedulev1.TDSetSpec{DefaultReplica: 1, SchedulingConfig: []schedulev1.Scheduling{
		hours(8, 12, 2), hours(10, 14, 6), hours(20, 22, 1), clock("23:00", "01:00", 3, "Sun"), hours(0, 2, 4),
	}})
	assert.Equal(t, [][2]int{{0, 1}, {3, 4}}, s.Overlaps())
	d := s.Decide(time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC))
	assert.Equal(t, int32(6), d.Replicas)
	assert.Equal(t, 1, d.Window)
	assert.Equal(t, "schedulingConfig[1] (10:00-14:00)", s.Describe(d.Window))
}

// overlapByMinute is the plain definition of an overlap: some minute of
// the week where both windows are in force.
func overlapByMinute(a, b window) bool {
	for day := time.Sunday; day <= time.Saturday; day++ {
		for minute := 0; minute < 1440; minute++ {
			if a.covers(day, minute) && b.covers(day, minute) {
				return true
			}
		}
	}
	return false
}

func TestOverlapAgreesWithTheMinuteByMinuteDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randomWindow := func() window {
		w := window{start: rng.IntN(1440), end: rng.IntN(1441)}
		if w.end == w.start {
			w.end = (w.start + 1 + rng.IntN(1439)) % 1441
		}
		if rng.IntN(2) == 0 {
			w.days = map[time.Weekday]bool{}
			for range 1 + rng.IntN(3) {
				w.days[time.Weekday(rng.IntN(7))] = true
			}
		}
		return w
	}
	for i := range 2000 {
		a, b := randomWindow(), randomWindow()
		require.Equal(t, overlapByMinute(a, b), overlap(a, b), "case %d: %+v and %+v", i, a, b)
	}
	// Edges: touching windows do not overlap; Saturday night wraps into Sunday.
	sat := map[time.Weekday]bool{time.Saturday: true}
	sun := map[time.Weekday]bool{time.Sunday: true}
	assert.False(t, overlap(window{start: 480, end: 720}, window{start: 720, end: 900}))
	assert.True(t, overlap(window{start: 1380, end: 60, days: sat}, window{start: 0, end: 30, days: sun}))
	assert.False(t, overlap(window{start: 1380, end: 60, days: sat}, window{start: 60, end: 120, days: sun}))
}

func BenchmarkOverlaps(b *testing.B) {
	windows := make([]schedulev1.Scheduling, 0, 12)
	for h := range 12 {
		windows = append(windows, hours(h*2, (h*2+3)%24, h+1))
	}
	s, err := NewSchedule(schedulev1.TDSetSpec{DefaultReplica: 1, SchedulingConfig: windows})
	require.NoError(b, err)
	b.Run("intervals", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Overlaps()
		}
	})
	// The check as it was, every minute of the week per pair: the number
	// the intervals are compared with.
	b.Run("minute-by-minute", func(b *testing.B) {
		for b.Loop() {
			for i := range s.windows {
				for j := i + 1; j < len(s.windows); j++ {
					overlapByMinute(s.windows[i], s.windows[j])
				}
			}
		}
	})
}
