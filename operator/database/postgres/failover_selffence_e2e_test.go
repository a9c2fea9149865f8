package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/failover"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
)

// TestAnOldPrimaryCutOffFromTheOperatorFencesItselfAndRejoins: the
// primary's agent is cut off from the operator (its server still serves
// its clients): the operator fails over with the fence unreached and
// fo-0 keeps running as a primary. Once its pod names fo-1 (the kubelet's
// refresh of the mounted ConfigMap, done by hand here), fo-0's agent
// fences its own server. The operator, reaching the agent again, records
// it (the record's selfFenced, a Warning Event OldPrimaryFencedItself),
// lifts the fence, and fo-0 rejoins as fo-1's standby without the row it
// took alone.
func TestAnOldPrimaryCutOffFromTheOperatorFencesItselfAndRejoins(t *testing.T) {
	t.Parallel()
	f := newFailoverSetup(t)
	e := f.e
	restore := f.agents.Cut(instance.PodHosts("fo-0", "fo-headless", e.ns)[0])
	rec := failedOverFromACutOffPrimary(t, e)
	// No kubelet delivers the name here: fo-1 was promoted once the wait
	// was over.
	assert.False(t, rec.Finished.Time.Before(rec.NamedFirst.Add(failover.DefaultNameFirstWait-time.Second)), "promoted %s after it was named, sooner than the wait: %+v", rec.Finished.Sub(rec.NamedFirst.Time), rec)
	assertEventReason(t, e, "NamingNewPrimaryFirst")
	out, err := f.psql("fo-0", "INSERT INTO rows VALUES (-1)")
	require.NoError(t, err, "the old primary, cut off from the operator only, takes a write alone: %s", out)
	out, err = f.psql("fo-1", "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, "the new primary takes writes: %s", out)

	// Its pod reads the new name: its agent fences its server.
	named := filepath.Join(scriptsDir(e.root, "fo-0"), "primary")
	require.NoError(t, os.Remove(named))
	require.NoError(t, os.WriteFile(named, []byte("fo-1"), 0o444))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.FileExists(ct, filepath.Join(filepath.Dir(f.data["fo-0"]), instance.FenceMarker), "the fence marker keeps its restart from serving")
		assert.NoFileExists(ct, filepath.Join(f.data["fo-0"], "postmaster.pid"), "the server stopped")
	}, time.Minute, 200*time.Millisecond, "fo-0's agent did not fence its server")
	out, err = f.psql("fo-0", "INSERT INTO rows VALUES (-2)")
	require.Error(t, err, "the self-fenced old primary takes no write: %s", out)
	f.primary.Stop(t) // its process has ended with the server

	// The operator reaches it again: it records the fence, lifts it once
	// the restarted pod names fo-1, and fo-0 rejoins.
	restore()
	f.startServerAgain("fo-0")
	got := waitDatabase(t, e, "the old primary rejoined", func(ct *assert.CollectT, d *dbv1.Database) {
		rec := d.Status.Failovers[len(d.Status.Failovers)-1]
		assert.NotNil(ct, rec.SelfFenced)
		assert.NotNil(ct, rec.Rejoined)
	})
	rec = got.Status.Failovers[len(got.Status.Failovers)-1]
	assert.False(t, rec.Rejoined.Before(rec.SelfFenced), "%+v", rec)
	assertEventReason(t, e, "OldPrimaryFencedItself")
	f.waitRows("fo-0", "1,2")
	out, err = f.psql("fo-1", "SELECT count(*) FROM rows WHERE id < 0")
	require.NoError(t, err, out)
	assert.Equal(t, "0", out, "the new primary never had the row the old one took alone")
}

