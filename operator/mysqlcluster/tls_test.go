package mysqlcluster_test

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/servertls"
	"github.com/deckhand-dev/deckhand/operator/mysqlcluster"
)

// A new MySQLCluster gets TLS by default: the server CA's Secret (never
// mounted), the pods' Secret with a certificate for every name a client
// uses, mounted by the servers, the init Job given its ca.crt alone, and
// the ConfigMap <name>-ca with the bundle for clients (a MySQLCluster has
// no app Secret). A cluster an older operator ran keeps running without
// until its owner turns TLS on.
func TestTLSIsOnByDefaultForANewClusterOnly(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()

	older := newCluster(ns, "older", "older-root", 1)
	require.NoError(t, c.Create(ctx, older))
	older.Status.ObservedGeneration = older.Generation
	require.NoError(t, c.Status().Update(ctx, older))

	startOperatorWith(t, ns, mysqlcluster.Options{TLSByDefault: true})
	require.NoError(t, c.Create(ctx, newCluster(ns, "fresh", "fresh-root", 2)))
	fresh := waitFor(t, c, ns, "fresh", "Ready", ready)
	assert.Equal(t, "true", fresh.Annotations[mysqlcluster.Keys.TLSDefault])
	assert.Equal(t, "cr.mysqloperator.grtl.github.com/tls-default", mysqlcluster.Keys.TLSDefault)
	cond := condition(fresh.Status.Conditions, database.ConditionServerCertificate)
	assert.Equal(t, metav1.ConditionTrue, cond.Status, cond.Message)

	// The certificate names every way a client or a replica reaches a
	// server, and verifies against the bundle clients get.
	pods := get(t, c, ns, "fresh-server-tls", &corev1.Secret{})
	assert.Equal(t, corev1.SecretTypeTLS, pods.Type)
	leaf := servertls.ParseCert(pods.Data[servertls.TLSCertKey])
	require.NotNil(t, leaf)
	ca := get(t, c, ns, "fresh-ca", &corev1.ConfigMap{})
	assert.Equal(t, string(pods.Data[servertls.BundleKey]), ca.Data["ca.crt"])
	assert.True(t, metav1.IsControlledBy(ca, fresh), "the CA ConfigMap goes with the cluster")
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM([]byte(ca.Data["ca.crt"])))
	for _, name := range []string{"fresh-rw", "fresh-rw." + ns + ".svc", "fresh-ro." + ns + ".svc.cluster.local",
		"fresh-0.fresh-headless", "fresh-1.fresh-headless." + ns + ".svc"} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		assert.NoError(t, err, name)
	}
	op := get(t, c, ns, "fresh-server-ca", &corev1.Secret{})
	assert.NotEmpty(t, op.Data[servertls.CAKeyKey], "the CA's key stays in the operator's Secret")
	assert.Empty(t, pods.Data[servertls.CAKeyKey], "the pods never get the CA's key")

	// The servers present it and require TLS from their first start; the
	// init Job verifies them with the bundle alone.
	assert.Equal(t, "required", get(t, c, ns, "fresh-scripts", &corev1.ConfigMap{}).Data[engine.ScriptsTLSKey])
	sts := get(t, c, ns, "fresh", &appsv1.StatefulSet{})
	assert.Equal(t, engine.TLSDir, testenv.EnvOf(sts.Spec.Template.Spec.Containers[0])["TLS_DIR"])
	assert.Equal(t, "fresh-server-tls", testenv.VolumeNamed(sts.Spec.Template.Spec, engine.TLSVolume).Secret.SecretName)
	job := get(t, c, ns, "fresh-init", &batchv1.Job{})
	v := testenv.VolumeNamed(job.Spec.Template.Spec, engine.TLSVolume)
	require.NotNil(t, v)
	assert.Equal(t, []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}, v.Secret.Items)
	assert.Equal(t, engine.TLSCAFile, testenv.EnvOf(job.Spec.Template.Spec.Containers[0])["TLS_CA_FILE"])

	// The older cluster: recorded off, nothing changed under it.
	older = waitFor(t, c, ns, "older", "default recorded", func(ct *assert.CollectT, mc *grtlv1.MySQLCluster) {
		require.Equal(ct, "false", mc.Annotations[mysqlcluster.Keys.TLSDefault])
	})
	sts = get(t, c, ns, "older", &appsv1.StatefulSet{})
	assert.Nil(t, testenv.VolumeNamed(sts.Spec.Template.Spec, engine.TLSVolume))
	assert.NotContains(t, testenv.EnvOf(sts.Spec.Template.Spec.Containers[0]), "TLS_DIR")

	// Its owner turns TLS on: the pods get the certificate.
	older.Spec.TLS = &dbv1.TLSSpec{Enabled: ptr.To(true)}
	require.NoError(t, c.Update(ctx, older))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var s appsv1.StatefulSet
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "older"}, &s))
		require.NotNil(ct, testenv.VolumeNamed(s.Spec.Template.Spec, engine.TLSVolume))
		var cm corev1.ConfigMap
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "older-ca"}, &cm))
		require.NotEmpty(ct, cm.Data["ca.crt"])
	}, wait, 200*time.Millisecond)

	// A user certificate with TLS turned off is refused at admission.
	bad := newCluster(ns, "bad", "bad-root", 1)
	bad.Spec.TLS = &dbv1.TLSSpec{Enabled: ptr.To(false), ServerCertSecret: "mine"}
	err := c.Create(ctx, bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tls.serverCertSecret needs TLS on")
}
