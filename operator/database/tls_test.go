package database_test

import (
	"context"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/servertls"
)

// A new Database gets TLS by default: the server CA's Secret (its key,
// never mounted), the pods' Secret (kubernetes.io/tls) with a certificate
// for every name a client uses, the pods mount it, the init Job gets its
// ca.crt alone, and the app Secret the bundle and verifying URIs. A
// Database an older operator ran, or one that opts out, keeps running
// without.
func TestTLSIsOnByDefaultForANewDatabaseOnly(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	older := newDatabase(ns, "older", 1)
	require.NoError(t, c.Create(ctx, older))
	older.Status.ObservedGeneration = older.Generation
	require.NoError(t, c.Status().Update(ctx, older))

	startOperatorWith(t, ns, database.Options{TLSByDefault: true})
	fresh := newDatabase(ns, "fresh", 2)
	optedOut := newDatabase(ns, "opted-out", 1)
	optedOut.Spec.TLS = &dbv1.TLSSpec{Enabled: ptr.To(false)}
	for _, db := range []*dbv1.Database{fresh, optedOut} {
		require.NoError(t, c.Create(ctx, db))
	}
	for _, tc := range []struct {
		db       *dbv1.Database
		recorded string
		tls      bool
	}{{fresh, "true", true}, {older, "false", false}, {optedOut, "true", false}} {
		cur := waitFor(t, c, tc.db, "Ready", ready)
		assert.Equal(t, tc.recorded, cur.Annotations[database.AnnotationTLSDefault], tc.db.Name)
		sts := get(t, c, ns, tc.db.Name, &appsv1.StatefulSet{})
		assert.Equal(t, tc.tls, testenv.VolumeNamed(sts.Spec.Template.Spec, engine.TLSVolume) != nil, "%s: the pods mount the server TLS Secret", tc.db.Name)
		app := get(t, c, ns, tc.db.Name+"-app", &corev1.Secret{})
		assert.Equal(t, tc.tls, len(app.Data["ca.crt"]) > 0, "%s: the app Secret's ca.crt", tc.db.Name)
		assert.NotContains(t, string(app.Data["uri"]), "sslmode", "%s: uri stays as it was", tc.db.Name)
		// The multi-host strings verify the servers with TLS, and leave
		// sslmode to the driver without.
		for _, k := range []string{database.AppMultiHostURIKey, database.AppMultiHostJDBCURIKey, database.AppMultiHostROURIKey, database.AppMultiHostROJDBCURIKey} {
			assert.Contains(t, string(app.Data[k]), tc.db.Name+"-0."+tc.db.Name+"-headless."+ns+".svc:5432", "%s: %s", tc.db.Name, k)
			assert.Equal(t, tc.tls, strings.Contains(string(app.Data[k]), "sslmode=verify-full"), "%s: %s", tc.db.Name, k)
		}
		if !tc.tls {
			err := c.Get(ctx, client2Key(ns, tc.db.Name+"-server-tls"), &corev1.Secret{})
			assert.True(t, apierrors.IsNotFound(err), "%s: no server TLS Secret: %v", tc.db.Name, err)
			assert.Empty(t, condition(cur, database.ConditionServerCertificate).Type)
		}
	}

	// The fresh Database's Secrets.
	op := get(t, c, ns, "fresh-server-ca", &corev1.Secret{})
	pods := get(t, c, ns, "fresh-server-tls", &corev1.Secret{})
	assert.NotEmpty(t, op.Data[servertls.CAKeyKey])
	assert.Equal(t, corev1.SecretTypeTLS, pods.Type)
	assert.NotContains(t, pods.Data, servertls.CAKeyKey, "the CA's key never leaves the operator's Secret")
	for _, s := range []*corev1.Secret{op, pods} {
		require.NotEmpty(t, s.OwnerReferences)
		assert.Equal(t, "fresh", s.OwnerReferences[0].Name, "%s is the Database's", s.Name)
	}
	leaf := servertls.ParseCert(pods.Data[servertls.TLSCertKey])
	require.NotNil(t, leaf)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pods.Data[servertls.BundleKey]))
	for _, name := range []string{"fresh-rw", "fresh-rw." + ns + ".svc", "fresh-ro." + ns + ".svc.cluster.local",
		"fresh-0.fresh-headless", "fresh-1.fresh-headless." + ns + ".svc"} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		assert.NoError(t, err, name)
	}
	// Not the instance channel's CA: a sibling of its own.
	assert.Contains(t, servertls.ParseCert(op.Data[servertls.CACertKey]).Subject.CommonName, "deckhand server CA")

	// The app Secret.
	app := get(t, c, ns, "fresh-app", &corev1.Secret{})
	assert.Equal(t, pods.Data[servertls.BundleKey], app.Data["ca.crt"])
	u, err := url.Parse(string(app.Data[database.AppVerifyFullURIKey]))
	require.NoError(t, err)
	assert.Equal(t, "fresh-rw."+ns+".svc:5432", u.Host)
	assert.Equal(t, "verify-full", u.Query().Get("sslmode"))
	assert.Equal(t, database.CAMountDir+"/ca.crt", u.Query().Get("sslrootcert"))
	jdbc := string(app.Data[database.AppJDBCURIKey])
	assert.True(t, strings.HasPrefix(jdbc, "jdbc:postgresql://fresh-rw."+ns+".svc:5432/name-of-database?"), jdbc)
	assert.Contains(t, jdbc, "sslmode=verify-full")
	// The multi-host keys: every pod under the headless Service, the names
	// the certificate carries, each string verifying against ca.crt.
	pods2 := "fresh-0.fresh-headless." + ns + ".svc:5432,fresh-1.fresh-headless." + ns + ".svc:5432"
	for k, want := range map[string]string{
		database.AppMultiHostURIKey:       "target_session_attrs=read-write",
		database.AppMultiHostROURIKey:     "target_session_attrs=prefer-standby",
		database.AppMultiHostJDBCURIKey:   "targetServerType=primary",
		database.AppMultiHostROJDBCURIKey: "targetServerType=preferSecondary",
	} {
		v := string(app.Data[k])
		assert.Contains(t, v, pods2+"/name-of-database?", k)
		assert.Contains(t, v, want, k)
		assert.Contains(t, v, "sslmode=verify-full&sslrootcert=%2Fetc%2Fdeckhand%2Fdb%2Fca.crt", k)
		assert.Contains(t, v, map[bool]string{true: "connectTimeout=2", false: "connect_timeout=2"}[strings.HasPrefix(v, "jdbc:")], k)
	}
	for _, name := range strings.Split(pods2, ",") {
		host, _, _ := strings.Cut(name, ":")
		assert.NoError(t, leaf.VerifyHostname(host), "the certificate carries %s", host)
	}

	// A new Database's servers require TLS from their first start.
	assert.Equal(t, "required", get(t, c, ns, "fresh-scripts", &corev1.ConfigMap{}).Data[engine.ScriptsTLSKey])

	// The pods: the Secret, a memory directory for the server's copy.
	sts := get(t, c, ns, "fresh", &appsv1.StatefulSet{})
	env := testenv.EnvOf(sts.Spec.Template.Spec.Containers[0])
	assert.Equal(t, engine.TLSDir, env["TLS_DIR"])
	assert.Equal(t, "fresh-server-tls", testenv.VolumeNamed(sts.Spec.Template.Spec, engine.TLSVolume).Secret.SecretName)
	// The init Job: the bundle only.
	job := get(t, c, ns, "fresh-init", &batchv1.Job{})
	v := testenv.VolumeNamed(job.Spec.Template.Spec, engine.TLSVolume)
	require.NotNil(t, v)
	assert.Equal(t, []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}, v.Secret.Items)
	assert.Equal(t, engine.TLSDir+"/ca.crt", testenv.EnvOf(job.Spec.Template.Spec.Containers[0])["TLS_CA_FILE"])

	// Status, Event, metric.
	cur := get(t, c, ns, "fresh", &dbv1.Database{})
	cond := condition(cur, database.ConditionServerCertificate)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	assert.Equal(t, "Generated", cond.Reason)
	assert.Contains(t, cond.Message, leaf.NotAfter.UTC().Format(time.RFC3339))
	assertEvent(t, c, ns, "fresh", corev1.EventTypeNormal, "CertificateIssued")
	assert.Equal(t, float64(leaf.NotAfter.Unix()), gaugeValue(t, "deckhand_database_server_certificate_expiry_timestamp_seconds", ns, "fresh"))

	// A third replica: its names join the certificate.
	update(t, c, cur, func(d *dbv1.Database) { d.Spec.Replicas = 3 })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var s corev1.Secret
		require.NoError(ct, c.Get(ctx, client2Key(ns, "fresh-server-tls"), &s))
		assert.NoError(ct, servertls.ParseCert(s.Data[servertls.TLSCertKey]).VerifyHostname("fresh-2.fresh-headless."+ns+".svc"))
	}, wait, 100*time.Millisecond)
	assertEvent(t, c, ns, "fresh", corev1.EventTypeNormal, "CertificateRenewed")
	// ... and the app Secret's multi-host keys, the password kept.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var s corev1.Secret
		require.NoError(ct, c.Get(ctx, client2Key(ns, "fresh-app"), &s))
		for _, k := range []string{database.AppMultiHostURIKey, database.AppMultiHostJDBCURIKey, database.AppMultiHostROURIKey, database.AppMultiHostROJDBCURIKey} {
			assert.Contains(ct, string(s.Data[k]), pods2+",fresh-2.fresh-headless."+ns+".svc:5432/", k)
		}
		assert.Equal(ct, app.Data["password"], s.Data["password"], "the password is never replaced")
	}, wait, 100*time.Millisecond)

	// The older Database's owner opts in, then out again: the pods and the
	// app Secret follow.
	tlsOf := func(want bool) {
		t.Helper()
		update(t, c, older, func(d *dbv1.Database) { d.Spec.TLS = &dbv1.TLSSpec{Enabled: ptr.To(want)} })
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var app corev1.Secret
			require.NoError(ct, c.Get(ctx, client2Key(ns, "older-app"), &app))
			assert.Equal(ct, want, len(app.Data["ca.crt"]) > 0, "ca.crt")
			assert.Equal(ct, want, len(app.Data[database.AppVerifyFullURIKey]) > 0, "verify-full-uri")
			assert.NotEmpty(ct, app.Data["uri"])
			var sts appsv1.StatefulSet
			require.NoError(ct, c.Get(ctx, client2Key(ns, "older"), &sts))
			assert.Equal(ct, want, testenv.VolumeNamed(sts.Spec.Template.Spec, engine.TLSVolume) != nil, "the pods mount the Secret")
			// Required once the pods rolled, gone at once when turned off.
			var cm corev1.ConfigMap
			require.NoError(ct, c.Get(ctx, client2Key(ns, "older-scripts"), &cm))
			assert.Equal(ct, map[bool]string{true: "required", false: "offered"}[want], cm.Data[engine.ScriptsTLSKey])
		}, wait, 100*time.Millisecond, "TLS %v on the older Database", want)
	}
	tlsOf(true)
	tlsOf(false)
}

