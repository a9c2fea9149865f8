package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	"github.com/deckhand-dev/deckhand/operator"
)

// BenchmarkOperatorMemory measures the resident memory of the operator (a
// separate process, run as the chart runs it) with every controller on,
// before and after the cluster holds 10,000 ConfigMaps of 10 KiB that no
// monitor names, 1,000 Deployments of 5 replicas (5,000 pods, 1,000
// ReplicaSets) and 1,000 (headless) Services, none of them deckhand's, all
// in the namespace the operator watches. RSS, as the kernel counts it, not
// the Go heap; the Go heap is printed beside it to show where RSS goes.
//
// Setting up the objects takes minutes, starting an operator seconds: to
// compare builds in the same conditions, DECKHAND_BENCH_COMPARE lists
// other operator binaries (label=path,...), measured after this tree's
// build against the same objects, and DECKHAND_BENCH_RUNS (default 1)
// repeats each, interleaved. DECKHAND_BENCH_PROFILE_DIR turns the
// operators' pprof endpoint on and saves each one's heap profile,
// /proc/<pid>/status, smaps and smaps_rollup there.
func BenchmarkOperatorMemory(b *testing.B) {
	const configMaps, size, deployments, replicas = 10000, 10 << 10, 1000, 5
	c := testenv.Client(b)
	// The operator run by the tests watches its release's namespace only:
	// the objects go there.
	ns := testenv.Namespace(b, c)
	profiles := os.Getenv("DECKHAND_BENCH_PROFILE_DIR")
	sets := allControllers()
	if profiles != "" {
		sets = append(sets, "config.pprof-bind-address="+freeAddress(b))
	}
	rel := installChartIn(b, c, ns, localValues(b, sets...))
	load := loadAverage()
	builds := operatorBuilds(b)
	before := measureOperator(b, rel, builds[0], "")
	createConfigMaps(b, c, ns, configMaps, size)
	objs := make([]client.Object, 0, 2*deployments)
	for i := range deployments {
		name := fmt.Sprintf("app-%04d", i)
		objs = append(objs, foreignDeployment(ns, name, replicas, 0), &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			// Headless: the local cluster's Service IP range is too small
			// for 1,000 more.
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, ClusterIP: corev1.ClusterIPNone,
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		})
	}
	testenv.CreateAll(b, c, objs)
	pods := testenv.WaitPods(b, c, ns, deployments*replicas, 4*time.Minute)
	loadAfter := loadAverage()

	fmt.Printf("\nOperator memory, every controller on (%s), run as the chart runs it; load before: %s, once the objects exist: %s\n", strings.Join(operator.Names(), ", "), load, loadAfter)
	fmt.Printf("%-72s %s\n", "operator RSS, cluster without the objects below", before)
	with := fmt.Sprintf("with %d ConfigMaps of %d KiB, %d Deployments, %d Services, %d pods", configMaps, size>>10, deployments, deployments, pods)
	runs := 1
	if n, err := strconv.Atoi(os.Getenv("DECKHAND_BENCH_RUNS")); err == nil && n > 0 {
		runs = n
	}
	for run := 1; run <= runs; run++ {
		for _, build := range builds {
			m := measureOperator(b, rel, build, profiles)
			fmt.Printf("%-72s %s (target < 80 MiB; build %s, run %d, load %s)\n", with, m, build.label, run, loadAverage())
			if build == builds[0] && run == 1 {
				b.ReportMetric(float64(m.rss)/1024, "rss-MiB")
			}
		}
	}
}

// operatorBuild is an operator binary under a label.
type operatorBuild struct{ label, path string }

// operatorBuilds are this tree's build, then those DECKHAND_BENCH_COMPARE
// names (label=path,...).
func operatorBuilds(b *testing.B) []operatorBuild {
	b.Helper()
	builds := []operatorBuild{{"this tree", operatorBinary(b)}}
	for _, item := range strings.Split(os.Getenv("DECKHAND_BENCH_COMPARE"), ",") {
		if item == "" {
			continue
		}
		label, path, ok := strings.Cut(item, "=")
		require.True(b, ok, "DECKHAND_BENCH_COMPARE: %q is not label=path", item)
		builds = append(builds, operatorBuild{label, path})
	}
	return builds
}

// operatorMemory is what the kernel and the Go runtime say of a settled
// operator.
type operatorMemory struct {
	// rss, anon and file are VmRSS, RssAnon and RssFile in KiB.
	rss, anon, file int
	// cpu is the CPU time (user and system) the process used so far:
	// starting, filling its caches and handling their events.
	cpu time.Duration
	// heapInuse, heapIdle, heapReleased and nextGC are the Go runtime's,
	// in bytes, from the metrics endpoint (0 when metrics are off).
	heapInuse, heapIdle, heapReleased, nextGC float64
}

