package registration

import (
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

// LabelledCache is a cache of a controller's own, with the manager's
// client settings, that holds only objects carrying the label key (in
// the namespaces the operator watches), without their managed fields.
// A controller whose objects are of kinds other controllers watch
// unfiltered (Secrets, ConfigMaps, Services) watches them through it: a
// label selector on the manager's shared cache would hide objects from
// those controllers. The caller adds it to the manager.
func LabelledCache(mgr ctrl.Manager, key, name string, watch, exclude []string) (cluster.Cluster, error) {
	has, err := labels.NewRequirement(key, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	opts := cache.Options{
		DefaultLabelSelector: labels.NewSelector().Add(*has),
		DefaultTransform:     dropManagedFields,
		DefaultNamespaces:    CacheNamespaces(watch, exclude),
	}
	return cluster.New(mgr.GetConfig(), func(o *cluster.Options) {
		o.Scheme = mgr.GetScheme()
		o.HTTPClient = mgr.GetHTTPClient()
		o.MapperProvider = func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mgr.GetRESTMapper(), nil }
		o.Cache = opts
		o.Logger = mgr.GetLogger().WithName(name)
	})
}

func dropManagedFields(in any) (any, error) {
	if obj, ok := in.(metav1.Object); ok {
		obj.SetManagedFields(nil)
	}
	return in, nil
}
