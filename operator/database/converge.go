package database

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// converge creates or updates every object of the Database, in the order
// they are needed.
func (r *Reconciler) converge(ctx context.Context, db *Cluster, eng engine.Engine, l *live) error {
	n := namesOf(db)
	bundle := ""
	if tlsOn(db) {
		var err error
		if bundle, err = r.ensureServerTLS(ctx, db); err != nil {
			return err
		}
	} else {
		r.forgetServerTLS(db)
	}
	if err := r.ensureSecrets(ctx, db, eng, l, bundle); err != nil {
		return err
	}
	if n.CA != "" && bundle != "" {
		if err := r.applyOne(ctx, db, caConfigMap(db, bundle), &l.ca, l.has("ConfigMap", n.CA)); err != nil {
			return err
		}
	}
	holds, err := r.baseBackupHoldsOf(ctx, db)
	if err != nil {
		return err
	}
	if err := r.applyOne(ctx, db, scriptsConfigMap(db, eng, tlsRequired(db, l), holds), &l.scripts, l.has("ConfigMap", n.Scripts)); err != nil {
		return err
	}
	for i, svc := range services(db, eng) {
		if err := r.applyOne(ctx, db, svc, &l.services[i], l.has("Service", svc.Name)); err != nil {
			return err
		}
	}
	var claims []corev1.PersistentVolumeClaim
	if l.has("StatefulSet", n.StatefulSet) {
		claims = l.statefulSet.Spec.VolumeClaimTemplates
	}
	plan, err := r.serversToRun(ctx, db, eng, l)
	if err != nil {
		return err
	}
	if !plan.Keep {
		desired := statefulSetRunning(db, eng, claims, plan)
		skip, err := r.wireInstanceChannel(ctx, db, desired, l)
		if err != nil {
			return err
		}
		if !skip {
			if err := r.applyOne(ctx, db, desired, &l.statefulSet, l.has("StatefulSet", n.StatefulSet)); err != nil {
				return err
			}
		}
	}
	if err := r.liftFence(ctx, db, eng); err != nil {
		return err
	}
	if err := r.ensurePDB(ctx, db, l); err != nil {
		return err
	}
	pods, err := r.serverPods(ctx, db)
	if err != nil {
		return err
	}
	if err := r.labelRoles(ctx, db, pods); err != nil {
		return err
	}
	if err := r.growStorage(ctx, db, l); err != nil {
		return err
	}
	if !r.observeRecovery(db, primaryPod(db, pods)) {
		return nil
	}
	if done, err := r.ensureRestore(ctx, db, eng, primaryPod(db, pods)); err != nil || !done {
		return err
	}
	if err := r.ensureInitJob(ctx, db, eng, l, primaryPod(db, pods)); err != nil {
		return err
	}
	return r.verifyBaseBackups(ctx, db)
}

// applyOne applies one object and announces what it did.
func (r *Reconciler) applyOne(ctx context.Context, db *Cluster, desired, current client.Object, exists bool) error {
	wrote, err := r.apply(ctx, desired, current, exists)
	kind := desired.GetObjectKind().GroupVersionKind().Kind
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, desired.GetName(), err)
	}
	if wrote {
		action, reason := "updated", "Updated"
		if !exists {
			action, reason = "created", "Created"
		}
		r.Kind.metrics.objectWrites.WithLabelValues(kind, action).Inc()
		r.normal(db, reason, "Apply", "%s %s %s", kind, desired.GetName(), action)
	}
	return nil
}

// newPassword is 128 bits from crypto/rand, in letters and digits only, so
// it needs no quoting in a URI or a shell.
func newPassword() string { return rand.Text() }

