package testenv

import (
	"sync/atomic"
	"time"
)

// ClockFrom is a clock for an operator under test that reads base when it
// is made and runs on from there in real time, moved on by what the test
// stores in offset: a schedule test fixes where in a schedule's interval
// it starts, so a real schedule time passing while it runs changes
// nothing, and only the offsets it sets decide which schedule times pass.
func ClockFrom(base time.Time) (now func() time.Time, offset *atomic.Int64) {
	started := time.Now()
	offset = &atomic.Int64{}
	return func() time.Time { return base.Add(time.Since(started) + time.Duration(offset.Load())) }, offset
}