func (m operatorMemory) String() string {
	s := fmt.Sprintf("%s (anon %s, file %s; CPU %v", mib(m.rss), mib(m.anon), mib(m.file), m.cpu.Round(10*time.Millisecond))
	if m.heapInuse > 0 {
		s += fmt.Sprintf("; Go heap in use %.1f MiB, idle not released %.1f MiB, next GC at %.1f MiB",
			m.heapInuse/(1<<20), (m.heapIdle-m.heapReleased)/(1<<20), m.nextGC/(1<<20))
	}
	return s + ")"
}

// measureOperator starts a build of the operator as the chart would, waits
// until it is ready (its caches synced) and settled, and reads its memory;
// with a profile directory it saves its heap profile, status and
// smaps_rollup there.
func measureOperator(b *testing.B, rel installed, build operatorBuild, profiles string) operatorMemory {
	b.Helper()
	op := runOperatorBinaryAsChart(b, build.path, rel.rendered, rel.namespace, "", nil)
	op.WaitReady(b)
	time.Sleep(5 * time.Second)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", op.Pid()))
	require.NoError(b, err)
	m := operatorMemory{rss: statusKiB(status, "VmRSS"), anon: statusKiB(status, "RssAnon"), file: statusKiB(status, "RssFile"), cpu: cpuTime(b, op.Pid())}
	if op.metrics != "" {
		metrics := httpGet(b, "http://"+op.metrics+"/metrics")
		m.heapInuse = metricValue(metrics, "go_memstats_heap_inuse_bytes")
		m.heapIdle = metricValue(metrics, "go_memstats_heap_idle_bytes")
		m.heapReleased = metricValue(metrics, "go_memstats_heap_released_bytes")
		m.nextGC = metricValue(metrics, "go_memstats_next_gc_bytes")
	}
	if profiles != "" {
		saveProfiles(b, op, rel, build, profiles, status)
	}
	require.NoError(b, op.Stop(b), op.Logs())
	return m
}

// saveProfiles writes the operator's heap profile (in use and allocated:
// pprof -sample_index picks one), its memory statistics (debug=1), status
// and smaps_rollup under dir, named by build and pid.
func saveProfiles(b *testing.B, op *HostOperator, rel installed, build operatorBuild, dir string, status []byte) {
	b.Helper()
	pprof, _ := configOf(b, rel.rendered)["pprof-bind-address"].(string)
	require.NotEmpty(b, pprof, "the release has no pprof-bind-address")
	prefix := filepath.Join(dir, fmt.Sprintf("%s-%d", strings.ReplaceAll(build.label, " ", "-"), op.Pid()))
	require.NoError(b, os.MkdirAll(dir, 0o755))
	rollup, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", op.Pid()))
	require.NoError(b, err)
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", op.Pid()))
	require.NoError(b, err)
	files := map[string]string{
		".heap.pb.gz":     httpGet(b, "http://"+pprof+"/debug/pprof/heap"),
		".heap.txt":       httpGet(b, "http://"+pprof+"/debug/pprof/heap?debug=1"),
		".status":         string(status),
		".smaps_rollup":   string(rollup),
		".smaps":          string(smaps),
		".goroutines.txt": httpGet(b, "http://"+pprof+"/debug/pprof/goroutine?debug=1"),
	}
	for suffix, body := range files {
		require.NoError(b, os.WriteFile(prefix+suffix, []byte(body), 0o644))
	}
}

