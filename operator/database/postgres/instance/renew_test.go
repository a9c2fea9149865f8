package instance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

func instances(pods ...string) []instance.Instance {
	var out []instance.Instance
	for _, p := range pods {
		out = append(out, instance.Instance{Pod: p, Hosts: hosts(p)})
	}
	return out
}

// What the reconciler writes: made once, then left alone; renewed,
// grown and shrunk with the pods, under the same CA.
func TestSecretDataIsMadeOnceThenKeptRenewedAndFollowsThePods(t *testing.T) {
	now := time.Now()
	op, pods, changed, err := instance.SecretData(nil, nil, "ns", "db", instances(pod0, pod1), now)
	require.NoError(t, err)
	assert.True(t, changed, "made")
	assert.ElementsMatch(t, []string{"ca.crt", "db-0.crt", "db-0.key", "db-1.crt", "db-1.key"}, keys(pods))
	assert.ElementsMatch(t, []string{"ca.crt", "ca.key", "client.crt", "client.key"}, keys(op))

	op2, pods2, changed, err := instance.SecretData(op, pods, "ns", "db", instances(pod0, pod1), now.Add(time.Hour))
	require.NoError(t, err)
	assert.False(t, changed, "a steady state writes nothing")
	assert.Equal(t, op, op2)
	assert.Equal(t, pods, pods2)

	// A third pod: its pair is added, the others kept.
	_, grown, changed, err := instance.SecretData(op, pods, "ns", "db", instances(pod0, pod1, "db-2"), now)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, pods["db-0.crt"], grown["db-0.crt"])
	assert.Contains(t, grown, "db-2.key")
	// One pod fewer: its pair is dropped.
	_, shrunk, changed, err := instance.SecretData(op, pods, "ns", "db", instances(pod0), now)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.NotContains(t, shrunk, "db-1.crt")

	// Past two thirds of the leaves' life: new leaves, same CA.
	later := now.Add(instance.LeafLifetime * 3 / 4)
	renewedOp, renewedPods, changed, err := instance.SecretData(op, pods, "ns", "db", instances(pod0, pod1), later)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, op["ca.crt"], renewedOp["ca.crt"], "the pods' trust does not change")
	assert.NotEqual(t, op["client.crt"], renewedOp["client.crt"])
	assert.NotEqual(t, pods["db-1.crt"], renewedPods["db-1.crt"])
	assert.False(t, instance.NeedsRenewal(renewedPods["db-1.crt"], later))
}

func TestSecretDataReplacesWhatDoesNotBelong(t *testing.T) {
	now := time.Now()
	op, pods, _, err := instance.SecretData(nil, nil, "ns", "db", instances(pod0), now)
	require.NoError(t, err)

	// An unreadable CA: a new one, and everything under it.
	broken := map[string][]byte{"ca.crt": []byte("garbage"), "ca.key": op["ca.key"], "client.crt": op["client.crt"], "client.key": op["client.key"]}
	newOp, newPods, changed, err := instance.SecretData(broken, pods, "ns", "db", instances(pod0), now)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.NotEqual(t, op["ca.crt"], newOp["ca.crt"])
	assert.NotEqual(t, op["client.crt"], newOp["client.crt"], "the old CA's client certificate is not kept")
	assert.NotEqual(t, pods["db-0.crt"], newPods["db-0.crt"])

	// A server certificate for other names (the Database renamed its
	// headless Service, or a hand-edited Secret): issued again.
	other := issue(t)
	mixed := map[string][]byte{"ca.crt": pods["ca.crt"], "db-0.crt": other.Servers[pod0].CertPEM, "db-0.key": other.Servers[pod0].KeyPEM}
	_, fixed, changed, err := instance.SecretData(op, mixed, "ns", "db", instances(pod0), now)
	require.NoError(t, err)
	assert.True(t, changed, "a certificate of another CA is replaced")
	assert.NotEqual(t, other.Servers[pod0].CertPEM, fixed["db-0.crt"])
	renamed := []instance.Instance{{Pod: pod0, Hosts: instance.PodHosts(pod0, "renamed-headless", "ns")}}
	_, fixed, changed, err = instance.SecretData(op, pods, "ns", "db", renamed, now)
	require.NoError(t, err)
	assert.True(t, changed, "other names: issued again")
	assert.Equal(t, "db-0.renamed-headless.ns.svc", parse(t, fixed["db-0.crt"]).DNSNames[0])
}
