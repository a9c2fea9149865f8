package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// TestAStandbyWhosePrimaryStopsAcknowledgingItSaysForHowLong: the
// standby's replies to its primary dropped on the way (what a primary
// whose node lost power or network looks like from the standby: nothing
// refused, the kernel retransmitting), its agent reports
// receiverStalledSeconds growing while the WAL receiver still says
// "streaming" (it waits out wal_receiver_timeout); once the replies get
// through again, the stall is over. The operator counts on it to skip
// waits owed to a primary that cannot have heard the standbys
// (failover.UnheardSince, the detach wait).
func TestAStandbyWhosePrimaryStopsAcknowledgingItSaysForHowLong(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary, standby := primaryAndStreamingStandby(t, h)
	ch := newChannel(t, h, h.cluster.Name+"-1")
	standbyHost := ch.startAgent(t, h, 1, "data-1")
	ctx := context.Background()
	st := statusOf(t, ch.client, standbyHost)
	require.True(t, st.Streaming, "%+v", st)
	assert.Zero(t, st.ReceiverStalledSeconds, "a link whose replies are acknowledged")

	// The WAL receiver's end of its connection, as the primary sees it.
	receiverPort := h.sql(primary.Port, "postgres", "SELECT client_port FROM pg_stat_replication")
	require.NotEmpty(t, receiverPort)
	restore := pgtest.DropPackets(t, receiverPort, primary.Port)
	// WAL to receive, so the standby has replies to send now rather than
	// at its next status interval.
	out, err := h.appSQL(primary.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err = ch.client.Status(ctx, standbyHost)
		require.NoError(ct, err)
		assert.GreaterOrEqual(ct, st.ReceiverStalledSeconds, 3.0, "%+v", st)
	}, 30*time.Second, 500*time.Millisecond, "the standby never said its replies go unacknowledged")
	assert.True(t, st.Streaming, "the WAL receiver still says streaming: only the link tells")
	assert.Equal(t, instance.RoleStandby, st.Role)

	restore()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err = ch.client.Status(ctx, standbyHost)
		require.NoError(ct, err)
		assert.Zero(ct, st.ReceiverStalledSeconds, "%+v", st)
		assert.True(ct, st.Streaming)
	}, 60*time.Second, 500*time.Millisecond, "the stall never ended once the replies got through")
	waitForRow(t, h, standby.Port, "2")
}
