package faults

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/e2e"
	"github.com/deckhand-dev/deckhand/internal/testenv"
	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
	"github.com/deckhand-dev/deckhand/operator/configmonitor"
)

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// A storm's size and pace. make test runs stormTest: every behaviour it
// checks (each workload rolls exactly once, paced, the API server ready,
// the operator within its memory limit) holds at any size, and 250
// workloads cost a quarter of 1,000's time and CPU on a machine the whole
// suite keeps busy. make bench runs stormBench, the size
// docs/performance.md reports. The pace is raised from the default (1/s,
// burst 100) so a storm takes seconds, not a quarter of an hour; the
// pacing checked is the same.
type stormShape struct {
	size, rate, burst int
}

var (
	stormTest  = stormShape{size: 250, rate: 25, burst: 25}
	stormBench = stormShape{size: 1000, rate: 50, burst: 50}
)

// A configuration storm: ConfigMaps, each used by its own Deployment and
// watched by its own monitor, all changed at once. Every workload rolls
// exactly once, no faster than the restart limit lets it, while the API
// server stays ready and the operator stays within the chart's memory limit.
func TestConfigStormEveryWorkloadRollsOncePacedAndTheAPIServerStaysHealthy(t *testing.T) {
	configStorm(t, stormTest)
}

// BenchmarkConfigStorm is the storm at 1,000 workloads: how long they take
// to roll, the API server's latency and the operator's memory meanwhile
// (the same checks as the test).
func BenchmarkConfigStorm(b *testing.B) {
	for range b.N {
		took := configStorm(b, stormBench)
		b.ReportMetric(took.Seconds(), "s-to-roll-all")
	}
}

// configStorm runs one storm of the given shape in a new release and
// returns how long every workload took to roll.
func configStorm(t testing.TB, shape stormShape) time.Duration {
	c, ns, rendered := release(t, "leaderElection.enabled=false",
		"config.configmonitor-restarts-per-second="+strconv.Itoa(shape.rate),
		"config.configmonitor-restart-burst="+strconv.Itoa(shape.burst))
	s := newStorm(t, c, ns, shape.size)
	op := e2e.RunOperatorAsChart(t, rendered, ns)
	op.WaitReady(t)
	s.waitTakenIn(t)

	idle := startHealthSampler(t, ns, op.Pid())
	time.Sleep(3 * time.Second)
	floor := idle.stop()
	sampler := startHealthSampler(t, ns, op.Pid())
	changed := time.Now()
	s.changeAll(t)
	s.waitRolled(t, 5*time.Minute)
	took := time.Since(changed)
	health := sampler.stop()

	s.rolledExactlyOnce(t)
	limit := operatorMemoryLimit(t, rendered)
	assert.Zero(t, health.readyzFailures, "/readyz failed during the storm")
	assert.Less(t, int64(health.peakRSS)<<10, limit, "operator RSS passed the chart's memory limit")
	minimum := time.Duration(float64(shape.size-shape.burst) / float64(shape.rate) * float64(time.Second))
	assert.GreaterOrEqual(t, took, minimum, "the storm rolled faster than the restart limit allows")
	assert.True(t, op.Running())
	assert.Empty(t, op.Failures())
	t.Logf("RESULT config-storm: %d ConfigMaps changed at once, %d workloads rolled in %.1f s (limit %d/s, burst %d: at least %.0f s); /readyz %d checks, %d failed, p50 %v, max %v; GET ConfigMap p50 %v, p99 %v, max %v (before the storm: p50 %v, max %v); operator RSS %.1f MiB before, peak %.1f MiB (chart limit %d MiB); every workload rolled exactly once",
		shape.size, shape.size, took.Seconds(), shape.rate, shape.burst, minimum.Seconds(),
		len(health.readyz), health.readyzFailures, ms(testenv.Percentile(health.readyz, 0.5)), ms(testenv.Percentile(health.readyz, 1)),
		ms(testenv.Percentile(health.get, 0.5)), ms(testenv.Percentile(health.get, 0.99)), ms(testenv.Percentile(health.get, 1)),
		ms(testenv.Percentile(floor.get, 0.5)), ms(testenv.Percentile(floor.get, 1)),
		float64(health.firstRSS)/1024, float64(health.peakRSS)/1024, limit>>20)
	return took
}

// storm is size ConfigMaps, each used by one Deployment and watched by
// one monitor, and each Deployment's revision before the change.
type storm struct {
	c        client.Client
	ns       string
	size     int
	baseline map[string]int
	hashes   map[string]string
}

func stormName(i int) string { return fmt.Sprintf("s-%04d", i) }

func newStorm(t testing.TB, c client.Client, ns string, size int) *storm {
	t.Helper()
	objs := make([]client.Object, 0, 3*size)
	for i := range size {
		name := stormName(i)
		labels := map[string]string{"storm": name}
		objs = append(objs,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"v": "1"}},
			&appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](1),
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox",
							EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}}}},
					},
				},
			},
			&magalixv1.ConfigMonitor{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec:       magalixv1.ConfigMonitorSpec{ConfigMap: name, PodSelector: labels},
			})
	}
	testenv.CreateAll(t, c, objs)
	return &storm{c: c, ns: ns, size: size, baseline: map[string]int{}, hashes: map[string]string{}}
}

