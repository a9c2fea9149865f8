package servertls

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var hosts = Hosts("db-rw", "db-ro", "db-headless", "ns", []string{"db-0", "db-1"})

// verifies: the pods' tls.crt verifies against their ca.crt for every
// host, as a verify-full client does.
func verifies(t *testing.T, pods map[string][]byte, now time.Time, names ...string) {
	t.Helper()
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pods[BundleKey]))
	leaf := parseCert(pods[TLSCertKey])
	require.NotNil(t, leaf)
	for _, h := range names {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: h, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		assert.NoError(t, err, h)
	}
}

func TestHostsAreEveryNameAClientUses(t *testing.T) {
	for _, h := range []string{"db-rw", "db-rw.ns", "db-rw.ns.svc", "db-rw.ns.svc.cluster.local", "db-ro.ns.svc",
		"db-0.db-headless", "db-1.db-headless.ns.svc.cluster.local"} {
		assert.Contains(t, hosts, h)
	}
	assert.Len(t, hosts, 16)
}

func TestAGeneratedCertificateIsRenewedAtTwoThirdsAndWhenItsNamesChange(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res, err := Generated(nil, nil, "ns", "db", hosts, now)
	require.NoError(t, err)
	assert.Equal(t, []Event{Issued}, res.Events)
	assert.True(t, res.Changed)
	assert.NotContains(t, res.Pods, CAKeyKey, "the CA's key never reaches the pods' Secret")
	assert.Equal(t, []string{TLSCertKey, TLSKeyKey, BundleKey}, keys(res.Pods))
	verifies(t, res.Pods, now, hosts...)
	assert.Equal(t, now.Add(LeafLifetime), res.NotAfter)
	assert.Equal(t, now.Add(-time.Hour).Add((LeafLifetime+time.Hour)*2/3), res.Next, "two thirds of its life")

	// Nothing to do until then.
	again, err := Generated(res.Operator, res.Pods, "ns", "db", hosts, now.Add(59*24*time.Hour))
	require.NoError(t, err)
	assert.False(t, again.Changed)
	assert.Empty(t, again.Events)

	// Day 61: a new certificate under the same CA.
	later := now.Add(61 * 24 * time.Hour)
	renewed, err := Generated(res.Operator, res.Pods, "ns", "db", hosts, later)
	require.NoError(t, err)
	assert.Equal(t, []Event{Renewed}, renewed.Events)
	assert.Equal(t, res.Operator[CACertKey], renewed.Operator[CACertKey])
	assert.Equal(t, res.Pods[BundleKey], renewed.Pods[BundleKey], "the bundle does not change")
	assert.NotEqual(t, res.Pods[TLSCertKey], renewed.Pods[TLSCertKey])
	verifies(t, renewed.Pods, later, hosts...)

	// A third replica: its names are added at once.
	more := Hosts("db-rw", "db-ro", "db-headless", "ns", []string{"db-0", "db-1", "db-2"})
	scaled, err := Generated(renewed.Operator, renewed.Pods, "ns", "db", more, later)
	require.NoError(t, err)
	assert.Equal(t, []Event{Renewed}, scaled.Events)
	verifies(t, scaled.Pods, later, "db-2.db-headless.ns.svc")
}

func TestACAChangeKeepsBothCAsInTheBundleWhileClientsCatchUp(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res, err := Generated(nil, nil, "ns", "db", hosts, now)
	require.NoError(t, err)
	old := res.Operator[CACertKey]

	// At two thirds of the CA's life a new CA joins the bundle; the served
	// certificate is still the old CA's.
	at := now.Add(CALifetime * 2 / 3)
	introduced, err := Generated(res.Operator, res.Pods, "ns", "db", hosts, at)
	require.NoError(t, err)
	assert.Contains(t, introduced.Events, CAIntroduced)
	assert.Len(t, pemBlocks(introduced.Pods[BundleKey]), 2)
	assert.Equal(t, old, introduced.Operator[CACertKey])
	verifies(t, introduced.Pods, at, "db-rw.ns.svc")
	next := introduced.Operator[NextCACertKey]
	require.NotEmpty(t, next)

	// CAOverlap later the new CA signs; the old stays in the bundle for
	// CAOverlap more.
	at = at.Add(CAOverlap + 2*time.Hour)
	rotated, err := Generated(introduced.Operator, introduced.Pods, "ns", "db", hosts, at)
	require.NoError(t, err)
	assert.Equal(t, []Event{CARotated}, rotated.Events)
	assert.Equal(t, next, rotated.Operator[CACertKey])
	assert.NotContains(t, rotated.Operator, NextCACertKey)
	assert.Len(t, pemBlocks(rotated.Pods[BundleKey]), 2, "new and old")
	assert.NoError(t, parseCert(rotated.Pods[TLSCertKey]).CheckSignatureFrom(parseCert(next)))
	verifies(t, rotated.Pods, at, "db-rw.ns.svc")
	// A client that kept the bundle of the introduction verifies the new
	// certificate.
	verifies(t, map[string][]byte{BundleKey: introduced.Pods[BundleKey], TLSCertKey: rotated.Pods[TLSCertKey]}, at, "db-rw.ns.svc")

	at = at.Add(CAOverlap + time.Hour)
	settled, err := Generated(rotated.Operator, rotated.Pods, "ns", "db", hosts, at)
	require.NoError(t, err)
	assert.Len(t, pemBlocks(settled.Pods[BundleKey]), 1, "the old CA has left")
	assert.NotContains(t, settled.Operator, RetiredKey)
}

