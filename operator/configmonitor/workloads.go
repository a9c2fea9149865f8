package configmonitor

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// workloadKinds are the kinds ConfigMonitor rolls.
var workloadKinds = []string{"Deployment", "StatefulSet", "DaemonSet"}

// workloadMetadata is an empty metadata-only object of a workload kind.
func workloadMetadata(kind string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind(kind))
	return m
}

// workloadCache is a metadata-only cache of the workloads ConfigMonitor may
// roll, separate from the manager's: there the Deployment type may be
// limited to deckhand's own objects (a controller that Owns Deployments),
// while ConfigMonitor rolls anyone's. A workload costs its name, labels,
// owner references, resourceVersion and generation: annotations and
// managedFields are dropped. The manager starts and stops it.
func workloadCache(mgr ctrl.Manager, namespaces []string) (cache.Cache, error) {
	opts := cache.Options{
		Scheme:           mgr.GetScheme(),
		Mapper:           mgr.GetRESTMapper(),
		DefaultTransform: slimMetadata,
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return nil, err
	}
	return c, mgr.Add(c)
}

// slimMetadata keeps of a cached object only what a restart reads.
func slimMetadata(in any) (any, error) {
	if m, ok := in.(*metav1.PartialObjectMetadata); ok {
		m.ManagedFields = nil
		m.Annotations = nil
	}
	return in, nil
}
