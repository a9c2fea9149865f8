package main

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTheCollectorRunsAtHalfTheLiveHeapUnlessGOGCIsSet(t *testing.T) {
	restore := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(restore) })
	if v, ok := os.LookupEnv("GOGC"); ok {
		t.Cleanup(func() { os.Setenv("GOGC", v) })
	}

	os.Unsetenv("GOGC")
	collectAtHalfTheLiveHeap()
	assert.Equal(t, defaultGCPercent, debug.SetGCPercent(100))

	// The runtime has read GOGC itself: it is left alone.
	t.Setenv("GOGC", "200")
	collectAtHalfTheLiveHeap()
	assert.Equal(t, 100, debug.SetGCPercent(100))
}
