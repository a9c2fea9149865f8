package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
)

func TestVerifySettingsAreRefusedWithReadableMessages(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		verify dbv1.BackupVerify
		msg    string
	}{
		{"Scheduled without a schedule", dbv1.BackupVerify{Mode: dbv1.VerifyScheduled}, "verify.schedule is required with mode Scheduled"},
		{"a schedule without Scheduled", dbv1.BackupVerify{Schedule: "@weekly"}, "verify.schedule is used only with mode Scheduled"},
		{"a schedule of four fields", dbv1.BackupVerify{Mode: dbv1.VerifyScheduled, Schedule: "0 4 * *"}, `verify.schedule must be five cron fields`},
		{"an unknown mode", dbv1.BackupVerify{Mode: "Sometimes"}, `supported values: "EachBackup", "Scheduled", "Off"`},
		{"a blank user check", dbv1.BackupVerify{UserCheck: "  "}, "verify.userCheck must be an SQL query returning true"},
		{"maxAge 0", dbv1.BackupVerify{MaxAge: &metav1.Duration{}}, "verify.maxAge must be more than 0"},
		{"negative startTimeout", dbv1.BackupVerify{StartTimeout: &metav1.Duration{Duration: -time.Minute}}, "verify.startTimeout must be more than 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDatabase(ns, "bad", 1)
			db.Spec.Backup = &dbv1.BackupSpec{Verify: &tc.verify}
			err := c.Create(ctx, db)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	ok := newDatabase(ns, "fine", 1)
	ok.Spec.Backup = &dbv1.BackupSpec{Verify: &dbv1.BackupVerify{Mode: dbv1.VerifyScheduled, Schedule: "0 4 * * 0", UserCheck: "SELECT true"}}
	require.NoError(t, c.Create(ctx, ok))
	none := newDatabase(ns, "defaults", 1)
	none.Spec.Backup = &dbv1.BackupSpec{Verify: &dbv1.BackupVerify{}}
	require.NoError(t, c.Create(ctx, none))
	assert.Equal(t, dbv1.VerifyEachBackup, none.Spec.Backup.Verify.Mode, "the default")
}
