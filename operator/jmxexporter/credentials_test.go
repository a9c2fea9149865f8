package jmxexporter

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/deckhand-dev/deckhand/operator/jmxexporter/jvm"
)

// An exporter configuration may hold the credentials of a remote JMX
// connection (the agent's username and password keys). They reach the
// container byte for byte and nowhere else: not the operator's log at any
// level, not an Event, not the pod's annotations, not the exporter's status,
// whether the attach works, the configuration changes or the attach fails.
func TestConfigCredentialsAreNeverLoggedNorPublished(t *testing.T) {
	const password = "s3cr3t-jmx-Pa55"
	secretConfig := testConfig + "username: monitor\npassword: " + password + "\n"

	var logs bytes.Buffer
	ctx := ctrl.LoggerInto(context.Background(), zap.New(zap.WriteTo(&logs), zap.Level(zapcore.Level(-10))))
	e := exporter("exp", time.Now(), 9400)
	f := newPodFixture(t, e)
	setConfig(t, f, secretConfig)

	var published []string
	reconcileAll := func() {
		t.Helper()
		_, err := f.r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "app"}})
		require.NoError(t, err)
		er := &ExporterReconciler{Client: f.c, Cache: f.c, Reader: f.c, Recorder: f.events}
		_, err = er.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(e)})
		require.NoError(t, err)
		published = append(published, f.drainEvents()...)
		published = append(published, objectJSON(t, f.pod()))
		require.NoError(t, f.c.Get(ctx, client.ObjectKeyFromObject(e), e))
		published = append(published, objectJSON(t, e))
	}

	reconcileAll()
	require.Equal(t, jvm.Attached, f.state().Result)
	assert.Equal(t, []byte(secretConfig), f.box.files["/tmp/deckhand-jmx/config.yaml"], "the credentials reach the container as written")

	setConfig(t, f, secretConfig+"# changed\n")
	reconcileAll()

	f.box.attach = jvm.Result{Result: jvm.Failed, Reason: jvm.ReasonNoJVM, Message: "no Java process found", Retry: true}
	f.restart("containerd://two", 1)
	reconcileAll()
	require.Equal(t, jvm.Failed, f.state().Result)

	require.NotEmpty(t, published)
	for _, p := range published {
		assert.NotContains(t, p, password)
	}
	assert.NotContains(t, logs.String(), password)
}

func setConfig(t *testing.T, f *podFixture, config string) {
	t.Helper()
	var cm corev1.ConfigMap
	require.NoError(t, f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "cfg"}, &cm))
	cm.Data["config.yaml"] = config
	require.NoError(t, f.c.Update(context.Background(), &cm))
}

func objectJSON(t *testing.T, o client.Object) string {
	t.Helper()
	b, err := json.Marshal(o)
	require.NoError(t, err)
	return strings.ToValidUTF8(string(b), "")
}
