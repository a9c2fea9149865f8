package testenv

import "time"

// ClockFrom is a clock for an operator under test that reads base when it
// is made and runs on from there in real time: a schedule test fixes where
// in a schedule's interval it starts, so a real schedule time passing
// while it runs changes nothing.
func ClockFrom(base time.Time) func() time.Time {
	started := time.Now()
	return func() time.Time { return base.Add(time.Since(started)) }
}
