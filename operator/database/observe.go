package database

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// observe fills the status from what runs: the StatefulSet, its pods and
// volumes, and the init Job with what its pod reported.
func (r *Reconciler) observe(ctx context.Context, db *Cluster, eng engine.Engine, l *live) {
	n := namesOf(db)
	replicas := replicasOf(db)
	sts := &l.statefulSet
	stsExists := l.has("StatefulSet", n.StatefulSet)

	pods, err := r.serverPods(ctx, db)
	if err != nil {
		logf.FromContext(ctx).Error(err, "listing pods")
	}
	db.Status.ReadyReplicas = 0
	if stsExists {
		db.Status.ReadyReplicas = sts.Status.ReadyReplicas
	}
	db.Status.Ready = fmt.Sprintf("%d/%d", db.Status.ReadyReplicas, replicas)
	primary, primaryReady := primaryPod(db, pods), false
	db.Status.Primary = ""
	if primary != nil {
		db.Status.Primary = primary.Name
		primaryReady = podReady(primary)
	}
	if stsExists && sts.Status.ObservedGeneration >= sts.Generation && sts.Status.UpdatedReplicas == replicas &&
		sts.Status.CurrentRevision == sts.Status.UpdateRevision && len(sts.Spec.Template.Spec.Containers) > 0 {
		db.Status.CurrentImage = sts.Spec.Template.Spec.Containers[0].Image
	}

	r.observeStorage(db, l)
	report := r.observeInit(ctx, db, eng, l)
	r.observeVersion(db, eng, l, report)

	rolledOut := stsExists && sts.Status.ObservedGeneration >= sts.Generation && sts.Status.UpdatedReplicas == replicas
	initialized := meta.IsStatusConditionTrue(db.Status.Conditions, ConditionInitialized)
	allReady := stsExists && db.Status.ReadyReplicas == replicas && rolledOut
	problems := append(podProblems(pods), r.podsOnLostNodes(ctx, currentPrimary(db), pods)...)
	wrongOwner := dataOwnerMismatches(pods)
	r.observeClones(ctx, db, eng, pods)
	var down []string
	if primaryReady {
		// A cloning standby passes its startup probe while its clone
		// progresses: it is coming up, not degraded.
		down = notCloning(db, standbysNotReady(db, pods))
	}

	switch {
	case len(wrongOwner) > 0:
		msg := strings.Join(wrongOwner, "; ")
		r.warn(db, ConditionReady, ReasonDataDirectoryOwnerMismatch, msg)
		r.setCondition(db, ConditionReady, false, ReasonDataDirectoryOwnerMismatch, msg)
		db.Status.Phase = dbv1.PhaseDegraded
		return
	case db.Spec.Suspend:
		r.setCondition(db, ConditionReady, allReady && initialized, "Suspended",
			fmt.Sprintf("suspended: the operator changes nothing; %s replicas ready", db.Status.Ready))
	case initialized && len(down) > 0:
		msg := fmt.Sprintf("%s replicas ready; the primary %s serves, but standby %s started and is not ready: a standby is ready only while it streams from the primary (see its log: fallen behind, or the primary unreachable)",
			db.Status.Ready, currentPrimary(db), strings.Join(down, ", "))
		if len(problems) > 0 {
			msg += "; " + strings.Join(problems, "; ")
		}
		r.warn(db, ConditionReady, ReasonStandbyNotReady, msg)
		r.setCondition(db, ConditionReady, false, ReasonStandbyNotReady, msg)
		db.Status.Phase = dbv1.PhaseDegraded
		return
	case initialized && allReady:
		r.setCondition(db, ConditionReady, true, "Ready",
			fmt.Sprintf("%s replicas ready; %s", db.Status.Ready, appDatabase(db)))
	default:
		msg := []string{fmt.Sprintf("%s replicas ready", db.Status.Ready)}
		if c := restoreProblem(db); c != nil {
			msg = append(msg, "not restored: "+c.Message)
		} else if !initialized {
			msg = append(msg, "not initialised yet (see condition Initialized)")
		}
		if stsExists && !rolledOut {
			msg = append(msg, fmt.Sprintf("rolling out: %d of %d replicas updated", sts.Status.UpdatedReplicas, replicas))
		}
		msg = append(msg, cloneMessages(db)...)
		msg = append(msg, problems...)
		r.setCondition(db, ConditionReady, false, notReadyReason(initialized, db), strings.Join(msg, "; "))
	}
	db.Status.Phase = phaseOf(db, initialized, allReady, primaryReady)
}

