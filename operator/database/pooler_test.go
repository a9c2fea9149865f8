package database_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/internal/testenv"
	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/database/pooler"
)

func newPooler(ns, name, db string) *dbv1.Pooler {
	return &dbv1.Pooler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       dbv1.PoolerSpec{Database: db},
	}
}

// waitPooler waits until check passes on the Pooler.
func waitPooler(t *testing.T, c client.Client, p *dbv1.Pooler, what string, check func(*assert.CollectT, *dbv1.Pooler)) *dbv1.Pooler {
	t.Helper()
	cur := &dbv1.Pooler{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(p), cur))
		check(ct, cur)
	}, wait, 200*time.Millisecond, "Pooler %s: %s; status %+v", p.Name, what, cur.Status)
	return cur
}

func poolerReady(p *dbv1.Pooler) metav1.Condition {
	if c := meta.FindStatusCondition(p.Status.Conditions, pooler.ConditionReady); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// A Pooler named before its Database waits for it and says so; once the
// Database is initialized it gets PgBouncer pods, a Service, a setup Job
// that keeps every password off its command line, its own certificate,
// and a Secret with the app Secret's keys pointing at the pooler.
func TestAPoolerFrontsItsDatabaseOnceItExists(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperatorWith(t, ns, database.Options{PoolerImage: "example.org/pgbouncer:test"})
	ctx := context.Background()

	p := newPooler(ns, "shop-pool", "shop")
	p.Spec.PgBouncer.PoolMode = dbv1.PoolModeTransaction
	require.NoError(t, c.Create(ctx, p))
	waitPooler(t, c, p, "waits for its Database", func(ct *assert.CollectT, cur *dbv1.Pooler) {
		cond := poolerReady(cur)
		require.Equal(ct, dbv1.PoolerReasonDatabaseMissing, cond.Reason)
		assert.Equal(ct, `Database "shop" does not exist in namespace `+ns+`: the pooler starts once it does`, cond.Message)
	})
	assertEvent(t, c, ns, p.Name, corev1.EventTypeWarning, dbv1.PoolerReasonDatabaseMissing)

	db := newDatabase(ns, "shop", 1)
	require.NoError(t, c.Create(ctx, db))
	// Two waits, each with its own ceiling: the Database's initialization
	// (its init Job, its StatefulSet), then the pooler's setup Job and pods.
	// One ceiling over both ran out at the peak of make test's load.
	waitFor(t, c, db, "Ready", ready)
	cur := waitPooler(t, c, p, "Ready", func(ct *assert.CollectT, cur *dbv1.Pooler) {
		require.Equal(ct, metav1.ConditionTrue, poolerReady(cur).Status, "%+v", poolerReady(cur))
	})
	assert.Equal(t, int32(2), cur.Status.ReadyInstances, "two PgBouncer pods by default")
	assert.Equal(t, "shop-pool", cur.Status.Secret)
	assert.Contains(t, poolerReady(cur).Message, "shop-rw."+ns+".svc (transaction mode)")

	var dep appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-pool"}, &dep))
	pod := dep.Spec.Template.Spec
	assert.Equal(t, "example.org/pgbouncer:test", pod.Containers[0].Image)
	assert.True(t, *pod.SecurityContext.RunAsNonRoot)
	assert.False(t, *pod.Containers[0].SecurityContext.AllowPrivilegeEscalation)
	assert.False(t, *pod.AutomountServiceAccountToken, "PgBouncer needs no API access")

	var pdb policyv1.PodDisruptionBudget
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-pool"}, &pdb))
	assert.Equal(t, 1, pdb.Spec.MaxUnavailable.IntValue(), "a drain evicts one PgBouncer pod at a time")

	var cm corev1.ConfigMap
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-pool-config"}, &cm))
	ini := cm.Data["pgbouncer.ini"]
	assert.Contains(t, ini, "host=shop-rw."+ns+".svc")
	assert.Regexp(t, `(?m)^pool_mode = transaction$`, ini)
	assert.Regexp(t, `(?m)^auth_user = deckhand_pooler_shop-pool$`, ini)

	// The setup Job reads every password from a Secret, never a literal.
	var jobs batchv1.JobList
	require.NoError(t, c.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{pooler.LabelPooler: "shop-pool"}))
	require.Len(t, jobs.Items, 1)
	budget, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	require.NoError(t, err)
	assert.False(t, budget.Matches(labels.Set(jobs.Items[0].Spec.Template.Labels)), "the budget selects PgBouncer's pods, not the setup Job's")
	assert.True(t, budget.Matches(labels.Set(dep.Spec.Template.Labels)))
	for _, e := range jobs.Items[0].Spec.Template.Spec.Containers[0].Env {
		if strings.Contains(e.Name, "PASSWORD") {
			assert.Empty(t, e.Value, "%s is a literal", e.Name)
			assert.NotNil(t, e.ValueFrom, e.Name)
		}
	}

	var app, conn corev1.Secret
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-app"}, &app))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-pool"}, &conn))
	host := "shop-pool." + ns + ".svc"
	assert.Equal(t, host, string(conn.Data["host"]))
	assert.Equal(t, "5432", string(conn.Data["port"]))
	for _, k := range []string{"user", "password", "dbname"} {
		assert.Equal(t, string(app.Data[k]), string(conn.Data[k]), "the app Secret's %s", k)
	}
	assert.Contains(t, string(conn.Data["jdbc-uri"]), "prepareThreshold=0", "pgjdbc in transaction mode")
	assert.Contains(t, string(conn.Data["verify-full-uri"]), "@"+host+":5432/")

	// PgBouncer's certificate carries the Service's names and verifies
	// against the ca.crt clients get.
	var tls corev1.Secret
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-pool-tls"}, &tls))
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(conn.Data["ca.crt"]))
	block, _ := pem.Decode(tls.Data["tls.crt"])
	require.NotNil(t, block)
	leaf, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots})
	assert.NoError(t, err)
	assertEvent(t, c, ns, p.Name, corev1.EventTypeNormal, "CertificateIssued")

	// Scaling changes the Deployment, nothing else.
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(p), p))
	p.Spec.Instances = ptr.To[int32](3)
	require.NoError(t, c.Update(ctx, p))
	waitPooler(t, c, p, "three pods", func(ct *assert.CollectT, cur *dbv1.Pooler) {
		require.Equal(ct, int32(3), cur.Status.ReadyInstances)
	})

	wide, err := testenv.Kubectl(t, "get", "poolers", "-n", ns)
	require.NoError(t, err)
	assert.Equal(t, "shop", column(t, wide, "shop-pool", "DATABASE"))
	assert.Equal(t, "transaction", column(t, wide, "shop-pool", "MODE"))
	assert.Equal(t, "True", column(t, wide, "shop-pool", "READY"))
}

