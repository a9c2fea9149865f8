package configmonitor_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/internal/testenv"
	"github.com/deckhand-dev/deckhand/operator/manager"
)

// benchOperator is the operator a reaction benchmark measures: this tree's
// cmd/deckhand as a process of its own, every controller on, as a user
// runs it on the host (make run), so its runtime settings (GOGC, the soft
// memory limit) are measured too. DECKHAND_BENCH_IN_PROCESS=1 runs the
// same manager (manager.New, every controller) inside the benchmark's
// process instead, where go test's -cpuprofile, -blockprofile and
// -mutexprofile see it.
type benchOperator struct {
	// pid is the operator's process, 0 in the benchmark's process.
	pid int
	// metricsAddr and pprofAddr are its endpoints ("" in-process).
	metricsAddr, pprofAddr string
	// requests times the operator's API requests (in-process only).
	requests *requestLog
}

// requestLog is when each API request started and ended, by method and
// path.
type requestLog struct {
	mu    sync.Mutex
	spans map[string][]span
}

type span struct{ start, end time.Time }

func (l *requestLog) add(key string, s span) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spans[key] = append(l.spans[key], s)
}

// first is the first request to key that started after t.
func (l *requestLog) first(key string, after time.Time) (span, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.spans[key] {
		if s.start.After(after) {
			return s, true
		}
	}
	return span{}, false
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

var (
	loggerOnce      sync.Once
	benchBinaryOnce sync.Once
	benchBinary     string
	benchBinaryErr  error
)

// operatorBinary builds cmd/deckhand once per benchmark process, unless
// DECKHAND_BENCH_OPERATOR names another build to measure (an older one, to
// compare in the same conditions).
func operatorBinary(b *testing.B) string {
	b.Helper()
	if path := os.Getenv("DECKHAND_BENCH_OPERATOR"); path != "" {
		return path
	}
	benchBinaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deckhand-bench-")
		if err != nil {
			benchBinaryErr = err
			return
		}
		benchBinary = filepath.Join(dir, "deckhand")
		cmd := exec.Command("go", "build", "-o", benchBinary, "./cmd/deckhand")
		cmd.Dir = testenv.Root(b)
		if out, err := cmd.CombinedOutput(); err != nil {
			benchBinaryErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(b, benchBinaryErr)
	return benchBinary
}

// operatorArgs are the operator's options for a benchmark in namespace ns:
// every controller (the default), the restart limit raised so the
// benchmark measures reaction rather than pacing, and no leader election.
func operatorArgs(ns string, listen ...string) []string {
	args := []string{
		"--watch-namespaces=" + ns,
		"--configmonitor-restarts-per-second=1000000",
		"--configmonitor-restart-burst=1000000",
		// kwok's pods run no instance agent: never ask them.
		"--database-failover-default=false",
		"--log-level=error",
	}
	return append(args, listen...)
}

// quietLogs logs errors only: the benchmark's own clients, and an operator
// in this process, would drown the table.
func quietLogs() {
	loggerOnce.Do(func() { ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel))) })
}

func startBenchOperator(b *testing.B, ns string) *benchOperator {
	b.Helper()
	if os.Getenv("DECKHAND_BENCH_IN_PROCESS") == "1" {
		return startInProcess(b, ns)
	}
	metricsAddr, health, pprofAddr := freeAddress(b), freeAddress(b), freeAddress(b)
	args := append(operatorArgs(ns,
		"--metrics-bind-address="+metricsAddr,
		"--health-probe-bind-address="+health,
		"--pprof-bind-address="+pprofAddr),
		"--kubeconfig="+testenv.Kubeconfig(b))
	cmd := exec.Command(operatorBinary(b), args...)
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(b, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(45 * time.Second):
			_ = cmd.Process.Kill()
		}
		if b.Failed() {
			b.Logf("operator logs:\n%s", logs.String())
		}
	})
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true,
		func(ctx context.Context) (bool, error) {
			select {
			case err := <-done:
				return false, fmt.Errorf("operator exited: %v", err)
			default:
			}
			resp, err := http.Get("http://" + health + "/readyz")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
	require.NoError(b, err, "operator not ready:\n%s", logs.String())
	return &benchOperator{pid: cmd.Process.Pid, metricsAddr: metricsAddr, pprofAddr: pprofAddr}
}

// startInProcess runs the operator's manager, as manager.New builds it,
// in this process until the benchmark ends.
func startInProcess(b *testing.B, ns string) *benchOperator {
	b.Helper()
	cfg, err := manager.Load(operatorArgs(ns, "--metrics-bind-address=0", "--health-probe-bind-address=0"))
	require.NoError(b, err)
	cfg.ManyPerProcess = true
	rc := testenv.RESTConfig(b)
	rc.QPS, rc.Burst = cfg.KubeAPIQPS, cfg.KubeAPIBurst
	requests := &requestLog{spans: map[string][]span{}}
	rc.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			start := time.Now()
			resp, err := next.RoundTrip(req)
			requests.add(req.Method+" "+req.URL.Path, span{start, time.Now()})
			return resp, err
		})
	})
	mgr, _, err := manager.New(cfg, rc)
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("operator stopped with an error: %v", err)
		}
	})
	syncCtx, syncCancel := context.WithTimeout(ctx, 2*time.Minute)
	defer syncCancel()
	require.True(b, mgr.GetCache().WaitForCacheSync(syncCtx), "operator caches did not sync")
	return &benchOperator{requests: requests}
}

