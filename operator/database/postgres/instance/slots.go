package instance

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
)

// Replication slots on a promoted standby. PostgreSQL 15 does not copy
// slots to standbys, so the standby chosen by a failover has none: the
// other standbys, whose primary_conninfo names the read-write Service and
// whose primary_slot_name is their own slot, would be refused by the new
// primary ("replication slot ... does not exist") and stop streaming. The
// operator names their slots in the promote request, and the agent makes
// them while the server is still a standby, just before pg_promote: a
// physical slot made during recovery reserves WAL from the last
// restartpoint's redo position, older than what any standby following
// the same primary has replayed recently, so from the promotion on the
// new primary keeps every WAL segment those standbys need (up to
// max_slot_wal_keep_size), and the slots exist before the read-write
// Service routes to it, hence before any standby can reconnect.

// PromoteRequest is POST /promote's optional body.
type PromoteRequest struct {
	// Slots are the physical replication slots to make (if missing)
	// before the promotion: one per other instance of the Database,
	// the old primary's among them.
	Slots []string `json:"slots,omitempty"`
}

// slotName is what the agent accepts as a slot name (PostgreSQL's rule:
// lower-case letters, digits and underscores, at most 63).
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// readPromoteRequest decodes the body (empty: no slots) and checks the
// names.
func readPromoteRequest(r *http.Request) (PromoteRequest, error) {
	var req PromoteRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return req, err
	}
	if len(body) == 0 {
		return req, nil
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("the promote request is not JSON: %w", err)
	}
	for _, s := range req.Slots {
		if !slotName.MatchString(s) {
			return req, fmt.Errorf("%q is not a replication slot name (lower-case letters, digits and '_', at most 63)", s)
		}
	}
	return req, nil
}

// ensureSlots makes each physical slot that does not exist, reserving
// WAL at once.
func ensureSlots(ctx context.Context, db *sql.DB, slots []string) error {
	for _, s := range slots {
		_, err := db.ExecContext(ctx, `SELECT pg_catalog.pg_create_physical_replication_slot($1, true)
WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_name = $1)`, s)
		if err != nil {
			return fmt.Errorf("making replication slot %s: %w", s, err)
		}
	}
	return nil
}
