package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

// TestAJustStartedPrimaryEndsItsSegmentAtArchiveTimeout: a write to a
// primary that has just started reaches the archive within its
// archive_timeout. PostgreSQL alone ended no segment until its first
// checkpoint_timeout after the start had passed (here an hour: its
// checkpointer's first sleep leaves archive_timeout out); the primary's
// readiness probe reloads the server once per start, which wakes the
// checkpointer, and a second probe does not reload it again.
func TestAJustStartedPrimaryEndsItsSegmentAtArchiveTimeout(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	params := archiveCommand("cp %p " + h.u.TempDir(t) + "/%f")
	params["archive_timeout"] = "2s"
	params["checkpoint_timeout"] = "1h"
	server := h.archivingServer(t, 0, "data-0", "", params, nil)
	ready := postgres.Engine{}.ServerPod(h.cluster).Container.ReadinessProbe
	out, ok := h.probe(ready, 0, "data-0", "", nil)
	require.True(t, ok, "the primary's readiness probe: %s", out)

	h.sql(server.Port, "postgres", "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
	segment := strings.TrimSpace(h.sql(server.Port, "postgres", "SELECT pg_walfile_name(pg_current_wal_lsn())"))
	var archived string
	assert.Eventually(t, func() bool {
		archived = strings.TrimSpace(h.sql(server.Port, "postgres", "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver"))
		return archived >= segment
	}, time.Minute, 250*time.Millisecond,
		"the segment holding the write, %s, was not archived within a minute (archive_timeout 2 s); the last archived: %q; the server's log:\n%s",
		segment, archived, server.Log.String())

	out, ok = h.probe(ready, 0, "data-0", "", nil)
	require.True(t, ok, "the primary's readiness probe, again: %s", out)
	assert.Equal(t, 1, strings.Count(server.Log.String(), "received SIGHUP"), "reloads of the server:\n%s", server.Log.String())
}
