package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/servertls"
)

// A Database on the real node, serving the operator's certificate, is
// switched to a certificate the user brings (a kubernetes.io/tls Secret
// of a CA of its own, as cert-manager writes it) while a client writes
// through the app Secret's verify-full-uri, with a new connection for
// every write, verifying against the ca.crt it mounts: the user's CA
// reaches the client's mount before the servers present the new
// certificate, so no write fails to verify the server and none
// acknowledged is lost; every
// server ends up presenting the user's certificate, without a restart and
// without a failover.
func TestRealNodeSwitchesToTheUsersCertificateUnderAVerifyingWriter(t *testing.T) {
	parallel(t, 6*time.Minute) // see the package comment: its own namespace, the shared operator
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	f := startFailoverCluster(ctx, t, 2, 0)
	// Two writes a second, each a new verify-full connection: a new psql,
	// TLS and SCRAM each time cost the loaded node CPU for five minutes.
	script := strings.Replace(writerScript, "cat /app/uri", "cat /app/"+database.AppVerifyFullURIKey, 1)
	w := f.startWriterScript("writer", strings.Replace(script, "sleep 0.05", "sleep 0.5", 1))
	restarts := serverRestarts(ctx, t, f)
	failovers := len(f.database().Status.Failovers)

	pods := f.pods()
	now := time.Now()
	ca, err := servertls.NewCA(f.ns, "user", now)
	require.NoError(t, err)
	crt, key, err := ca.IssueServer(servertls.Hosts(f.name+"-rw", f.name+"-ro", f.name+"-headless", f.ns, pods), now)
	require.NoError(t, err)
	_, err = f.cs.CoreV1().Secrets(f.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pay-cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.CertPEM},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	start := time.Now()
	f.updateDatabase(func(db *dbv1.Database) { db.Spec.TLS = &dbv1.TLSSpec{ServerCertSecret: "pay-cert"} })
	// The CA's propagation (servertls.UserCAPropagation) is minutes of
	// waiting under a writer of two writes a second.
	takeBack := lendSlot(t)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 6*time.Minute, true, func(ctx context.Context) (bool, error) {
		var cur dbv1.Database
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.name}, &cur); err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, database.ConditionServerCertificate)
		return c != nil && c.Reason == "UserProvided", nil
	}), "the user's certificate never installed")
	installed := time.Since(start)

	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca.CertPEM))
	app := secretData(ctx, t, f.cs, f.ns, f.name+"-app")
	for _, pod := range pods {
		p, err := f.cs.CoreV1().Pods(f.ns).Get(ctx, pod, metav1.GetOptions{})
		require.NoError(t, err)
		name := pod + "." + f.name + "-headless"
		var lastErr error
		err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			lastErr = presentsCertificateOf(ctx, p.Status.PodIP, name, roots, app)
			return lastErr == nil, nil
		})
		require.NoError(t, err, "%s does not present the user's certificate: %v", pod, lastErr)
	}
	served := time.Since(start)
	takeBack()
	w.waitAcks(3)
	log := w.stop()

	// A write that timed out on a loaded node is not the certificate's
	// doing; one that could not verify the server is.
	var failed, unverified []string
	for _, o := range log {
		if o.ok || !o.at.After(start) {
			continue
		}
		what := fmt.Sprintf("write %d at %+.1fs: %q", o.id, o.at.Sub(start).Seconds(), o.fail)
		failed = append(failed, what)
		if strings.Contains(o.fail, "certificate") || strings.Contains(o.fail, "SSL") || strings.Contains(o.fail, "verif") {
			unverified = append(unverified, what)
		}
	}
	assert.Empty(t, unverified, "verify-full writes that could not verify the server during the switch")
	lost := checkNoAckLost(t, log, w.committedIDs())
	assert.Equal(t, restarts, serverRestarts(ctx, t, f), "no server restarted")
	assert.Len(t, f.database().Status.Failovers, failovers, "no failover")
	logf(t, "user's certificate on the node under a verify-full writer: installed %.1f s after the spec change (its CA %s in ca.crt first), presented by every server %.1f s after it; %d writes acknowledged, %d failed (%d could not verify the server: %v), %d lost",
		installed.Seconds(), servertls.UserCAPropagation, served.Seconds(), countAcks(log), len(failed), len(unverified), failed, lost)
}

// presentsCertificateOf connects to a server's address as the app role
// and succeeds only when it presents a certificate for name that
// verifies against roots.
func presentsCertificateOf(ctx context.Context, ip, name string, roots *x509.CertPool, app map[string][]byte) error {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%s dbname=%s user=%s connect_timeout=10 sslmode=require", ip, app["port"], app["dbname"], app["user"]))
	if err != nil {
		return err
	}
	cfg.Password = string(app["password"])
	cfg.TLSConfig = &tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12}
	cfg.Fallbacks = nil
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// serverRestarts is every server pod's UID and its containers' restart
// counts.
func serverRestarts(ctx context.Context, t testing.TB, f *failoverCluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, pod := range f.pods() {
		p, err := f.cs.CoreV1().Pods(f.ns).Get(ctx, pod, metav1.GetOptions{})
		require.NoError(t, err)
		var counts []string
		for _, s := range p.Status.ContainerStatuses {
			counts = append(counts, fmt.Sprintf("%s=%d", s.Name, s.RestartCount))
		}
		out[pod] = string(p.UID) + " " + strings.Join(counts, ",")
	}
	return out
}
