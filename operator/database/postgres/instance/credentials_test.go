package instance_test

import (
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c
}

func TestCredentialsNameEachPodAndKeepTheCAKeyOutOfThePods(t *testing.T) {
	creds := issue(t)
	server := parse(t, creds.Servers[pod1].CertPEM)
	assert.Equal(t, []string{"db-1.db-headless.ns.svc", "db-1.db-headless.ns.svc.cluster.local", "db-1.db-headless.ns", "db-1.db-headless"}, server.DNSNames)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, server.ExtKeyUsage)
	client := parse(t, creds.Client.CertPEM)
	assert.Equal(t, instance.ClientCommonName, client.Subject.CommonName)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, client.ExtKeyUsage)

	pods := creds.PodSecretData()
	assert.ElementsMatch(t, []string{"ca.crt", "db-0.crt", "db-0.key", "db-1.crt", "db-1.key"}, keys(pods))
	assert.ElementsMatch(t, []string{"ca.crt", "ca.key", "client.crt", "client.key"}, keys(creds.OperatorSecretData()))

	// A renewal under the same CA: the pods' trust does not change.
	ca, err := instance.LoadCA(creds.CA.CertPEM, creds.CA.KeyPEM)
	require.NoError(t, err)
	renewed, err := ca.IssueAll([]instance.Instance{{Pod: pod0, Hosts: hosts(pod0)}}, time.Now())
	require.NoError(t, err)
	_, err = parse(t, renewed.Servers[pod0].CertPEM).Verify(x509.VerifyOptions{Roots: pool(t, creds.CA.CertPEM), DNSName: "db-0.db-headless.ns.svc"})
	require.NoError(t, err)
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func pool(t *testing.T, pemData []byte) *x509.CertPool {
	p := x509.NewCertPool()
	require.True(t, p.AppendCertsFromPEM(pemData))
	return p
}

func TestNeedsRenewalAfterTwoThirdsOfALeafsLife(t *testing.T) {
	now := time.Now()
	creds := issue(t)
	cert := creds.Client.CertPEM
	assert.False(t, instance.NeedsRenewal(cert, now))
	assert.False(t, instance.NeedsRenewal(cert, now.Add(instance.LeafLifetime/2)))
	assert.True(t, instance.NeedsRenewal(cert, now.Add(instance.LeafLifetime*3/4)))
	assert.True(t, instance.NeedsRenewal(cert, now.Add(-2*time.Hour)), "not valid yet")
	assert.True(t, instance.NeedsRenewal([]byte("not a certificate"), now))
}
