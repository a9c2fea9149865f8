package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The outage a fault caused: outage ends with the first run of failed
// writes, outageSpan with the first acknowledged write after the last
// failed one. Runs without the node.
func TestOutageSpanCoversEveryRunOfFailedWritesAfterTheFault(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	log := []writeOutcome{
		{ok: false, at: at(-5)}, // before the fault: not its outage
		{ok: true, at: at(-4)},
		{ok: true, at: at(1)},
		{ok: false, at: at(2)}, // the first run: 2 s to 3 s
		{ok: true, at: at(3)},
		{ok: false, at: at(10)}, // the second, longer run: to 20 s
		{ok: false, at: at(15)},
		{ok: true, at: at(20)},
		{ok: true, at: at(21)},
	}
	first, _ := outage(log, t0)
	assert.Equal(t, time.Second, first)
	assert.Equal(t, 18*time.Second, outageSpan(log, t0))
	assert.Zero(t, outageSpan(log[:3], t0), "no write failed after the fault")
	assert.Equal(t, time.Duration(-1), outageSpan(log[:7], t0), "the last write failed: not over")
}
