package tdset_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	schedulev1 "github.com/deckhand-dev/deckhand/operator/apis/schedule/v1"
	"github.com/deckhand-dev/deckhand/operator/tdset"
)

// replicasSeen records when a watch saw each replica count of a Deployment.
type replicasSeen struct {
	mu     sync.Mutex
	seen   map[int32][]time.Time
	annots map[string]time.Time
}

func watchDeployment(b *testing.B, ns, name string) *replicasSeen {
	b.Helper()
	wc, err := client.NewWithWatch(testenv.RESTConfig(b), client.Options{Scheme: testenv.Scheme(b)})
	require.NoError(b, err)
	w, err := wc.Watch(context.Background(), &appsv1.DeploymentList{}, client.InNamespace(ns))
	require.NoError(b, err)
	b.Cleanup(w.Stop)
	r := &replicasSeen{seen: map[int32][]time.Time{}, annots: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			at := time.Now()
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || d.Name != name || ev.Type == watch.Deleted {
				continue
			}
			r.mu.Lock()
			r.seen[ptr.Deref(d.Spec.Replicas, 0)] = append(r.seen[ptr.Deref(d.Spec.Replicas, 0)], at)
			if v, ok := d.Annotations["bench/ping"]; ok {
				if _, dup := r.annots[v]; !dup {
					r.annots[v] = at
				}
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// firstAfter is the first time the watch saw replicas at or after since.
func (r *replicasSeen) firstAfter(replicas int32, since time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.seen[replicas] {
		if !at.Before(since) {
			return at, true
		}
	}
	return time.Time{}, false
}

func (r *replicasSeen) annotation(v string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.annots[v]
	return at, ok
}

func waitFor(b *testing.B, what string, f func() bool) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkBoundaryLag measures, over 20 window boundaries, the time from
// the boundary instant to the moment a watch sees the Deployment's new
// replica count, next to the floor: a write seen by the same watch.
func BenchmarkBoundaryLag(b *testing.B) {
	const transitions = 20
	const lead = 500 * time.Millisecond
	testenv.InstallCRDs(b)
	c := testenv.Client(b)
	ns := testenv.Namespace(b, c)

	// The benchmark moves the operator's clock so each boundary is lead away
	// in real time.
	var clock shiftedClock
	day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	clock.readAheadOf(day.Add(11*time.Hour), 0)
	testenv.StartController(b, testenv.RESTConfig(b), func(mgr ctrl.Manager) error { return tdset.SetupWithClock(mgr, clock.Now) }, ns)

	td := newTDSet(ns, "lag", schedulev1.Scheduling{StartTime: intstr.FromString("12:00"), EndTime: intstr.FromString("12:01"), Replica: 2})
	td.Spec.DefaultReplica = 1
	seen := watchDeployment(b, ns, td.Name)
	require.NoError(b, c.Create(context.Background(), td))
	waitFor(b, "the Deployment at 1 replica", func() bool { _, ok := seen.firstAfter(1, time.Time{}); return ok })

	var lags []time.Duration
	for i := range transitions {
		boundary, want := day.Add(12*time.Hour), int32(2) // into the window
		if i%2 == 1 {
			boundary, want = day.Add(12*time.Hour+time.Minute), 1 // out of it
		}
		realBoundary := clock.readAheadOf(boundary, lead)
		poke(b, c, td, i) // a reconcile now, so the controller sees the moved clock
		waitFor(b, fmt.Sprintf("transition %d to %d replicas", i, want), func() bool {
			_, ok := seen.firstAfter(want, realBoundary.Add(-lead))
			return ok
		})
		at, _ := seen.firstAfter(want, realBoundary.Add(-lead))
		if at.Before(realBoundary) {
			b.Fatalf("transition %d landed %v before its boundary", i, realBoundary.Sub(at))
		}
		lags = append(lags, at.Sub(realBoundary))
	}

	// The floor: a write to the Deployment and the same watch seeing it.
	var floor []time.Duration
	for i := range transitions {
		v := fmt.Sprint(i)
		start := time.Now()
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench/ping":%q}}}`, v)
		require.NoError(b, c.Patch(context.Background(), &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: td.Name}},
			client.RawPatch(types.MergePatchType, patch)))
		waitFor(b, "the ping", func() bool { _, ok := seen.annotation(v); return ok })
		at, _ := seen.annotation(v)
		floor = append(floor, at.Sub(start))
	}

	fmt.Printf("\nTDSet boundary lag over %d transitions (boundary instant -> watch sees new replicas)\n", transitions)
	fmt.Printf("%-34s %10s %10s\n", "", "p50", "max")
	fmt.Printf("%-34s %10v %10v\n", "boundary lag (target max < 1s)", testenv.Percentile(lags, 0.5).Round(100*time.Microsecond), slices.Max(lags).Round(100*time.Microsecond))
	fmt.Printf("%-34s %10v %10v\n", "floor: write -> watch, same run", testenv.Percentile(floor, 0.5).Round(100*time.Microsecond), slices.Max(floor).Round(100*time.Microsecond))
	b.ReportMetric(float64(testenv.Percentile(lags, 0.5).Microseconds())/1000, "lag-p50-ms")
	b.ReportMetric(float64(slices.Max(lags).Microseconds())/1000, "lag-max-ms")
	b.ReportMetric(float64(testenv.Percentile(floor, 0.5).Microseconds())/1000, "floor-p50-ms")
}

func poke(b *testing.B, c client.Client, td *schedulev1.TDSet, i int) {
	b.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench/poke":"%d"}}}`, i)
	require.NoError(b, c.Patch(context.Background(), td.DeepCopy(), client.RawPatch(types.MergePatchType, patch)))
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkSteadyState1000 runs 1,000 TDSets whose windows do not change
// and counts the operator's API writes over a minute of resyncs
// (intervalMint 1): the target is none.
func BenchmarkSteadyState1000(b *testing.B) {
	const count = 1000
	testenv.InstallCRDs(b)
	c := testenv.Client(b)
	ns := testenv.Namespace(b, c)

	createTDSets(b, c, ns, count)
	heapBefore := heapInUse()
	rc, writes := testenv.CountRequests(b, testenv.IsWrite)
	start := time.Now()
	testenv.StartController(b, rc, tdset.Setup, ns)
	waitConverged(b, c, ns, count)
	converged := time.Since(start)
	convergeWrites := writes.Load()
	heapAfter := heapInUse()

	writes.Store(0)
	reconcilesBefore := testenv.ReconcileCount(b, tdset.Name)
	const idle = 65 * time.Second // every TDSet resyncs at least once
	time.Sleep(idle)
	idleWrites := writes.Load()
	idleReconciles := testenv.ReconcileCount(b, tdset.Name) - reconcilesBefore
	require.GreaterOrEqual(b, idleReconciles, float64(count), "the TDSets did not resync while idle: the write count proves nothing")

	fmt.Printf("\nTDSet steady state with %d TDSets (in-process operator, local cluster)\n", count)
	fmt.Printf("%-48s %v\n", "converge (operator start -> all Ready)", converged.Round(10*time.Millisecond))
	fmt.Printf("%-48s %d (%.1f per TDSet)\n", "API writes to converge", convergeWrites, float64(convergeWrites)/count)
	fmt.Printf("%-48s %.0f\n", "reconciles while idle (65 s)", idleReconciles)
	fmt.Printf("%-48s %.1f (target 0)\n", "API writes per minute, idle, intervalMint=1", float64(idleWrites)/idle.Minutes())
	fmt.Printf("%-48s %.1f MiB\n", "operator heap in use (after GC, TDSets+Deployments cached)", float64(heapAfter-min(heapBefore, heapAfter))/(1<<20))
	fmt.Printf("%-48s %s\n", "process RSS (test binary incl. operator)", fmt.Sprintf("%d kB", testenv.RSS(b, os.Getpid())))
	b.ReportMetric(float64(idleWrites)/idle.Minutes(), "idle-writes/min")
	b.ReportMetric(converged.Seconds(), "converge-s")
}

func createTDSets(b *testing.B, c client.Client, ns string, count int) {
	b.Helper()
	objs := make([]client.Object, count)
	for i := range objs {
		td := newTDSet(ns, fmt.Sprintf("td-%04d", i), schedulev1.Scheduling{StartTime: intstr.FromInt32(0), EndTime: intstr.FromString("24:00"), Replica: 0})
		td.Spec.DefaultReplica = 0
		td.Spec.IntervalMint = 1
		objs[i] = td
	}
	testenv.CreateAll(b, c, objs)
}

func waitConverged(b *testing.B, c client.Client, ns string, count int) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var list schedulev1.TDSetList
		require.NoError(b, c.List(context.Background(), &list, client.InNamespace(ns)))
		ready := 0
		for _, td := range list.Items {
			if td.Status.ObservedGeneration == td.Generation && td.Status.ScaleTarget != "" && isReady(&td) {
				ready++
			}
		}
		if ready == count {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d TDSets Ready after 5 minutes", ready, count)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func isReady(td *schedulev1.TDSet) bool {
	for _, c := range td.Status.Conditions {
		if c.Type == tdset.ConditionReady {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// BenchmarkBoundaryBurst1000 measures 1,000 TDSets whose window opens at
// the same minute (0 -> 2 replicas): from the boundary instant to the
// moment a watch sees each Deployment's new replica count. The floor, in
// the same run and the same namespace, is a plain client making the same
// change (0 -> 2 replicas, so as many pods are created) to 1,000 other
// Deployments with as many requests in flight as TDSet has workers. The
// floor runs first; the boundary comes once its pods exist.
func BenchmarkBoundaryBurst1000(b *testing.B) {
	const count = 1000
	testenv.InstallCRDs(b)
	c := testenv.Client(b)
	ns := testenv.Namespace(b, c)
	seen := watchReplicas(b, ns, 2)

	// The operator's clock reads 06:00: the 12:00 window is far away
	// until the benchmark moves the clock.
	var clock shiftedClock
	day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	clock.readAheadOf(day.Add(6*time.Hour), 0)
	objs := make([]client.Object, 0, 2*count)
	for i := range count {
		td := newTDSet(ns, fmt.Sprintf("td-%04d", i), schedulev1.Scheduling{StartTime: intstr.FromString("12:00"), EndTime: intstr.FromString("13:00"), Replica: 2})
		td.Spec.DefaultReplica = 0
		objs = append(objs, td, plainDeployment(ns, fmt.Sprintf("floor-%04d", i)))
	}
	testenv.CreateAll(b, c, objs)
	testenv.StartController(b, testenv.RESTConfig(b), func(mgr ctrl.Manager) error {
		return tdset.SetupWithOptions(mgr, tdset.Options{Now: clock.Now})
	}, ns)
	waitConverged(b, c, ns, count)

	// The floor: the same change by a plain client.
	loadFloor := loadAverage()
	floorStart := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range tdset.DefaultWorkers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < count; i = int(next.Add(1)) - 1 {
				patch := []byte(`{"spec":{"replicas":2}}`)
				if err := c.Patch(context.Background(), plainDeployment(ns, fmt.Sprintf("floor-%04d", i)), client.RawPatch(types.MergePatchType, patch)); err != nil {
					b.Errorf("patching floor-%04d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	floor := seen.lags(b, "floor-", count, floorStart)
	testenv.WaitPods(b, c, ns, 2*count, 3*time.Minute)

	// TDSet: the clock moves so 12:00 is lead away; an HPA created and
	// deleted wakes every TDSet of the namespace (writing nothing), so
	// each sleeps until the boundary on the moved clock.
	const lead = 20 * time.Second
	realBoundary := clock.readAheadOf(day.Add(12*time.Hour), lead)
	before := testenv.ReconcileCount(b, tdset.Name)
	wakeAll(b, c, ns, func() {
		waitFor(b, "the TDSets to see the moved clock", func() bool { return testenv.ReconcileCount(b, tdset.Name)-before >= count })
	})
	if time.Now().After(realBoundary.Add(-2 * time.Second)) {
		b.Fatalf("the TDSets took too long to wake; the boundary is too close")
	}
	loadTDSet := loadAverage()
	lags := seen.lags(b, "td-", count, realBoundary)
	if early := seen.before("td-", realBoundary); early > 0 {
		b.Fatalf("%d Deployments scaled before the boundary", early)
	}

	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	p99, floor99 := testenv.Percentile(lags, 0.99), testenv.Percentile(floor, 0.99)
	met := "yes"
	if p99 > floor99*12/10 {
		met = "NO"
	}
	fmt.Printf("\nTDSet: %d TDSets whose window opens at the same minute (0 -> 2 replicas); boundary (floor: first patch sent) -> watch sees the new replicas\n", count)
	fmt.Printf("%-42s %10s %10s %10s %8s %s\n", "", "p50", "p99", "max", ">30 s", "load before")
	fmt.Printf("%-42s %10v %10v %10v %8d %s\n", fmt.Sprintf("floor: plain client, %d in flight", tdset.DefaultWorkers), r(testenv.Percentile(floor, 0.5)), r(floor99), r(slices.Max(floor)), over(floor, 30*time.Second), loadFloor)
	fmt.Printf("%-42s %10v %10v %10v %8d %s\n", fmt.Sprintf("TDSet, %d workers", tdset.DefaultWorkers), r(testenv.Percentile(lags, 0.5)), r(p99), r(slices.Max(lags)), over(lags, 30*time.Second), loadTDSet)
	fmt.Printf("target: TDSet p99 <= 1.2 x floor p99 = %v: %s\n", r(floor99*12/10), met)
	b.ReportMetric(p99.Seconds(), "tdset-p99-s")
	b.ReportMetric(floor99.Seconds(), "floor-p99-s")
}

// replicaWatch records when a watch first saw each Deployment of a
// namespace at a replica count.
type replicaWatch struct {
	mu sync.Mutex
	at map[string]time.Time
}

func watchReplicas(b *testing.B, ns string, replicas int32) *replicaWatch {
	b.Helper()
	wc, err := client.NewWithWatch(testenv.RESTConfig(b), client.Options{Scheme: testenv.Scheme(b)})
	require.NoError(b, err)
	w, err := wc.Watch(context.Background(), &appsv1.DeploymentList{}, client.InNamespace(ns))
	require.NoError(b, err)
	b.Cleanup(w.Stop)
	rw := &replicaWatch{at: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			at := time.Now()
			if d, ok := ev.Object.(*appsv1.Deployment); ok && ev.Type != watch.Deleted && ptr.Deref(d.Spec.Replicas, 0) == replicas {
				rw.mu.Lock()
				if _, dup := rw.at[d.Name]; !dup {
					rw.at[d.Name] = at
				}
				rw.mu.Unlock()
			}
		}
	}()
	return rw
}

// lags waits until count Deployments named prefix* were seen and returns
// each one's time since start.
func (rw *replicaWatch) lags(b *testing.B, prefix string, count int, start time.Time) []time.Duration {
	b.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		rw.mu.Lock()
		var lags []time.Duration
		for name, at := range rw.at {
			if strings.HasPrefix(name, prefix) {
				lags = append(lags, at.Sub(start))
			}
		}
		rw.mu.Unlock()
		if len(lags) == count {
			return lags
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d %s Deployments scaled after 3 minutes", len(lags), count, prefix)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (rw *replicaWatch) before(prefix string, t time.Time) int {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	n := 0
	for name, at := range rw.at {
		if strings.HasPrefix(name, prefix) && at.Before(t) {
			n++
		}
	}
	return n
}

func over(d []time.Duration, limit time.Duration) int {
	n := 0
	for _, x := range d {
		if x > limit {
			n++
		}
	}
	return n
}

func plainDeployment(ns, name string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"floor": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"floor": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "crccheck/hello-world"}}},
			},
		},
	}
}

// wakeAll creates and deletes an HorizontalPodAutoscaler (of nothing): its
// events wake every TDSet of the namespace.
func wakeAll(b *testing.B, c client.Client, ns string, woken func()) {
	b.Helper()
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wake"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "nothing"},
			MaxReplicas:    1,
		},
	}
	require.NoError(b, c.Create(context.Background(), hpa))
	woken()
	require.NoError(b, c.Delete(context.Background(), hpa))
	time.Sleep(2 * time.Second)
}

// loadAverage is the host's 1-, 5- and 15-minute load: other work shares
// the two cores, and the numbers mean little without it.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(raw))[:3], " ")
}