// TestAnOldPrimaryCutOffFromTheOperatorFencesItselfBeforeTheNewOneIsPromoted:
// the primary's agent is cut off from the operator, not from the API
// server: its pod's mount follows the scripts ConfigMap as a kubelet's
// does (copied here as soon as it changes). The fence does not reach fo-0
// and its pod shows its server running, so the operator names fo-1 the
// primary first; fo-0's agent reads the name and fences its server, and
// only then is fo-1 promoted. There is no moment with two primaries: fo-0
// stopped writing before fo-1 began (the fence marker is older than fo-1's
// new timeline), and fo-1 holds every row fo-0 acknowledged.
func TestAnOldPrimaryCutOffFromTheOperatorFencesItselfBeforeTheNewOneIsPromoted(t *testing.T) {
	t.Parallel()
	f := newFailoverSetup(t)
	e := f.e
	followTheConfigMap(t, e, "fo-0")
	restore := f.agents.Cut(instance.PodHosts("fo-0", "fo-headless", e.ns)[0])
	failedOverFromACutOffPrimary(t, e)

	marker, err := os.Stat(filepath.Join(filepath.Dir(f.data["fo-0"]), instance.FenceMarker))
	require.NoError(t, err, "fo-0 did not fence itself before fo-1's promotion")
	timeline, err := os.Stat(filepath.Join(f.data["fo-1"], "pg_wal", "00000002.history"))
	require.NoError(t, err, "fo-1 was not promoted")
	assert.True(t, marker.ModTime().Before(timeline.ModTime()),
		"fo-0 fenced itself at %s, after fo-1's promotion at %s: two primaries ran", marker.ModTime().Format(time.StampMilli), timeline.ModTime().Format(time.StampMilli))
	reason, err := os.ReadFile(filepath.Join(filepath.Dir(f.data["fo-0"]), instance.FenceMarker))
	require.NoError(t, err)
	assert.Contains(t, string(reason), "fenced by its own agent: its pod names fo-1 the primary")

	// Reachable again, it is lifted and rejoins: nothing of it was lost.
	f.rejoinsAfterItsSelfFence(restore)
}

// failedOverFromACutOffPrimary waits for the failover of fo-0, whose
// agent is cut off, and returns its record: fo-1 promoted, the fence
// unreached, and fo-1 named first, since fo-0's pod showed its server
// running.
func failedOverFromACutOffPrimary(t *testing.T, e *endToEnd) dbv1.FailoverRecord {
	t.Helper()
	got := waitDatabase(t, e, "failed over", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotEmpty(ct, d.Status.Failovers)
		assert.Equal(ct, dbv1.FailoverCompleted, d.Status.Failovers[len(d.Status.Failovers)-1].Phase, "%+v", d.Status.Failovers)
	})
	rec := got.Status.Failovers[len(got.Status.Failovers)-1]
	require.Equal(t, "fo-1", rec.To)
	require.False(t, rec.Fenced, "the fence reached an agent cut off: %+v", rec)
	require.NotNil(t, rec.NamedFirst, "fo-1 was not named first: %+v", rec)
	return rec
}

