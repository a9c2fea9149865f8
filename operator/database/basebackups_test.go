package database_test

import (
	"time"

	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
)

// A DatabaseBackup is a dump unless it says otherwise; its method never
// changes; a base backup of a Database that has no WAL archive fails at
// once, saying so, and kubectl shows each backup's method.
func TestABackupsMethodIsADumpByDefaultAndABaseBackupNeedsAnArchive(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	startOperator(t, ns)
	require.NoError(t, c.Create(ctx, newDatabase(ns, "plain", 1)))

	dump := &dbv1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Name: "a-dump", Namespace: ns}, Spec: dbv1.DatabaseBackupSpec{Database: "plain"}}
	require.NoError(t, c.Create(ctx, dump))
	assert.Equal(t, dbv1.BackupMethodDump, dump.Spec.Method, "the default method")
	// Read again before each try: the operator adds its finalizer meanwhile.
	var err error
	for range 10 {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(dump), dump))
		dump.Spec.Method = dbv1.BackupMethodBaseBackup
		if err = c.Update(ctx, dump); !apierrors.IsConflict(err) {
			break
		}
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "method is immutable: make a new DatabaseBackup for the other method")

	base := &dbv1.DatabaseBackup{ObjectMeta: metav1.ObjectMeta{Name: "a-base", Namespace: ns},
		Spec: dbv1.DatabaseBackupSpec{Database: "plain", Method: dbv1.BackupMethodBaseBackup}}
	require.NoError(t, c.Create(ctx, base))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(base), base))
		require.Equal(ct, dbv1.BackupFailed, base.Status.Phase)
	}, wait, 100*time.Millisecond)
	cond := findBackupCondition(base, database.ConditionBackupCompleted)
	require.NotNil(t, cond)
	assert.Equal(t, "CannotTakeBaseBackup", cond.Reason)
	assert.Contains(t, cond.Message, "Database plain has no WAL archive (spec.backup.storage.objectStore)")
	assertEvent(t, c, ns, "a-base", corev1.EventTypeWarning, "CannotTakeBaseBackup")

	out, err := testenv.Kubectl(t, "get", "databasebackups", "-n", ns)
	require.NoError(t, err, out)
	assert.Equal(t, "BaseBackup", column(t, out, "a-base", "METHOD"))
	assert.Equal(t, "Dump", column(t, out, "a-dump", "METHOD"))
}

func findBackupCondition(b *dbv1.DatabaseBackup, kind string) *metav1.Condition {
	for i := range b.Status.Conditions {
		if b.Status.Conditions[i].Type == kind {
			return &b.Status.Conditions[i]
		}
	}
	return nil
}
