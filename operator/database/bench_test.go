package database_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// until polls f every 100 ms and returns how long it took to hold.
func until(b *testing.B, start time.Time, limit time.Duration, what string, f func() bool) time.Duration {
	b.Helper()
	for !f() {
		if time.Since(start) > limit {
			b.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

func count(b *testing.B, c client.Client, ns string, list client.ObjectList, match func(client.Object) bool) int {
	b.Helper()
	require.NoError(b, c.List(context.Background(), list, client.InNamespace(ns)))
	items, n := listItems(list), 0
	for _, o := range items {
		if match(o) {
			n++
		}
	}
	return n
}

func listItems(list client.ObjectList) []client.Object {
	var out []client.Object
	switch l := list.(type) {
	case *dbv1.DatabaseList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *appsv1.StatefulSetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *batchv1.JobList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}

// BenchmarkHundredDatabases creates 100 Databases at once and measures
// the time until every one has its objects (the StatefulSet is the last
// before the primary runs) and until every one is Ready (volume bound,
// primary ready, init Job done), next to the floor: 100
// bare StatefulSets with the same volume claim, created by the benchmark
// itself, until ready. Then it counts the operator's API writes over a
// minute of quiet (target 0).
func BenchmarkHundredDatabases(b *testing.B) {
	const n = 100
	testenv.InstallCRDs(b)
	c := testenv.Client(b)
	ns := testenv.Namespace(b, c)
	rc, writes := testenv.CountRequests(b, testenv.IsWrite)
	testenv.StartController(b, rc, func(m ctrl.Manager) error {
		return database.Setup(m, database.Options{WatchNamespaces: []string{ns}, InstanceDial: testenv.NoPodDial})
	}, ns)
	testenv.ReleaseNamespaceOnCleanup(b, ns, &dbv1.DatabaseList{}, &dbv1.DatabaseBackupList{})

	dbs := make([]client.Object, n)
	for i := range dbs {
		db := newDatabase(ns, fmt.Sprintf("db-%03d", i), 1)
		db.Spec.Image = "postgres:17.6"
		dbs[i] = db
	}
	start := time.Now()
	testenv.CreateAll(b, c, dbs)
	// The StatefulSet is the last object a Database makes before its
	// primary runs (the init Job waits for that).
	created := until(b, start, 5*time.Minute, "every Database's StatefulSet", func() bool {
		return count(b, c, ns, &appsv1.StatefulSetList{}, func(client.Object) bool { return true }) == n
	})
	ready := until(b, start, 10*time.Minute, "every Database Ready", func() bool {
		return count(b, c, ns, &dbv1.DatabaseList{}, func(o client.Object) bool {
			return o.(*dbv1.Database).Status.Phase == dbv1.PhaseReady
		}) == n
	})
	require.Equal(b, n, count(b, c, ns, &batchv1.JobList{}, func(client.Object) bool { return true }), "init Jobs")
	writesToReady := writes.Load()
	reconcilesToReady := testenv.ReconcileCount(b, database.Name)

	time.Sleep(5 * time.Second)
	before, reconcilesBefore := writes.Load(), testenv.ReconcileCount(b, database.Name)
	time.Sleep(time.Minute)
	idleWrites, idleReconciles := writes.Load()-before, testenv.ReconcileCount(b, database.Name)-reconcilesBefore

	// The floor, in a namespace of its own: the cluster making 100
	// StatefulSets with one 1Gi volume each ready, no operator involved.
	floorNS := testenv.Namespace(b, c)
	sets := make([]client.Object, n)
	for i := range sets {
		labels := map[string]string{"app": fmt.Sprintf("s-%03d", i)}
		sets[i] = &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%03d", i), Namespace: floorNS},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17.6",
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/postgresql/data"}}}},
				}},
				VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
					ObjectMeta: metav1.ObjectMeta{Name: "data"},
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
					},
				}},
			},
		}
	}
	floorStart := time.Now()
	testenv.CreateAll(b, c, sets)
	floor := until(b, floorStart, 10*time.Minute, "100 bare StatefulSets ready", func() bool {
		return count(b, c, floorNS, &appsv1.StatefulSetList{}, func(o client.Object) bool {
			return o.(*appsv1.StatefulSet).Status.ReadyReplicas == 1
		}) == n
	})

	fmt.Printf("\n%d Databases created at once (1 replica, 1Gi each)\n", n)
	fmt.Printf("%-58s %10v\n", "until every Database's objects exist (StatefulSet last)", created.Round(10*time.Millisecond))
	fmt.Printf("%-58s %10v\n", "until every Database is Ready (volume bound, init Job done)", ready.Round(10*time.Millisecond))
	fmt.Printf("%-58s %10v\n", "floor: 100 bare StatefulSets with a volume, until ready", floor.Round(10*time.Millisecond))
	fmt.Printf("%-58s %10d (%.1f per Database)\n", "operator API writes until Ready", writesToReady, float64(writesToReady)/n)
	fmt.Printf("%-58s %10.0f\n", "reconciles until Ready", reconcilesToReady)
	fmt.Printf("%-58s %10d (target 0; %.0f reconciles)\n", "operator API writes per minute once settled", idleWrites, idleReconciles)
	b.ReportMetric(created.Seconds(), "objects-s")
	b.ReportMetric(ready.Seconds(), "ready-s")
	b.ReportMetric(floor.Seconds(), "floor-s")
	b.ReportMetric(float64(idleWrites), "idle-writes/min")
}
