package configmonitor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	magalixv1 "github.com/deckhand-dev/deckhand/operator/apis/magalix/v1"
)

// AnnotationPrefix starts the pod-template annotation that records which
// configuration a workload was last restarted for.
const AnnotationPrefix = "deckhand.dev/"

// Hash is the SHA-256 of a ConfigMap's data and binaryData and, when given,
// a Secret's data: keys sorted, every key and value length-prefixed, so
// labels, annotations and key order never change it.
func Hash(cm *corev1.ConfigMap, secret *corev1.Secret) string {
	h := sha256.New()
	writeSection(h, "data", len(cm.Data), func(yield func(string, []byte)) {
		for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
			yield(k, []byte(cm.Data[k]))
		}
	})
	writeSection(h, "binaryData", len(cm.BinaryData), func(yield func(string, []byte)) {
		for _, k := range slices.Sorted(maps.Keys(cm.BinaryData)) {
			yield(k, cm.BinaryData[k])
		}
	})
	if secret != nil {
		writeSection(h, "secret", len(secret.Data), func(yield func(string, []byte)) {
			for _, k := range slices.Sorted(maps.Keys(secret.Data)) {
				yield(k, secret.Data[k])
			}
		})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeSection(h hash.Hash, name string, n int, entries func(func(string, []byte))) {
	fmt.Fprintf(h, "%s:%d\n", name, n)
	entries(func(k string, v []byte) {
		fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(v))
		h.Write(v)
	})
}

// AnnotationKey is the pod-template annotation a monitor stamps: one key
// per configuration (ConfigMap, or ConfigMap and Secret), so two monitors
// of the same ConfigMap over one workload share it and restart it once.
func AnnotationKey(spec *magalixv1.ConfigMonitorSpec) string {
	name := "configmap-" + spec.ConfigMapName()
	if spec.Secret != "" {
		name += ".secret-" + spec.Secret
	}
	// An annotation name is at most 63 characters: keep a readable start
	// and make the rest unique with a digest.
	if len(name) > 63 {
		sum := sha256.Sum256([]byte(name))
		name = strings.TrimRight(name[:50], "-.") + "-" + hex.EncodeToString(sum[:])[:12]
	}
	return AnnotationPrefix + name
}