// ensureSecrets creates the superuser, replication and app Secrets once
// (those the cluster has). Their passwords are never replaced; the app
// Secret's other keys follow the spec (a new port, say).
//
// bundle is the CA bundle of a Database with TLS on (ca.crt and the
// verifying connection keys of the app Secret), "" without TLS.
func (r *Reconciler) ensureSecrets(ctx context.Context, db *Cluster, eng engine.Engine, l *live, bundle string) error {
	n := namesOf(db)
	if !l.has("Secret", n.Superuser) {
		if err := r.createSecret(ctx, db, superuserSecret(db, eng, newPassword())); err != nil {
			return err
		}
	}
	if n.Replication != "" && !l.has("Secret", n.Replication) {
		if err := r.createSecret(ctx, db, passwordSecret(db, n.Replication, newPassword())); err != nil {
			return err
		}
	}
	if n.App == "" {
		return nil
	}
	if !l.has("Secret", n.App) {
		return r.createSecret(ctx, db, appSecret(db, eng, newPassword(), bundle))
	}
	conn := connectionOf(db, eng, bundle)
	if l.app.Labels[db.Kind.Keys.Connection] == conn.hash() {
		return nil
	}
	return r.updateConnection(ctx, db, eng, conn)
}

func (r *Reconciler) createSecret(ctx context.Context, db *Cluster, s *corev1.Secret) error {
	if err := r.Client.Create(ctx, s, client.FieldOwner(db.Kind.FieldManager)); err != nil {
		// Never the Secret itself in an error: it holds the password.
		return fmt.Errorf("creating Secret %s: %w", s.Name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("Secret", "created").Inc()
	r.normal(db, "Created", "Apply", "Secret %s created with a generated password", s.Name)
	return nil
}

// updateConnection rewrites the app Secret's connection details, keeping
// its password. It is the one place the operator reads a password (to
// rebuild the URI), from the API server, not a cache.
func (r *Reconciler) updateConnection(ctx context.Context, db *Cluster, eng engine.Engine, conn connection) error {
	var s corev1.Secret
	if err := r.API.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: namesOf(db).App}, &s); err != nil {
		return fmt.Errorf("reading Secret %s: %w", namesOf(db).App, err)
	}
	data := conn.appData(eng, string(s.Data["password"]))
	// Keys the details no longer have (TLS turned off) are removed.
	removed := map[string]any{}
	for k := range s.Data {
		if _, ok := data[k]; !ok && tlsAppKeys[k] {
			removed[k] = nil
		}
	}
	patch := map[string]any{
		"metadata":   map[string]any{"labels": map[string]string{db.Kind.Keys.Connection: conn.hash()}, "resourceVersion": s.ResourceVersion},
		"stringData": data,
	}
	if len(removed) > 0 {
		patch["data"] = removed
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, &s, client.RawPatch(types.MergePatchType, body), client.FieldOwner(db.Kind.FieldManager)); err != nil {
		return fmt.Errorf("updating the connection details in Secret %s: %w", s.Name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("Secret", "updated").Inc()
	r.normal(db, "Updated", "Apply", "Secret %s: connection details updated (host %s, port %s); password kept", s.Name, conn.Host, conn.Port)
	return nil
}

// ensurePDB keeps a PodDisruptionBudget while there are standbys, and the
// primary's (drain.go) while a switchover can move the primary.
func (r *Reconciler) ensurePDB(ctx context.Context, db *Cluster, l *live) error {
	primaryBudget := r.wantsPrimaryPDB(db)
	if err := r.keepPDB(ctx, db, l, podDisruptionBudget(db, primaryBudget), &l.pdb, replicasOf(db) > 1,
		"a single replica has nothing to protect"); err != nil {
		return err
	}
	return r.keepPDB(ctx, db, l, primaryDisruptionBudget(db), &l.primaryPDB, primaryBudget,
		"the primary can no longer be switched over ahead of a drain (one replica, failover off, or Nodes not readable)")
}

// keepPDB applies want when wanted, else deletes the live budget if there
// is one, saying why.
func (r *Reconciler) keepPDB(ctx context.Context, db *Cluster, l *live, want, have *policyv1.PodDisruptionBudget, wanted bool, whyNot string) error {
	exists := l.has("PodDisruptionBudget", want.Name)
	if wanted {
		return r.applyOne(ctx, db, want, have, exists)
	}
	if !exists {
		return nil
	}
	if err := client.IgnoreNotFound(r.Client.Delete(ctx, have)); err != nil {
		return fmt.Errorf("deleting PodDisruptionBudget %s: %w", want.Name, err)
	}
	r.Kind.metrics.objectWrites.WithLabelValues("PodDisruptionBudget", "deleted").Inc()
	r.normal(db, "Deleted", "Apply", "PodDisruptionBudget %s deleted: %s", want.Name, whyNot)
	return nil
}

// serverPods are the StatefulSet's pods, by name.
func (r *Reconciler) serverPods(ctx context.Context, db *Cluster) (map[string]*corev1.Pod, error) {
	return serverPodsOf(ctx, r.Owned, db)
}

func serverPodsOf(ctx context.Context, owned client.Reader, db *Cluster) (map[string]*corev1.Pod, error) {
	var pods corev1.PodList
	if err := owned.List(ctx, &pods, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db, componentServer))); err != nil {
		return nil, err
	}
	out := map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if owner := metav1.GetControllerOf(p); owner != nil && owner.Kind == "StatefulSet" && owner.Name == namesOf(db).StatefulSet {
			out[p.Name] = p
		}
	}
	return out, nil
}

