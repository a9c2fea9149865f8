package configmonitor_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
	"github.com/deckhand-dev/deckhand/operator/configmonitor"
)

// seen records when a watch first saw each value of each object.
type seen struct {
	mu sync.Mutex
	at map[string]time.Time // name + "=" + value
}

func (s *seen) record(name, v string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.at[name+"="+v]; !ok {
		s.at[name+"="+v] = at
	}
}

func (s *seen) lookup(name, v string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[name+"="+v]
	return at, ok
}

func (s *seen) wait(b *testing.B, name, v string) time.Time {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if at, ok := s.lookup(name, v); ok {
			return at
		}
		if time.Now().After(deadline) {
			b.Fatalf("a watch never saw %s=%q", name, v)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// watchValues opens a watch on list in ns and records value(obj) for each
// event on each object, with the time the event arrived.
func watchValues[T client.Object](b *testing.B, list client.ObjectList, ns string, value func(T) string) *seen {
	b.Helper()
	wc, err := client.NewWithWatch(testenv.RESTConfig(b), client.Options{Scheme: testenv.Scheme(b)})
	require.NoError(b, err)
	w, err := wc.Watch(context.Background(), list, client.InNamespace(ns))
	require.NoError(b, err)
	b.Cleanup(w.Stop)
	s := &seen{at: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			at := time.Now()
			if o, ok := ev.Object.(T); ok && ev.Type != watch.Deleted {
				if v := value(o); v != "" {
					s.record(o.GetName(), v, at)
				}
			}
		}
	}()
	return s
}

// reactionRow is one row of the reaction table: how many monitors exist,
// how many of them have a workload, and how many changes are made, one at
// a time, rotating over the active ones.
type reactionRow struct {
	monitors, active, changes int
}

// BenchmarkReactionLatency measures what a user sees: the time from a
// ConfigMap update to the watch event of its workload's template patch,
// with every monitor active (each has its own ConfigMap and Deployment),
// changes rotating over all of them one at a time (wait for the reaction,
// then a short pause). The floor is measured in the same run on the same
// ConfigMaps: the same update seen by a bare watch. The restart rate limit
// is raised so the table measures reaction, not pacing
// (BenchmarkRestartPacing shows the pacing).
//
// monitors=1000: 1,000 active monitors, 400 changes, each to another
// monitor, spread over all 1,000 (a stride coprime with 1,000).
// monitors=10000: 10,000 monitors and ConfigMaps, of which 1,000 have a
// workload; 300 changes rotate over those, and the other 9,000 monitors
// sit idle in the caches and the index (10,000 pods would take the local
// cluster longer to create than a benchmark may hold it).
func BenchmarkReactionLatency(b *testing.B) {
	for _, row := range []reactionRow{{1000, 1000, 400}, {10000, 1000, 300}} {
		b.Run(fmt.Sprintf("monitors=%d", row.monitors), func(b *testing.B) { benchmarkReaction(b, row) })
	}
}

func benchmarkReaction(b *testing.B, row reactionRow) {
	testenv.InstallCRDs(b)
	c := testenv.Client(b)
	ns := testenv.Namespace(b, c)
	setupStart := time.Now()
	createMonitors(b, c, ns, row.monitors, row.active)
	testenv.WaitPods(b, c, ns, row.active, 4*time.Minute)

	cmSeen := watchValues(b, &corev1.ConfigMapList{}, ns, func(cm *corev1.ConfigMap) string { return cm.Data["v"] })
	patchSeen := watchValues(b, &appsv1.DeploymentList{}, ns, func(d *appsv1.Deployment) string {
		return d.Spec.Template.Annotations[annotationOf(strings.Replace(d.Name, "w-", "cm-", 1))]
	})

	rc, writes := testenv.CountRequests(b, testenv.IsWrite)
	testenv.StartController(b, rc, func(mgr ctrl.Manager) error {
		return configmonitor.Setup(mgr, configmonitor.Options{RestartsPerSecond: 1e6, RestartBurst: 1e6, Namespaces: []string{ns}})
	}, ns)
	waitBaselined(b, c, ns, row.monitors)
	setup := time.Since(setupStart)

	load := loadAverage()
	var floor, patch []time.Duration
	for i := range row.changes {
		k := (i * 7) % row.active
		v := fmt.Sprint("change-", i)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cmName(k)}, Data: map[string]string{"v": v}}
		start := time.Now()
		require.NoError(b, c.Update(context.Background(), cm))
		floor = append(floor, cmSeen.wait(b, cm.Name, v).Sub(start))
		patch = append(patch, patchSeen.wait(b, workloadName(k), configmonitor.Hash(cm, nil)).Sub(start))
		time.Sleep(10 * time.Millisecond)
	}

	target := 2*testenv.Percentile(floor, 0.99) + 10*time.Millisecond
	met := "yes"
	if testenv.Percentile(patch, 0.99) > target {
		met = "NO"
	}
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	fmt.Printf("\nConfigMonitor reaction, %d monitors (%d active), %d changes one at a time, rate limit raised; update call -> watch event; load before: %s; setup %v\n",
		row.monitors, row.active, row.changes, load, setup.Round(time.Second))
	fmt.Printf("%-9s %-7s %10s %10s %10s %10s %10s %10s %12s %s\n", "monitors", "changes", "floor p50", "floor p99", "patch p50", "patch p99", "patch max", "floor max", "target p99", "met")
	fmt.Printf("%-9d %-7d %10v %10v %10v %10v %10v %10v %12v %s\n", row.monitors, row.changes,
		r(testenv.Percentile(floor, 0.5)), r(testenv.Percentile(floor, 0.99)),
		r(testenv.Percentile(patch, 0.5)), r(testenv.Percentile(patch, 0.99)), r(slices.Max(patch)), r(slices.Max(floor)), r(target), met)
	fmt.Printf("(target p99 = 2 x floor p99 + 10 ms; load after: %s)\n", loadAverage())
	b.ReportMetric(ms(testenv.Percentile(patch, 0.99)), "patch-p99-ms")
	b.ReportMetric(ms(testenv.Percentile(floor, 0.99)), "floor-p99-ms")

	if row.monitors == 1000 {
		idleWrites(b, writes, row.monitors)
	}
}

