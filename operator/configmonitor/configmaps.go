package configmonitor

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// cachedHashKey holds, on ConfigMonitor's cached copy of a ConfigMap only
// (never on the API server's), the resourceVersion and Hash of the data
// the cache dropped: "<resourceVersion>/<hash>".
const cachedHashKey = AnnotationPrefix + "cached-data-hash"

// keepDataHash is the transform of ConfigMonitor's ConfigMap cache: each
// ConfigMap keeps its name and the hash of its data, not the data. A
// change is hashed as its watch event arrives, so a reconcile reads no
// ConfigMap: such a read would put one more round trip through the API
// server, busy with the very rollouts changes cause, in every reaction.
// Memory stays that of a metadata-only watch: an unreferenced ConfigMap
// costs its name, not its data (a watch list streams the initial objects
// through this transform one at a time).
//
// Informers may apply it twice to an object (a watch list's store, then
// the replace): an object it already slimmed, at the same resourceVersion,
// is left as it is.
func keepDataHash(in any) (any, error) {
	cm, ok := in.(*corev1.ConfigMap)
	if !ok {
		return in, nil
	}
	if _, done := cachedHash(cm); done && cm.Data == nil && cm.BinaryData == nil {
		return cm, nil
	}
	hash := Hash(cm, nil)
	cm.Data, cm.BinaryData = nil, nil
	cm.Annotations = map[string]string{cachedHashKey: cm.ResourceVersion + "/" + hash}
	cm.Labels, cm.ManagedFields, cm.OwnerReferences, cm.Finalizers = nil, nil, nil, nil
	return cm, nil
}

// cachedHash is the data hash keepDataHash recorded on a cached ConfigMap.
func cachedHash(cm *corev1.ConfigMap) (string, bool) {
	rv, hash, ok := strings.Cut(cm.Annotations[cachedHashKey], "/")
	if !ok || rv != cm.ResourceVersion || hash == "" {
		return "", false
	}
	return hash, true
}

// dataChanged passes a cached ConfigMap's update only when its data
// changed: a label or annotation edit, or a relist delivering the same
// object again, wakes no monitor and starts no reaction clock.
type dataChanged struct {
	predicate.Funcs
}

func (dataChanged) Update(e event.UpdateEvent) bool {
	before, okBefore := e.ObjectOld.(*corev1.ConfigMap)
	after, okAfter := e.ObjectNew.(*corev1.ConfigMap)
	if !okBefore || !okAfter {
		return true
	}
	old, knownBefore := cachedHash(before)
	now, knownAfter := cachedHash(after)
	return !knownBefore || !knownAfter || old != now
}
