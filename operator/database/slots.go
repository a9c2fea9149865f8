package database

import "strconv"

// standbySlot is the physical replication slot a standby streams through
// on the primary, named after its ordinal (bootstrap.sh's slot, probe.sh
// drops those beyond the replicas).
func standbySlot(ordinal int) string {
	return "deckhand_standby_" + strconv.Itoa(ordinal)
}

// slotsForNewPrimary are the slots a promoted instance must hold: one per
// other instance, the old primary's among them (it rejoins through its
// slot, and until then the slot keeps the WAL its pg_rewind and catch-up
// need, up to max_slot_wal_keep_size; one that never comes back has its
// slot lost past that bound, and probe.sh drops the slots beyond the
// replicas).
func slotsForNewPrimary(db *Cluster, promoted string) []string {
	var slots []string
	for _, inst := range instanceHosts(db) {
		if inst.Pod == promoted {
			continue
		}
		if ordinal, ok := podOrdinal(db, inst.Pod); ok {
			slots = append(slots, standbySlot(int(ordinal)))
		}
	}
	return slots
}