// cpu is the operator process's user and system time so far (the
// benchmark's own in-process).
func (o *benchOperator) cpu(b *testing.B) time.Duration {
	b.Helper()
	pid := o.pid
	if pid == 0 {
		pid = os.Getpid()
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(b, err)
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	utime, err := strconv.Atoi(fields[11])
	require.NoError(b, err)
	stime, err := strconv.Atoi(fields[12])
	require.NoError(b, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// rss is the operator process's VmRSS in KiB.
func (o *benchOperator) rss(b *testing.B) int {
	b.Helper()
	pid := o.pid
	if pid == 0 {
		pid = os.Getpid()
	}
	return testenv.RSS(b, pid)
}

// scrape reads the operator's metrics: every sample by its series as the
// text format writes it (name{label="value",...}, labels sorted).
func (o *benchOperator) scrape(b *testing.B) samples {
	b.Helper()
	var text []byte
	if o.metricsAddr != "" {
		resp, err := http.Get("http://" + o.metricsAddr + "/metrics")
		require.NoError(b, err)
		defer resp.Body.Close()
		text, err = io.ReadAll(resp.Body)
		require.NoError(b, err)
	} else {
		families, err := metrics.Registry.Gather()
		require.NoError(b, err)
		var buf bytes.Buffer
		enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, f := range families {
			require.NoError(b, enc.Encode(f))
		}
		text = buf.Bytes()
	}
	s := samples{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			s[line[:i]] = v
		}
	}
	return s
}

// profile saves the operator's pprof profile name (e.g. "profile?seconds=10",
// "heap") to dir; in-process, go test's profile flags do this instead.
func (o *benchOperator) profile(b *testing.B, dir, name, file string) {
	b.Helper()
	if o.pprofAddr == "" {
		return
	}
	resp, err := http.Get("http://" + o.pprofAddr + "/debug/pprof/" + name)
	if err != nil {
		b.Logf("profile %s: %v", name, err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.NoError(b, os.MkdirAll(dir, 0o755))
	require.NoError(b, os.WriteFile(filepath.Join(dir, file), body, 0o644))
}

// processCPU is the CPU time (user and system) every process on the host
// used so far, by command name.
func processCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range dirs {
		stat, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(string(stat[end+2:]))
		utime, _ := strconv.Atoi(fields[11])
		stime, _ := strconv.Atoi(fields[12])
		out[string(stat[open+1:end])] += time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return out
}

// busiest names the processes that used the most CPU between two
// processCPU readings.
func busiest(before, after map[string]time.Duration, n int) string {
	type use struct {
		name string
		cpu  time.Duration
	}
	var uses []use
	for name, t := range after {
		if d := t - before[name]; d > 0 {
			uses = append(uses, use{name, d})
		}
	}
	slices.SortFunc(uses, func(a, b use) int { return cmpFloat(float64(b.cpu), float64(a.cpu)) })
	var parts []string
	for _, u := range uses[:min(n, len(uses))] {
		parts = append(parts, fmt.Sprintf("%s %v", u.name, u.cpu))
	}
	return strings.Join(parts, ", ")
}

// apiServerProfile saves the API server's CPU profile over the next secs
// seconds to dir.
func apiServerProfile(b *testing.B, dir string, secs int) {
	cs, err := kubernetes.NewForConfig(testenv.RESTConfig(b))
	if err != nil {
		b.Logf("API server profile: %v", err)
		return
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(secs)).Timeout(time.Duration(secs+30) * time.Second).DoRaw(context.Background())
	if err != nil {
		b.Logf("API server profile: %v", err)
		return
	}
	_ = os.MkdirAll(dir, 0o755)
	_ = os.WriteFile(filepath.Join(dir, "apiserver-cpu.pb.gz"), body, 0o644)
}

// samples are metric samples by series.
type samples map[string]float64

// sub is s minus before, series by series.
func (s samples) sub(before samples) samples {
	d := samples{}
	for k, v := range s {
		d[k] = v - before[k]
	}
	return d
}

// sum adds the series of metric name whose labels include every
// label="value" pair given.
func (s samples) sum(name string, labels ...string) float64 {
	total := 0.0
	for k, v := range s {
		if metricName(k) == name && hasLabels(k, labels) {
			total += v
		}
	}
	return total
}

// quantile estimates quantile q of the histogram name (from its _bucket
// series whose labels include labels) as the upper bound of the bucket it
// falls in: the buckets are coarse, so it is an upper bound.
func (s samples) quantile(name string, q float64, labels ...string) float64 {
	type bucket struct{ le, count float64 }
	var buckets []bucket
	for k, v := range s {
		if metricName(k) != name+"_bucket" || !hasLabels(k, labels) {
			continue
		}
		le := labelValue(k, "le")
		bound := math.Inf(1)
		if le != "+Inf" {
			bound, _ = strconv.ParseFloat(le, 64)
		}
		i := slices.IndexFunc(buckets, func(x bucket) bool { return x.le == bound })
		if i < 0 {
			buckets = append(buckets, bucket{bound, 0})
			i = len(buckets) - 1
		}
		buckets[i].count += v
	}
	slices.SortFunc(buckets, func(a, b bucket) int { return cmpFloat(a.le, b.le) })
	if len(buckets) == 0 || buckets[len(buckets)-1].count == 0 {
		return math.NaN()
	}
	want := q * buckets[len(buckets)-1].count
	for _, bk := range buckets {
		if bk.count >= want {
			return bk.le
		}
	}
	return math.Inf(1)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func metricName(series string) string {
	if i := strings.IndexByte(series, '{'); i >= 0 {
		return series[:i]
	}
	return series
}

func hasLabels(series string, labels []string) bool {
	for _, l := range labels {
		if !strings.Contains(series, l) {
			return false
		}
	}
	return true
}

func labelValue(series, label string) string {
	_, rest, ok := strings.Cut(series, label+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

func freeAddress(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer l.Close()
	return l.Addr().String()
}
