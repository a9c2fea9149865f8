package tdset

import (
	"regexp"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
)

// The patterns the CRD's CEL rules admit (operator/apis/schedule/v1): the
// parser must accept exactly what admission accepts, no more.
var (
	admittedStart = regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9]$`)
	admittedEnd   = regexp.MustCompile(`^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$`)
)

var fuzzZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham"}

// FuzzSchedule feeds the parser arbitrary times and checks what a user
// relies on: admission and the parser agree; a decision's replica count
// comes from a window or the default; nothing changes between now and
// Next; at Next the count is NextReplicas.
func FuzzSchedule(f *testing.F) {
	f.Add("22:00", "06:00", int32(3), uint8(0), int32(1), uint8(1), int64(1_700_000_000))
	f.Add("09:00", "24:00", int32(5), uint8(0b0111110), int32(0), uint8(2), int64(1_711_846_800)) // DST day in New York
	f.Add("-1:00", "+2:00", int32(1), uint8(0), int32(0), uint8(0), int64(0))
	f.Add("02:30", "03:30", int32(2), uint8(0), int32(0), uint8(1), int64(1_711_846_800)) // skipped hour in Berlin
	f.Fuzz(func(t *testing.T, start, end string, replicas int32, days uint8, fallback int32, zone uint8, unix int64) {
		spec := schedulev1.TDSetSpec{
			DefaultReplica: fallback,
			TimeZone:       fuzzZones[int(zone)%len(fuzzZones)],
			SchedulingConfig: []schedulev1.Scheduling{{
				StartTime: intstr.FromString(start), EndTime: intstr.FromString(end),
				Replica: replicas, Days: fuzzDays(days),
			}},
		}
		s, err := NewSchedule(spec)
		// Admission compares the two times in minutes: "00:00" to "24:00"
		// is a whole day, not an empty window.
		admitted := admittedStart.MatchString(start) && admittedEnd.MatchString(end) && minuteOf(start) != minuteOf(end)
		if err == nil && !admitted {
			t.Fatalf("parser accepted start %q end %q, which admission refuses", start, end)
		}
		if err != nil {
			if admitted {
				t.Fatalf("parser refused start %q end %q, which admission accepts: %v", start, end, err)
			}
			return
		}
		now := time.Unix(unix%(1<<34), 0) // years 1970-2514
		d := s.Decide(now)
		if d.Replicas != fallback && d.Replicas != replicas {
			t.Fatalf("decision %d is neither the window's %d nor the default %d", d.Replicas, replicas, fallback)
		}
		if d.Next.IsZero() {
			return
		}
		if !d.Next.After(now) || d.Next.Sub(now) > 8*24*time.Hour {
			t.Fatalf("next change %v is not within 8 days after %v", d.Next, now)
		}
		if mid := now.Add(d.Next.Sub(now) / 2); s.Decide(mid).Replicas != d.Replicas {
			t.Fatalf("replicas changed at %v, before the announced change at %v", mid, d.Next)
		}
		if at := s.Decide(d.Next); at.Replicas != d.NextReplicas {
			t.Fatalf("at %v replicas are %d, announced %d", d.Next, at.Replicas, d.NextReplicas)
		}
	})
}

func fuzzDays(mask uint8) []schedulev1.Weekday {
	names := []schedulev1.Weekday{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	var out []schedulev1.Weekday
	for i, n := range names {
		if mask&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// minuteOf reads an admitted "HH:MM".
func minuteOf(v string) int {
	return int(v[0]-'0')*600 + int(v[1]-'0')*60 + int(v[3]-'0')*10 + int(v[4]-'0')
}