func notReadyReason(initialized bool, db *Cluster) string {
	if c := restoreProblem(db); c != nil {
		return c.Reason
	}
	if c := meta.FindStatusCondition(db.Status.Conditions, ConditionInitialized); !initialized && c != nil && c.Reason == "InitJobFailed" {
		return "InitJobFailed"
	}
	if !initialized {
		return "Initializing"
	}
	return "ReplicasNotReady"
}

// phaseOf sums up the conditions.
func phaseOf(db *Cluster, initialized, allReady, primaryReady bool) dbv1.Phase {
	initCond := meta.FindStatusCondition(db.Status.Conditions, ConditionInitialized)
	if c := restoreProblem(db); c != nil && (c.Reason == "BackupNotFound" || c.Reason == "BackupFailed" || c.Reason == "RestoreFailed" || c.Reason == "RecoveryFailed") {
		return dbv1.PhaseDegraded
	}
	switch {
	case initialized && allReady:
		return dbv1.PhaseReady
	case !initialized && initCond != nil && initCond.Reason == "InitJobFailed":
		return dbv1.PhaseDegraded
	case initialized && !primaryReady:
		return dbv1.PhaseDegraded
	case initialized:
		// The primary serves; standbys are coming up or rolling.
		return dbv1.PhaseProvisioning
	case primaryReady:
		return dbv1.PhaseInitializing
	default:
		return dbv1.PhaseProvisioning
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podProblems names pods the scheduler cannot place and containers that
// wait for a reason worth telling (an image that cannot be pulled, a
// crash loop), for the Ready message.
func podProblems(pods map[string]*corev1.Pod) []string {
	var out []string
	for name, p := range pods {
		if why := podUnschedulable(p); why != "" {
			out = append(out, fmt.Sprintf("pod %s: cannot be scheduled (%s)", name, truncate(why, 200)))
		}
		for _, cs := range p.Status.ContainerStatuses {
			w := cs.State.Waiting
			if w == nil || w.Reason == "" || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing" {
				continue
			}
			msg := fmt.Sprintf("pod %s: %s", name, w.Reason)
			if w.Message != "" {
				msg += " (" + truncate(w.Message, 200) + ")"
			}
			out = append(out, msg)
		}
	}
	sort.Strings(out)
	return out
}

// podUnschedulable is the scheduler's word on a pod it cannot place (no node
// matches its selector, tolerations or anti-affinity, or none has room),
// "" for a pod that is placed or not tried yet.
func podUnschedulable(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message
		}
	}
	return ""
}

// ReasonStandbyNotReady: the primary is ready and a standby that started
// is not (its readiness needs a streaming WAL receiver): the Database runs
// with fewer copies than asked for.
const ReasonStandbyNotReady = "StandbyNotReady"

// standbysNotReady names the standby pods whose server started (the
// startup probe passed, so the first clone is done) and is not ready now:
// a standby still cloning or being rolled is coming up, not degraded.
func standbysNotReady(db *Cluster, pods map[string]*corev1.Pod) []string {
	var out []string
	for _, s := range standbysOf(db, pods) {
		if s.Started && !s.Healthy && pods[s.Pod].DeletionTimestamp.IsZero() {
			out = append(out, s.Pod)
		}
	}
	sort.Strings(out)
	return out
}

// ReasonDataDirectoryOwnerMismatch: a server found its data directory
// owned by another UID than the one it runs as.
const ReasonDataDirectoryOwnerMismatch = "DataDirectoryOwnerMismatch"

// dataOwnerReport is what a server's bootstrap script writes to its
// termination message when the data directory's owner is not its user.
type dataOwnerReport struct {
	DataDirectory string `json:"dataDirectory"`
	DataOwner     string `json:"dataOwner"`
	RunAsUser     string `json:"runAsUser"`
}

