package failover_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/operator/database/failover"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

const mb = 1 << 20

// standby is a healthy standby's observation on timeline 1, replayed to
// replay (received as far), streaming or not.
func standby(pod string, replay uint64, streaming bool) failover.Observation {
	return failover.Observation{Pod: pod, Status: &instance.Status{
		Pod: pod, ServerUp: true, Role: instance.RoleStandby, Timeline: 1,
		ReplayLSN: instance.LSN(replay), ReceiveLSN: instance.LSN(replay), Streaming: streaming,
	}}
}

func primary(pod string) failover.Observation {
	return failover.Observation{Pod: pod, PodReady: true, Status: &instance.Status{Pod: pod, ServerUp: true, Role: instance.RolePrimary, Timeline: 1, CurrentLSN: 100 * mb}}
}

func with(o failover.Observation, change func(*instance.Status)) failover.Observation {
	st := *o.Status
	change(&st)
	o.Status = &st
	return o
}

func TestChooseStandby(t *testing.T) {
	gone := failover.Observation{Pod: "db-0"} // unreachable
	for _, c := range []struct {
		name      string
		instances []failover.Observation
		maxLag    uint64
		want      string
		err       error
	}{
		{
			name:      "the most advanced replay position wins when the primary is gone (nobody streams)",
			instances: []failover.Observation{gone, standby("db-1", 50*mb, false), standby("db-2", 60*mb, false), standby("db-3", 55*mb, false)},
			want:      "db-2",
		},
		{
			name:      "a streaming standby is preferred within the bound",
			instances: []failover.Observation{primary("db-0"), standby("db-1", 60*mb, false), standby("db-2", 59*mb, true)},
			want:      "db-2",
		},
		{
			name:      "a streaming standby behind by more than the bound is never promoted while a better one exists",
			instances: []failover.Observation{primary("db-0"), standby("db-1", 60*mb, false), standby("db-2", 40*mb, true)},
			want:      "db-1",
		},
		{
			name:      "the bound is a parameter",
			instances: []failover.Observation{primary("db-0"), standby("db-1", 60*mb, false), standby("db-2", 40*mb, true)},
			maxLag:    32 * mb,
			want:      "db-2",
		},
		{
			name: "received WAL breaks a tie of replay positions, then the name",
			instances: []failover.Observation{gone, standby("db-3", 60*mb, false),
				with(standby("db-2", 60*mb, false), func(s *instance.Status) { s.ReceiveLSN = 61 * mb }), standby("db-1", 60*mb, false)},
			want: "db-2",
		},
		{
			name:      "equal standbys: the first name, every time",
			instances: []failover.Observation{gone, standby("db-2", 60*mb, false), standby("db-1", 60*mb, false)},
			want:      "db-1",
		},
		{
			name: "unreachable, down, fenced and position-less standbys are not healthy",
			instances: []failover.Observation{gone,
				{Pod: "db-1"},
				with(standby("db-2", 90*mb, false), func(s *instance.Status) { s.ServerUp, s.Role = false, instance.RoleUnknown }),
				with(standby("db-3", 90*mb, false), func(s *instance.Status) { s.Fenced = true }),
				with(standby("db-4", 0, false), func(s *instance.Status) {}),
				standby("db-5", 10*mb, false)},
			want: "db-5",
		},
		{
			name: "a standby left on an older timeline is not compared with the newer",
			instances: []failover.Observation{gone,
				with(standby("db-1", 90*mb, false), func(s *instance.Status) { s.Timeline = 1 }),
				with(standby("db-2", 20*mb, false), func(s *instance.Status) { s.Timeline = 2 })},
			want: "db-2",
		},
		{
			name:      "no healthy standby: nothing is promoted",
			instances: []failover.Observation{gone, {Pod: "db-1"}, with(standby("db-2", 90*mb, false), func(s *instance.Status) { s.Fenced = true })},
			err:       failover.ErrNoHealthyStandby,
		},
		{
			name:      "a primary alone: nothing to promote",
			instances: []failover.Observation{gone},
			err:       failover.ErrNoHealthyStandby,
		},
		{
			name: "two other primaries: nothing is promoted",
			instances: []failover.Observation{gone, with(primary("db-1"), func(*instance.Status) {}), with(primary("db-2"), func(*instance.Status) {}),
				standby("db-3", 90*mb, false)},
			err: failover.ErrSeveralPrimaries,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := failover.ChooseStandby("db-0", c.instances, c.maxLag)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got.Pod, got.Reason)
			assert.False(t, got.AlreadyPrimary)
		})
	}
}