// A certificate the user brings (spec.tls.serverCertSecret): missing, then
// invalid, each reported; once valid it is what the pods' Secret holds and
// the app Secret's bundle is its CA.
func TestTheUsersCertificateReplacesTheGeneratedOneAndBadOnesAreReported(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	startOperatorWith(t, ns, database.Options{})
	db := newDatabase(ns, "own", 1)
	db.Spec.TLS = &dbv1.TLSSpec{ServerCertSecret: "own-cert"}
	require.NoError(t, c.Create(ctx, db))

	cur := waitFor(t, c, db, "the missing Secret reported", func(ct *assert.CollectT, d *dbv1.Database) {
		assert.Equal(ct, "UserCertificateMissing", condition(d, database.ConditionServerCertificate).Reason)
	})
	assert.Equal(t, metav1.ConditionFalse, condition(cur, database.ConditionServerCertificate).Status)
	assert.Contains(t, condition(cur, database.ConditionServerCertificate).Message, "Secret own-cert (spec.tls.serverCertSecret) not found")
	assertEvent(t, c, ns, "own", corev1.EventTypeWarning, "UserCertificateMissing")

	// Issued for the Services only: standbys and backups could not verify
	// the pod's name.
	now := time.Now()
	ca, err := servertls.NewCA(ns, "user", now)
	require.NoError(t, err)
	crt, key, err := ca.IssueServer([]string{"own-rw", "own-rw." + ns + ".svc"}, now)
	require.NoError(t, err)
	user := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "own-cert", Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.CertPEM},
	}
	require.NoError(t, c.Create(ctx, user))
	cur = waitFor(t, c, db, "the invalid certificate reported", func(ct *assert.CollectT, d *dbv1.Database) {
		assert.Equal(ct, "UserCertificateInvalid", condition(d, database.ConditionServerCertificate).Reason)
	})
	assert.Contains(t, condition(cur, database.ConditionServerCertificate).Message, "tls.crt does not name own-0.own-headless")
	assertEvent(t, c, ns, "own", corev1.EventTypeWarning, "UserCertificateInvalid")

	crt, key, err = ca.IssueServer([]string{"own-rw", "own-rw." + ns + ".svc", "own-0.own-headless"}, now)
	require.NoError(t, err)
	user.Data = map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.CertPEM}
	require.NoError(t, c.Update(ctx, user))
	cur = waitFor(t, c, db, "the user's certificate installed", func(ct *assert.CollectT, d *dbv1.Database) {
		assert.Equal(ct, "UserProvided", condition(d, database.ConditionServerCertificate).Reason)
	})
	assert.Equal(t, metav1.ConditionTrue, condition(cur, database.ConditionServerCertificate).Status)
	pods := get(t, c, ns, "own-server-tls", &corev1.Secret{})
	assert.Equal(t, crt, pods.Data["tls.crt"])
	assert.Equal(t, ca.CertPEM, pods.Data["ca.crt"])
	assertEvent(t, c, ns, "own", corev1.EventTypeNormal, "UserCertificateInstalled")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var app corev1.Secret
		require.NoError(ct, c.Get(ctx, client2Key(ns, "own-app"), &app))
		assert.Equal(ct, ca.CertPEM, app.Data["ca.crt"])
	}, wait, 100*time.Millisecond)
	waitFor(t, c, db, "Ready", ready)

	// Back to a certificate the operator issues: the user's CA stays in
	// the bundle for a while, beside the new server CA.
	update(t, c, cur, func(d *dbv1.Database) { d.Spec.TLS = &dbv1.TLSSpec{Enabled: ptr.To(true)} })
	waitFor(t, c, db, "a generated certificate", func(ct *assert.CollectT, d *dbv1.Database) {
		assert.Equal(ct, "Generated", condition(d, database.ConditionServerCertificate).Reason)
	})
	pods = get(t, c, ns, "own-server-tls", &corev1.Secret{})
	assert.Equal(t, 2, strings.Count(string(pods.Data["ca.crt"]), "BEGIN CERTIFICATE"), "the new CA and the user's")
	assert.Contains(t, string(pods.Data["ca.crt"]), string(ca.CertPEM))
}