// dataOwnerMismatches names the pods whose server stopped because its data
// directory belongs to another UID (its last termination message says
// which): runAsUser is fixed before a container runs, so only the user can
// fix it, by naming the image's user in the spec.
func dataOwnerMismatches(pods map[string]*corev1.Pod) []string {
	var out []string
	for name, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Ready {
				// Fixed since (the directory's owner changed by hand).
				continue
			}
			t := cs.State.Terminated
			if t == nil {
				t = cs.LastTerminationState.Terminated
			}
			if t == nil || !strings.Contains(t.Message, `"dataOwner"`) {
				continue
			}
			var rep dataOwnerReport
			if json.Unmarshal([]byte(t.Message), &rep) != nil || rep.DataOwner == "" {
				continue
			}
			out = append(out, fmt.Sprintf("pod %s: the data directory %s belongs to uid %s, but the servers run as uid %s (spec.podTemplate.runAsUser, default %d): "+
				"set spec.podTemplate.runAsUser to %s if that is the image's server user",
				name, rep.DataDirectory, rep.DataOwner, rep.RunAsUser, DefaultRunAsUser, rep.DataOwner))
		}
	}
	sort.Strings(out)
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// observeStorage: StorageBound says whether every replica's volume is
// bound.
func (r *Reconciler) observeStorage(db *Cluster, l *live) {
	replicas := replicasOf(db)
	var unbound []string
	for ordinal := range replicas {
		pvc, ok := l.claims[ordinal]
		switch {
		case !ok:
			unbound = append(unbound, claimName(db, ordinal)+" (not created yet)")
		case pvc.Status.Phase != corev1.ClaimBound:
			unbound = append(unbound, fmt.Sprintf("%s (%s)", pvc.Name, ptr.Deref(&pvc.Status.Phase, "Pending")))
		}
	}
	if len(unbound) == 0 {
		r.setCondition(db, ConditionStorageBound, true, "Bound", fmt.Sprintf("all %d volumes are bound", replicas))
		return
	}
	r.setCondition(db, ConditionStorageBound, false, "Pending",
		fmt.Sprintf("%d of %d volumes bound; waiting for %s", int(replicas)-len(unbound), replicas, strings.Join(unbound, ", ")))
}

// observeInit sets Initialized from the init Job, which stays True once
// reached, and returns what the Job's pod reported.
func (r *Reconciler) observeInit(ctx context.Context, db *Cluster, eng engine.Engine, l *live) engine.Report {
	name := namesOf(db).InitJob
	was := meta.IsStatusConditionTrue(db.Status.Conditions, ConditionInitialized)
	if !l.has("Job", name) {
		if !was {
			r.setCondition(db, ConditionInitialized, false, "WaitingForPrimary", fmt.Sprintf("init Job %s runs once the primary %s is ready", name, currentPrimary(db)))
		}
		return engine.Report{}
	}
	job := &l.job
	report, reportMsg := r.jobReport(ctx, db, job)
	switch {
	case jobFinished(job, batchv1.JobComplete):
		if !was {
			r.Kind.metrics.initJobs.WithLabelValues("succeeded").Inc()
			r.normal(db, "Initialized", "Init", "init Job %s succeeded: %s", name, appDatabase(db))
		}
		r.setCondition(db, ConditionInitialized, true, "InitJobSucceeded",
			fmt.Sprintf("init Job %s %s", name, initDid(db)))
	case was:
	case jobFinished(job, batchv1.JobFailed):
		c := jobCondition(job, batchv1.JobFailed)
		msg := fmt.Sprintf("init Job %s failed (%s: %s)", name, c.Reason, c.Message)
		if reportMsg != "" {
			msg += "; its pod said: " + truncate(reportMsg, 400)
		}
		msg += fmt.Sprintf("; is %s a %s server image? Fix spec.image and a new init Job runs", imageOf(db, eng), eng.Name())
		if c := meta.FindStatusCondition(db.Status.Conditions, ConditionInitialized); c == nil || c.Reason != "InitJobFailed" {
			r.Kind.metrics.initJobs.WithLabelValues("failed").Inc()
		}
		r.warn(db, ConditionInitialized, "InitJobFailed", msg)
		r.setCondition(db, ConditionInitialized, false, "InitJobFailed", msg)
	default:
		r.setCondition(db, ConditionInitialized, false, "InitJobRunning",
			fmt.Sprintf("init Job %s runs: it waits for the primary, then %s", name, initDoes(db)))
	}
	return report
}

