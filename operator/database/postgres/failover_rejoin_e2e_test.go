package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// TestTheOldPrimaryRejoinsAsAStandbyOnceItsPodNamesTheNewPrimary: after a
// failover (fo-0's server killed, fo-1 promoted) the old primary stays
// fenced while its pod still reads itself named primary (its mounted
// ConfigMap not yet refreshed). Its container restarts (the entrypoint
// waits on the fence) and its mount comes to show the new name; the
// operator, told so by its agent, lifts the fence; the old primary is
// rewound and streams from fo-1 through its slot, read-only, with the
// row committed on fo-1 after the failover. The failover record says
// when the fence was lifted and when it rejoined; Events FenceLifted and
// Rejoined.
func TestTheOldPrimaryRejoinsAsAStandbyOnceItsPodNamesTheNewPrimary(t *testing.T) {
	t.Parallel()
	f := newFailoverSetup(t)
	e := f.e
	require.NoError(t, syscall.Kill(-f.primary.Cmd.Process.Pid, syscall.SIGKILL))
	f.primary.Stop(t)
	waitDatabase(t, e, "failed over", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotEmpty(ct, d.Status.Failovers)
		assert.Equal(ct, dbv1.FailoverCompleted, d.Status.Failovers[len(d.Status.Failovers)-1].Phase, "%+v", d.Status.Failovers)
	})
	out, err := f.psql("fo-1", "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, "the new primary takes writes: %s", out)

	// The pod still reads fo-0 as the primary: the fence stays.
	marker := filepath.Join(filepath.Dir(f.data["fo-0"]), instance.FenceMarker)
	oc := f.operatorClient()
	st := statusOf(t, oc, instance.PodHosts("fo-0", "fo-headless", e.ns)[0])
	assert.Equal(t, "fo-0", st.NamedPrimary)
	assert.True(t, st.Fenced)
	var cur dbv1.Database
	require.NoError(t, e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: "fo"}, &cur))
	assert.Nil(t, cur.Status.Failovers[0].FenceLifted, "not lifted while the pod reads its own name")
	_, err = os.Stat(marker)
	require.NoError(t, err, "the fence marker is in place")

	// Its container restarts, following fo-rw, with its mount of the
	// ConfigMap refreshed as the kubelet does (fo-1 named once the
	// operator has written it); its entrypoint waits on the fence until
	// the operator lifts it.
	followTheConfigMap(t, e, "fo-0")
	f.startServerAgain("fo-0")
	got := waitDatabase(t, e, "the old primary rejoined", func(ct *assert.CollectT, d *dbv1.Database) {
		rec := d.Status.Failovers[len(d.Status.Failovers)-1]
		assert.NotNil(ct, rec.FenceLifted)
		assert.NotNil(ct, rec.Rejoined)
	})
	rec := got.Status.Failovers[0]
	assert.Equal(t, "fo-1", got.Status.CurrentPrimary)
	assert.False(t, rec.Rejoined.Before(rec.FenceLifted))
	f.waitRows("fo-0", "1,2")
	assert.FileExists(t, filepath.Join(roleDir(e.root, "fo-0"), "deckhand-restarted"),
		"the entrypoint recorded the lift, for the liveness probe (no startup probe runs again under the supervisor)")
	inRecovery, err := f.psql("fo-0", "SELECT pg_is_in_recovery()")
	require.NoError(t, err, inRecovery)
	assert.Equal(t, "t", inRecovery, "the old primary is a standby")
	out, err = f.psql("fo-0", "INSERT INTO rows VALUES (3)")
	assert.Error(t, err, "the old primary refuses writes: %s", out)
	slot, err := f.psql("fo-1", "SELECT active FROM pg_replication_slots WHERE slot_name = 'deckhand_standby_0'")
	require.NoError(t, err, slot)
	assert.Equal(t, "t", slot, "fo-0 streams through its slot")
	assertEventReason(t, e, "FenceLifted")
	assertEventReason(t, e, "Rejoined")
}

// startServerAgain restarts pod's server as its container would, with
// the scripts ConfigMap as it is now and fo-rw as its primary; it returns
// once the server answers (a fenced one waits for the lift first).
func (f *failoverSetup) startServerAgain(pod string) {
	ordinal := int(pod[len(pod)-1] - '0')
	server, port, data := f.e.startServerOnPort(pod[:len(pod)-2], ordinal, f.rwPort, f.portOf(pod))
	f.started(pod, port, data)
	f.e.t.Cleanup(func() {
		if f.e.t.Failed() {
			f.e.t.Logf("server %s:\n%s", pod, server.Log.String())
		}
	})
}

// operatorClient is a client with the operator's certificate.
func (f *failoverSetup) operatorClient() *instance.Client {
	t := f.e.t
	var op corev1.Secret
	require.NoError(t, f.e.c.Get(context.Background(), client.ObjectKey{Namespace: f.e.ns, Name: "fo-instance-operator"}, &op))
	tlsConfig, err := instance.ClientTLSConfig(op.Data[instance.CACertKey], op.Data[instance.ClientCertKey], op.Data[instance.ClientKeyKey])
	require.NoError(t, err)
	return instance.NewClient(tlsConfig, instance.DefaultPort, instance.WithDialContext(f.agents.DialContext))
}

func assertEventReason(t *testing.T, e *endToEnd, reason string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var events corev1.EventList
		require.NoError(ct, e.c.List(context.Background(), &events, client.InNamespace(e.ns)))
		found := false
		for _, ev := range events.Items {
			found = found || ev.Reason == reason
		}
		assert.True(ct, found, "an Event %s", reason)
	}, time.Minute, 200*time.Millisecond)
}
