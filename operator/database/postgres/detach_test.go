package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// TestADetachedStandbyStopsStreamingAndStreamsAgainWhenAttached: a
// failover detaches the standbys through their agents (the old primary's
// isolation check then sees them stop replying). Detached, the standby's
// WAL receiver has ended when the call returns, the primary lists no
// standby, a row written on it does not arrive, and the standby's status
// says detached; a second detach keeps the saved setting. Attached, it
// streams again with the same primary_conninfo, receives the row, and the
// saved file is gone. A primary is never detached.
func TestADetachedStandbyStopsStreamingAndStreamsAgainWhenAttached(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	primary, standby := primaryAndStreamingStandby(t, h)
	ch := newChannel(t, h, h.cluster.Name+"-0", h.cluster.Name+"-1")
	primaryHost := ch.startAgent(t, h, 0, "data-0")
	standbyHost := ch.startAgent(t, h, 1, "data-1")
	ctx := context.Background()
	setting := func() string { return h.sql(standby.Port, "postgres", "SELECT current_setting('primary_conninfo')") }
	before := setting()
	require.Contains(t, before, "password=", "the password (with quotes and backslashes) is part of it")
	saved := filepath.Join(h.volume("data-1"), instance.DetachedMarker)

	res, err := ch.client.Detach(ctx, standbyHost)
	require.NoError(t, err)
	assert.True(t, res.Status.Detached, "%+v", res.Status)
	assert.Empty(t, res.Status.WALReceiver, "the WAL receiver ended before the answer")
	assert.Empty(t, h.sql(primary.Port, "postgres", replicationState), "the primary lists no standby")
	_, err = ch.client.Detach(ctx, standbyHost)
	require.NoError(t, err, "a second detach changes nothing")
	info, err := os.Stat(saved)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "it holds the replication password")
	content, err := os.ReadFile(saved)
	require.NoError(t, err)
	assert.Equal(t, before, string(content), "the setting saved is the standby's primary_conninfo")
	assert.Empty(t, setting(), "detached: no primary_conninfo")

	out, err := h.appSQL(primary.Port, "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)
	out, err = h.appSQL(standby.Port, "SELECT count(*) FROM rows WHERE id = 2")
	require.NoError(t, err, out)
	assert.Equal(t, "0", out, "a detached standby receives nothing")

	_, err = ch.client.Detach(ctx, primaryHost)
	require.ErrorIs(t, err, instance.ErrAlreadyPrimary, "a primary is never detached")

	res, err = ch.client.Attach(ctx, standbyHost)
	require.NoError(t, err)
	assert.False(t, res.Status.Detached)
	assert.NoFileExists(t, saved)
	waitForStreaming(t, h, primary.Port, "deckhand_replication name-of-database-1 streaming")
	waitForRow(t, h, standby.Port, "2")
	assert.Equal(t, before, setting(), "primary_conninfo is as before, password and all")
}
