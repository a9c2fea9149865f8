// Package badinput applies bad objects to every deckhand CRD on the local
// cluster's real API server: a catalogue written by hand
// (catalogue_test.go) and specs generated from each CRD's OpenAPI schema
// (generate_test.go). What admission refuses must come with a message a
// person understands; what it accepts, the controllers (run here as the
// chart's ServiceAccount) must handle without crashing, looping or
// touching another namespace.
package badinput

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/blogpost"
	"github.com/deckhand-dev/deckhand/operator/configmonitor"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/jmxexporter"
	"github.com/deckhand-dev/deckhand/operator/mysqlcluster"
	"github.com/deckhand-dev/deckhand/operator/tdset"
)

// kinds maps each CRD kind to its group/version and plural, and says
// whether a deckhand controller serves it.
var kinds = map[string]struct {
	gv         schema.GroupVersion
	plural     string
	controlled bool
}{
	"BlogPost":              {schema.GroupVersion{Group: "iximiuz.com", Version: "v1alpha1"}, "blogposts", true},
	"ConfigMonitor":         {schema.GroupVersion{Group: "magalix.com", Version: "v1"}, "configmonitors", true},
	"TDSet":                 {schema.GroupVersion{Group: "schedule.rs", Version: "v1"}, "tdsets", true},
	"Database":              {schema.GroupVersion{Group: "stable.imaginedata.co", Version: "v1"}, "databases", true},
	"DatabaseBackup":        {schema.GroupVersion{Group: "stable.imaginedata.co", Version: "v1"}, "databasebackups", true},
	"PrometheusJmxExporter": {schema.GroupVersion{Group: "banzaicloud.com", Version: "v1alpha1"}, "prometheusjmxexporters", true},
	"MySQLCluster":          {schema.GroupVersion{Group: "cr.mysqloperator.grtl.github.com", Version: "v1"}, "mysqlclusters", true},
	"MySQLBackupSchedule":   {schema.GroupVersion{Group: "cr.mysqloperator.grtl.github.com", Version: "v1"}, "mysqlbackupschedules", true},
	"MySQLBackupInstance":   {schema.GroupVersion{Group: "cr.mysqloperator.grtl.github.com", Version: "v1"}, "mysqlbackupinstances", true},
}

// operatorUnderTest is every deckhand controller in one manager, as the
// chart's ServiceAccount, watching one namespace, with its requests
// counted.
type operatorUnderTest struct {
	ns string
	// requests counts every request; outside those to another namespace.
	requests, outside *atomic.Int64
	// outsidePaths records what those were, for the failure message.
	outsidePaths *pathLog
}

type pathLog struct{ paths atomic.Value }

func (l *pathLog) add(p string) {
	old, _ := l.paths.Load().([]string)
	if len(old) < 20 {
		l.paths.Store(append(append([]string{}, old...), p))
	}
}

func (l *pathLog) list() []string { p, _ := l.paths.Load().([]string); return p }

// startOperator runs the six controllers for ns. The cleanup deletes the
// namespace while they still run, so their finalizers let go.
func startOperator(t *testing.T, ns string) *operatorUnderTest {
	t.Helper()
	o := &operatorUnderTest{ns: ns, outsidePaths: &pathLog{}}
	// The JMX exporter's pods/exec is granted only where listed (the chart
	// refuses it cluster-wide unless asked): here, in ns.
	jmx := map[string]map[string]any{"jmxExporter": {"namespaces": []any{ns}}}
	base := testenv.ChartRBACConfigWithValues(t, ns, jmx, blogpost.Name, configmonitor.Name, tdset.Name, database.Name, jmxexporter.Name, mysqlcluster.Name)
	rc, outside := testenv.Counting(base, func(req *http.Request) bool {
		other := inAnotherNamespace(req.URL.Path, ns)
		if other {
			o.outsidePaths.add(req.Method + " " + req.URL.Path)
		}
		return other
	})
	rc, all := testenv.Counting(rc, func(*http.Request) bool { return true })
	o.requests, o.outside = all, outside
	testenv.StartController(t, rc, func(mgr ctrl.Manager) error {
		if err := blogpost.Setup(mgr); err != nil {
			return err
		}
		if err := configmonitor.Setup(mgr, configmonitor.Options{Namespaces: []string{ns}}); err != nil {
			return err
		}
		if err := tdset.Setup(mgr); err != nil {
			return err
		}
		if err := database.Setup(mgr, database.Options{WatchNamespaces: []string{ns}, InstanceDial: testenv.NoPodDial}); err != nil {
			return err
		}
		if err := mysqlcluster.Setup(mgr, mysqlcluster.Options{WatchNamespaces: []string{ns}}); err != nil {
			return err
		}
		// No pod runs in the namespace, so nothing is ever attached: the
		// helper and agent are never read.
		return jmxexporter.Setup(mgr, jmxexporter.Options{TargetDir: "/tmp/deckhand-badinput"})
	}, ns)
	testenv.ReleaseNamespaceOnCleanup(t, ns, &dbv1.DatabaseList{}, &dbv1.DatabaseBackupList{}, &grtlv1.MySQLClusterList{}, &grtlv1.MySQLBackupInstanceList{})
	return o
}

// inAnotherNamespace says whether an API path names a namespace other
// than ns (cluster-scoped reads, such as CRDs and StorageClasses, name
// none).
func inAnotherNamespace(path, ns string) bool {
	_, rest, ok := strings.Cut(path, "/namespaces/")
	if !ok {
		return false
	}
	name, _, _ := strings.Cut(rest, "/")
	return name != ns
}

// panics is controller-runtime's count of reconcile panics in this
// process (it recovers them; a panic is still a crash to the user).
func panics(t *testing.T) float64 {
	t.Helper()
	return testenv.CounterValue(t, "controller_runtime_reconcile_panics_total", nil)
}

// quietRequests waits until the operator has handled what was applied
// (settle), then counts its requests over window: a controller that loops
// keeps sending them.
func (o *operatorUnderTest) quietRequests(settle, window time.Duration) int64 {
	time.Sleep(settle)
	before := o.requests.Load()
	time.Sleep(window)
	return o.requests.Load() - before
}

// assertWellBehaved checks what a user would notice of a misbehaving
// operator: a panic, requests to another namespace, a busy loop.
func (o *operatorUnderTest) assertWellBehaved(t *testing.T, panicsBefore float64, maxQuiet int64) {
	t.Helper()
	quiet := o.quietRequests(5*time.Second, 5*time.Second)
	t.Logf("RESULT operator: %d requests in all, %d in a 5 s window after settling, %d to other namespaces, %.0f reconcile panics",
		o.requests.Load(), quiet, o.outside.Load(), panics(t)-panicsBefore)
	assert.Zero(t, panics(t)-panicsBefore, "a reconcile panicked")
	assert.Zero(t, o.outside.Load(), "requests to other namespaces: %v", o.outsidePaths.list())
	assert.LessOrEqual(t, quiet, maxQuiet, "the operator keeps sending requests after the objects settled: a loop")
}

// newObject is an object of kind named name in ns with spec.
func newObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(kinds[kind].gv.WithKind(kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// refusal is the message a user reads when the API server refuses obj
// (kubectl prints the same text), or "" when it accepted it.
func refusal(err error) string {
	if err == nil {
		return ""
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}
