package database

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

// The instance channel wired into a Database with spec.failover.enabled:
// the agent in every pod, its two Secrets, and the operator's client.
// What the operator does with it when the primary dies is in
// failover.go.

// AnnotationFailoverDefault on a Database says whether failover is on when
// spec.failover.enabled is unset ("true" or "false"): the operator's
// default when it first saw the Database, recorded then and never
// changed, so that no later operator, with another default, turns
// failover on or off under a running Database (either restarts every
// pod). A person may change it, as the field.
const AnnotationFailoverDefault = "stable.imaginedata.co/failover-default"

// failoverOn: the Database asks for automatic failover (PostgreSQL only:
// the agent speaks to PostgreSQL), in spec.failover.enabled or, when that
// is unset, by its recorded default.
func failoverOn(db *Cluster) bool {
	if engineOf(db) != dbv1.EnginePostgreSQL {
		return false
	}
	if f := db.Spec.Failover; f != nil && f.Enabled != nil {
		return *f.Enabled
	}
	return db.Annotations[AnnotationFailoverDefault] == "true"
}

// recordDefaults records, on a cluster, each default it has no annotation
// for yet, and reports whether it recorded any: the operator's default
// (r.TLSByDefault for every engine's TLS; r.FailoverByDefault and
// r.MonitoringByDefault for PostgreSQL's failover and metrics) for a
// cluster it has never reconciled, "false" for one an operator from before
// the annotation ran (its observedGeneration is set), whose default was
// off. It runs on every pass: the cluster's view (a copy) is built only for
// one that may miss an annotation.
func (r *Reconciler) recordDefaults(obj client.Object) bool {
	annotations := obj.GetAnnotations()
	_, postgres := r.Kind.Engines[dbv1.EnginePostgreSQL]
	if hasAll(annotations, r.Kind.Keys.TLSDefault) &&
		(!postgres || hasAll(annotations, AnnotationFailoverDefault, AnnotationMonitoringDefault)) {
		return false
	}
	db := r.Kind.Clusters.View(obj)
	defaults := map[string]bool{r.Kind.Keys.TLSDefault: r.TLSByDefault}
	if engineOf(db) == dbv1.EnginePostgreSQL {
		defaults[AnnotationFailoverDefault] = r.FailoverByDefault
		defaults[AnnotationMonitoringDefault] = r.MonitoringByDefault
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	recorded := false
	for key, on := range defaults {
		if _, ok := annotations[key]; !ok {
			annotations[key] = strconv.FormatBool(on && db.Status.ObservedGeneration == 0)
			recorded = true
		}
	}
	if recorded {
		obj.SetAnnotations(annotations)
	}
	return recorded
}

// hasAll: annotations holds every key.
func hasAll(annotations map[string]string, keys ...string) bool {
	for _, k := range keys {
		if _, ok := annotations[k]; !ok {
			return false
		}
	}
	return true
}

// instanceSecretNames are the operator's Secret (never mounted) and the
// pods' Secret (mounted in every pod).
func instanceSecretNames(db *Cluster) (operator, pods string) {
	return db.Name + "-instance-operator", db.Name + "-instance-tls"
}

// withAgent adds the agent to the desired StatefulSet, which starts its
// pods in parallel: OrderedReady starts ordinal 0 first and waits for it
// to be ready, and a standby is ready only while it streams, so with the
// primary at a higher ordinal a restart of every pod would wait forever.
// An existing StatefulSet that is not Parallel was recreated first
// (parallel.go).
func withAgent(db *Cluster, desired *appsv1.StatefulSet, operatorImage string) error {
	desired.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	_, pods := instanceSecretNames(db)
	spec := &desired.Spec.Template.Spec
	return instance.AddAgent(spec, instance.PodOptions{OperatorImage: operatorImage, TLSSecret: pods, Server: spec.Containers[0].Name, ScriptsVolume: engine.ScriptsVolume})
}

// keepParallel keeps a Parallel StatefulSet Parallel once failover is
// turned off: the field cannot change in place, so asking for OrderedReady
// would have every update refused. Parallel is right without the agent too:
// a primary a failover left at a higher ordinal still starts after a
// restart of every pod.
func keepParallel(desired *appsv1.StatefulSet, l *live) {
	if l.has("StatefulSet", desired.Name) && l.statefulSet.Spec.PodManagementPolicy == appsv1.ParallelPodManagement {
		desired.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	}
}

// instanceHosts are the instances of the Database's ordinals, by the
// names their certificates carry.
func instanceHosts(db *Cluster) []instance.Instance {
	headless := namesOf(db).Headless
	var out []instance.Instance
	for ordinal := range replicasOf(db) {
		pod := podName(db, ordinal)
		out = append(out, instance.Instance{Pod: pod, Hosts: instance.PodHosts(pod, headless, db.Namespace)})
	}
	return out
}

// channels keeps each Database's client, made again when its operator
// Secret changes.
type channels struct {
	mu sync.Mutex
	by map[types.UID]*channelOf
}

type channelOf struct {
	opVersion, podsVersion string
	op, pods               map[string][]byte
	client                 *instance.Client
}

// ensureInstanceSecrets writes the channel's two Secrets as
// instance.SecretData says (made once, renewed when due, a pod added or
// removed), and returns the operator's client for the Database. The
// Secrets' data is read from the API server only when their
// resourceVersion (in the owned cache) changed since the last read.
func (r *Reconciler) ensureInstanceSecrets(ctx context.Context, db *Cluster) (*instance.Client, error) {
	opName, podsName := instanceSecretNames(db)
	ch, err := r.channelData(ctx, db, opName, podsName)
	if err != nil {
		return nil, err
	}
	op, pods, changed, err := instance.SecretData(ch.op, ch.pods, db.Namespace, db.Name, instanceHosts(db), r.now())
	if err != nil {
		return nil, err
	}
	if changed {
		for _, s := range []struct {
			name string
			data map[string][]byte
			old  map[string][]byte
		}{{opName, op, ch.op}, {podsName, pods, ch.pods}} {
			if err := r.writeInstanceSecret(ctx, db, s.name, s.data, s.old != nil); err != nil {
				return nil, err
			}
		}
		r.normal(db, "InstanceCredentials", "Apply", "Secrets %s and %s of the instance channel written (certificates issued or renewed)", opName, podsName)
		ch.op, ch.pods, ch.client = op, pods, nil
	}
	if ch.client == nil {
		tlsConfig, err := instance.ClientTLSConfig(op[instance.CACertKey], op[instance.ClientCertKey], op[instance.ClientKeyKey])
		if err != nil {
			return nil, err
		}
		dial := r.InstanceDial
		if dial == nil {
			dial = r.dialPod
		}
		ch.client = instance.NewClient(tlsConfig, instance.DefaultPort, instance.WithDialContext(dial))
	}
	return ch.client, nil
}

// channelData is the Database's kept channel, its Secrets read again when
// they changed.
func (r *Reconciler) channelData(ctx context.Context, db *Cluster, opName, podsName string) (*channelOf, error) {
	r.channels.mu.Lock()
	defer r.channels.mu.Unlock()
	if r.channels.by == nil {
		r.channels.by = map[types.UID]*channelOf{}
	}
	ch := r.channels.by[db.UID]
	if ch == nil {
		ch = &channelOf{}
		r.channels.by[db.UID] = ch
	}
	opVersion, err := r.secretVersion(ctx, db, opName)
	if err != nil {
		return nil, err
	}
	podsVersion, err := r.secretVersion(ctx, db, podsName)
	if err != nil {
		return nil, err
	}
	if opVersion == ch.opVersion && podsVersion == ch.podsVersion && (ch.op != nil || opVersion == "") {
		return ch, nil
	}
	ch.op, ch.pods, ch.client = nil, nil, nil
	for _, s := range []struct {
		name string
		into *map[string][]byte
	}{{opName, &ch.op}, {podsName, &ch.pods}} {
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
	}
	ch.opVersion, ch.podsVersion = opVersion, podsVersion
	return ch, nil
}

// secretVersion is the resourceVersion of the Database's Secret in the
// owned cache, "" when it is not there.
func (r *Reconciler) secretVersion(ctx context.Context, db *Cluster, name string) (string, error) {
	m := secretMetadata()
	err := r.Owned.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, m)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	return m.ResourceVersion, err
}

