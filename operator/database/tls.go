package database

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/servertls"
)

// TLS on the servers' connections (spec.tls): a server CA per Database
// and one server certificate for every name a client uses, or the user's
// certificate; the pods mount the pods' Secret, and the app Secret gets
// the CA bundle. The decisions are in the servertls package.

// AnnotationTLSDefault on a Database says whether TLS is on when
// spec.tls.enabled is unset ("true" or "false"): the operator's default
// when it first saw the Database, recorded then and never changed, as
// AnnotationFailoverDefault is, so that upgrading the operator never turns
// TLS on (which restarts every pod and refuses plain connections) under a
// running Database. A person may change it, as the field. Other kinds
// record it under their own group (Keys.TLSDefault).
const AnnotationTLSDefault = "stable.imaginedata.co/tls-default"

// ConditionServerCertificate says whether the servers have a certificate
// to present (TLS on only).
const ConditionServerCertificate = "ServerCertificate"

// userCertRecheck is how often a Database with spec.tls.serverCertSecret
// reads that Secret again: it is the user's, not in the operator's cache
// (which holds only what Databases own), so its renewal sends no event.
const userCertRecheck = time.Minute

// tlsOn: the cluster's servers use TLS, by spec.tls.enabled or, when
// that is unset, by its recorded default. A serverCertSecret alone turns
// it on.
func tlsOn(db *Cluster) bool {
	if t := db.Spec.TLS; t != nil {
		if t.Enabled != nil {
			return *t.Enabled
		}
		if t.ServerCertSecret != "" {
			return true
		}
	}
	return db.Annotations[db.Kind.Keys.TLSDefault] == "true"
}

// tlsRequired is the scripts ConfigMap's engine.ScriptsTLSKey: "required"
// once every server runs with the certificate (a new Database's at once:
// none runs without), and from then on while TLS is on; "" before (TLS
// just turned on under running servers: a standby restarted first must
// still reach a primary without TLS) and without TLS.
func tlsRequired(db *Cluster, l *live) string {
	if !tlsOn(db) {
		return ""
	}
	n := namesOf(db)
	if l.has("ConfigMap", n.Scripts) && l.scripts.Data[engine.ScriptsTLSKey] == "required" {
		return "required"
	}
	if !l.has("StatefulSet", n.StatefulSet) {
		return "required"
	}
	sts := &l.statefulSet
	mounted := false
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == tlsSecretOf(db) && len(v.Secret.Items) == 0 {
			mounted = true
		}
	}
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	if mounted && sts.Status.ObservedGeneration >= sts.Generation && sts.Status.UpdateRevision != "" &&
		sts.Status.CurrentRevision == sts.Status.UpdateRevision && sts.Status.UpdatedReplicas == replicas {
		return "required"
	}
	return ""
}

// serverTLSSecretNames are the operator's Secret (the CA's key; never
// mounted) and the pods' Secret (tls.crt, tls.key, ca.crt).
func serverTLSSecretNames(db *Cluster) (operator, pods string) {
	return db.Name + "-server-ca", db.Name + "-server-tls"
}

// serverHosts are every name a client reaches a server by.
func serverHosts(db *Cluster) []string {
	n := namesOf(db)
	var pods []string
	for ordinal := range replicasOf(db) {
		pods = append(pods, podName(db, ordinal))
	}
	return servertls.Hosts(n.ReadWrite, n.ReadOnly, n.Headless, db.Namespace, pods)
}

// internalHosts are the names the servers and Jobs verify when they
// connect to each other: the read-write Service as the pods' environment
// names it, and each pod under the headless Service (backups from a
// standby).
func internalHosts(db *Cluster) []string {
	n := namesOf(db)
	out := []string{n.ReadWrite}
	for ordinal := range replicasOf(db) {
		out = append(out, podName(db, ordinal)+"."+n.Headless)
	}
	return out
}

// serverTLS keeps each Database's Secrets' data, read again only when
// their resourceVersion in the owned cache changes.
type serverTLS struct {
	mu sync.Mutex
	by map[types.UID]*serverTLSOf
}

type serverTLSOf struct {
	opVersion, podsVersion string
	op, pods               map[string][]byte
	// next: when ensureServerTLS must run again at the latest.
	next time.Time
}