// An operator that promoted a standby and stopped before it recorded so
// finds it a primary: it is chosen as it is, never a second one.
func TestChooseStandbyFindsAnEarlierPromotion(t *testing.T) {
	promoted := with(primary("db-2"), func(s *instance.Status) { s.Timeline = 2 })
	got, err := failover.ChooseStandby("db-0", []failover.Observation{{Pod: "db-0"}, standby("db-1", 90*mb, false), promoted}, 0)
	require.NoError(t, err)
	assert.Equal(t, "db-2", got.Pod)
	assert.True(t, got.AlreadyPrimary)

	// A fenced old primary that still says primary is not it.
	fenced := with(primary("db-3"), func(s *instance.Status) { s.Fenced = true })
	got, err = failover.ChooseStandby("db-0", []failover.Observation{{Pod: "db-0"}, standby("db-1", 90*mb, false), fenced}, 0)
	require.NoError(t, err)
	assert.Equal(t, "db-1", got.Pod)
	assert.False(t, got.AlreadyPrimary)
}

func TestChooseStandbySaysHowFarBehind(t *testing.T) {
	got, err := failover.ChooseStandby("db-0", []failover.Observation{primary("db-0"), standby("db-1", 60*mb, false), standby("db-2", 59*mb, true)}, 0)
	require.NoError(t, err)
	assert.Equal(t, uint64(mb), got.Behind)
	assert.Contains(t, got.Reason, "streaming from the primary")
}

func TestPrimaryGone(t *testing.T) {
	start := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	seen := start.Add(time.Minute) // last healthy
	down := failover.Observation{Pod: "db-0"}
	notReady := primary("db-0")
	notReady.PodReady = false
	fenced := with(primary("db-0"), func(s *instance.Status) { s.Fenced = true })
	demoted := with(primary("db-0"), func(s *instance.Status) { s.Role = instance.RoleStandby })
	// Its WAL not flushed for WALFlushStallAfter: its disk takes no
	// writes, though it answers; a shorter wait is a busy disk.
	stalled := with(primary("db-0"), func(s *instance.Status) {
		s.Time = seen
		s.WALFlushStalledSince = ptr.To(seen.Add(-instance.WALFlushStallAfter))
	})
	slowFlush := with(primary("db-0"), func(s *instance.Status) {
		s.Time = seen
		s.WALFlushStalledSince = ptr.To(seen.Add(-instance.WALFlushStallAfter + time.Millisecond))
	})
	bound := failover.DefaultPrimaryGoneAfter
	assert.True(t, failover.PrimaryHealthy(slowFlush), "a flush waited for less than the stall bound")
	assert.False(t, failover.PrimaryHealthy(stalled), "a WAL flush stalled")
	stalledNotReady := stalled
	stalledNotReady.PodReady = false
	assert.Equal(t, bound, failover.GoneAfter(stalledNotReady, 0), "a stalled server is not one back as the primary: the bound, not twice it")

	assert.False(t, failover.PrimaryGone(primary("db-0"), seen, start, seen.Add(time.Hour), 0), "a healthy primary is never gone")
	for name, o := range map[string]failover.Observation{"unreachable": down, "fenced": fenced, "not a primary": demoted, "WAL flush stalled": stalled} {
		assert.False(t, failover.PrimaryGone(o, seen, start, seen.Add(bound), 0), "%s: not past the bound", name)
		assert.True(t, failover.PrimaryGone(o, seen, start, seen.Add(bound+time.Millisecond), 0), "%s: past the bound", name)
	}
	// Its server back up as a primary, its pod not ready yet (a restarted
	// container): fencing it now could lose writes it already took.
	assert.False(t, failover.PrimaryGone(notReady, seen, start, seen.Add(bound+time.Millisecond), 0), "a server back as the primary: not past twice the bound")
	assert.False(t, failover.PrimaryGone(notReady, seen, start, seen.Add(2*bound), 0))
	assert.True(t, failover.PrimaryGone(notReady, seen, start, seen.Add(2*bound+time.Millisecond), 0), "one that never becomes ready is failed over")
	// A standby just promoted, up as the primary, whose pod still names
	// the old primary (the kubelet has not refreshed its mount): its
	// readiness waits on that refresh, which any other standby would wait
	// for too; it is failed over only after NameWait.
	promoted := with(primary("db-1"), func(s *instance.Status) { s.NamedPrimary = "db-0" })
	promoted.PodReady = false
	assert.False(t, failover.PrimaryGone(promoted, seen, start, seen.Add(2*bound+time.Millisecond), 0), "waiting for its name: not past twice the bound")
	assert.False(t, failover.PrimaryGone(promoted, seen, start, seen.Add(failover.NameWait), 0))
	assert.True(t, failover.PrimaryGone(promoted, seen, start, seen.Add(failover.NameWait+time.Millisecond), 0), "a name that never comes: failed over")
	named := with(primary("db-1"), func(s *instance.Status) { s.NamedPrimary = "db-1" })
	named.PodReady = false
	assert.Equal(t, 2*bound, failover.GoneAfter(named, 0), "named already, not ready: twice the bound, as any server back as the primary")
	serverDown := with(primary("db-0"), func(s *instance.Status) { s.ServerUp = false })
	serverDown.PodReady = false
	assert.True(t, failover.PrimaryGone(serverDown, seen, start, seen.Add(bound+time.Millisecond), 0), "a server still down: the bound")
	assert.True(t, failover.PrimaryGone(down, seen, start, seen.Add(3*time.Second), 2*time.Second), "the bound is a parameter")
	// An operator that just started has never seen the primary healthy:
	// the wait counts from when it began watching.
	restarted := start.Add(time.Hour)
	assert.False(t, failover.PrimaryGone(down, time.Time{}, restarted, restarted.Add(bound), 0))
	assert.False(t, failover.PrimaryGone(down, seen, restarted, restarted.Add(bound), 0), "a health seen before the restart does not count down")
	assert.True(t, failover.PrimaryGone(down, time.Time{}, restarted, restarted.Add(bound+time.Second), 0))
}