// writeInstanceSecret creates or replaces one Secret's data (never
// logged: it holds keys).
func (r *Reconciler) writeInstanceSecret(ctx context.Context, db *Cluster, name string, data map[string][]byte, exists bool) error {
	s := &corev1.Secret{ObjectMeta: secretMeta(db, name, nil), Type: corev1.SecretTypeOpaque, Data: data}
	if !exists {
		if err := r.Client.Create(ctx, s, client.FieldOwner(db.Kind.FieldManager)); err != nil {
			return fmt.Errorf("creating Secret %s: %w", name, err)
		}
		return nil
	}
	// A merge patch of data: keys no longer wanted (a removed pod's) are
	// set to null.
	var cur corev1.Secret
	if err := r.API.Get(ctx, client.ObjectKeyFromObject(s), &cur); err != nil {
		return fmt.Errorf("reading Secret %s: %w", name, err)
	}
	before := cur.DeepCopy()
	cur.Data = data
	if err := r.Client.Patch(ctx, &cur, client.MergeFrom(before), client.FieldOwner(db.Kind.FieldManager)); err != nil {
		return fmt.Errorf("writing Secret %s: %w", name, err)
	}
	return nil
}

// wireInstanceChannel, when failover is on, writes the channel's Secrets
// and adds the agent to the desired StatefulSet, and with monitoring on the
// metrics collector (addPodExtras). An operator that does not know its own
// image cannot add either: it says so and leaves the pods as they are.
//
// It reports whether the StatefulSet must not be written this pass: one
// that is not Parallel is recreated (parallel.go).
func (r *Reconciler) wireInstanceChannel(ctx context.Context, db *Cluster, desired *appsv1.StatefulSet, l *live) (bool, error) {
	switch {
	case !failoverOn(db):
	case r.OperatorImage == "":
		msg := "spec.failover.enabled is set but the operator does not know its own image (DECKHAND_OPERATOR_IMAGE), from which the pods copy the instance agent: no failover"
		r.warn(db, ConditionFailover, "AgentImageUnknown", msg)
		r.setCondition(db, ConditionFailover, false, "AgentImageUnknown", msg)
	default:
		if _, err := r.ensureInstanceSecrets(ctx, db); err != nil {
			return false, err
		}
		var existing *appsv1.StatefulSet
		if l.has("StatefulSet", namesOf(db).StatefulSet) {
			existing = &l.statefulSet
		}
		if skip, err := r.recreateForParallel(ctx, db, existing); skip || err != nil {
			return true, err
		}
	}
	return false, r.addPodExtras(db, desired, l)
}

// addPodExtras adds to a desired StatefulSet what wireInstanceChannel and
// wireMetrics add to it, with no request: the instance agent (failover on
// and the operator's image known; failover off keeps a Parallel
// StatefulSet Parallel) and the metrics collector. A check that the live
// StatefulSet runs the desired template must build it the same way.
func (r *Reconciler) addPodExtras(db *Cluster, desired *appsv1.StatefulSet, l *live) error {
	switch {
	case !failoverOn(db):
		keepParallel(desired, l)
	case r.OperatorImage != "":
		if err := withAgent(db, desired, r.OperatorImage); err != nil {
			return err
		}
	}
	if err := r.wireArchiving(db, desired); err != nil {
		return err
	}
	if err := r.wireRecovery(db, desired); err != nil {
		return err
	}
	return r.wireMetrics(db, desired)
}
