package configmonitor_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

// watchValues opens a watch on list in ns and records each value(obj) for
// each event on each object, with the time the event arrived.
func watchValues[T client.Object](b *testing.B, list client.ObjectList, ns string, values ...func(T) string) *seen {
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
				for _, value := range values {
					if v := value(o); v != "" {
						s.record(o.GetName(), v, at)
					}
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
// changes rotating over all of them one at a time. After each change the
// benchmark waits until the workload's rollout is over and pauses
// (settle), so each change meets a quiet control plane rather than the
// last one's rollout on the same two cores. The operator is this tree's
// cmd/deckhand with every controller on, run on the host as make run runs
// it (benchOperator), the restart rate limit raised so the table measures
// reaction, not pacing (BenchmarkRestartPacing shows the pacing).
//
// The floor is measured in the same run on the same updates: a bare watch
// of the ConfigMaps, opened by this process, sees each update, with
// nothing between the API server and it. The operator's path adds its own
// watch delivery of the ConfigMap (which carries the data's hash: no read
// of the ConfigMap), its cache reads, the patch and the patch's watch
// delivery. Targets: p50 <= 2 x floor p50 + 3 ms, p99 <= 2 x floor p99 +
// 10 ms.
//
// monitors=1000: 1,000 active monitors, 300 changes, each to another
// monitor, spread over all 1,000 (a stride coprime with 1,000).
// monitors=10000: 10,000 monitors and ConfigMaps, of which 1,000 have a
// workload; 300 changes rotate over those, and the other 9,000 monitors
// sit idle in the caches and the index (10,000 pods would take the local
// cluster longer to create than a benchmark may hold it).
//
// Besides the table it prints what the operator says of the run: its
// workqueue's adds, retries, wait and work time, its own event-to-patch
// histogram, its garbage collections, CPU and RSS, and the CPU each
// process on the host used meanwhile. DECKHAND_BENCH_PROFILE_DIR saves the
// operator's and the API server's CPU profiles of the changes, and the
// operator's heap and goroutines after them, there.
// DECKHAND_BENCH_OPERATOR=/path/to/deckhand measures that build instead of
// this tree's. DECKHAND_BENCH_IN_PROCESS=1 runs the operator in the
// benchmark's process (go test's profile flags then see it) and splits
// each reaction at the operator's requests.
func BenchmarkReactionLatency(b *testing.B) {
	for _, row := range []reactionRow{{1000, 1000, 300}, {10000, 1000, 300}} {
		b.Run(fmt.Sprintf("monitors=%d", row.monitors), func(b *testing.B) { benchmarkReaction(b, row) })
	}
}

// settle is the pause after each change's rollout has finished, for its
// last events (the old pod's deletion) to pass.
const settle = 100 * time.Millisecond

// rolledOut says the Deployment's rollout of its current template is over:
// every replica updated and available, none of an older template left.
func rolledOut(d *appsv1.Deployment) bool {
	want := ptr.Deref(d.Spec.Replicas, 1)
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want &&
		s.AvailableReplicas == want && ptr.Deref(s.TerminatingReplicas, 0) == 0
}

func benchmarkReaction(b *testing.B, row reactionRow) {
	quietLogs()
	testenv.InstallCRDs(b)
	c := testenv.Client(b)
	ns := testenv.Namespace(b, c)
	setupStart := time.Now()
	createMonitors(b, c, ns, row.monitors, row.active)
	testenv.WaitPods(b, c, ns, row.active, 4*time.Minute)

	cmSeen := watchValues(b, &corev1.ConfigMapList{}, ns, func(cm *corev1.ConfigMap) string { return cm.Data["v"] })
	hashOf := func(d *appsv1.Deployment) string {
		return d.Spec.Template.Annotations[annotationOf(strings.Replace(d.Name, "w-", "cm-", 1))]
	}
	patchSeen := watchValues(b, &appsv1.DeploymentList{}, ns, hashOf, func(d *appsv1.Deployment) string {
		if hashOf(d) == "" || !rolledOut(d) {
			return ""
		}
		return "rolled:" + hashOf(d)
	})

	op := startBenchOperator(b, ns)
	waitBaselined(b, c, ns, row.monitors)
	setup := time.Since(setupStart)
	// The baseline's status writes settle before the clock starts.
	time.Sleep(2 * time.Second)

	profiles := os.Getenv("DECKHAND_BENCH_PROFILE_DIR")
	profileDir := filepath.Join(profiles, fmt.Sprintf("reaction-%d-%s", row.monitors, time.Now().Format("150405")))
	var profiled sync.WaitGroup
	if profiles != "" {
		// A window of the changes.
		secs := 15
		profiled.Go(func() { op.profile(b, profileDir, fmt.Sprintf("profile?seconds=%d", secs), "cpu.pb.gz") })
		profiled.Go(func() { apiServerProfile(b, profileDir, secs) })
	}

	load := loadAverage()
	before, cpuBefore, hostBefore := op.scrape(b), op.cpu(b), processCPU()
	changesStart := time.Now()
	var floor, patch, rollouts, updates []time.Duration
	var starts []time.Time
	for i := range row.changes {
		k := (i * 7) % row.active
		v := fmt.Sprint("change-", i)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cmName(k)}, Data: map[string]string{"v": v}}
		start := time.Now()
		starts = append(starts, start)
		require.NoError(b, c.Update(context.Background(), cm))
		updates = append(updates, time.Since(start))
		floor = append(floor, cmSeen.wait(b, cm.Name, v).Sub(start))
		hash := configmonitor.Hash(cm, nil)
		patch = append(patch, patchSeen.wait(b, workloadName(k), hash).Sub(start))
		// Each change rolls a pod, which keeps the control plane busy for
		// a while: the next change waits until the cluster is quiet again,
		// or it would measure this rollout's load on the two cores.
		rollouts = append(rollouts, patchSeen.wait(b, workloadName(k), "rolled:"+hash).Sub(start))
		time.Sleep(settle)
	}
	run := op.scrape(b).sub(before)
	cpu := op.cpu(b) - cpuBefore
	took, host := time.Since(changesStart), busiest(hostBefore, processCPU(), 8)
	profiled.Wait()
	if profiles != "" {
		op.profile(b, profileDir, "heap", "heap.pb.gz")
		op.profile(b, profileDir, "goroutine?debug=1", "goroutines.txt")
	}

	printReaction(row, load, setup, floor, patch)
	printOperatorRun(b, op, run, cpu, row.changes)
	fmt.Printf("CPU by process during the changes (%v; each change's rollout took %v at p50, then a %v pause): %s\n",
		took.Round(100*time.Millisecond), testenv.Percentile(rollouts, 0.5).Round(time.Millisecond), settle, host)
	if op.requests != nil {
		printPath(op.requests, ns, row, starts, patch, updates)
	}
	b.ReportMetric(ms(testenv.Percentile(patch, 0.5)), "patch-p50-ms")
	b.ReportMetric(ms(testenv.Percentile(patch, 0.99)), "patch-p99-ms")
	b.ReportMetric(ms(testenv.Percentile(floor, 0.5)), "floor-p50-ms")
	b.ReportMetric(ms(testenv.Percentile(floor, 0.99)), "floor-p99-ms")

	if row.monitors == 1000 {
		idleWrites(b, op, row.monitors)
	}
}