// A Pooler whose Service name is someone else's leaves that Service alone
// and says why.
func TestAPoolerNeverTakesAnotherOwnersObject(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	startOperator(t, ns)
	ctx := context.Background()
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "theirs"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	require.NoError(t, c.Create(ctx, foreign))
	require.NoError(t, c.Create(ctx, newDatabase(ns, "shop", 1)))
	p := newPooler(ns, "pool", "shop")
	require.NoError(t, c.Create(ctx, p))
	waitPooler(t, c, p, "refuses the name", func(ct *assert.CollectT, cur *dbv1.Pooler) {
		require.Equal(ct, dbv1.PoolerReasonNameTaken, poolerReady(cur).Reason)
	})
	var after corev1.Service
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(foreign), &after))
	assert.Equal(t, map[string]string{"app": "theirs"}, after.Spec.Selector)
	assert.Empty(t, after.OwnerReferences)
}

func TestPoolerSettingsAreRefusedWithReadableMessages(t *testing.T) {
	t.Parallel()
	testenv.InstallCRDs(t)
	c := testenv.Client(t)
	ns := testenv.Namespace(t, c)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(*dbv1.Pooler)
		msg    string
	}{
		{"a name that is no Database's", func(p *dbv1.Pooler) { p.Spec.Database = "Shop_DB" },
			`spec.database must be the name of a Database (a DNS label), not "Shop_DB"`},
		{"a name too long for its role", func(p *dbv1.Pooler) { p.Name = strings.Repeat("p", 48) },
			"metadata.name must be at most 47 characters"},
		{"an unknown pool mode", func(p *dbv1.Pooler) { p.Spec.PgBouncer.PoolMode = "statement" },
			`spec.pgbouncer.poolMode: Unsupported value: "statement"`},
		{"no instance", func(p *dbv1.Pooler) { p.Spec.Instances = ptr.To[int32](0) },
			"spec.instances: Invalid value: 0: spec.instances in body should be greater than or equal to 1"},
		{"an unknown type", func(p *dbv1.Pooler) { p.Spec.Type = "any" },
			`spec.type: Unsupported value: "any"`},
		{"a user to run as", func(p *dbv1.Pooler) { p.Spec.PodTemplate = &dbv1.PodTemplate{RunAsUser: ptr.To[int64](1000)} },
			"podTemplate.runAsUser does not apply to a Pooler: PgBouncer runs as UID 65532 whatever the image"},
		{"a node selector key that is no label key", func(p *dbv1.Pooler) {
			p.Spec.PodTemplate = &dbv1.PodTemplate{NodeSelector: map[string]dbv1.LabelValue{"disk type": "ssd"}}
		}, "podTemplate.nodeSelector: each key must be a label key"},
		{"a request over its limit", func(p *dbv1.Pooler) {
			p.Spec.Resources = &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
			}
		}, "resources: a request (cpu, memory or ephemeral-storage) must not be more than its limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPooler(ns, "pool", "shop")
			tc.change(p)
			err := c.Create(ctx, p)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	p := newPooler(ns, "pool", "shop")
	require.NoError(t, c.Create(ctx, p))
	p.Spec.Database = "other"
	err := c.Update(ctx, p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.database cannot change: create another Pooler for another Database")

	out, err := testenv.Kubectl(t, "apply", "-n", ns, "-f", filepath.Join(testenv.Root(t), "examples", "database", "pooler.yaml"))
	require.NoError(t, err, "the example as it is:\n%s", out)
}
