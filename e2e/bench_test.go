package e2e

import (
	"fmt"
	"os"
	"runtime"
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
// the Go heap.
func BenchmarkOperatorMemory(b *testing.B) {
	const configMaps, size, deployments, replicas = 10000, 10 << 10, 1000, 5
	c := testenv.Client(b)
	// The operator run by the tests watches its release's namespace only:
	// the objects go there.
	ns := testenv.Namespace(b, c)
	rel := installChartIn(b, c, ns, localValues(b, enableAll()...))
	load := loadAverage()
	before := operatorRSS(b, rel)
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
	after := operatorRSS(b, rel)

	fmt.Printf("\nOperator memory, every controller on (%s), run as the chart runs it; load before: %s\n", strings.Join(operator.Names(), ", "), load)
	fmt.Printf("%-72s %s\n", "operator RSS, cluster without the objects below", mib(before))
	fmt.Printf("%-72s %s (target < 80 MiB)\n", fmt.Sprintf("with %d ConfigMaps of %d KiB, %d Deployments, %d Services, %d pods", configMaps, size>>10, deployments, deployments, pods), mib(after))
	b.ReportMetric(float64(after)/1024, "rss-MiB")
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
			sets = enableAll()
		} else {
			for _, ctl := range operator.Controllers {
				if ctl.Name == row {
					sets = append(sets, "controllers."+ctl.ValuesKey+".enabled=true")
				}
			}
		}
		rss := operatorRSS(b, installChartIn(b, c, ns, localValues(b, sets...)))
		fmt.Printf("%-20s %s\n", row, mib(rss))
		b.ReportMetric(float64(rss)/1024, "rss-MiB/"+row)
	}
}

// enableAll turns every controller on.
func enableAll() []string {
	var sets []string
	for _, c := range operator.Controllers {
		sets = append(sets, "controllers."+c.ValuesKey+".enabled=true")
	}
	return sets
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
// separate process, run as the chart runs it, only ConfigMonitor enabled)
// with 10,000 ConfigMaps of 10 KiB that no monitor names (~100 MiB of
// data), next to the same operator before they exist and to a plain
// ConfigMap informer (what a full cache holds), all in the same run.
func BenchmarkConfigMonitorMemory(b *testing.B) {
	const count, size = 10000, 10 << 10
	c := testenv.Client(b)
	data := testenv.Namespace(b, c)
	rel := installChartIn(b, c, data, localValues(b, append(disableAll(), "controllers.configMonitor.enabled=true")...))
	before := operatorRSS(b, rel)
	createConfigMaps(b, c, data, count, size)
	after := operatorRSS(b, rel)
	informer := fullInformerHeap(b, data)

	fmt.Printf("\nConfigMonitor memory with %d unreferenced ConfigMaps of %d KiB (%.0f MiB of data)\n", count, size>>10, float64(count*size)/(1<<20))
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