// The quorum rule for ANY k of n synchronous standbys: a standby is
// promoted only while n - k + 1 of them answer, and then only one that
// flushed the furthest among them.
func TestSynchronousCandidates(t *testing.T) {
	names := []string{"db-1", "db-2", "db-3"}
	all := []failover.Observation{standby("db-1", 50*mb, false), standby("db-2", 60*mb, false), standby("db-3", 55*mb, false), standby("db-4", 90*mb, false)}
	unreachable := func(pods ...string) []failover.Observation {
		var out []failover.Observation
		for _, o := range all {
			if slices.Contains(pods, o.Pod) {
				o.Status = nil
			}
			out = append(out, o)
		}
		return out
	}
	for _, c := range []struct {
		name      string
		quorum    int
		instances []failover.Observation
		needed    int
		want      []string
	}{
		{"asynchronous: every instance", 0, all, 0, []string{"db-1", "db-2", "db-3", "db-4"}},
		{"ANY 1 of 3, all answer: the furthest of them, never the asynchronous db-4", 1, all, 3, []string{"db-2"}},
		{"ANY 1 of 3, one does not answer: refused", 1, unreachable("db-3"), 3, nil},
		{"ANY 2 of 3, one does not answer: the furthest of the two", 2, unreachable("db-2"), 2, []string{"db-3"}},
		{"ANY 2 of 3, two do not answer: refused", 2, unreachable("db-2", "db-3"), 2, nil},
		{"ANY 3 of 3, one answers: it has every commit", 3, unreachable("db-2", "db-3"), 1, []string{"db-1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sync := failover.Synchronous{Standbys: names, Quorum: c.quorum}
			if c.quorum == 0 {
				sync.Standbys = nil
			}
			assert.Equal(t, c.needed, sync.Needed())
			got, err := sync.Candidates(c.instances)
			if c.want == nil {
				require.ErrorIs(t, err, failover.ErrSynchronousQuorum)
				return
			}
			require.NoError(t, err)
			var pods []string
			for _, o := range got {
				pods = append(pods, o.Pod)
			}
			assert.Equal(t, c.want, pods)
		})
	}
}

// A standby that received a commit's WAL but has not replayed it yet has
// it (promotion replays it first): it is the one chosen.
func TestSynchronousCandidatesGoByWhatWasFlushedNotReplayed(t *testing.T) {
	received := with(standby("db-1", 50*mb, false), func(st *instance.Status) { st.ReceiveLSN = 70 * mb })
	sync := failover.Synchronous{Standbys: []string{"db-1", "db-2"}, Quorum: 2}
	got, err := sync.Candidates([]failover.Observation{received, standby("db-2", 60*mb, false)})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "db-1", got[0].Pod)
}

// A new leader that cannot reach the primary counts its wait from when
// the standbys last heard it: the shortest of their receivers' stalls,
// and only when every streaming one has stalled.
func TestUnheardSinceIsTheShortestStallOfEveryStreamingStandby(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	stalled := func(pod string, seconds float64) failover.Observation {
		return with(standby(pod, 100*mb, true), func(s *instance.Status) { s.ReceiverStalledSeconds = seconds })
	}
	notStreaming := standby("db-3", 90*mb, false)
	unreached := failover.Observation{Pod: "db-4"}

	assert.Equal(t, now.Add(-9*time.Second), failover.UnheardSince([]failover.Observation{stalled("db-1", 12), stalled("db-2", 9)}, now),
		"the shortest stall: the primary's node heard neither since then")
	assert.Equal(t, now.Add(-12*time.Second), failover.UnheardSince([]failover.Observation{stalled("db-1", 12), notStreaming, unreached}, now),
		"a standby not streaming, or not reached, says nothing either way")
	assert.True(t, failover.UnheardSince([]failover.Observation{stalled("db-1", 12), stalled("db-2", 0)}, now).IsZero(),
		"a standby whose replies are acknowledged: the primary's node hears it")
	assert.True(t, failover.UnheardSince([]failover.Observation{notStreaming, unreached}, now).IsZero(), "no streaming standby: nothing known")
	assert.True(t, failover.UnheardSince(nil, now).IsZero())
}
