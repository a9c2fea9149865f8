package configmonitor

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// hashingCache reads ConfigMaps as ConfigMonitor's cache holds them: through
// keepDataHash. missing lists those it has not seen yet.
type hashingCache struct {
	client.Reader
	missing map[string]bool
}

func (c hashingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if c.missing[key.Name] {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	}
	if err := c.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	_, err := keepDataHash(obj)
	return err
}

func TestTheCacheKeepsTheDataHashNotTheData(t *testing.T) {
	cm := configMap(strings.Repeat("x", 10<<10))
	cm.ResourceVersion = "42"
	cm.Labels = map[string]string{"app": "frontend"}
	want := Hash(cm, nil)

	out, err := keepDataHash(cm.DeepCopy())
	require.NoError(t, err)
	cached := out.(*corev1.ConfigMap)
	assert.Nil(t, cached.Data, "the cache kept the data")
	assert.Nil(t, cached.Labels)
	hash, ok := cachedHash(cached)
	require.True(t, ok)
	assert.Equal(t, want, hash)

	// Informers may pass an object through the transform twice.
	again, err := keepDataHash(cached)
	require.NoError(t, err)
	hash, ok = cachedHash(again.(*corev1.ConfigMap))
	require.True(t, ok)
	assert.Equal(t, want, hash, "a second pass hashed the emptied data")

	// A hash recorded for another version of the object is not its hash.
	stale := cached.DeepCopy()
	stale.ResourceVersion = "43"
	_, ok = cachedHash(stale)
	assert.False(t, ok)
}

func TestADataChangeRollsFromTheCachedHash(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("Welcome to Kubernetes!"), monitor("m"))...)
	f.r.ConfigMaps = hashingCache{Reader: f.c}
	f.reconcile(t, "m")
	f.setMessage(t, "Welcome to Operators!")
	m, _ := f.reconcile(t, "m")

	want := Hash(configMap("Welcome to Operators!"), nil)
	hash, _ := f.templateHash(t)
	assert.Equal(t, want, hash)
	assert.Equal(t, want, m.Status.ObservedHash)
	assert.Equal(t, "Restarted", reason(m, ConditionReady))
}

func TestAConfigMapTheCacheHasNotSeenIsReadLive(t *testing.T) {
	f := newFixture(t, append(frontend(), configMap("Welcome to Kubernetes!"), monitor("m"))...)
	f.r.ConfigMaps = hashingCache{Reader: f.c, missing: map[string]bool{"flaskapp-config": true}}
	m, _ := f.reconcile(t, "m")
	assert.Equal(t, Hash(configMap("Welcome to Kubernetes!"), nil), m.Status.ObservedHash, "reported missing while it exists")
	assert.Equal(t, "Baseline", reason(m, ConditionReady))
}

func TestOnlyADataChangeWakesMonitors(t *testing.T) {
	cached := func(msg, rv string, labels map[string]string) *corev1.ConfigMap {
		cm := configMap(msg)
		cm.ResourceVersion, cm.Labels = rv, labels
		out, err := keepDataHash(cm)
		require.NoError(t, err)
		return out.(*corev1.ConfigMap)
	}
	before := cached("a", "1", nil)
	assert.False(t, dataChanged{}.Update(event.UpdateEvent{ObjectOld: before, ObjectNew: cached("a", "2", map[string]string{"team": "web"})}),
		"a label edit woke the monitors")
	assert.True(t, dataChanged{}.Update(event.UpdateEvent{ObjectOld: before, ObjectNew: cached("b", "3", nil)}))
}
