package database_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

// withRecovery makes db recover from the archive the Database named
// server wrote into the test's store, to target.
func withRecovery(db *dbv1.Database, server string, target *dbv1.RecoveryTarget) {
	db.Spec.Recovery = &dbv1.Recovery{
		Source:         dbv1.RecoverySource{ObjectStore: *objectStore(), ServerName: server},
		RecoveryTarget: target,
	}
}

func TestRecoverySettingsAreRefusedWithReadableMessages(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(*dbv1.Database)
		msg    string
	}{
		{"two targets", func(d *dbv1.Database) {
			d.Spec.Recovery.RecoveryTarget = &dbv1.RecoveryTarget{TargetTime: "2026-11-28T18:50:01Z", TargetName: "before-the-mistake"}
		}, "recovery.recoveryTarget takes at most one of targetTime, targetLSN, targetName, targetXID and targetImmediate (none: the end of the archive)"},
		{"a time without a zone", func(d *dbv1.Database) {
			d.Spec.Recovery.RecoveryTarget = &dbv1.RecoveryTarget{TargetTime: "2026-11-28 18:50:01"}
		}, `recovery.recoveryTarget.targetTime must be an RFC 3339 time with a zone, such as 2026-11-28T18:50:01Z, not "2026-11-28 18:50:01"`},
		{"an LSN that is not one", func(d *dbv1.Database) {
			d.Spec.Recovery.RecoveryTarget = &dbv1.RecoveryTarget{TargetLSN: "3000060"}
		}, `recovery.recoveryTarget.targetLSN must be a WAL position such as 0/3000060, not "3000060"`},
		{"a transaction ID that is not one", func(d *dbv1.Database) {
			d.Spec.Recovery.RecoveryTarget = &dbv1.RecoveryTarget{TargetXID: "-1"}
		}, "recovery.recoveryTarget.targetXID must be a transaction ID"},
		{"a timeline that is not one", func(d *dbv1.Database) {
			d.Spec.Recovery.RecoveryTarget = &dbv1.RecoveryTarget{TargetTLI: "newest"}
		}, `recovery.recoveryTarget.targetTLI must be latest, current or a timeline number, not "newest"`},
		{"exclusive without a point", func(d *dbv1.Database) {
			d.Spec.Recovery.RecoveryTarget = &dbv1.RecoveryTarget{Exclusive: ptr.To(true)}
		}, "recovery.recoveryTarget.exclusive needs targetTime, targetLSN or targetXID"},
		{"a server name that is no Database's", func(d *dbv1.Database) { d.Spec.Recovery.Source.ServerName = "Shop_1" },
			`recovery.source.serverName must be the name of the Database that wrote the archive`},
		{"a store with plain http", func(d *dbv1.Database) { d.Spec.Recovery.Source.ObjectStore.Endpoint = "http://store:7070" },
			`objectStore.endpoint must be an https:// URL`},
		{"with fromBackup too", func(d *dbv1.Database) { d.Spec.FromBackup = "nightly" },
			"recovery needs engine PostgreSQL, and excludes fromBackup: a new Database starts from one source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newDatabase(ns, "bad", 1)
			withRecovery(db, "shop", nil)
			tc.change(db)
			err := c.Create(ctx, db)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}

	// A Database recovered to the end of the archive, and to an LSN,
	// exclusive; neither can change its recovery, nor gain one.
	end := newDatabase(ns, "to-the-end", 1)
	withRecovery(end, "shop", nil)
	require.NoError(t, c.Create(ctx, end))
	lsn := newDatabase(ns, "to-an-lsn", 1)
	withRecovery(lsn, "shop", &dbv1.RecoveryTarget{TargetLSN: "0/3000060", Exclusive: ptr.To(true), TargetTLI: "2"})
	require.NoError(t, c.Create(ctx, lsn))
	plain := newDatabase(ns, "plain", 1)
	require.NoError(t, c.Create(ctx, plain))
	for name, change := range map[string]func(*dbv1.Database){
		"to-the-end": func(d *dbv1.Database) { d.Spec.Recovery.RecoveryTarget = &dbv1.RecoveryTarget{TargetName: "later"} },
		"to-an-lsn":  func(d *dbv1.Database) { d.Spec.Recovery = nil },
		"plain":      func(d *dbv1.Database) { withRecovery(d, "shop", nil) },
	} {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var d dbv1.Database
			require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d))
			change(&d)
			return c.Update(ctx, &d)
		})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "recovery is set at creation only", name)
	}
}