// printReaction prints the floor's and ConfigMonitor's percentiles, their
// ratio and the targets: p99 <= 2 x floor p99 + 10 ms, p50 <= 2 x floor
// p50 + 3 ms.
func printReaction(row reactionRow, load string, setup time.Duration, floor, patch []time.Duration) {
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	pct := func(d []time.Duration) []time.Duration {
		return []time.Duration{testenv.Percentile(d, 0.5), testenv.Percentile(d, 0.9), testenv.Percentile(d, 0.99), slices.Max(d)}
	}
	f, p := pct(floor), pct(patch)
	fmt.Printf("\nConfigMonitor reaction, %d monitors (%d active), %d changes one at a time, rate limit raised; update call -> watch event; load before: %s; setup %v\n",
		row.monitors, row.active, row.changes, load, setup.Round(time.Second))
	fmt.Printf("%-20s %10s %10s %10s %10s\n", "", "p50", "p90", "p99", "max")
	fmt.Printf("%-20s %10v %10v %10v %10v\n", "floor (bare watch)", r(f[0]), r(f[1]), r(f[2]), r(f[3]))
	fmt.Printf("%-20s %10v %10v %10v %10v\n", "ConfigMonitor", r(p[0]), r(p[1]), r(p[2]), r(p[3]))
	ratio := func(i int) string { return fmt.Sprintf("%.2f", float64(p[i])/float64(f[i])) }
	fmt.Printf("%-20s %10s %10s %10s %10s\n", "ratio", ratio(0), ratio(1), ratio(2), ratio(3))
	met := func(got, target time.Duration) string {
		if got <= target {
			return "met"
		}
		return fmt.Sprintf("NOT met (+%v)", r(got-target))
	}
	t50, t99 := 2*f[0]+3*time.Millisecond, 2*f[2]+10*time.Millisecond
	fmt.Printf("target p50 <= 2 x floor p50 + 3 ms = %v: %s; target p99 <= 2 x floor p99 + 10 ms = %v: %s; load after: %s\n",
		r(t50), met(p[0], t50), r(t99), met(p[2], t99), loadAverage())
}

