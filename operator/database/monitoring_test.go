package database_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// Metrics are on by default for a Database the operator has never run,
// and the default is recorded on it (annotation
// stable.imaginedata.co/monitoring-default); a Database an older operator
// ran keeps its pod template (no metrics, no restart) until its owner
// sets spec.monitoring.enabled. Without failover the pods get a sidecar
// of their own (the agent in metrics-only mode, copied from the
// operator's image, sharing the server's socket, with no certificate and
// no data volume); with failover the agent
// serves the metrics on a second port. The user's queries ConfigMap is
// mounted optional, by the key named, as the file the collector reads.
func TestMonitoringIsOnByDefaultForANewDatabaseOnly(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	older := newDatabase(ns, "older", 1)
	require.NoError(t, c.Create(ctx, older))
	older.Status.ObservedGeneration = older.Generation
	require.NoError(t, c.Status().Update(ctx, older))

	startOperatorWith(t, ns, database.Options{OperatorImage: "example.org/deckhand:test", MonitoringByDefault: true})
	fresh := newDatabase(ns, "fresh", 2)
	optedOut := newDatabase(ns, "opted-out", 1)
	optedOut.Spec.Monitoring = &dbv1.MonitoringSpec{Enabled: ptr.To(false)}
	withAgent := newDatabase(ns, "with-agent", 1)
	withAgent.Spec.Failover = &dbv1.FailoverSpec{Enabled: ptr.To(true)}
	withAgent.Spec.Monitoring = &dbv1.MonitoringSpec{CustomQueries: &dbv1.CustomQueriesSource{Name: "my-queries", Key: "pg.yaml"}}
	for _, db := range []*dbv1.Database{fresh, optedOut, withAgent} {
		require.NoError(t, c.Create(ctx, db))
	}

	for _, tc := range []struct {
		db       *dbv1.Database
		recorded string
		// container serves the metrics ("": none does).
		container string
		why       string
	}{
		{fresh, "true", instance.MetricsContainer, "a new Database gets the operator's default, on: a sidecar without failover"},
		{older, "false", "", "a Database an older operator ran keeps its pods as they are"},
		{optedOut, "true", "", "spec.monitoring.enabled false wins over the recorded default"},
		{withAgent, "true", instance.AgentContainer, "with failover the agent serves them"},
	} {
		cur := waitFor(t, c, tc.db, "its monitoring default recorded", func(ct *assert.CollectT, d *dbv1.Database) {
			assert.Contains(ct, d.Annotations, database.AnnotationMonitoringDefault)
		})
		assert.Equal(t, tc.recorded, cur.Annotations[database.AnnotationMonitoringDefault], "%s: %s", tc.db.Name, tc.why)
		sts := get(t, c, ns, tc.db.Name, &appsv1.StatefulSet{})
		spec := sts.Spec.Template.Spec
		var serving []string
		for _, ctr := range spec.Containers {
			for _, p := range ctr.Ports {
				if p.Name == instance.MetricsPortName {
					assert.Equal(t, int32(instance.MetricsPort), p.ContainerPort)
					serving = append(serving, ctr.Name)
				}
			}
		}
		if tc.container == "" {
			assert.Empty(t, serving, "%s: %s", tc.db.Name, tc.why)
			assert.Len(t, spec.Containers, 1, "%s: the server alone", tc.db.Name)
			continue
		}
		require.Equal(t, []string{tc.container}, serving, "%s: %s", tc.db.Name, tc.why)
		ctr := spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == tc.container })]
		assert.Contains(t, ctr.Command, "--metrics-listen", tc.db.Name)
		assert.Contains(t, ctr.Command, "--app-user", tc.db.Name)
		require.Len(t, spec.InitContainers, 1, "%s: the agent copied once", tc.db.Name)
		assert.Equal(t, "example.org/deckhand:test", spec.InitContainers[0].Image)
		server := spec.Containers[0]
		assert.True(t, slices.ContainsFunc(server.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == instance.SocketDir }),
			"%s: the server's socket is shared", tc.db.Name)
		if tc.container == instance.MetricsContainer {
			for _, m := range ctr.VolumeMounts {
				assert.NotEqual(t, engine.DataVolume, m.Name, "the metrics sidecar needs no data volume")
				v := spec.Volumes[slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })]
				assert.Nil(t, v.Secret, "the metrics sidecar needs no certificate (%s)", m.Name)
			}
			assert.NotContains(t, ctr.Command, "--queries")
		}
	}

	// The user's queries: the ConfigMap's key mounted, optional, read by
	// the agent.
	spec := get(t, c, ns, withAgent.Name, &appsv1.StatefulSet{}).Spec.Template.Spec
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == "my-queries" })
	require.GreaterOrEqual(t, i, 0, "the queries ConfigMap is a volume of the pods")
	cm := spec.Volumes[i].ConfigMap
	assert.Equal(t, ptr.To(true), cm.Optional, "a missing ConfigMap stops no pod")
	assert.Equal(t, []corev1.KeyToPath{{Key: "pg.yaml", Path: instance.QueriesFile}}, cm.Items)
	agent := spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == instance.AgentContainer })]
	assert.Contains(t, agent.Command, "--queries")
	assert.True(t, slices.ContainsFunc(agent.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == spec.Volumes[i].Name && m.ReadOnly }))
}
