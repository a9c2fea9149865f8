package database

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

func TestWALArchivingConditionFollowsTheLastAttempt(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	for _, tc := range []struct {
		name   string
		a      instance.ArchiverStatus
		ok     bool
		reason string
		says   string
	}{
		{"nothing tried yet", instance.ArchiverStatus{}, true, "Archiving", "primary db-0 archives its WAL"},
		{"archived", instance.ArchiverStatus{ArchivedCount: 3, LastArchivedWAL: "000000010000000000000003", LastArchivedTime: &t1}, true, "Archiving", ""},
		{"failed, then archived", instance.ArchiverStatus{ArchivedCount: 3, FailedCount: 2, LastArchivedTime: &t1, LastFailedTime: &t0}, true, "Archiving", ""},
		{"archived, then failed", instance.ArchiverStatus{ArchivedCount: 3, FailedCount: 2, LastArchivedWAL: "000000010000000000000003", LastArchivedTime: &t0,
			LastFailedWAL: "000000010000000000000004", LastFailedTime: &t1}, false, "ArchiveFailing",
			"primary db-0 cannot archive WAL file 000000010000000000000004 (last archived: 000000010000000000000003)"},
		{"never archived", instance.ArchiverStatus{FailedCount: 1, LastFailedWAL: "000000010000000000000001", LastFailedTime: &t0}, false, "ArchiveFailing",
			"(nothing archived since the server started)"},
	} {
		ok, reason, msg := archivingState("db-0", tc.a)
		assert.Equal(t, tc.ok, ok, tc.name)
		assert.Equal(t, tc.reason, reason, tc.name)
		assert.Contains(t, msg, tc.says, tc.name)
	}
}