// labelRoles marks the named primary (namedPrimary) primary and the others standbys,
// which is what the read-write and read-only Services select.
func (r *Reconciler) labelRoles(ctx context.Context, db *Cluster, pods map[string]*corev1.Pod) error {
	for name, p := range pods {
		role := roleOf(db, name)
		if p.Labels[db.Kind.Keys.Role] == role {
			continue
		}
		body := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, db.Kind.Keys.Role, role)
		if err := r.Client.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(body)), client.FieldOwner(db.Kind.FieldManager)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("labelling pod %s %s: %w", name, role, err)
		}
		r.Kind.metrics.objectWrites.WithLabelValues("Pod", "labelled").Inc()
	}
	return nil
}

// growStorage asks for bigger volumes when storage-size grew and the
// StorageClass allows it; otherwise StorageResized says why not.
func (r *Reconciler) growStorage(ctx context.Context, db *Cluster, l *live) error {
	want := resource.MustParse(db.Spec.StorageSize)
	var small []*corev1.PersistentVolumeClaim
	pending := 0
	for ordinal := range replicasOf(db) {
		pvc, ok := l.claims[ordinal]
		if !ok {
			continue
		}
		requested := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		if requested.Cmp(want) < 0 {
			small = append(small, pvc)
		}
		if capacity, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok && capacity.Cmp(want) < 0 {
			pending++
		}
	}
	for _, pvc := range small {
		class := ptr.Deref(pvc.Spec.StorageClassName, "")
		if why := r.cannotExpand(ctx, class); why != "" {
			msg := fmt.Sprintf("storage-size is %s but PersistentVolumeClaim %s requests %s and cannot grow: %s",
				db.Spec.StorageSize, pvc.Name, pvc.Spec.Resources.Requests.Storage(), why)
			r.warn(db, ConditionStorageResized, "ExpansionNotAllowed", msg)
			r.setCondition(db, ConditionStorageResized, false, "ExpansionNotAllowed", msg)
			return nil
		}
		body := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, want.String())
		if err := r.Client.Patch(ctx, pvc, client.RawPatch(types.MergePatchType, []byte(body)), client.FieldOwner(db.Kind.FieldManager)); err != nil {
			return fmt.Errorf("growing PersistentVolumeClaim %s to %s: %w", pvc.Name, want.String(), err)
		}
		r.Kind.metrics.objectWrites.WithLabelValues("PersistentVolumeClaim", "resized").Inc()
		r.normal(db, "Resizing", "Resize", "PersistentVolumeClaim %s now requests %s", pvc.Name, want.String())
		pending++
	}
	switch {
	case pending > 0:
		r.setCondition(db, ConditionStorageResized, true, "ExpansionRequested",
			fmt.Sprintf("every volume requests %s; %d of them still report a smaller capacity while the storage provider resizes them", want.String(), pending))
	default:
		r.setCondition(db, ConditionStorageResized, true, "Resized", fmt.Sprintf("every volume requests %s", want.String()))
	}
	return nil
}