// waitTakenIn waits until every monitor holds its configuration's hash with
// nothing pending and every Deployment is ready, and records revisions.
func (s *storm) waitTakenIn(t testing.TB) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		monitors := s.monitors(ct)
		for _, m := range monitors {
			require.NotEmpty(ct, m.Status.ObservedHash, m.Name)
			require.Empty(ct, m.Status.PendingWorkloads, m.Name)
		}
		for _, d := range s.deployments(ct) {
			require.Equal(ct, int32(1), d.Status.ReadyReplicas, d.Name)
			s.baseline[d.Name] = revision(d)
		}
		for _, m := range monitors {
			s.hashes[m.Name] = m.Status.ObservedHash
		}
	}, 5*time.Minute, 2*time.Second)
}

// changeAll writes new data into every ConfigMap, 16 writes in flight.
func (s *storm) changeAll(t testing.TB) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, s.size)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < s.size; i += 16 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: stormName(i), Namespace: s.ns}}
				patch := client.RawPatch("application/merge-patch+json", []byte(`{"data":{"v":"2"}}`))
				if err := s.c.Patch(context.Background(), cm, patch); err != nil {
					errs <- err
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

// waitRolled waits until every monitor has a new hash, nothing pending,
// and each Deployment's template carries its monitor's new hash.
func (s *storm) waitRolled(t testing.TB, within time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		observed := map[string]string{}
		for _, m := range s.monitors(ct) {
			require.NotEqual(ct, s.hashes[m.Name], m.Status.ObservedHash, m.Name)
			require.Empty(ct, m.Status.PendingWorkloads, m.Name)
			observed[m.Name] = m.Status.ObservedHash
		}
		for _, d := range s.deployments(ct) {
			spec := magalixv1.ConfigMonitorSpec{ConfigMap: d.Name}
			require.Equal(ct, observed[d.Name], d.Spec.Template.Annotations[configmonitor.AnnotationKey(&spec)], d.Name)
		}
	}, within, time.Second)
}

// rolledExactlyOnce: each Deployment made one new revision, and no later.
// The revision is the controller manager's to write, after the operator
// changed the template (waitRolled saw that): with 1,000 Deployments
// changed at once on a loaded machine it has lagged by more than two
// minutes.
func (s *storm) rolledExactlyOnce(t testing.TB) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, d := range s.deployments(ct) {
			require.Equal(ct, s.baseline[d.Name]+1, revision(d), d.Name)
		}
	}, 6*time.Minute, time.Second)
	time.Sleep(2 * time.Second)
	for _, d := range s.deployments(t) {
		assert.Equal(t, s.baseline[d.Name]+1, revision(d), "%s rolled again", d.Name)
	}
}

func (s *storm) monitors(t require.TestingT) []magalixv1.ConfigMonitor {
	list := &magalixv1.ConfigMonitorList{}
	require.NoError(t, s.c.List(context.Background(), list, client.InNamespace(s.ns)))
	require.Len(t, list.Items, s.size)
	return list.Items
}

func (s *storm) deployments(t require.TestingT) []appsv1.Deployment {
	list := &appsv1.DeploymentList{}
	require.NoError(t, s.c.List(context.Background(), list, client.InNamespace(s.ns)))
	// The chart's own Deployment (no replicas) shares the namespace.
	ours := slices.DeleteFunc(list.Items, func(d appsv1.Deployment) bool { return !strings.HasPrefix(d.Name, "s-") })
	require.Len(t, ours, s.size)
	return ours
}

// health is what the sampler saw while the storm ran.
type health struct {
	readyz, get       []time.Duration
	readyzFailures    int
	firstRSS, peakRSS int
}

type healthSampler struct {
	done   chan struct{}
	result chan health
}

// startHealthSampler asks the API server for /readyz and for one
// ConfigMap every 250 ms, timing both, and reads the operator's RSS.
func startHealthSampler(t testing.TB, ns string, pid int) *healthSampler {
	t.Helper()
	cs, err := kubernetes.NewForConfig(testenv.RESTConfig(t))
	require.NoError(t, err)
	s := &healthSampler{done: make(chan struct{}), result: make(chan health, 1)}
	go func() {
		var h health
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			start := time.Now()
			body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
			h.readyz = append(h.readyz, time.Since(start))
			if err != nil || string(body) != "ok" {
				h.readyzFailures++
			}
			start = time.Now()
			if _, err := cs.CoreV1().ConfigMaps(ns).Get(context.Background(), stormName(0), metav1.GetOptions{}); err == nil {
				h.get = append(h.get, time.Since(start))
			}
			if rss, err := testenv.ReadRSS(pid); err == nil {
				h.peakRSS = max(h.peakRSS, rss)
				if h.firstRSS == 0 {
					h.firstRSS = rss
				}
			}
			select {
			case <-s.done:
				s.result <- h
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *healthSampler) stop() health {
	close(s.done)
	return <-s.result
}

// operatorMemoryLimit is the memory limit the chart gives the operator's
// container, in bytes.
func operatorMemoryLimit(t testing.TB, r *e2e.Rendered) int64 {
	t.Helper()
	d := e2e.Into[appsv1.Deployment](t, r.Operator(t, "Deployment"))
	limit, ok := d.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
	require.True(t, ok, "the chart sets no memory limit")
	return limit.Value()
}