// printPath splits each reaction at the operator's patch of the workload:
// from the update to the patch (the operator's watch delivery, its queue,
// its cache reads and any read of the ConfigMap, shown apart), the patch,
// and from its answer to the benchmark's watch seeing it.
func printPath(requests *requestLog, ns string, row reactionRow, starts []time.Time, patch, updates []time.Duration) {
	var toPatch, read, patching, toSeen []time.Duration
	reads := 0
	for i, start := range starts {
		k := (i * 7) % row.active
		p, ok := requests.first("PATCH /apis/apps/v1/namespaces/"+ns+"/deployments/"+workloadName(k), start)
		if !ok {
			continue
		}
		toPatch = append(toPatch, p.start.Sub(start))
		patching = append(patching, p.end.Sub(p.start))
		toSeen = append(toSeen, start.Add(patch[i]).Sub(p.end))
		var d time.Duration
		if get, ok := requests.first("GET /api/v1/namespaces/"+ns+"/configmaps/"+cmName(k), start); ok && get.end.Before(p.start) {
			d = get.end.Sub(get.start)
			reads++
		}
		read = append(read, d)
	}
	if len(toPatch) == 0 {
		return
	}
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	fmt.Printf("the path of %d changes, %d of them reading the ConfigMap (the benchmark's own update call beside it):\n", len(toPatch), reads)
	fmt.Printf("%-6s %16s %16s %16s %16s %16s\n", "", "update->patch", "of it a read", "patch", "patch->seen", "update call")
	for _, q := range []float64{0.5, 0.9, 0.99} {
		fmt.Printf("%-6s", fmt.Sprintf("p%g", q*100))
		for _, d := range [][]time.Duration{toPatch, read, patching, toSeen, updates} {
			fmt.Printf(" %16v", r(testenv.Percentile(d, q)))
		}
		fmt.Println()
	}
}

// printOperatorRun prints what the operator's metrics say of the changes:
// how often its workqueue took a monitor in and retried one, how long
// monitors waited in it and were worked on (the histograms' buckets are
// decades: their quantiles are bucket bounds), its own event-to-patch
// time, and its collections and CPU.
func printOperatorRun(b *testing.B, op *benchOperator, run samples, cpu time.Duration, changes int) {
	q := []string{`controller="configmonitor"`}
	mean := func(name string) time.Duration {
		n := run.sum(name+"_count", q...)
		if n == 0 {
			return 0
		}
		return time.Duration(run.sum(name+"_sum", q...) / n * float64(time.Second)).Round(10 * time.Microsecond)
	}
	bound := func(name string, p float64, labels ...string) string {
		return "<= " + seconds(run.quantile(name, p, labels...))
	}
	fmt.Printf("operator during the changes: workqueue adds %.0f, retries %.0f; wait mean %v (p99 %s); work mean %v (p99 %s)\n",
		run.sum("workqueue_adds_total", q...), run.sum("workqueue_retries_total", q...),
		mean("workqueue_queue_duration_seconds"), bound("workqueue_queue_duration_seconds", 0.99, q...),
		mean("workqueue_work_duration_seconds"), bound("workqueue_work_duration_seconds", 0.99, q...))
	fmt.Printf("operator event->patch (deckhand_configmonitor_reaction_seconds): %.0f observed, p50 %s, p99 %s; GC cycles %.0f; CPU %v (%v per change); RSS %s\n",
		run.sum("deckhand_configmonitor_reaction_seconds_count"),
		bound("deckhand_configmonitor_reaction_seconds", 0.5), bound("deckhand_configmonitor_reaction_seconds", 0.99),
		run.sum("go_gc_duration_seconds_count"), cpu, (cpu / time.Duration(changes)).Round(10*time.Microsecond),
		fmt.Sprintf("%.1f MiB", float64(op.rss(b))/1024))
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

// seconds prints a histogram bound given in seconds as a duration.
func seconds(s float64) string {
	if math.IsInf(s, 1) || math.IsNaN(s) {
		return fmt.Sprint(s)
	}
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
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

// idleWrites counts the operator's writes (its client's requests other
// than GET) over 15 s in which nothing changes.
func idleWrites(b *testing.B, op *benchOperator, monitors int) {
	writes := func(s samples) float64 {
		return s.sum("rest_client_requests_total") - s.sum("rest_client_requests_total", `method="GET"`)
	}
	before := op.scrape(b)
	const idle = 15 * time.Second
	time.Sleep(idle)
	n := writes(op.scrape(b).sub(before))
	fmt.Printf("API writes by the operator during %v idle with %d monitors: %.0f (target 0)\n", idle, monitors, n)
	b.ReportMetric(n, "idle-writes")
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
