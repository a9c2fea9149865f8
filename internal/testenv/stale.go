package testenv

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StaleCache answers a Get of Stale (same key, same type) with a copy of
// it, as an informer that has not yet seen the latest write does;
// everything else, every write included, goes to Client, the real API
// server. A test drives a Reconciler over it to see what a pass from a
// stale read writes.
type StaleCache struct {
	client.Client
	Stale client.Object
}

// Get is Client's, but for Stale.
func (s StaleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if key == client.ObjectKeyFromObject(s.Stale) && reflect.TypeOf(obj) == reflect.TypeOf(s.Stale) {
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(s.Stale.DeepCopyObject()).Elem())
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// EventRecorder is a real Event recorder (of a manager that runs no
// controller, watching ns), for a Reconciler a test drives one pass at a
// time.
func EventRecorder(t testing.TB, ns, name string) events.EventRecorder {
	t.Helper()
	var mgr ctrl.Manager
	StartController(t, RESTConfig(t), func(m ctrl.Manager) error { mgr = m; return nil }, ns)
	return mgr.GetEventRecorder(name)
}

// RemoveFinalizersOnCleanup takes the finalizers off obj when the test
// ends, so its namespace can go while no operator runs.
func RemoveFinalizersOnCleanup(t testing.TB, c client.Client, obj client.Object) {
	t.Cleanup(func() {
		cur := obj.DeepCopyObject().(client.Object)
		if c.Get(context.Background(), client.ObjectKeyFromObject(obj), cur) == nil {
			cur.SetFinalizers(nil)
			_ = c.Update(context.Background(), cur)
		}
	})
}