// cannotExpand says why volumes of a StorageClass cannot grow ("" when
// they can).
func (r *Reconciler) cannotExpand(ctx context.Context, class string) string {
	if class == "" {
		return "it has no StorageClass"
	}
	var sc storagev1.StorageClass
	if err := r.API.Get(ctx, client.ObjectKey{Name: class}, &sc); err != nil {
		return fmt.Sprintf("StorageClass %s cannot be read (%v)", class, err)
	}
	if !ptr.Deref(sc.AllowVolumeExpansion, false) {
		return fmt.Sprintf("StorageClass %s does not allow volume expansion (allowVolumeExpansion is not true)", class)
	}
	return ""
}

// ensureInitJob creates the init Job, once the primary is ready, until the
// database is initialised. A failed Job whose image is no longer the
// Database's (the user fixed it) is replaced.
func (r *Reconciler) ensureInitJob(ctx context.Context, db *Cluster, eng engine.Engine, l *live, primary *corev1.Pod) error {
	if meta.IsStatusConditionTrue(db.Status.Conditions, ConditionInitialized) {
		return nil
	}
	desired := initJob(db, eng)
	name := desired.Name
	if l.has("Job", name) {
		if !jobFinished(&l.job, batchv1.JobFailed) || jobImage(&l.job) == imageOf(db, eng) {
			return nil
		}
		if err := r.Client.Delete(ctx, &l.job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting failed init Job %s: %w", name, err)
		}
		r.Kind.metrics.objectWrites.WithLabelValues("Job", "deleted").Inc()
		r.normal(db, "Deleted", "Init", "failed init Job %s deleted: the image changed to %s, a new one runs with it", name, imageOf(db, eng))
		l.exists["Job/"+name] = false
		return nil
	}
	if primary == nil || !podReady(primary) {
		// The Job would only wait; the primary's readiness requeues.
		return nil
	}
	err := r.Client.Create(ctx, desired, client.FieldOwner(db.Kind.FieldManager))
	if apierrors.IsAlreadyExists(err) {
		// Ours still being deleted (its deletion requeues), or someone
		// else's.
		_, err := r.lookup(ctx, db, "Job", name, &l.job, true)
		return err
	}
	if err != nil {
		return fmt.Errorf("creating init Job %s: %w", name, err)
	}
	l.job, l.exists["Job/"+name] = *desired, true
	r.Kind.metrics.objectWrites.WithLabelValues("Job", "created").Inc()
	if db.Spec.Name == "" {
		r.normal(db, "Created", "Init", "init Job %s created: it waits for the primary and reports its version", name)
		return nil
	}
	r.normal(db, "Created", "Init", "init Job %s created: it creates database %q owned by role %q once the primary is ready", name, db.Spec.Name, appUser(db))
	return nil
}

func jobImage(j *batchv1.Job) string {
	if c := j.Spec.Template.Spec.Containers; len(c) > 0 {
		return c[0].Image
	}
	return ""
}

// jobFinished reports whether the Job has the terminal condition kind.
func jobFinished(j *batchv1.Job, kind batchv1.JobConditionType) bool {
	return jobCondition(j, kind) != nil
}

func jobCondition(j *batchv1.Job, kind batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if c := &j.Status.Conditions[i]; c.Type == kind && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}
