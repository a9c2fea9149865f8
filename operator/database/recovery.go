package database

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
)

// Point-in-time recovery (spec.recovery): a new Database's primary starts
// from a base backup of another Database's archive, replayed to a target
// (postgres/recovery.go; docs/design/database-backup.md). The operator
// adds the init container and the sidecar's source settings to the pods,
// says in the scripts ConfigMap whether the recovery is still to be done,
// and follows it in the Restored condition, which keeps the init Job and
// backups waiting as a restore from a DatabaseBackup does.

// recoveryOf is the Database's recovery; nil: it starts empty or from
// fromBackup.
func recoveryOf(db *Cluster) *dbv1.Recovery {
	if engineOf(db) != dbv1.EnginePostgreSQL {
		return nil
	}
	return db.Spec.Recovery
}

// recoveryState is the scripts ConfigMap's recovery key: pending until
// the recovered primary has served, then done, so a primary whose volume
// is emptied later never recovers the source's old data again.
func recoveryState(db *Cluster) string {
	if meta.IsStatusConditionTrue(db.Status.Conditions, ConditionRestored) {
		return postgres.RecoveryDone
	}
	return postgres.RecoveryPending
}

// archiveLocation is an archive's URL as the scripts print it.
func archiveLocation(s *dbv1.ObjectStore, server string) string {
	where := "s3://" + s.Bucket
	if p := strings.TrimSuffix(s.Path, "/"); p != "" {
		where += "/" + p
	}
	return where + "/" + server
}

// targetOf says what a recovery stops at, as a person reads it.
func targetOf(rc *dbv1.Recovery) string {
	t := rc.RecoveryTarget
	switch {
	case t == nil:
		return "the end of the archive"
	case t.TargetTime != "":
		return "time " + t.TargetTime
	case t.TargetLSN != "":
		return "LSN " + t.TargetLSN
	case t.TargetName != "":
		return "restore point " + t.TargetName
	case t.TargetXID != "":
		return "transaction " + t.TargetXID
	case t.TargetImmediate != nil && *t.TargetImmediate:
		return "the end of the base backup (immediate)"
	}
	return "the end of the archive"
}