// jobReport reads the termination message of the Job's newest finished
// pod: a Report when it succeeded, the raw message (often the log's last
// lines) when it failed.
func (r *Reconciler) jobReport(ctx context.Context, db *Cluster, job *batchv1.Job) (engine.Report, string) {
	var pods corev1.PodList
	if err := r.Owned.List(ctx, &pods, client.InNamespace(db.Namespace), client.MatchingLabels(selectorLabels(db, componentInit))); err != nil {
		return engine.Report{}, ""
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if !metav1.IsControlledBy(p, job) || (p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed) {
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&p.CreationTimestamp) ||
			(p.Status.Phase == corev1.PodSucceeded && newest.Status.Phase != corev1.PodSucceeded) {
			newest = p
		}
	}
	if newest == nil {
		return engine.Report{}, ""
	}
	for _, cs := range newest.Status.ContainerStatuses {
		t := cs.State.Terminated
		if t == nil || t.Message == "" {
			continue
		}
		if newest.Status.Phase == corev1.PodFailed {
			return engine.Report{}, t.Message
		}
		report, err := engine.ParseReport(t.Message)
		if err != nil {
			logf.FromContext(ctx).Info("init Job pod's termination message is not a report", "pod", newest.Name, "error", err.Error())
		}
		return report, ""
	}
	return engine.Report{}, ""
}

// observeVersion: the server's own report when it came from the image now
// running, else the image tag.
func (r *Reconciler) observeVersion(db *Cluster, eng engine.Engine, l *live, report engine.Report) {
	image := db.Status.CurrentImage
	if image == "" {
		image = imageOf(db, eng)
	}
	if _, tagged := eng.VersionFromImage(image); !tagged && db.Kind.RequirePinnedImage {
		r.reportUnpinned(db, eng, l, report, image)
		return
	}
	if v := report.Version(); v != "" && jobImage(&l.job) == image {
		db.Status.CurrentVersion = v
		r.setCondition(db, ConditionVersionKnown, true, "ReportedByServer", fmt.Sprintf("the server reports version %s", report.ServerVersion))
		return
	}
	if v, ok := eng.VersionFromImage(image); ok {
		db.Status.CurrentVersion = v
		r.setCondition(db, ConditionVersionKnown, true, "FromImageTag", fmt.Sprintf("version %s, read from the tag of image %s", v, image))
		return
	}
	db.Status.CurrentVersion = ""
	msg := fmt.Sprintf("image %s has no version in its tag and no server has reported one; version-aware upgrades need an image tagged with its version, such as %s", image, eng.DefaultImage())
	r.warn(db, ConditionVersionKnown, "VersionUnreadable", msg)
	r.setCondition(db, ConditionVersionKnown, false, "VersionUnreadable", msg)
}

// reportUnpinned: an image whose tag names no version (mysql:latest) runs
// whatever the registry has when a pod restarts, so no version is known
// for good even when a server reported one; VersionKnown stays False and a
// Warning says so once.
func (r *Reconciler) reportUnpinned(db *Cluster, eng engine.Engine, l *live, report engine.Report, image string) {
	db.Status.CurrentVersion = ""
	msg := fmt.Sprintf("image %s is not pinned: its tag names no version, so a restart may run another version and no upgrade can be checked; use an image tagged with its version, such as %s", image, eng.DefaultImage())
	if v := report.Version(); v != "" && jobImage(&l.job) == image {
		db.Status.CurrentVersion = v
		msg += fmt.Sprintf(" (the server reported %s when the init Job ran)", report.ServerVersion)
	}
	r.warn(db, ConditionVersionKnown, "ImageNotPinned", msg)
	r.setCondition(db, ConditionVersionKnown, false, "ImageNotPinned", msg)
}

// publishMetrics updates the per-cluster gauges.
func (k *Kind) publishMetrics(db *Cluster) {
	k.metrics.readyReplicas.WithLabelValues(db.Namespace, db.Name).Set(float64(db.Status.ReadyReplicas))
	v := 0.0
	if meta.IsStatusConditionTrue(db.Status.Conditions, ConditionReady) {
		v = 1
	}
	k.metrics.ready.WithLabelValues(db.Namespace, db.Name).Set(v)
}

func (k *Kind) forgetMetrics(namespace, name string) {
	k.metrics.readyReplicas.DeleteLabelValues(namespace, name)
	k.metrics.ready.DeleteLabelValues(namespace, name)
	k.metrics.lastBackupSuccess.DeleteLabelValues(namespace, name)
	k.metrics.nextScheduledBackup.DeleteLabelValues(namespace, name)
	k.metrics.lastVerifiedBackup.DeleteLabelValues(namespace, name)
	k.metrics.verifiedStale.DeleteLabelValues(namespace, name)
	k.metrics.failoverPending.DeleteLabelValues(namespace, name)
	k.metrics.certificateExpiry.DeleteLabelValues(namespace, name)
	forgetArchivingMetrics(namespace, name)
}
