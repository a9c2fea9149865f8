package database

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/failover"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// The last failover's old primary, its fence lifted, may still be
// starting when the pass first asks it (a clone just finished) and
// stream by the time the pass reads the standbys again, to choose a
// switchover target among them. Seen streaming there, it is recorded back
// then, before a switchover to it leaves the record behind for good.
func TestAnOldPrimarySeenStreamingLaterInThePassIsRecordedBack(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, dbv1.AddToScheme(scheme))
	lifted := metav1.NewTime(time.Date(2026, 12, 1, 11, 40, 0, 0, time.UTC))
	obj := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "pay", Namespace: "ns"},
		Spec:       dbv1.DatabaseSpec{Replicas: 2, Failover: &dbv1.FailoverSpec{Enabled: ptr.To(true)}},
		Status: dbv1.DatabaseStatus{CurrentPrimary: "pay-1", Failovers: []dbv1.FailoverRecord{{
			Kind: "failover", Phase: dbv1.FailoverCompleted, From: "pay-0", To: "pay-1", FenceLifted: &lifted,
		}}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(obj).WithStatusSubresource(&dbv1.Database{}).Build()
	now := lifted.Add(2 * time.Second)
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10), Kind: DatabaseKind, Now: func() time.Time { return now }}
	ctx := context.Background()
	view := func() *Cluster {
		var cur dbv1.Database
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(obj), &cur))
		return DatabaseKind.Clusters.View(&cur)
	}
	starting := failover.Observation{Pod: "pay-0", Status: &instance.Status{ServerUp: true, Role: instance.RoleStandby, WALReceiver: "starting"}}
	streaming := failover.Observation{Pod: "pay-0", Status: &instance.Status{ServerUp: true, Role: instance.RoleStandby, WALReceiver: "streaming", Streaming: true}}

	require.NoError(t, r.rejoinSeenIn(ctx, view(), []failover.Observation{starting}))
	assert.Nil(t, view().Status.Failovers[0].Rejoined, "still starting: not back yet")

	require.NoError(t, r.rejoinSeenIn(ctx, view(), []failover.Observation{streaming}))
	rec := view().Status.Failovers[0]
	require.NotNil(t, rec.Rejoined, "streaming: back as a standby")
	assert.True(t, rec.Rejoined.Time.Equal(now))
	assert.True(t, rec.FenceLifted.Time.Equal(lifted.Time), "the lift keeps its time")
	assert.Nil(t, lastRejoinPending(view()), "nothing left to wait for")
}
