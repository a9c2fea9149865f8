package registration

import (
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// The operator-wide flags that say which namespaces the controllers see.
const (
	FlagWatchNamespaces   = "watch-namespaces"
	FlagExcludeNamespaces = "exclude-namespaces"
)

// CacheNamespaces is cache.Options.DefaultNamespaces for an operator that
// watches watch (empty: every namespace) less exclude: nil when it sees
// every namespace. An excluded namespace is left out by a field selector
// on metadata.namespace, so the API server never sends its objects.
// watch and exclude are not both set (the manager's configuration refuses
// that).
func CacheNamespaces(watch, exclude []string) map[string]cache.Config {
	if len(watch) > 0 {
		m := make(map[string]cache.Config, len(watch))
		for _, ns := range watch {
			m[ns] = cache.Config{}
		}
		return m
	}
	if len(exclude) == 0 {
		return nil
	}
	notIn := make([]fields.Selector, 0, len(exclude))
	for _, ns := range exclude {
		notIn = append(notIn, fields.OneTermNotEqualSelector("metadata.namespace", ns))
	}
	return map[string]cache.Config{cache.AllNamespaces: {FieldSelector: fields.AndSelectors(notIn...)}}
}
