package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// With spec.failover.enabled, a new Database's pods carry the instance
// agent (its init container copies it from the operator's image), the
// StatefulSet starts its pods in parallel (a primary at any ordinal
// starts after a restart of every pod), and the channel's two Secrets
// exist: the operator's (never mounted) and the pods' (a server
// certificate per pod).
func TestFailoverEnabledRunsTheInstanceAgentInEveryPod(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperatorWith(t, ns, database.Options{OperatorImage: "example.org/deckhand:test"})
	db := newDatabase(ns, "fo", 2)
	db.Spec.Failover = &dbv1.FailoverSpec{Enabled: true}
	require.NoError(t, c.Create(context.Background(), db))

	sts := get(t, c, ns, "fo", &appsv1.StatefulSet{})
	assert.Equal(t, appsv1.ParallelPodManagement, sts.Spec.PodManagementPolicy)
	spec := sts.Spec.Template.Spec
	var names []string
	for _, ctr := range spec.Containers {
		names = append(names, ctr.Name)
	}
	assert.Contains(t, names, instance.AgentContainer)
	require.Len(t, spec.InitContainers, 1)
	assert.Equal(t, "example.org/deckhand:test", spec.InitContainers[0].Image)
	mounted := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			mounted[v.Secret.SecretName] = true
		}
	}
	assert.True(t, mounted["fo-instance-tls"], "the pods' Secret is mounted")
	assert.False(t, mounted["fo-instance-operator"], "the operator's Secret is never mounted")

	var op, pods corev1.Secret
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fo-instance-operator"}, &op))
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fo-instance-tls"}, &pods))
	}, wait, 100*time.Millisecond)
	assert.NotEmpty(t, op.Data[instance.CAKeyKey])
	assert.NotEmpty(t, op.Data[instance.ClientKeyKey])
	assert.NotContains(t, pods.Data, instance.CAKeyKey, "the CA's key stays with the operator")
	for _, pod := range []string{"fo-0", "fo-1"} {
		assert.NotEmpty(t, pods.Data[instance.ServerCertKey(pod)], pod)
	}
	opVersion, podsVersion := op.ResourceVersion, pods.ResourceVersion

	// A steady state rewrites neither Secret.
	waitFor(t, c, db, "Ready", ready)
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fo-instance-operator"}, &op))
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "fo-instance-tls"}, &pods))
	assert.Equal(t, opVersion, op.ResourceVersion)
	assert.Equal(t, podsVersion, pods.ResourceVersion)
}

// Without the field nothing changes: no agent, ordered start, no Secrets.
func TestFailoverOffByDefault(t *testing.T) {
	t.Parallel()
	c, ns, _ := readyDatabase(t, "nofo", 1)
	sts := get(t, c, ns, "nofo", &appsv1.StatefulSet{})
	assert.Equal(t, appsv1.OrderedReadyPodManagement, sts.Spec.PodManagementPolicy)
	assert.Len(t, sts.Spec.Template.Spec.Containers, 1)
	var s corev1.Secret
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "nofo-instance-tls"}, &s)
	assert.True(t, client.IgnoreNotFound(err) == nil && err != nil, "no channel Secret: %v", err)
}
