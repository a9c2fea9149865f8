package e2e

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// BenchmarkConfigMonitorMemory measures the operator's resident memory (a
// separate process, run as the chart runs it, only ConfigMonitor enabled)
// with 10,000 ConfigMaps of 10 KiB that no monitor names (~100 MiB of
// data), next to the same operator before they exist and to a plain
// ConfigMap informer (what a full cache holds), all in the same run.
func BenchmarkConfigMonitorMemory(b *testing.B) {
	const count, size = 10000, 10 << 10
	rel := installChart(b, testenv.Client(b), localValues(b, append(disableAll(), "controllers.configMonitor.enabled=true")...))
	before := operatorRSS(b, rel)
	data := namespaceWithConfigMaps(b, count, size)
	after := operatorRSS(b, rel)
	informer := fullInformerHeap(b, data)

	mib := func(kib int) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
	fmt.Printf("\nConfigMonitor memory with %d unreferenced ConfigMaps of %d KiB (%.0f MiB of data)\n", count, size>>10, float64(count*size)/(1<<20))
	fmt.Printf("%-56s %s\n", "operator RSS before the ConfigMaps exist", mib(before))
	fmt.Printf("%-56s %s (target < 80 MiB)\n", "operator RSS with them", mib(after))
	fmt.Printf("%-56s %.1f MiB\n", "for comparison: heap of a full ConfigMap informer", float64(informer)/(1<<20))
	b.ReportMetric(float64(after)/1024, "rss-MiB")
}

// namespaceWithConfigMaps creates count ConfigMaps of size bytes in a new
// namespace and returns it.
func namespaceWithConfigMaps(b *testing.B, count, size int) string {
	b.Helper()
	c := testenv.Client(b)
	ns := testenv.Namespace(b, c)
	payload := strings.Repeat("x", size)
	objs := make([]client.Object, count)
	for i := range objs {
		objs[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("unreferenced-%05d", i)}, Data: map[string]string{"blob": payload}}
	}
	testenv.CreateAll(b, c, objs)
	return ns
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