// ensureServerTLS writes the two Secrets of a Database with TLS on, and
// returns the CA bundle its clients trust ("" when the servers cannot
// have TLS yet: a user's Secret is missing or invalid and none was
// served before). It sets ConditionServerCertificate and the expiry
// metric.
func (r *Reconciler) ensureServerTLS(ctx context.Context, db *Cluster) (string, error) {
	opName, podsName := serverTLSSecretNames(db)
	st, err := r.serverTLSData(ctx, db, opName, podsName)
	if err != nil {
		return "", err
	}
	now := r.now()
	var res *servertls.Result
	if user := db.Spec.TLS; user != nil && user.ServerCertSecret != "" {
		data, problem, err := r.userCertificate(ctx, db, user.ServerCertSecret, now)
		if err != nil {
			return "", err
		}
		if problem != "" {
			reason := "UserCertificateInvalid"
			if strings.Contains(problem, "not found") {
				reason = "UserCertificateMissing"
			}
			r.warn(db, ConditionServerCertificate, reason, problem)
			msg := problem
			if st.pods != nil {
				msg += "; the servers keep the certificate they have"
			} else {
				msg += "; the servers cannot start without a certificate"
			}
			r.setCondition(db, ConditionServerCertificate, false, reason, msg)
			// Looked at again soon: a person is fixing it.
			st.next = now.Add(recheckForeign)
			return string(st.pods[servertls.BundleKey]), nil
		}
		res = servertls.User(data, st.op, st.pods, now)
		res.Next = earliest(res.Next, now.Add(userCertRecheck))
	} else {
		if res, err = servertls.Generated(st.op, st.pods, db.Namespace, db.Name, serverHosts(db), now); err != nil {
			return "", err
		}
	}
	if res.Changed {
		if err := r.writeServerTLSSecret(ctx, db, opName, corev1.SecretTypeOpaque, res.Operator, st.op != nil); err != nil {
			return "", err
		}
		if err := r.writeServerTLSSecret(ctx, db, podsName, corev1.SecretTypeTLS, res.Pods, st.pods != nil); err != nil {
			return "", err
		}
		st.op, st.pods = res.Operator, res.Pods
	}
	for _, e := range res.Events {
		r.normal(db, string(e), "Certificate", "%s", certificateMessage(e, podsName, res.NotAfter))
	}
	reason, how := "Generated", "issued by the Database's server CA (Secret "+opName+")"
	if u := db.Spec.TLS; u != nil && u.ServerCertSecret != "" {
		reason, how = "UserProvided", "from Secret "+u.ServerCertSecret
		if pending := res.Operator[servertls.UserCAIntroducedKey]; len(pending) > 0 {
			reason, how = "UserCertificatePending", fmt.Sprintf("the one served before; the certificate of Secret %s is served from %s, once its CA, in ca.crt since %s, has reached the clients",
				u.ServerCertSecret, res.Next.UTC().Format(time.RFC3339), pending)
		}
	}
	r.setCondition(db, ConditionServerCertificate, true, reason,
		fmt.Sprintf("the servers present the certificate in Secret %s (%s), valid until %s", podsName, how, res.NotAfter.UTC().Format(time.RFC3339)))
	r.Kind.metrics.certificateExpiry.WithLabelValues(db.Namespace, db.Name).Set(float64(res.NotAfter.Unix()))
	st.next = res.Next
	return string(res.Pods[servertls.BundleKey]), nil
}

func certificateMessage(e servertls.Event, podsName string, notAfter time.Time) string {
	until := notAfter.UTC().Format(time.RFC3339)
	switch e {
	case servertls.Issued:
		return "server CA and certificate issued (Secret " + podsName + "), valid until " + until
	case servertls.Renewed:
		return "server certificate renewed (Secret " + podsName + "), valid until " + until + "; the servers reload it"
	case servertls.CAIntroduced:
		return "a new server CA is in the CA bundle (ca.crt); it signs the server certificate in " + servertls.CAOverlap.String()
	case servertls.CARotated:
		return "the new server CA signs the server certificate now, valid until " + until + "; the old CA stays in ca.crt for " + servertls.CAOverlap.String()
	case servertls.UserCAIntroduced:
		return "the CA of the user's certificate is in the CA bundle (ca.crt) beside the CA clients trust now; the servers present the user's certificate in " + servertls.UserCAPropagation.String()
	default:
		return "the user's certificate is installed in Secret " + podsName + ", valid until " + until + "; the servers reload it"
	}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// tlsRecheck is how long until the Database's certificates need a look
// (0: none planned).
func (r *Reconciler) tlsRecheck(db *Cluster) time.Duration {
	if !tlsOn(db) {
		return 0
	}
	r.serverTLS.mu.Lock()
	defer r.serverTLS.mu.Unlock()
	st := r.serverTLS.by[db.UID]
	if st == nil || st.next.IsZero() {
		return 0
	}
	return max(st.next.Sub(r.now()), time.Second)
}

// userCertificate reads and checks the user's Secret: its data, or a
// problem in words.
func (r *Reconciler) userCertificate(ctx context.Context, db *Cluster, name string, now time.Time) (map[string][]byte, string, error) {
	var s corev1.Secret
	err := r.API.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("Secret %s (spec.tls.serverCertSecret) not found in namespace %s", name, db.Namespace), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading Secret %s: %w", name, err)
	}
	if s.Type != corev1.SecretTypeTLS {
		return nil, fmt.Sprintf("Secret %s (spec.tls.serverCertSecret) is of type %q, not kubernetes.io/tls", name, s.Type), nil
	}
	if err := servertls.CheckUser(name, s.Data, internalHosts(db), now); err != nil {
		return nil, err.Error(), nil
	}
	return s.Data, "", nil
}