// followTheConfigMap keeps pod's mounted copy of the scripts ConfigMap's
// primary key as its kubelet would: written again whenever the ConfigMap
// names another pod, until the test ends.
func followTheConfigMap(t *testing.T, e *endToEnd, pod string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	named := filepath.Join(scriptsDir(e.root, pod), "primary")
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var cm corev1.ConfigMap
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "fo-scripts"}, &cm); err == nil {
				if have, _ := os.ReadFile(named); string(have) != cm.Data[engine.ScriptsPrimaryKey] {
					// As the kubelet does: a new file, never one half written.
					tmp := named + ".new"
					if os.WriteFile(tmp, []byte(cm.Data[engine.ScriptsPrimaryKey]), 0o444) == nil {
						_ = os.Rename(tmp, named)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// TestAPrimaryCutOffFromTheOperatorTheAPIServerAndItsStandbyFencesItselfFirst:
// a network partition around the primary fo-0. Its agent is cut off from
// the operator, the API server's address does not answer it, no kubelet
// brings it the new name, and its standby fo-1 stops replying (fo-rw, the
// standby's way to it, delivers nothing more). The operator fails over to
// fo-1 (named first: fo-0's pod shows its server running). fo-0's agent,
// cut off from the operator past the bound the operator gave it (half
// primaryGoneAfter) and from the API server, with a standby silent,
// fences its own server before fo-1's promotion: its fence marker is older
// than fo-1's new timeline. Once the partition heals, the operator
// records the self-fence and fo-0 rejoins as fo-1's standby.
func TestAPrimaryCutOffFromTheOperatorTheAPIServerAndItsStandbyFencesItselfFirst(t *testing.T) {
	t.Parallel()
	// A free port, which nothing listens on: the API server as a
	// partitioned pod finds it.
	f := newFailoverSetupWithAgentArgs(t, 2, isolationBound, "--api-server", "127.0.0.1:"+pgtest.FreePort(t))
	e := f.e
	f.waitPrimaryReportsStreaming("fo-0", "fo-1")
	restore := f.agents.Cut(instance.PodHosts("fo-0", "fo-headless", e.ns)[0])
	f.partition()
	failedOverFromACutOffPrimary(t, e)
	f.isolatedPrimaryFencedItselfBeforeThePromotion("standby fo-1 sent no reply")

	// The partition heals: it is recorded, lifted, and rejoins.
	f.partitioned.Store(false)
	f.rejoinsAfterItsSelfFence(restore)
}

// isolationBound gives the isolation tests a primaryGoneAfter of 6 s:
// the agent's bound is 3 s, not the 1 s of the failover tests' 2 s,
// which a loaded machine (make test) can pass while the operator is slow
// to ask and a standby slow to reply, fencing the primary before the test
// has cut anything.
func isolationBound(db *dbv1.Database) {
	db.Spec.Failover.PrimaryGoneAfter = &metav1.Duration{Duration: 6 * time.Second}
}

// isolatedPrimaryFencedItselfBeforeThePromotion: fo-0's isolation check
// fenced its server (its marker's reason says so, and why) before fo-1's
// promotion (the marker is older than fo-1's new timeline).
func (f *failoverSetup) isolatedPrimaryFencedItselfBeforeThePromotion(why string) {
	t := f.e.t
	t.Helper()
	markerPath := filepath.Join(filepath.Dir(f.data["fo-0"]), instance.FenceMarker)
	marker, err := os.Stat(markerPath)
	require.NoError(t, err, "fo-0 did not fence itself before fo-1's promotion")
	timeline, err := os.Stat(filepath.Join(f.data["fo-1"], "pg_wal", "00000002.history"))
	require.NoError(t, err, "fo-1 was not promoted")
	assert.True(t, marker.ModTime().Before(timeline.ModTime()),
		"fo-0 fenced itself at %s, after fo-1's promotion at %s: two primaries ran", marker.ModTime().Format(time.StampMilli), timeline.ModTime().Format(time.StampMilli))
	reason, err := os.ReadFile(markerPath)
	require.NoError(t, err)
	assert.Contains(t, string(reason), "fenced by its own agent: cut off from the operator and from the API server")
	assert.Contains(t, string(reason), why)
}

// TestAPrimaryCutOffFromTheOperatorAndTheAPIServerButNotItsStandbysFencesItselfFirst:
// the primary fo-0's agent is cut off from the operator and the API
// server's address does not answer it, but its standbys fo-1 and fo-2
// still stream from it (a partition that leaves the database's own
// traffic alone). The failover's fence does not reach fo-0, fo-1 is named
// first, and fo-0's pod still shows its server running when the wait is
// over, so the operator detaches both standbys: fo-0's isolation check
// sees them stop replying and fences its server before fo-1's promotion.
// fo-2's agent, lost during the wait, is not attached with the
// promotion; reached again, the failover watch attaches it and it
// streams from fo-1. Reachable again, fo-0 rejoins.
func TestAPrimaryCutOffFromTheOperatorAndTheAPIServerButNotItsStandbysFencesItselfFirst(t *testing.T) {
	t.Parallel()
	f := newFailoverSetupWithAgentArgs(t, 3, isolationBound, "--api-server", "127.0.0.1:"+pgtest.FreePort(t))
	e := f.e
	f.waitPrimaryReportsStreaming("fo-0", "fo-1", "fo-2")
	restore := f.agents.Cut(instance.PodHosts("fo-0", "fo-headless", e.ns)[0])
	detached := waitDatabase(t, e, "the standbys detached", func(ct *assert.CollectT, d *dbv1.Database) {
		require.NotEmpty(ct, d.Status.Failovers)
		assert.NotNil(ct, d.Status.Failovers[len(d.Status.Failovers)-1].StandbysDetached)
	})
	assert.Equal(t, []string{"fo-2", "fo-1"}, detached.Status.Failovers[len(detached.Status.Failovers)-1].DetachedStandbys, "the new primary last")
	// fo-2's agent lost before the promotion: it is not attached with it.
	restoreFo2 := f.agents.Cut(instance.PodHosts("fo-2", "fo-headless", e.ns)[0])
	rec := failedOverFromACutOffPrimary(t, e)
	// Whichever standby's silence came first is named.
	f.isolatedPrimaryFencedItselfBeforeThePromotion("sent no reply")
	assertEventReason(t, e, "StandbysDetached")
	assert.Equal(t, []string{"fo-2"}, rec.DetachedStandbys, "fo-2, not reached after the promotion, is still detached")

	// Reached again, the failover watch attaches it.
	restoreFo2()
	waitDatabase(t, e, "fo-2 attached again", func(ct *assert.CollectT, d *dbv1.Database) {
		assert.Empty(ct, d.Status.Failovers[len(d.Status.Failovers)-1].DetachedStandbys)
	})
	assertEventReason(t, e, "StandbysAttached")
	assert.NoFileExists(t, filepath.Join(filepath.Dir(f.data["fo-2"]), instance.DetachedMarker))

	f.rejoinsAfterItsSelfFence(restore) // a row 2 written on fo-1
	f.waitRows("fo-2", "1,2")
	out, err := f.psql("fo-2", "SELECT count(*) FROM pg_catalog.pg_stat_wal_receiver WHERE status = 'streaming'")
	require.NoError(t, err, out)
	assert.Equal(t, "1", out, "fo-2 streams again")

	// A standby detached that no record lists (an operator that stopped
	// between the detach and its record) is attached by the watch too.
	ch := f.operatorClient()
	fo2 := instance.PodHosts("fo-2", "fo-headless", e.ns)[0]
	_, err = ch.Detach(context.Background(), fo2)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := ch.Status(context.Background(), fo2)
		require.NoError(ct, err)
		assert.False(ct, st.Detached)
		assert.True(ct, st.Streaming, "WAL receiver: %q", st.WALReceiver)
	}, time.Minute, 200*time.Millisecond, "the watch did not attach fo-2")
}

// rejoinsAfterItsSelfFence: the old primary fo-0, which fenced itself,
// takes no write, while fo-1 does; reachable again (restore), its fence
// is recorded and lifted, and it rejoins holding exactly fo-1's rows.
func (f *failoverSetup) rejoinsAfterItsSelfFence(restore func()) {
	t := f.e.t
	t.Helper()
	out, err := f.psql("fo-0", "INSERT INTO rows VALUES (-1)")
	require.Error(t, err, "the old primary takes no write after the failover: %s", out)
	out, err = f.psql("fo-1", "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, "the new primary takes writes: %s", out)
	f.primary.Stop(t) // its process has ended with the server

	restore()
	f.startServerAgain("fo-0")
	waitDatabase(t, f.e, "the old primary rejoined", func(ct *assert.CollectT, d *dbv1.Database) {
		rec := d.Status.Failovers[len(d.Status.Failovers)-1]
		assert.NotNil(ct, rec.SelfFenced)
		assert.NotNil(ct, rec.Rejoined)
	})
	f.waitRows("fo-0", "1,2")
}

// TestAPrimaryThatFencedItselfWhileCutOffIsLiftedWhenNoFailoverHappened:
// the operator stopped and the primary fo-0 partitioned from its standby,
// with the API server not answering it: fo-0's agent fences its own server
// (it cannot tell this from a partition in which fo-1 is being promoted).
// Nothing was failed over. The partition heals and a new operator starts:
// it finds its current primary fenced by its own agent, its pod naming it,
// and no failover under way, so it lifts the fence (a Warning Event
// PrimaryFenceLifted) and fo-0 serves again as the primary, with no
// failover recorded.
func TestAPrimaryThatFencedItselfWhileCutOffIsLiftedWhenNoFailoverHappened(t *testing.T) {
	t.Parallel()
	f := newFailoverSetupWithAgentArgs(t, 2, func(db *dbv1.Database) {
		// Long enough for the lifted primary's restart: no failover.
		db.Spec.Failover.PrimaryGoneAfter = &metav1.Duration{Duration: 20 * time.Second}
	}, "--api-server", "127.0.0.1:"+pgtest.FreePort(t))
	e := f.e
	f.waitPrimaryReportsStreaming("fo-0", "fo-1")
	e.stopOperator()
	f.partition()
	markerPath := filepath.Join(filepath.Dir(f.data["fo-0"]), instance.FenceMarker)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.FileExists(ct, markerPath)
		assert.NoFileExists(ct, filepath.Join(f.data["fo-0"], "postmaster.pid"), "the server stopped")
	}, time.Minute, 200*time.Millisecond, "fo-0's agent did not fence its server")
	reason, err := os.ReadFile(markerPath)
	require.NoError(t, err)
	assert.Contains(t, string(reason), "cut off from the operator and from the API server")
	f.primary.Stop(t) // its process has ended with the server

	// The partition heals; a new operator lifts the fence, and the
	// server's entrypoint (started again here, as its container's restart
	// does) waits for that.
	f.partitioned.Store(false)
	e.startOperator()
	f.startServerAgain("fo-0")
	got := waitDatabase(t, e, "the primary serves again", func(ct *assert.CollectT, d *dbv1.Database) {
		c := conditionOf(d, database.ConditionFailover)
		require.NotNil(ct, c)
		assert.Equal(ct, "PrimaryHealthy", c.Reason, c.Message)
	})
	assert.Empty(t, got.Status.Failovers, "nothing failed over")
	assert.Equal(t, "fo-0", got.Status.CurrentPrimary)
	assertEventReason(t, e, "PrimaryFenceLifted")
	out, err := f.psql("fo-0", "INSERT INTO rows VALUES (3)")
	require.NoError(t, err, "the primary takes writes again: %s", out)
	f.waitRows("fo-1", "1,3")
}

// waitPrimaryReportsStreaming waits until the primary's agent answers a
// question (asked with the operator's certificate, as the operator asks)
// with the standbys streaming from it: the isolation check watches the
// standbys of the last answer, and a standby that began to stream after
// it is not watched.
func (f *failoverSetup) waitPrimaryReportsStreaming(primary string, standbys ...string) {
	f.e.t.Helper()
	ch := f.operatorClient()
	require.EventuallyWithT(f.e.t, func(ct *assert.CollectT) {
		st, err := ch.Status(context.Background(), instance.PodHosts(primary, "fo-headless", f.e.ns)[0])
		require.NoError(ct, err)
		assert.Subset(ct, st.StreamingStandbys, standbys)
	}, time.Minute, 200*time.Millisecond, "%s does not report %v streaming from it", primary, standbys)
}