// A recovering Database: its pods get the recover init container (the
// archiver image, the source archive's settings and the target, the keys
// as files) and the sidecar the source archive's settings, the scripts
// ConfigMap says the recovery is pending, and the Restored condition
// follows it: Recovering, RecoveryFailed with the init container's reason
// (the Database Degraded, a Warning Event), Recovered once the primary
// serves. Then the recovery is done for good (a primary whose volume is
// emptied later starts empty), and the init Job gives the app role the
// new Secret's password.
func TestARecoveringDatabaseFollowsItsPrimarysRecovery(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	startOperatorWith(t, ns, database.Options{ArchiverImage: "example.org/archiver:test"})

	// Its pods are never scheduled: the test plays the kubelet.
	db := newDatabase(ns, "recovered", 2)
	withRecovery(db, "shop", &dbv1.RecoveryTarget{TargetTime: "2026-11-28T18:50:01.5Z", Exclusive: ptr.To(true)})
	db.Spec.Recovery.Source.ObjectStore.Path = "clusters/production"
	db.Spec.PodTemplate = &dbv1.PodTemplate{NodeSelector: map[string]dbv1.LabelValue{corev1.LabelHostname: "nowhere"}}
	require.NoError(t, c.Create(ctx, db))

	sts := get(t, c, ns, "recovered", &appsv1.StatefulSet{})
	spec := sts.Spec.Template.Spec
	require.Len(t, spec.InitContainers, 1)
	recover := spec.InitContainers[0]
	assert.Equal(t, postgres.RecoverContainer, recover.Name)
	assert.Equal(t, "example.org/archiver:test", recover.Image)
	assert.Equal(t, []string{"sh", "/deckhand/scripts/recover-primary.sh"}, recover.Command)
	env := testenv.EnvOf(recover)
	for k, v := range map[string]string{
		"STORE_ENDPOINT": "https://store.example.org:7070", "STORE_BUCKET": "wal-archive", "STORE_PREFIX": "clusters/production",
		"STORE_SERVER": "shop", "STORE_ACCESS_KEY_FILE": postgres.RecoveryStoreDir + "/access-key-id",
		"RECOVERY_TARGET_TIME": "2026-11-28T18:50:01.5Z", "RECOVERY_TARGET_EXCLUSIVE": "true",
		"RESTORE_COMMAND": "sh /deckhand/scripts/wal-handoff.sh --restore " + postgres.ArchiveQueueDir + " %f %p",
	} {
		assert.Equal(t, v, env[k], k)
	}
	assert.NotContains(t, env, "RECOVERY_TARGET_LSN")
	assert.Equal(t, corev1.TerminationMessageFallbackToLogsOnError, recover.TerminationMessagePolicy)
	sidecar := spec.Containers[len(spec.Containers)-1]
	require.Equal(t, postgres.ArchiverContainer, sidecar.Name)
	sidecarEnv := testenv.EnvOf(sidecar)
	assert.Equal(t, "shop", sidecarEnv["SOURCE_STORE_SERVER"])
	assert.Equal(t, postgres.RecoveryStoreDir+"/secret-access-key", sidecarEnv["SOURCE_STORE_SECRET_KEY_FILE"])
	assert.NotContains(t, sidecarEnv, "STORE_BUCKET", "the recovered Database archives nowhere")
	assert.NotContains(t, strings.Join(spec.Containers[0].Args, " "), "archive_mode", "no archiving of its own")
	require.NotNil(t, testenv.VolumeNamed(spec, postgres.RecoveryStoreVolume))
	for _, ctr := range append(spec.InitContainers, spec.Containers...) {
		for _, e := range ctr.Env {
			assert.False(t, e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && strings.HasPrefix(e.ValueFrom.SecretKeyRef.Name, "store-"),
				"%s %s: no store key reaches an environment", ctr.Name, e.Name)
		}
	}
	scripts := get(t, c, ns, "recovered-scripts", &corev1.ConfigMap{})
	assert.Equal(t, postgres.RecoveryPending, scripts.Data[postgres.ScriptsRecoveryKey])
	assert.NotEmpty(t, scripts.Data[postgres.RecoverPrimaryScript])

	recovering := waitFor(t, c, db, "Recovering", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "Recovering", condition(d, database.ConditionRestored).Reason)
	})
	assert.Contains(t, condition(recovering, database.ConditionRestored).Message, "s3://wal-archive/clusters/production/shop to time 2026-11-28T18:50:01.5Z")

	// The init container refuses the target: the reason its script gave.
	refusal := "recovery target time 2026-11-28T18:50:01.500000Z is outside what s3://wal-archive/clusters/production/shop can recover: from 2026-11-29T01:00:00.000000Z (LSN 0/2000100, the end of base backup 20261129T010000) to 2026-11-29T02:00:00.000000Z (the last transaction archived; the archive ends at LSN 0/5000000)"
	setRecoverStatus(t, c, ns, "recovered-0", corev1.ContainerStatus{
		Name: postgres.RecoverContainer, Image: "example.org/archiver:test",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
			Message: "deckhand: recovering s3://wal-archive/clusters/production/shop\nsome output\ndeckhand: " + refusal + "\n"}},
	})
	failed := waitFor(t, c, db, "RecoveryFailed", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "RecoveryFailed", condition(d, database.ConditionRestored).Reason)
	})
	assert.Contains(t, condition(failed, database.ConditionRestored).Message, refusal)
	assert.Equal(t, dbv1.PhaseDegraded, failed.Status.Phase)
	assert.Equal(t, "RecoveryFailed", condition(failed, database.ConditionReady).Reason)
	assert.True(t, slices.ContainsFunc(listEvents(t, c, ns, "recovered"), func(e eventsv1.Event) bool {
		return e.Reason == "RecoveryFailed" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, refusal)
	}), "a Warning Event RecoveryFailed with the reason")
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "recovered-init"}, &batchv1.Job{})
	assert.True(t, apierrors.IsNotFound(err), "no init Job before the recovery: %v", err)

	// The pod tried again, and its server replays, then serves.
	setRecoverStatus(t, c, ns, "recovered-0", corev1.ContainerStatus{
		Name: postgres.RecoverContainer, Image: "example.org/archiver:test",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}},
	})
	waitFor(t, c, db, "Recovering again", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, "Recovering", condition(d, database.ConditionRestored).Reason)
	})
	setUnscheduledPodReady(t, c, ns, "recovered-0")
	done := waitFor(t, c, db, "Recovered", func(ct *assert.CollectT, d *dbv1.Database) {
		require.Equal(ct, metav1.ConditionTrue, condition(d, database.ConditionRestored).Status)
	})
	assert.Equal(t, "Recovered", condition(done, database.ConditionRestored).Reason)
	assert.Equal(t, "recovered from s3://wal-archive/clusters/production/shop to time 2026-11-28T18:50:01.5Z", condition(done, database.ConditionRestored).Message)
	assert.True(t, slices.ContainsFunc(listEvents(t, c, ns, "recovered"), func(e eventsv1.Event) bool { return e.Reason == "Recovered" }),
		"an Event Recovered")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var cm corev1.ConfigMap
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "recovered-scripts"}, &cm))
		require.Equal(ct, postgres.RecoveryDone, cm.Data[postgres.ScriptsRecoveryKey])
	}, wait, 100*time.Millisecond, "the recovery is done for good")
	job := get(t, c, ns, "recovered-init", &batchv1.Job{})
	assert.Equal(t, "true", testenv.EnvOf(job.Spec.Template.Spec.Containers[0])["APP_PASSWORD_RESET"])
}

// setRecoverStatus writes the pod's init container status, as a kubelet
// would.
func setRecoverStatus(t *testing.T, c client.Client, ns, name string, cs corev1.ContainerStatus) {
	t.Helper()
	ctx := context.Background()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var pod corev1.Pod
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
				return err
			}
			pod.Status.InitContainerStatuses = []corev1.ContainerStatus{cs}
			return c.Status().Update(ctx, &pod)
		})
		require.NoError(ct, err)
	}, wait, 100*time.Millisecond)
}

// setUnscheduledPodReady writes what a kubelet writes once every container
// of the pod is ready.
func setUnscheduledPodReady(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var pod corev1.Pod
		require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &pod))
		pod.Status.Phase = corev1.PodRunning
		pod.Status.ContainerStatuses = nil
		for _, ctr := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: ctr.Name, Image: ctr.Image, Ready: true, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
			})
		}
		testenv.SetPodReadyConditions(&pod, corev1.ConditionTrue)
		return c.Status().Update(context.Background(), &pod)
	}))
}
