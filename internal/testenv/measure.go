package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// IsWrite matches the requests that change something.
func IsWrite(req *http.Request) bool { return req.Method != http.MethodGet }

// CountRequests returns a client config for the test cluster that counts
// the requests match accepts, for an operator under test.
func CountRequests(t testing.TB, match func(*http.Request) bool) (*rest.Config, *atomic.Int64) {
	t.Helper()
	return Counting(RESTConfig(t), match)
}

// Counting is base with a count of the requests match selects.
func Counting(base *rest.Config, match func(*http.Request) bool) (*rest.Config, *atomic.Int64) {
	count := &atomic.Int64{}
	rc := rest.CopyConfig(base)
	rc.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if match(req) {
				count.Add(1)
			}
			return next.RoundTrip(req)
		})
	})
	return rc, count
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// CounterValue is the sum of the counter name over the series, in this
// process's controller-runtime registry, whose labels include all of
// labels (none: every series).
func CounterValue(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			if matches(have, labels) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// ReconcileCount is controller-runtime's count of reconciles of one
// controller in this process.
func ReconcileCount(t testing.TB, controller string) float64 {
	t.Helper()
	return CounterValue(t, "controller_runtime_reconcile_total", map[string]string{"controller": controller})
}

// Percentile is the p-th (0..1) of durations, nearest rank.
func Percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1)+0.5)]
}

// RSS is the resident memory of process pid, in KiB.
func RSS(t testing.TB, pid int) int {
	t.Helper()
	kib, err := ReadRSS(pid)
	require.NoError(t, err)
	return kib
}

// ReadRSS is a process's VmRSS in KiB, for samplers that run beside a test
// (they may not fail it from their goroutine).
func ReadRSS(pid int) (int, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// CreateAll creates objs with a few requests in flight, for benchmarks that
// need thousands of objects.
func CreateAll(t testing.TB, c client.Client, objs []client.Object) {
	t.Helper()
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, len(objs))
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(objs); i += workers {
				if err := c.Create(context.Background(), objs[i]); err != nil {
					errs <- fmt.Errorf("creating %s: %w", objs[i].GetName(), err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// WaitPods waits, for at most within, until at least n pods exist in ns
// (listed as metadata), and returns how many there are: benchmarks wait
// for one phase's pods before timing the next.
func WaitPods(t testing.TB, c client.Client, ns string, n int, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var pods metav1.PartialObjectMetadataList
		pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		require.NoError(t, c.List(context.Background(), &pods, client.InNamespace(ns)))
		if len(pods.Items) >= n {
			return len(pods.Items)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pods after %s", len(pods.Items), n, within)
		}
		time.Sleep(time.Second)
	}
}
