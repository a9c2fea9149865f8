package configmonitor

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
)

// statefulSets are n StatefulSets, each with one pod the monitor selects.
func statefulSets(n int) []client.Object {
	labels := map[string]string{"app": "frontend"}
	var objs []client.Object
	for i := range n {
		name := fmt.Sprintf("web-%02d", i)
		uid := types.UID("sts-" + name)
		objs = append(objs,
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid},
				Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}}}},
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-0", Namespace: ns, Labels: labels,
				OwnerReferences: []metav1.OwnerReference{controllerRef("apps/v1", "StatefulSet", name, uid)}}})
	}
	return objs
}

// workloadRequests counts the reads and writes of StatefulSets.
func workloadRequests(f *fixture) *int {
	n := new(int)
	f.r.Client = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := o.(*appsv1.StatefulSet); ok {
				*n++
			}
			return c.Patch(ctx, o, p, opts...)
		},
	})
	f.r.Reader = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if _, ok := o.(*appsv1.StatefulSet); ok {
				*n++
			}
			return c.Get(ctx, key, o, opts...)
		},
	})
	return n
}

func TestARefusedStatusWriteKeepsAPacedRolloutsRequeue(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("one"), monitor("m"))...)
	f.reconcile(t, "m")
	f.setMessage(t, "two")
	f.r.Limiter = rate.NewLimiter(rate.Every(time.Second), 1)
	f.r.Limiter.Allow() // the budget is spent: the pass is paced
	f.r.Client = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			return apierrors.NewTooManyRequests("slow down", 1)
		},
	})
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "m"}})
	assert.NoError(t, err, "a refused status write turned the planned requeue into an error (and a growing backoff)")
	assert.Positive(t, res.RequeueAfter, "the pass must come back when the next restart is allowed")
	assert.LessOrEqual(t, res.RequeueAfter, time.Second)
}

func TestAServerErrorOnOneWorkloadIsRetriedWithinThePass(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("one"), monitor("m"))...)
	f.reconcile(t, "m")
	f.setMessage(t, "two")
	// One restart allowed, as in a paced rollout: the refused attempt must
	// not spend it.
	f.r.Limiter = rate.NewLimiter(rate.Every(time.Hour), 1)
	refused := 0
	f.r.Client = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if refused == 0 {
				refused++
				return apierrors.NewInternalError(errors.New("etcdserver: leader changed"))
			}
			return c.Patch(ctx, o, p, opts...)
		},
	})
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "m"}})
	require.NoError(t, err, "one 500 failed the whole pass")
	assert.Zero(t, res.RequeueAfter)
	var m magalixv1.ConfigMonitor
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "m"}, &m))
	assert.Equal(t, "Restarted", reason(&m, ConditionReady))
	hash, _ := f.templateHash(t)
	assert.Equal(t, Hash(configMap("two"), nil), hash)
	evs := f.drainEvents()
	assert.Len(t, evs, 2, "one restart, announced on the monitor and the workload: %v", evs)
}

func TestAFailedRestartGivesItsBudgetBack(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("one"), monitor("m"))...)
	f.reconcile(t, "m")
	f.setMessage(t, "two")
	f.r.Limiter = rate.NewLimiter(rate.Every(time.Hour), 1)
	f.r.Client = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			return apierrors.NewForbidden(appsv1.Resource("deployments"), o.GetName(), errors.New("denied"))
		},
	})
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "m"}})
	require.Error(t, err)
	assert.InDelta(t, 1, f.r.Limiter.Tokens(), 0.01, "a restart that did not happen spent the shared budget")
}

func TestAPacedRolloutVisitsWhatItHasNotReachedFirst(t *testing.T) {
	const n = 6
	f := newFixture(t, append(statefulSets(n), configMap("one"), monitor("m"))...)
	f.reconcile(t, "m")
	f.setMessage(t, "two")
	requests := workloadRequests(f)
	// One restart per pass: each pass finds a fresh budget of one.
	for pass := 1; pass <= n; pass++ {
		f.r.Limiter = rate.NewLimiter(rate.Every(time.Hour), 1)
		*requests = 0
		m, res := f.reconcile(t, "m")
		if pass < n {
			require.Equal(t, "RateLimited", reason(m, ConditionReady), "pass %d", pass)
			require.Positive(t, res.RequeueAfter)
			assert.Len(t, m.Status.PendingWorkloads, n-pass, "pass %d", pass)
		} else {
			require.Equal(t, "Restarted", reason(m, ConditionReady))
			assert.Len(t, m.Status.RestartedWorkloads, n)
		}
		// The workload restarted (read, patch) and the next one, paced
		// (read); not again every workload rolled by the passes before.
		// The last pass checks them all once: n reads and a patch.
		allowed := 3
		if pass == n {
			allowed = n + 1
		}
		assert.LessOrEqual(t, *requests, allowed, "pass %d revisited the workloads it had rolled", pass)
	}
	var list appsv1.StatefulSetList
	require.NoError(t, f.c.List(context.Background(), &list))
	for _, s := range list.Items {
		assert.Equal(t, Hash(configMap("two"), nil), s.Spec.Template.Annotations["deckhand.dev/configmap-flaskapp-config"], s.Name)
	}
}

func TestFailureBackoffGrowsAndIsCapped(t *testing.T) {
	l := failureBackoff()
	item := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "m"}}
	first := l.When(item)
	var last time.Duration
	for range 40 {
		last = l.When(item)
	}
	assert.Greater(t, last, first, "consecutive failures must back off")
	assert.Equal(t, MaxFailureBackoff, last, "a monitor failing for a while must be retried within the cap, not after 1000 s")
	l.Forget(item)
	assert.Equal(t, first, l.When(item), "a success resets the backoff")
}