// serverTLSData is the Database's kept data, its Secrets read again when
// they changed.
func (r *Reconciler) serverTLSData(ctx context.Context, db *Cluster, opName, podsName string) (*serverTLSOf, error) {
	r.serverTLS.mu.Lock()
	defer r.serverTLS.mu.Unlock()
	if r.serverTLS.by == nil {
		r.serverTLS.by = map[types.UID]*serverTLSOf{}
	}
	st := r.serverTLS.by[db.UID]
	if st == nil {
		st = &serverTLSOf{}
		r.serverTLS.by[db.UID] = st
	}
	opVersion, err := r.secretVersion(ctx, db, opName)
	if err != nil {
		return nil, err
	}
	podsVersion, err := r.secretVersion(ctx, db, podsName)
	if err != nil {
		return nil, err
	}
	if opVersion == st.opVersion && podsVersion == st.podsVersion && (st.op != nil || opVersion == "") {
		return st, nil
	}
	st.op, st.pods = nil, nil
	for _, s := range []struct {
		name string
		into *map[string][]byte
	}{{opName, &st.op}, {podsName, &st.pods}} {
		var secret corev1.Secret
		err := r.API.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: s.name}, &secret)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s: %w", s.name, err)
		}
		if !metav1.IsControlledBy(&secret, db) {
			return nil, &notOwnedError{Kind: "Secret", Name: s.name, Owner: db.Kind.clusterKind()}
		}
		*s.into = secret.Data
		if *s.into == nil {
			// It exists, empty (the operator's Secret of a Database that
			// has only ever served the user's certificate).
			*s.into = map[string][]byte{}
		}
	}
	st.opVersion, st.podsVersion = opVersion, podsVersion
	return st, nil
}

// writeServerTLSSecret creates or replaces one Secret's data (never
// logged: it holds keys).
func (r *Reconciler) writeServerTLSSecret(ctx context.Context, db *Cluster, name string, typ corev1.SecretType, data map[string][]byte, exists bool) error {
	s := &corev1.Secret{ObjectMeta: secretMeta(db, name, nil), Type: typ, Data: data}
	if !exists {
		if err := r.Client.Create(ctx, s, client.FieldOwner(db.Kind.FieldManager)); err != nil {
			return fmt.Errorf("creating Secret %s: %w", name, err)
		}
		r.Kind.metrics.objectWrites.WithLabelValues("Secret", "created").Inc()
		return nil
	}
	var cur corev1.Secret
	if err := r.API.Get(ctx, client.ObjectKeyFromObject(s), &cur); err != nil {
		return fmt.Errorf("reading Secret %s: %w", name, err)
	}
	before := cur.DeepCopy()
	cur.Data = data
	if err := r.Client.Patch(ctx, &cur, client.MergeFrom(before), client.FieldOwner(db.Kind.FieldManager)); err != nil {
		return fmt.Errorf("writing Secret %s: %w", name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("Secret", "updated").Inc()
	return nil
}

// forgetServerTLS drops the condition and metric of a Database whose TLS
// is off.
func (r *Reconciler) forgetServerTLS(db *Cluster) {
	meta.RemoveStatusCondition(&db.Status.Conditions, ConditionServerCertificate)
	r.Kind.metrics.certificateExpiry.DeleteLabelValues(db.Namespace, db.Name)
}
