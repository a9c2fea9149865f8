package configmonitor

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/operator/registration"
)

// workloadKinds are the kinds ConfigMonitor rolls.
var workloadKinds = []string{"Deployment", "StatefulSet", "DaemonSet"}

// workloadMetadata is an empty metadata-only object of a workload kind.
func workloadMetadata(kind string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind(kind))
	return m
}

// podMetadata is an empty metadata-only pod, for the pod label index.
func podMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return m
}

// podLabels are a pod's labels as key=value, its values in the pod label
// index.
func podLabels(o client.Object) []string {
	out := make([]string, 0, len(o.GetLabels()))
	for k, v := range o.GetLabels() {
		out = append(out, k+"="+v)
	}
	return out
}

// ownCache is ConfigMonitor's cache, separate from the manager's. It holds
// the metadata of the workloads ConfigMonitor may roll: there the
// Deployment type may be limited to deckhand's own objects (a controller
// that Owns Deployments), while ConfigMonitor rolls anyone's. A workload
// costs its name, labels, owner references, resourceVersion and
// generation: annotations and managedFields are dropped. And it holds
// ConfigMaps as their name and data hash (keepDataHash). The manager
// starts and stops it.
func ownCache(mgr ctrl.Manager, watch, exclude []string) (cache.Cache, error) {
	opts := cache.Options{
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		DefaultTransform:  slimMetadata,
		ByObject:          map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Transform: keepDataHash}},
		DefaultNamespaces: registration.CacheNamespaces(watch, exclude),
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
