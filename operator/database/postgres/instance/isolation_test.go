package instance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The isolation check's rule, case by case (the host test
// TestAPrimaryCutOffFromTheOperatorTheAPIServerAndItsStandbyFencesItselfFirst
// runs it with real servers).
func TestTheIsolationRuleNeedsTheOperatorsSilenceAndALostStandby(t *testing.T) {
	for name, c := range map[string]struct {
		i    Isolation
		want bool
	}{
		"silent past the bound, a standby lost":          {Isolation{Silence: 6 * time.Second, After: 5 * time.Second, Peers: []string{"db-1"}}, true},
		"one of two standbys lost":                       {Isolation{Silence: 6 * time.Second, After: 5 * time.Second, Peers: []string{"db-1", "db-2"}, Replied: []string{"db-2"}}, true},
		"every standby still replies":                    {Isolation{Silence: time.Minute, After: 5 * time.Second, Peers: []string{"db-1", "db-2"}, Replied: []string{"db-1", "db-2"}}, false},
		"the operator asked within its bound":            {Isolation{Silence: 4 * time.Second, After: 5 * time.Second, Peers: []string{"db-1"}}, false},
		"no bound given (the operator never asked one)":  {Isolation{Silence: time.Hour, Peers: []string{"db-1"}}, false},
		"no standby streamed when it last asked":         {Isolation{Silence: time.Hour, After: 5 * time.Second}, false},
		"a standby that replies but did not stream then": {Isolation{Silence: time.Hour, After: 5 * time.Second, Peers: []string{"db-1"}, Replied: []string{"db-1", "db-2"}}, false},
	} {
		assert.Equal(t, c.want, MayBeIsolated(c.i), name)
	}
}

// A standby counts as replying while its reply_time changes, measured
// with the agent's own clock; the operator's question sets the bound and
// the standbys to watch, and a question without a bound keeps the last.
func TestTheIsolationWatchCountsAStandbyLostWhenItsRepliesStop(t *testing.T) {
	var w isolationWatch
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	assert.Zero(t, w.look(t0, DefaultPeerSilence).After, "never asked: no bound")

	// A clone's pg_basebackup streams too, and ends with the clone: it is
	// no peer, nor is another Database's pod.
	primary := Status{Pod: "db-0", ServerUp: true, Role: RolePrimary, StreamingStandbys: []string{"db-1", "db-2", "db-x-1", "pg_basebackup"}}
	w.noteOperator(t0, 5*time.Second, primary)
	assert.Equal(t, []string{"db-1", "db-2"}, w.look(t0, DefaultPeerSilence).Peers)
	for s := 0; s <= 8; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		seen := map[string]string{"db-1": now.String()} // db-1 replies every second
		if s < 2 {
			seen["db-2"] = now.String()
		} else {
			seen["db-2"] = t0.Add(time.Second).String() // db-2's last reply, at 1 s
		}
		w.noteReplies(now, seen)
	}
	i := w.look(t0.Add(8*time.Second), DefaultPeerSilence)
	assert.Equal(t, 8*time.Second, i.Silence)
	assert.Equal(t, []string{"db-1"}, i.Replied)
	assert.Equal(t, []string{"db-2"}, i.lostPeers())
	assert.True(t, MayBeIsolated(i))

	w.noteOperator(t0.Add(9*time.Second), -1, primary)
	i = w.look(t0.Add(9*time.Second), DefaultPeerSilence)
	assert.Equal(t, 5*time.Second, i.After, "a question without a bound keeps the last")
	assert.False(t, MayBeIsolated(i), "just asked")

	w.noteOperator(t0.Add(10*time.Second), 5*time.Second, Status{Role: RoleUnknown, Error: "the server did not answer in time"})
	assert.Equal(t, []string{"db-1", "db-2"}, w.look(t0.Add(time.Minute), DefaultPeerSilence).Peers,
		"a question whose status was not read (cancelled, timed out) keeps the standbys")
	w.noteOperator(t0.Add(10*time.Second), 5*time.Second, Status{ServerUp: true, Role: RoleStandby})
	assert.Empty(t, w.look(t0.Add(time.Minute), DefaultPeerSilence).Peers, "a standby watches no peers")

	w.noteReplies(t0.Add(11*time.Second), map[string]string{"db-1": "x"})
	_, kept := w.replies["db-2"]
	assert.False(t, kept, "a standby gone from pg_stat_replication is forgotten")
}
