package instance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The flush watch says since when a primary's WAL has waited to be
// flushed at one flush position, a process waiting on it, from the first
// read that found it waiting; a position that moves, nothing waiting, or
// a standby starts it over.
func TestTheFlushWatchSaysSinceWhenTheWALWaitsAtOneFlushPosition(t *testing.T) {
	var w flushWatch
	t0 := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

	assert.Nil(t, w.observe(walPositions{insert: 100, flush: 100, waiting: true}, true, at(0)), "nothing waits")
	assert.Nil(t, w.observe(walPositions{insert: 200, flush: 100, waiting: true}, true, at(1)), "the first read that finds WAL waiting")
	since := w.observe(walPositions{insert: 300, flush: 100, waiting: true}, true, at(2))
	require.NotNil(t, since)
	assert.Equal(t, at(1), *since)
	assert.Nil(t, w.observe(walPositions{insert: 400, flush: 300, waiting: true}, true, at(3)), "the flush moved: a busy disk, not a stalled one")
	since = w.observe(walPositions{insert: 500, flush: 300, waiting: true}, true, at(9))
	require.NotNil(t, since)
	assert.Equal(t, at(3), *since)
	st := Status{Time: at(9), WALFlushStalledSince: since}
	assert.True(t, st.WALFlushStalled(), "6 s at one flush position")
	st.Time = at(7)
	assert.False(t, st.WALFlushStalled(), "4 s: within WALFlushStallAfter")

	assert.Nil(t, w.observe(walPositions{insert: 500, flush: 300, waiting: true}, false, at(10)), "a standby")
	assert.Nil(t, w.observe(walPositions{insert: 500, flush: 300, waiting: true}, true, at(11)), "counted again from the first read as a primary")
	assert.Nil(t, w.observe(walPositions{insert: 500, flush: 500, waiting: true}, true, at(12)), "flushed")

	// WAL not flushed but nothing waiting on it (a partial page of records
	// that need no flush, on an idle server): no stall, however long.
	assert.Nil(t, w.observe(walPositions{insert: 600, flush: 500}, true, at(13)))
	assert.Nil(t, w.observe(walPositions{insert: 600, flush: 500}, true, at(60)))
}