// cpuTime is a process's user and system CPU time, from /proc/<pid>/stat
// (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(b, err)
	// The command name, in parentheses, may hold spaces: count after it.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, err := strconv.Atoi(fields[11])
	require.NoError(b, err)
	stime, err := strconv.Atoi(fields[12])
	require.NoError(b, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// statusKiB is a "Name:  123 kB" line of /proc/<pid>/status, in KiB.
func statusKiB(status []byte, name string) int {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

// metricValue is an unlabelled sample of the Prometheus text exposition.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

func httpGet(b *testing.B, url string) string {
	b.Helper()
	resp, err := http.Get(url)
	require.NoError(b, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b, err)
	require.Equal(b, http.StatusOK, resp.StatusCode, "%s: %s", url, body)
	return string(body)
}

// BenchmarkOperatorMemoryPerController measures the operator's RSS with
// one controller at a time, and all, with 3,000 Deployments of about
// 1 KiB that no TDSet owns: a controller must not pay for objects it will
// never touch.
func BenchmarkOperatorMemoryPerController(b *testing.B) {
	const deployments = 3000
	c := testenv.Client(b)
	ns := testenv.Namespace(b, c)
	objs := make([]client.Object, deployments)
	for i := range objs {
		objs[i] = foreignDeployment(ns, fmt.Sprintf("foreign-%04d", i), 0, 600)
	}
	testenv.CreateAll(b, c, objs)

	fmt.Printf("\nOperator RSS by controller, with %d foreign Deployments of ~1 KiB in the cluster; load before: %s\n", deployments, loadAverage())
	rows := append([]string{}, operator.Names()...)
	rows = append(rows, "all")
	for _, row := range rows {
		sets := disableAll()
		if row == "all" {
			sets = allControllers()
		} else {
			for _, ctl := range operator.Controllers {
				if ctl.Name == row {
					sets = append(sets, "controllers."+ctl.ValuesKey+".enabled=true")
				}
			}
			if row == "jmxexporter" {
				// pods/exec in every namespace must be asked for.
				sets = append(sets, "controllers.jmxExporter.allNamespaces=true")
			}
		}
		rss := operatorRSS(b, installChartIn(b, c, ns, localValues(b, sets...)))
		fmt.Printf("%-20s %s\n", row, mib(rss))
		b.ReportMetric(float64(rss)/1024, "rss-MiB/"+row)
	}
}

// foreignDeployment is a user's Deployment: no deckhand label, padded
// with an annotation of pad bytes.
func foreignDeployment(ns, name string, replicas int32, pad int) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.0"}}},
			},
		},
	}
	if pad > 0 {
		d.Annotations = map[string]string{"example.com/notes": strings.Repeat("n", pad)}
	}
	return d
}

func mib(kib int) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

// loadAverage is the host's 1-, 5- and 15-minute load: other work shares
// the cores, and the numbers mean little without it.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(raw))[:3], " ")
}

// BenchmarkConfigMonitorMemory measures the operator's resident memory (a
// separate process, run as the chart runs it, every controller enabled)
// with 10,000 ConfigMaps of 10 KiB that no monitor names (~100 MiB of
// data), next to the same operator before they exist and to a plain
// ConfigMap informer (what a full cache holds), all in the same run.
func BenchmarkConfigMonitorMemory(b *testing.B) {
	const count, size = 10000, 10 << 10
	c := testenv.Client(b)
	data := testenv.Namespace(b, c)
	rel := installChartIn(b, c, data, localValues(b, allControllers()...))
	before := operatorRSS(b, rel)
	createConfigMaps(b, c, data, count, size)
	after := operatorRSS(b, rel)
	informer := fullInformerHeap(b, data)

	fmt.Printf("\nOperator memory, every controller on, with %d unreferenced ConfigMaps of %d KiB (%.0f MiB of data)\n", count, size>>10, float64(count*size)/(1<<20))
	fmt.Printf("%-56s %s\n", "operator RSS before the ConfigMaps exist", mib(before))
	fmt.Printf("%-56s %s (target < 80 MiB)\n", "operator RSS with them", mib(after))
	fmt.Printf("%-56s %.1f MiB\n", "for comparison: heap of a full ConfigMap informer", float64(informer)/(1<<20))
	b.ReportMetric(float64(after)/1024, "rss-MiB")
}

// createConfigMaps creates count ConfigMaps of size bytes in ns.
func createConfigMaps(b *testing.B, c client.Client, ns string, count, size int) {
	b.Helper()
	payload := strings.Repeat("x", size)
	objs := make([]client.Object, count)
	for i := range objs {
		objs[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("unreferenced-%05d", i)}, Data: map[string]string{"blob": payload}}
	}
	testenv.CreateAll(b, c, objs)
}

// operatorRSS starts the operator as the chart would, waits until it is
// ready (its caches synced) and settled, and returns its VmRSS in KiB.
func operatorRSS(b *testing.B, rel installed) int {
	b.Helper()
	op := rel.runOperator(b)
	time.Sleep(5 * time.Second)
	rss := testenv.RSS(b, op.cmd.Process.Pid)
	require.NoError(b, op.Stop(b), op.Logs())
	return rss
}

// fullInformerHeap is the heap a client-go informer caching the namespace's
// ConfigMaps in full takes, as a config-reload controller that watches
// whole ConfigMaps would.
func fullInformerHeap(b *testing.B, ns string) uint64 {
	b.Helper()
	cs, err := kubernetes.NewForConfig(testenv.RESTConfig(b))
	require.NoError(b, err)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	base := heap()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().ConfigMaps().Informer()
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	used := heap() - min(base, heap())
	runtime.KeepAlive(inf)
	return used
}