func TestTheUsersCertificateIsCheckedAndServedOnceItsCAHadTimeToReachTheClients(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	required := []string{"db-rw", "db-0.db-headless"}
	userCA, err := NewCA("ns", "user", now)
	require.NoError(t, err)
	crt, key, err := userCA.IssueServer([]string{"db-rw", "db-rw.ns.svc", "db-0.db-headless"}, now)
	require.NoError(t, err)
	user := map[string][]byte{TLSCertKey: crt, TLSKeyKey: key, BundleKey: userCA.CertPEM}
	require.NoError(t, CheckUser("mine", user, required, now))

	other, err := NewCA("ns", "other", now)
	require.NoError(t, err)
	_, otherKey, err := other.IssueServer([]string{"x"}, now)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		data map[string][]byte
		want string
	}{
		"no ca.crt":      {map[string][]byte{TLSCertKey: crt, TLSKeyKey: key}, "Secret mine has no ca.crt"},
		"not a pair":     {map[string][]byte{TLSCertKey: crt, TLSKeyKey: otherKey, BundleKey: userCA.CertPEM}, "tls.crt and tls.key are not a certificate and its key"},
		"another CA":     {map[string][]byte{TLSCertKey: crt, TLSKeyKey: key, BundleKey: other.CertPEM}, "does not verify against its ca.crt"},
		"names missing":  {user, "does not name db-1.db-headless"},
		"expired by now": {user, "not now"},
	} {
		req, at := required, now
		if name == "names missing" {
			req = append(req, "db-1.db-headless")
		}
		if name == "expired by now" {
			at = now.Add(LeafLifetime + time.Hour)
		}
		err := CheckUser("mine", tc.data, req, at)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
	}

	// Replacing a generated certificate: the user's CA enters the bundle
	// first, beside the generated one, while the generated certificate is
	// still served; UserCAPropagation later the user's certificate is
	// served, and the generated CA stays in the bundle for CAOverlap from
	// when it left the core.
	gen, err := Generated(nil, nil, "ns", "db", hosts, now)
	require.NoError(t, err)
	intro := User(user, gen.Operator, gen.Pods, now)
	assert.Equal(t, []Event{UserCAIntroduced}, intro.Events)
	assert.Equal(t, gen.Pods[TLSCertKey], intro.Pods[TLSCertKey], "the generated certificate, still")
	assert.Len(t, pemBlocks(intro.Pods[BundleKey]), 2, "both CAs in ca.crt")
	assert.Equal(t, now.Add(UserCAPropagation), intro.Next)
	assert.Equal(t, parseCert(gen.Pods[TLSCertKey]).NotAfter, intro.NotAfter, "what is served")

	meanwhile := User(user, intro.Operator, intro.Pods, now.Add(time.Minute))
	assert.False(t, meanwhile.Changed, "a look before the time changes nothing")
	assert.Empty(t, meanwhile.Events)

	res := User(user, intro.Operator, intro.Pods, now.Add(UserCAPropagation))
	assert.Equal(t, []Event{UserCertificate}, res.Events)
	assert.Equal(t, crt, res.Pods[TLSCertKey])
	assert.Len(t, pemBlocks(res.Pods[BundleKey]), 2)
	assert.Equal(t, gen.Operator[CAKeyKey], res.Operator[CAKeyKey], "the generated CA is kept, a way back")
	assert.NotContains(t, res.Operator, UserCAIntroducedKey)
	assert.Equal(t, now.Add(CAOverlap), res.Next)
	later := User(user, res.Operator, res.Pods, now.Add(CAOverlap+time.Minute))
	assert.Equal(t, userCA.CertPEM, later.Pods[BundleKey])
	assert.Empty(t, later.Events)

	// A renewal by the same CA, and a first certificate (no client
	// yet), are served at once.
	crt2, key2, err := userCA.IssueServer([]string{"db-rw", "db-rw.ns.svc", "db-0.db-headless"}, now.Add(CAOverlap))
	require.NoError(t, err)
	renewed := User(map[string][]byte{TLSCertKey: crt2, TLSKeyKey: key2, BundleKey: userCA.CertPEM}, later.Operator, later.Pods, now.Add(CAOverlap+2*time.Minute))
	assert.Equal(t, []Event{UserCertificate}, renewed.Events)
	assert.Equal(t, crt2, renewed.Pods[TLSCertKey])
	first := User(user, nil, nil, now)
	assert.Equal(t, []Event{UserCertificate}, first.Events)
	assert.Equal(t, crt, first.Pods[TLSCertKey])
}

func keys(m map[string][]byte) []string {
	var out []string
	for _, k := range []string{TLSCertKey, TLSKeyKey, BundleKey, CAKeyKey} {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	return out
}
