package database

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// Synchronous replication (spec.replication.synchronous.minStandbys, n):
// the primary's synchronous_standby_names is 'ANY k ("<pod>", ...)' over
// the standbys streaming from it now, k = min(n, how many stream), or ""
// when none does. Every pass of the watch that finds the primary healthy
// compares it with what the primary's agent reports and rewrites it
// through the agent when it differs: after a failover (the promoted
// standby may carry the old primary's value in its postgresql.auto.conf,
// naming itself) and whenever a standby stops or starts streaming.
//
// The choice, after CloudNativePG issue 5257 (a list naming a standby
// that is gone makes every commit wait forever): writes stay available.
// A standby that stops streaming leaves the list, and k drops to the
// standbys that remain, down to asynchronous with none. What it risks:
// while fewer than n standbys stream, a commit is on fewer than n
// standbys (on none without any), and a failover in that window may lose
// it, as asynchronous replication would. A Warning Event
// (SynchronousDegraded) says when it happens. Blocking writes instead
// (keeping n and the names) is not offered.
//
// With it on, the setting is recorded in status.synchronous
// (recordSynchronous) before the primary is told when it adds a standby,
// after when it only drops one, and a failover promotes only one
// of its standbys, and only while enough of them answer to be sure it
// has every acknowledged commit (failover.Synchronous.Candidates: n-k+1
// of ANY k of n); otherwise it is refused unless forced.

// synchronousWanted is n (0: asynchronous).
func synchronousWanted(db *Cluster) int32 {
	if r := db.Spec.Replication; r != nil && r.Synchronous != nil {
		return r.Synchronous.MinStandbys
	}
	return 0
}

// synchronousStandbyNames is the value for the standbys streaming now
// (their application names: the pods' names) from the primary.
func synchronousStandbyNames(db *Cluster, streaming []string) (value string, k int) {
	n := int(synchronousWanted(db))
	if n == 0 {
		return "", 0
	}
	var names []string
	for _, pod := range streaming {
		if ordinal, ok := podOrdinal(db, pod); ok && int32(ordinal) < replicasOf(db) && pod != currentPrimary(db) {
			names = append(names, `"`+pod+`"`)
		}
	}
	if len(names) == 0 {
		return "", 0
	}
	k = min(n, len(names))
	return fmt.Sprintf("ANY %d (%s)", k, strings.Join(names, ", ")), k
}

// ensureSynchronous rewrites the primary's synchronous_standby_names
// when it differs from what the standbys streaming now call for.
func (r *Reconciler) ensureSynchronous(ctx context.Context, db *Cluster, ch *instance.Client, primary instance.Status) error {
	want, k := synchronousStandbyNames(db, primary.StreamingStandbys)
	if primary.SynchronousStandbyNames == want {
		return r.recordSynchronous(ctx, db, primary.SynchronousStandbyNames)
	}
	// A standby added to the set is recorded before the primary uses it:
	// it may confirm commits from the moment it is there, and a failover
	// must count it. One only leaving the set stays recorded until the
	// primary has let it go: until then commits wait for it, and a
	// failover must count it too (a primary that died while being told
	// keeps it in the record for good).
	if addsStandby(primary.SynchronousStandbyNames, want) {
		if err := r.recordSynchronous(ctx, db, want); err != nil {
			return err
		}
	}
	if err := ch.SetSynchronous(ctx, r.instanceHost(db, currentPrimary(db)), want); err != nil {
		return fmt.Errorf("setting synchronous_standby_names on %s: %w", currentPrimary(db), err)
	}
	if err := r.recordSynchronous(ctx, db, want); err != nil {
		return err
	}
	n := int(synchronousWanted(db))
	if k < n {
		r.Recorder.Eventf(db.Object, nil, corev1.EventTypeWarning, "SynchronousDegraded", "Replication", "%s",
			fmt.Sprintf("synchronous_standby_names on %s is now %q: %d standby(s) stream, fewer than minStandbys %d; commits wait for %d (writes stay available; a failover now may lose commits that reached fewer standbys)", currentPrimary(db), want, k, n, k))
		return nil
	}
	r.normal(db, "SynchronousStandbys", "Replication", "%s", fmt.Sprintf("synchronous_standby_names on %s is now %q", currentPrimary(db), want))
	return nil
}

// addsStandby: the value want names a standby that current does not.
func addsStandby(current, want string) bool {
	have := synchronousNames(current)
	for _, name := range synchronousNames(want) {
		if !slices.Contains(have, name) {
			return true
		}
	}
	return false
}

// synchronousNames are the pods a synchronous_standby_names value the
// operator wrote names (its quoted names); none for "".
func synchronousNames(value string) []string {
	var names []string
	for {
		_, rest, ok := strings.Cut(value, `"`)
		if !ok {
			return names
		}
		name, after, ok := strings.Cut(rest, `"`)
		if !ok {
			return names
		}
		names = append(names, name)
		value = after
	}
}

// synchronousQuorum is the k of an 'ANY k (...)' value; 0 for "".
func synchronousQuorum(value string) int32 {
	var k int32
	if _, err := fmt.Sscanf(value, "ANY %d", &k); err != nil {
		return 0
	}
	return k
}

// recordSynchronous writes the current primary's synchronous_standby_names
// value into status.synchronous when it differs (a locked status write),
// so that a failover, by this operator or one started later, promotes
// only one of its standbys.
func (r *Reconciler) recordSynchronous(ctx context.Context, db *Cluster, value string) error {
	var want *dbv1.SynchronousStatus
	if names := synchronousNames(value); len(names) > 0 {
		want = &dbv1.SynchronousStatus{Primary: currentPrimary(db), Standbys: names, Quorum: synchronousQuorum(value)}
	}
	if equality.Semantic.DeepEqual(db.Status.Synchronous, want) {
		return nil
	}
	db.Status.Synchronous = want
	if err := r.saveStatus(ctx, db); err != nil {
		return fmt.Errorf("recording the synchronous standbys of %s: %w", currentPrimary(db), err)
	}
	return nil
}