// storeOptions are an object store's settings for the engine's scripts,
// for the archive written under server.
func storeOptions(s *dbv1.ObjectStore, server string) postgres.ArchiverOptions {
	o := postgres.ArchiverOptions{
		Endpoint:    s.Endpoint,
		Bucket:      s.Bucket,
		Prefix:      s.Path,
		Server:      server,
		Region:      s.Region,
		PathStyle:   s.PathStyle == nil || *s.PathStyle,
		Compression: string(s.Compression),
		AccessKey:   postgres.KeyRef(s.Credentials.AccessKeyID),
		SecretKey:   postgres.KeyRef(s.Credentials.SecretAccessKey),
	}
	if o.Compression == "" {
		o.Compression = string(dbv1.CompressionGzip)
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if ca := s.CABundle; ca != nil {
		// The engine's KeyRef has the API's fields, without its tags.
		o.CASecret = (*postgres.KeyRef)(ca.SecretKeyRef)
		o.CAConfigMap = (*postgres.KeyRef)(ca.ConfigMapKeyRef)
	}
	return o
}

// wireRecovery adds the recovery's init container, and the source archive
// to the archiver sidecar, to the desired StatefulSet of a Database with
// spec.recovery.
func (r *Reconciler) wireRecovery(db *Cluster, desired *appsv1.StatefulSet) error {
	rc := recoveryOf(db)
	if rc == nil {
		return nil
	}
	spec := &desired.Spec.Template.Spec
	o := postgres.RecoveryOptions{Image: r.archiverImage(), Source: storeOptions(&rc.Source.ObjectStore, rc.Source.ServerName)}
	if t := rc.RecoveryTarget; t != nil {
		o.TargetTime, o.TargetLSN, o.TargetName, o.TargetXID = t.TargetTime, t.TargetLSN, t.TargetName, t.TargetXID
		o.TargetImmediate = t.TargetImmediate != nil && *t.TargetImmediate
		o.Exclusive = t.Exclusive != nil && *t.Exclusive
		o.Timeline, o.BackupID = t.TargetTLI, t.BackupID
	}
	if err := postgres.AddRecovery(spec, spec.Containers[0].Name, o); err != nil {
		return err
	}
	setTemplateAnnotation(desired, AnnotationArchiveScripts, archiveScriptsHash())
	return nil
}

// setTemplateAnnotation sets one annotation of the StatefulSet's pod
// template.
func setTemplateAnnotation(sts *appsv1.StatefulSet, key, value string) {
	if sts.Spec.Template.Annotations == nil {
		sts.Spec.Template.Annotations = map[string]string{}
	}
	sts.Spec.Template.Annotations[key] = value
}

// observeRecovery follows a recovery from the primary's pod and reports
// whether it is done: the primary served once (it is ready only once its
// server has replayed to the target, promoted, and listens). Until then
// the Restored condition says where it is: Recovering, or RecoveryFailed
// when the init container refused (a target outside the archive, no base
// backup, the store unreachable), with its reason.
func (r *Reconciler) observeRecovery(db *Cluster, primary *corev1.Pod) bool {
	rc := recoveryOf(db)
	if rc == nil || meta.IsStatusConditionTrue(db.Status.Conditions, ConditionRestored) {
		return true
	}
	where := archiveLocation(&rc.Source.ObjectStore, rc.Source.ServerName)
	target := targetOf(rc)
	switch {
	case primary == nil:
		r.setCondition(db, ConditionRestored, false, "Recovering", fmt.Sprintf("waiting for the primary %s's pod to recover %s to %s", currentPrimary(db), where, target))
		return false
	case podReady(primary):
		r.normal(db, "Recovered", "Recover", "the primary %s recovered %s to %s and serves", primary.Name, where, target)
		r.setCondition(db, ConditionRestored, true, "Recovered", fmt.Sprintf("recovered from %s to %s", where, target))
		return true
	}
	if why := recoveryRefused(primary); why != "" {
		msg := fmt.Sprintf("the primary %s cannot recover %s to %s: %s; the pod tries again, which helps when the store was unreachable; a target outside the archive never succeeds, and spec.recovery cannot change: delete this Database (deletionPolicy Delete) and make a new one with another target",
			primary.Name, where, target, why)
		r.warn(db, ConditionRestored, "RecoveryFailed", msg)
		r.setCondition(db, ConditionRestored, false, "RecoveryFailed", msg)
		return false
	}
	msg := fmt.Sprintf("the primary %s recovers %s to %s: the init container %s restores the base backup, then the server replays the archive (the %s container's log says which segment it fetched last)",
		primary.Name, where, target, postgres.RecoverContainer, postgres.ArchiverContainer)
	if stopped := serverStopped(primary); stopped != "" {
		msg += "; " + stopped
	}
	r.setCondition(db, ConditionRestored, false, "Recovering", msg)
	return false
}

// recoveryRefused is why the recover init container of the pod failed
// (the last line its script said), "" while it has not, or once it
// succeeded.
func recoveryRefused(p *corev1.Pod) string {
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name != postgres.RecoverContainer {
			continue
		}
		t := cs.State.Terminated
		if t == nil {
			// Running or waiting again, after a failure?
			t = cs.LastTerminationState.Terminated
		}
		if t == nil || t.ExitCode == 0 {
			return ""
		}
		return lastSaid(t.Message, fmt.Sprintf("exit code %d", t.ExitCode))
	}
	return ""
}

// serverStopped says that the server container stopped while it replayed
// (restarted, it replays again), "" while it has not.
func serverStopped(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != p.Spec.Containers[0].Name || cs.LastTerminationState.Terminated == nil {
			continue
		}
		t := cs.LastTerminationState.Terminated
		return fmt.Sprintf("its server stopped during the replay %d times, last with exit code %d (kubectl logs %s -c %s --previous says why: a target the archive does not reach, or the store unreachable)",
			cs.RestartCount, t.ExitCode, p.Name, cs.Name)
	}
	return ""
}

// lastSaid is the last line starting "deckhand: " of a container's
// termination message (its log's end), without that prefix; otherwise
// fallback.
func lastSaid(message, fallback string) string {
	lines := strings.Split(strings.TrimSpace(message), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if said, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "deckhand: "); ok {
			return truncate(said, 600)
		}
	}
	return fallback
}