// BenchmarkRestartPacing changes the ConfigMaps of 130 monitors at once
// under the default restart limit (1 per second, burst 100): the first 100
// restart at once, the rest one per second, each monitor reporting
// RateLimited meanwhile. The floor is the watch seeing the last ConfigMap
// update of the burst.
func BenchmarkRestartPacing(b *testing.B) {
	const monitors = 130
	testenv.InstallCRDs(b)
	c := testenv.Client(b)
	ns := testenv.Namespace(b, c)
	createMonitors(b, c, ns, monitors, monitors)
	testenv.WaitPods(b, c, ns, monitors, 4*time.Minute)
	cmSeen := watchValues(b, &corev1.ConfigMapList{}, ns, func(cm *corev1.ConfigMap) string { return cm.Data["v"] })
	patchSeen := watchValues(b, &appsv1.DeploymentList{}, ns, func(d *appsv1.Deployment) string {
		return d.Spec.Template.Annotations[annotationOf(strings.Replace(d.Name, "w-", "cm-", 1))]
	})
	testenv.StartController(b, testenv.RESTConfig(b), func(mgr ctrl.Manager) error {
		return configmonitor.Setup(mgr, configmonitor.Options{Namespaces: []string{ns}})
	}, ns)
	waitBaselined(b, c, ns, monitors)

	load := loadAverage()
	start := time.Now()
	cms := make([]*corev1.ConfigMap, monitors)
	for k := range monitors {
		cms[k] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cmName(k)}, Data: map[string]string{"v": "burst"}}
		require.NoError(b, c.Update(context.Background(), cms[k]))
	}
	burstSeen := cmSeen.wait(b, cmName(monitors-1), "burst").Sub(start)
	var at []time.Duration
	for k := range monitors {
		deadline := time.Now().Add(90 * time.Second)
		for {
			if t, ok := patchSeen.lookup(workloadName(k), configmonitor.Hash(cms[k], nil)); ok {
				at = append(at, t.Sub(start))
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("workload %d never restarted", k)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	slices.Sort(at)
	paced := at[100:]
	rate := float64(len(paced)-1) / (paced[len(paced)-1] - paced[0]).Seconds()
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	fmt.Printf("\nConfigMonitor restart pacing: %d ConfigMaps changed at once, default limit (1/s, burst 100); burst start -> watch sees the patch; load before: %s\n", monitors, load)
	fmt.Printf("%-44s %v\n", "floor: watch sees the burst's last update", r(burstSeen))
	fmt.Printf("%-44s %v\n", "restart 1 (first of the burst)", r(at[0]))
	fmt.Printf("%-44s %v\n", "restart 100 (last of the burst allowance)", r(at[99]))
	fmt.Printf("%-44s %v\n", "restart 101 (first paced)", r(at[100]))
	fmt.Printf("%-44s %v\n", fmt.Sprintf("restart %d (last)", monitors), r(at[len(at)-1]))
	fmt.Printf("%-44s %.2f per second (limit 1)\n", "pace after the burst", rate)
	b.ReportMetric(at[99].Seconds(), "burst100-s")
	b.ReportMetric(rate, "paced-per-s")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// loadAverage is the host's 1-, 5- and 15-minute load: other work shares
// the two cores, and the numbers mean little without it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// idleWrites counts the operator's writes over 15 s in which nothing
// changes (the last status writes settle first).
func idleWrites(b *testing.B, writes *atomic.Int64, monitors int) {
	time.Sleep(2 * time.Second)
	writes.Store(0)
	const idle = 15 * time.Second
	time.Sleep(idle)
	fmt.Printf("API writes by the operator during %v idle with %d monitors: %d (target 0)\n", idle, monitors, writes.Load())
	b.ReportMetric(float64(writes.Load()), "idle-writes")
}

func cmName(i int) string       { return fmt.Sprintf("cm-%05d", i) }
func workloadName(i int) string { return fmt.Sprintf("w-%05d", i) }
func annotationOf(cm string) string {
	return configmonitor.AnnotationKey(&magalixv1.ConfigMonitorSpec{ConfigMap: cm})
}

// createMonitors creates n ConfigMaps and monitors, and a one-replica
// Deployment for the first active ones, each selected by its own monitor.
func createMonitors(b *testing.B, c client.Client, ns string, n, active int) {
	b.Helper()
	objs := make([]client.Object, 0, 2*n+active)
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cmName(i)}, Data: map[string]string{"v": "initial"}}
		m := &magalixv1.ConfigMonitor{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("m-%05d", i)},
			Spec: magalixv1.ConfigMonitorSpec{ConfigMap: cm.Name, PodSelector: map[string]string{"app": workloadName(i)}}}
		objs = append(objs, cm, m)
		if i < active {
			objs = append(objs, deployment(ns, workloadName(i)))
		}
	}
	testenv.CreateAll(b, c, objs)
}

func deployment(ns, name string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
			},
		},
	}
}

func waitBaselined(b *testing.B, c client.Client, ns string, n int) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var list magalixv1.ConfigMonitorList
		require.NoError(b, c.List(context.Background(), &list, client.InNamespace(ns)))
		done := 0
		for _, m := range list.Items {
			if m.Status.ObservedHash != "" {
				done++
			}
		}
		if done == n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d monitors baselined after 5 minutes", done, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
