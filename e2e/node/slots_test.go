package node

import (
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The parallel tests share the node through a few slots, and the longest
// start first. go test releases its paused parallel tests together and
// they race for its -parallel slots, so the order they start in was
// anyone's: in one run chart testing (2.5 min) started last, in another
// the certificate switch (4 to 6 min, its CA's three-minute propagation
// included), and the package ended minutes after the others' last test.
// Started longest first, the parallel tests end about when the longest
// does, or when the sum of their times over the slots runs out.
//
// make test (hack/gotest.sh) runs the package with go test -parallel
// above the number of parallel tests, so every paused test reaches
// parallel(); DECKHAND_NODE_PARALLEL (default 2) is how many run at once.
var slots = &nodeSlots{}

// nodeParallel is DECKHAND_NODE_PARALLEL, or 2: four tests at once (each a
// Database or two, their Jobs, a writer, the pods' probes) drove the
// 1-minute load to 35 on the two cores with the package alone, and
// starved Databases of the certificate, fence and archive tests missed
// their deadlines. Three at once passed, but each test held its slot a
// quarter longer and the package alone took 1,177 s against 1,263 s with
// two: too little to spend the margin on.
func nodeParallel() int {
	if n, err := strconv.Atoi(os.Getenv("DECKHAND_NODE_PARALLEL")); err == nil && n > 0 {
		return n
	}
	return 2
}

// limit is how many parallel tests may run now: the slots, and one more
// for each slot on loan (lendSlot).
func (s *nodeSlots) limit() int { return nodeParallel() + s.lent }

type nodeSlots struct {
	mu      sync.Mutex
	running int
	// lent: slots whose tests wait on the real clock for now (lendSlot).
	lent int
	// open: the first test arrived a second ago, time enough for every
	// paused test released with it to arrive too; until then none starts,
	// so the first to arrive is not the first to start.
	open    bool
	opening sync.Once
	waiting []slotWaiter
}

type slotWaiter struct {
	expected time.Duration
	start    chan struct{}
}

// parallel is t.Parallel, then a wait for one of the node's slots, which
// go to the waiting tests that expect to take longest first. expected is
// about how long the test takes on the node beside the rest of make test.
func parallel(t *testing.T, expected time.Duration) {
	t.Helper()
	t.Parallel()
	w := slotWaiter{expected: expected, start: make(chan struct{})}
	slots.opening.Do(func() {
		time.AfterFunc(time.Second, func() {
			slots.mu.Lock()
			defer slots.mu.Unlock()
			slots.open = true
			slots.grant()
		})
	})
	arrived := time.Now()
	slots.mu.Lock()
	slots.waiting = append(slots.waiting, w)
	slots.grant()
	slots.mu.Unlock()
	<-w.start
	started := time.Now()
	// Registered first, so it runs last: the test's own cleanups (its
	// namespace, its Database) are done before the next test starts.
	// go test's duration of a parallel test includes its wait for a slot;
	// the log line says how long it held one, for expected's estimates.
	t.Cleanup(func() {
		t.Logf("node slot: waited %.0fs, held %.0fs (expected %s)",
			started.Sub(arrived).Seconds(), time.Since(started).Seconds(), expected)
		slots.mu.Lock()
		defer slots.mu.Unlock()
		slots.running--
		slots.grant()
	})
}

// lendSlot lets one more parallel test start while the calling test
// waits on the real clock for minutes and uses little CPU meanwhile (a
// fixed propagation delay, an outage it holds open), so the node's slots
// are not held by a test that only waits. The returned func ends the loan
// (and runs at the test's end if not called before); it never waits: the
// lender keeps its place, and the node runs one test more than its slots
// until the next one ends.
func lendSlot(t *testing.T) (takeBack func()) {
	t.Helper()
	var once sync.Once
	slots.mu.Lock()
	slots.lent++
	slots.grant()
	slots.mu.Unlock()
	lentAt := time.Now()
	takeBack = func() {
		once.Do(func() {
			t.Logf("node slot: lent for %.0fs", time.Since(lentAt).Seconds())
			slots.mu.Lock()
			defer slots.mu.Unlock()
			slots.lent--
		})
	}
	t.Cleanup(takeBack)
	return takeBack
}

// grant starts the longest waiting tests while slots are free. Called
// with mu held.
func (s *nodeSlots) grant() {
	if !s.open {
		return
	}
	sort.SliceStable(s.waiting, func(i, j int) bool { return s.waiting[i].expected > s.waiting[j].expected })
	for limit := s.limit(); s.running < limit && len(s.waiting) > 0; s.running++ {
		close(s.waiting[0].start)
		s.waiting = s.waiting[1:]
	}
}
