package node

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

// storeOutage is how long the object store is unreachable.
const storeOutage = 2 * time.Minute

// The object store unreachable for two minutes while a Database on the
// real node takes writes, through the chart's operator from its image: the
// Database stays writable, its WALArchiving condition turns False with a
// Warning Event, the archive catches up once the store is back (Normal
// Event ArchiveRecovered), and nothing is missing from it: the
// verification of the base backup taken before the outage checks that
// every segment from that backup to the archive's end is in the store.
// The store is cut off by its Service selecting no pod (its connections
// refused, as a store down is), so its data stays.
func TestRealNodeKeepsWritingWhileTheStoreIsDownAndTheArchiveCatchesUp(t *testing.T) {
	parallel(t, 4*time.Minute) // see the package comment: its own namespace, the shared operator
	cfg, cs := clientFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	operatorDeployment(ctx, t, cs)
	helmUpgrade(ctx, t, "--set", "controllers.database.enabled=true")
	c := crClient(t, cfg)
	ns := namespace(ctx, t, cs)
	store := startObjectStore(ctx, t, cs, ns)
	store.ArchiveTimeout = &metav1.Duration{Duration: 10 * time.Second}

	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "journal", Namespace: ns},
		Spec: dbv1.DatabaseSpec{Name: "journal", StorageSize: "256Mi", Image: imageRef(t, "postgres"), Replicas: 1,
			Backup: &dbv1.BackupSpec{Storage: &dbv1.BackupStorage{ObjectStore: store},
				// Verified after the outage, so its archive check covers it.
				Verify: &dbv1.BackupVerify{Mode: dbv1.VerifyOff}}},
	}
	require.NoError(t, c.Create(ctx, db))
	waitDatabaseReady(ctx, t, c, ns, "journal")
	base := waitForContainerLog(ctx, t, cs, ns, "journal-0", postgres.ArchiverContainer, "deckhand: base backup base-")
	require.Contains(t, base, " done: backup_id=", "the first base backup:\n%s", base)
	archiving := func(ctx context.Context) (*metav1.Condition, error) {
		var cur dbv1.Database
		if err := c.Get(ctx, crclient.ObjectKeyFromObject(db), &cur); err != nil {
			return nil, err
		}
		return meta.FindStatusCondition(cur.Status.Conditions, database.ConditionWALArchiving), nil
	}
	waitArchiving := func(status metav1.ConditionStatus, within time.Duration) *metav1.Condition {
		t.Helper()
		var cond *metav1.Condition
		err := wait.PollUntilContextTimeout(ctx, time.Second, within, true, func(ctx context.Context) (bool, error) {
			got, err := archiving(ctx)
			cond = got
			return err == nil && got != nil && got.Status == status, nil
		})
		require.NoError(t, err, "WALArchiving never %s: %+v", status, cond)
		return cond
	}
	waitArchiving(metav1.ConditionTrue, 3*time.Minute)
	client := startPostgresClient(ctx, t, cs, ns, "journal", "psql")
	psql(ctx, t, cfg, cs, client, "rw", "CREATE TABLE entries (n int PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())")

	// The outage: a write every 2 s throughout, each acknowledged.
	selectStore := func(app string) {
		t.Helper()
		patch := []byte(`{"spec":{"selector":{"app":"` + app + `"}}}`)
		_, err := cs.CoreV1().Services(ns).Patch(ctx, "store", types.MergePatchType, patch, metav1.PatchOptions{})
		require.NoError(t, err)
	}
	selectStore("nothing")
	down := time.Now()
	// The outage is minutes of waiting under a write every 2 s.
	takeBack := lendSlot(t)
	var failedAfter time.Duration
	var failing *metav1.Condition
	written := 0
	for time.Since(down) < storeOutage {
		written++
		psql(ctx, t, cfg, cs, client, "rw", "INSERT INTO entries (n) VALUES ("+strconv.Itoa(written)+")")
		if failing == nil {
			if cond, err := archiving(ctx); err == nil && cond != nil && cond.Status == metav1.ConditionFalse {
				failing, failedAfter = cond, time.Since(down)
			}
		}
		time.Sleep(2 * time.Second)
	}
	require.NotNil(t, failing, "WALArchiving stayed True through %s of the store down", storeOutage)
	assert.Equal(t, "ArchiveFailing", failing.Reason, failing.Message)
	assert.Contains(t, failing.Message, "wait there now", "the message says what waits in pg_wal: %s", failing.Message)
	assert.Contains(t, eventReasonsOf(ctx, t, cs, ns, "journal"), "ArchiveFailing", "a Warning Event when archiving starts failing")

	takeBack()
	selectStore("store")
	up := time.Now()
	waitArchiving(metav1.ConditionTrue, 5*time.Minute)
	caughtUp := time.Since(up)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		return slices.Contains(eventReasonsOf(ctx, t, cs, ns, "journal"), "ArchiveRecovered"), nil
	}), "no Normal Event ArchiveRecovered")
	assert.Equal(t, strconv.Itoa(written), psql(ctx, t, cfg, cs, client, "rw", "SELECT count(*) FROM entries"), "every write of the outage committed")
	last, failures := archivedThrough(ctx, t, cs, ns, "journal-0", switchWAL(ctx, t, cs, ns, "journal-0"))
	assert.NotEqual(t, "0", failures, "pg_stat_archiver counted the failed attempts")

	// Nothing missing: the base backup from before the outage verified,
	// its archive check covering every segment from it to the archive's
	// end.
	var cur dbv1.Database
	require.NoError(t, c.Get(ctx, crclient.ObjectKeyFromObject(db), &cur))
	before := cur.DeepCopy()
	cur.Spec.Backup.Verify = &dbv1.BackupVerify{Mode: dbv1.VerifyEachBackup}
	require.NoError(t, c.Patch(ctx, &cur, crclient.MergeFrom(before)))
	var v *dbv1.BaseBackupVerification
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, crclient.ObjectKeyFromObject(db), &cur)
		if err != nil || cur.Status.BaseBackups == nil || cur.Status.BaseBackups.Verification == nil {
			return false, nil
		}
		v = cur.Status.BaseBackups.Verification
		return v.Outcome != "", nil
	}), "no verification of the base backup recorded: %+v", cur.Status.BaseBackups)
	require.Equal(t, dbv1.VerificationVerified, v.Outcome, "%s: %+v", v.Message, v.Checks)
	require.NotEmpty(t, v.Checks)
	assert.Equal(t, "archive", v.Checks[0].Name)
	assert.True(t, v.Checks[0].Passed, "every segment from the base backup to the archive's end (%s) is in the store", last)
	logf(t, "store unreachable for %s under a write every 2 s: %d writes acknowledged, none failed; WALArchiving False %.0f s after the cut (%s failed attempts counted); True again %.1f s after the store was back, the archive whole to %s",
		storeOutage, written, failedAfter.Seconds(), failures, caughtUp.Seconds(), last)
}