func client2Key(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// Switching a Database that serves the operator's certificate to the
// user's, of another CA: the user's CA enters the bundle first, the
// generated certificate still served (reason UserCertificatePending);
// 3 minutes on the operator's clock the user's certificate is served.
func TestSwitchingToTheUsersCertificatePublishesItsCAFirst(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	now, offset := testenv.ClockFrom(time.Now())
	startOperatorAt(t, ns, now)
	db := newDatabase(ns, "swap", 1)
	db.Spec.TLS = &dbv1.TLSSpec{Enabled: ptr.To(true)}
	require.NoError(t, c.Create(ctx, db))
	cur := waitFor(t, c, db, "Ready with a generated certificate", func(ct *assert.CollectT, d *dbv1.Database) {
		ready(ct, d)
		assert.Equal(ct, "Generated", condition(d, database.ConditionServerCertificate).Reason)
	})
	generated := get(t, c, ns, "swap-server-tls", &corev1.Secret{}).Data["tls.crt"]

	ca, err := servertls.NewCA(ns, "user", now())
	require.NoError(t, err)
	crt, key, err := ca.IssueServer([]string{"swap-rw", "swap-rw." + ns + ".svc", "swap-0.swap-headless"}, now())
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "swap-cert", Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.CertPEM},
	}))
	update(t, c, cur, func(d *dbv1.Database) { d.Spec.TLS = &dbv1.TLSSpec{ServerCertSecret: "swap-cert"} })
	cur = waitFor(t, c, db, "the user's CA published first", func(ct *assert.CollectT, d *dbv1.Database) {
		assert.Equal(ct, "UserCertificatePending", condition(d, database.ConditionServerCertificate).Reason)
	})
	assert.Contains(t, condition(cur, database.ConditionServerCertificate).Message, "the certificate of Secret swap-cert is served from ")
	pods := get(t, c, ns, "swap-server-tls", &corev1.Secret{})
	assert.Equal(t, generated, pods.Data["tls.crt"], "the generated certificate is still served")
	assert.Equal(t, 2, strings.Count(string(pods.Data["ca.crt"]), "BEGIN CERTIFICATE"), "the old CA and the user's")
	assert.Contains(t, string(pods.Data["ca.crt"]), string(ca.CertPEM))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var app corev1.Secret
		require.NoError(ct, c.Get(ctx, client2Key(ns, "swap-app"), &app))
		assert.Contains(ct, string(app.Data["ca.crt"]), string(ca.CertPEM), "clients get the user's CA before they meet it")
	}, wait, 100*time.Millisecond)
	assertEvent(t, c, ns, "swap", corev1.EventTypeNormal, "UserCAIntroduced")

	offset.Store(int64(servertls.UserCAPropagation + time.Second))
	poke(t, c, cur, "after-propagation")
	waitFor(t, c, db, "the user's certificate served", func(ct *assert.CollectT, d *dbv1.Database) {
		assert.Equal(ct, "UserProvided", condition(d, database.ConditionServerCertificate).Reason)
	})
	assert.Equal(t, crt, get(t, c, ns, "swap-server-tls", &corev1.Secret{}).Data["tls.crt"])
	assertEvent(t, c, ns, "swap", corev1.EventTypeNormal, "UserCertificateInstalled")
}
