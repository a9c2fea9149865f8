package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// endpointsWatch asks for <name>-rw's EndpointSlices every 200 ms and keeps
// each change of the addresses they list ready. It tells when the Service
// named the new primary (the operator's relabelling, then the controller
// manager's EndpointSlice) apart from when writes came back (kube-proxy,
// which reads the same EndpointSlices through a watch of its own, and
// re-lists them after an API-server outage only when its back-off lets it).
type endpointsWatch struct {
	mu      sync.Mutex
	changes []endpointsChange
	stop    func()
	done    chan struct{}
}

type endpointsChange struct {
	at    time.Time
	ready []string // sorted addresses
}

func (f *failoverCluster) watchRWEndpoints() *endpointsWatch {
	ctx, cancel := context.WithCancel(f.ctx)
	w := &endpointsWatch{stop: cancel, done: make(chan struct{})}
	selector := discoveryv1.LabelServiceName + "=" + f.name + "-rw"
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			// Errors (the API server down) are skipped: the last change
			// stands until an answer says otherwise.
			if slices, err := f.cs.DiscoveryV1().EndpointSlices(f.ns).List(ctx, metav1.ListOptions{LabelSelector: selector}); err == nil {
				w.record(time.Now(), readyAddresses(slices.Items))
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

func readyAddresses(eps []discoveryv1.EndpointSlice) []string {
	var ready []string
	for _, s := range eps {
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Ready, false) {
				ready = append(ready, e.Addresses...)
			}
		}
	}
	slices.Sort(ready)
	return ready
}

func (w *endpointsWatch) record(at time.Time, ready []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.changes); n > 0 && slices.Equal(w.changes[n-1].ready, ready) {
		return
	}
	w.changes = append(w.changes, endpointsChange{at: at, ready: ready})
}

// rwNamedAlone is when, at or after `since`, the watch first saw -rw list
// the pod's address alone as ready; the test fails if it never did.
func (f *failoverCluster) rwNamedAlone(w *endpointsWatch, pod string, since time.Time) time.Time {
	f.t.Helper()
	ip := f.podIP(pod)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.changes {
		if !c.at.Before(since) && slices.Equal(c.ready, []string{ip}) {
			return c.at
		}
	}
	require.FailNow(f.t, "-rw never listed the new primary alone as ready", "%s (%s) since %s; changes seen: %v", pod, ip, since.Format(time.StampMilli), w.changes)
	return time.Time{}
}

func (w *endpointsWatch) finish() {
	w.stop()
	<-w.done
}
