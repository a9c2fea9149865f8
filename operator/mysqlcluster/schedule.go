package mysqlcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	grtlv1 "github.com/deckhand-dev/deckhand/operator/apis/grtl/v1"
	"github.com/deckhand-dev/deckhand/operator/database"
	"github.com/deckhand-dev/deckhand/operator/status"
)

// Schedule conditions and labels.
const (
	// ConditionBackupScheduled says when the next backup is, or why none
	// will be taken.
	ConditionBackupScheduled = "BackupScheduled"
	// ConditionLastBackupSucceeded is about the newest finished backup of
	// the schedule.
	ConditionLastBackupSucceeded = "LastBackupSucceeded"
	// LabelSchedule on a MySQLBackupInstance names the schedule that made
	// it.
	LabelSchedule = "cr.mysqloperator.grtl.github.com/schedule"
)

// recheckCluster is how often a schedule whose cluster is missing looks
// again.
const recheckCluster = 30 * time.Second

// ScheduleReconciler runs MySQLBackupSchedules: at each cron time it makes
// a MySQLBackupInstance (the core's backup controller runs it, one at a
// time per cluster), one for any number of missed times, and applies the
// schedule's retention to the instances it made.
type ScheduleReconciler struct {
	Client   client.Client
	Core     *database.Reconciler
	Recorder events.EventRecorder
	// Now is the clock (tests may set one).
	Now func() time.Time
}

func (s *ScheduleReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name+"-schedule").
		For(&grtlv1.MySQLBackupSchedule{}).
		Watches(&grtlv1.MySQLBackupInstance{}, handler.EnqueueRequestsFromMapFunc(scheduleOfInstance)).
		Complete(s)
}

// scheduleOfInstance maps an instance to the schedule that made it.
func scheduleOfInstance(_ context.Context, o client.Object) []reconcile.Request {
	b, ok := o.(*grtlv1.MySQLBackupInstance)
	if !ok || b.Spec.Schedule == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Schedule}}}
}

func (s *ScheduleReconciler) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Reconcile runs one schedule.
func (s *ScheduleReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sched grtlv1.MySQLBackupSchedule
	if err := s.Client.Get(ctx, req.NamespacedName, &sched); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !sched.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := sched.DeepCopy()
	result, err := s.run(ctx, &sched)
	sched.Status.ObservedGeneration = sched.Generation
	return status.Outcome(ctx, result, err, status.PatchLocked(ctx, s.Client, before, &sched))
}

func (s *ScheduleReconciler) run(ctx context.Context, sched *grtlv1.MySQLBackupSchedule) (ctrl.Result, error) {
	var mc grtlv1.MySQLCluster
	err := s.Client.Get(ctx, client.ObjectKey{Namespace: sched.Namespace, Name: sched.Spec.Cluster}, &mc)
	if apierrors.IsNotFound(err) {
		s.notScheduled(sched, "ClusterNotFound", fmt.Sprintf("MySQLCluster %s does not exist in namespace %s: no backup is taken until it does", sched.Spec.Cluster, sched.Namespace))
		return ctrl.Result{RequeueAfter: recheckCluster}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if !mc.DeletionTimestamp.IsZero() {
		s.notScheduled(sched, "ClusterDeleting", fmt.Sprintf("MySQLCluster %s is being deleted: its final backup is the last one", mc.Name))
		return ctrl.Result{}, nil
	}
	now := s.now()
	last := sched.CreationTimestamp.Time
	if sched.Status.LastScheduleTime != nil {
		last = sched.Status.LastScheduleTime.Time
	}
	backups, err := s.instancesOf(ctx, sched)
	if err != nil {
		return ctrl.Result{}, err
	}
	waiting := database.Unfinished(views(backups))
	if made := database.LastMade(last, sched.Name, waiting); made.After(last) {
		last = made
		sched.Status.LastScheduleTime = &metav1.Time{Time: made}
	}
	due, isDue, times, next, err := database.NextBackup(sched.Spec.Time, last, now)
	if err != nil {
		s.notScheduled(sched, "InvalidSchedule", fmt.Sprintf("time %q is not a schedule: %v", sched.Spec.Time, err))
		return ctrl.Result{}, nil
	}
	if isDue {
		// due is after the waiting instance's own time (LastMade), so an
		// instance waiting stands for it.
		if waiting != "" {
			s.missSchedule(sched, waiting, due, times)
		} else if err := s.createInstance(ctx, sched, due); err != nil {
			return ctrl.Result{}, err
		}
		sched.Status.LastScheduleTime = &metav1.Time{Time: due}
	}
	sched.Status.NextScheduleTime = &metav1.Time{Time: next}
	msg := fmt.Sprintf("next backup of MySQLCluster %s at %s (time %q, UTC)", mc.Name, next.UTC().Format(time.RFC3339), sched.Spec.Time)
	if waiting != "" && sched.Status.MissedSchedules > 0 {
		msg += fmt.Sprintf("; MySQLBackupInstance %s has not finished yet, so times pass without a new backup (%d missed so far, status.missedSchedules)", waiting, sched.Status.MissedSchedules)
	}
	status.SetCondition(&sched.Status.Conditions, sched.Generation, ConditionBackupScheduled, true, "Scheduled", msg)
	s.observe(sched, backups)
	if err := s.applyRetention(ctx, sched, &mc, backups); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: next.Sub(now)}, nil
}

func (s *ScheduleReconciler) notScheduled(sched *grtlv1.MySQLBackupSchedule, reason, msg string) {
	if c := meta.FindStatusCondition(sched.Status.Conditions, ConditionBackupScheduled); c == nil || c.Reason != reason {
		s.Recorder.Eventf(sched, nil, corev1.EventTypeWarning, reason, "Schedule", "%s", msg)
	}
	sched.Status.NextScheduleTime = nil
	status.SetCondition(&sched.Status.Conditions, sched.Generation, ConditionBackupScheduled, false, reason, msg)
}

// instanceName is the same for one schedule time, so a reconcile that runs
// twice makes one backup.
func instanceName(sched *grtlv1.MySQLBackupSchedule, at time.Time) string {
	return database.ScheduledName(sched.Name, at)
}

func (s *ScheduleReconciler) createInstance(ctx context.Context, sched *grtlv1.MySQLBackupSchedule, due time.Time) error {
	b := &grtlv1.MySQLBackupInstance{
		ObjectMeta: metav1.ObjectMeta{Name: instanceName(sched, due), Namespace: sched.Namespace, Labels: map[string]string{
			Keys.Cluster: sched.Spec.Cluster, Keys.BackupReason: "scheduled", LabelSchedule: sched.Name,
		}},
		Spec: grtlv1.MySQLBackupInstanceSpec{Cluster: sched.Spec.Cluster, Schedule: sched.Name},
	}
	err := s.Client.Create(ctx, b)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating MySQLBackupInstance %s: %w", b.Name, err)
	}
	s.Recorder.Eventf(sched, nil, corev1.EventTypeNormal, "BackupScheduled", "Schedule",
		"MySQLBackupInstance %s created for the schedule time %s", b.Name, due.UTC().Format(time.RFC3339))
	return nil
}

// instancesOf are the instances the schedule made for its cluster.
func (s *ScheduleReconciler) instancesOf(ctx context.Context, sched *grtlv1.MySQLBackupSchedule) ([]*grtlv1.MySQLBackupInstance, error) {
	var list grtlv1.MySQLBackupInstanceList
	if err := s.Client.List(ctx, &list, client.InNamespace(sched.Namespace)); err != nil {
		return nil, err
	}
	var out []*grtlv1.MySQLBackupInstance
	for i := range list.Items {
		b := &list.Items[i]
		if b.Spec.Schedule == sched.Name && b.Spec.Cluster == sched.Spec.Cluster {
			out = append(out, b)
		}
	}
	return out, nil
}

// observe records the newest completed backup and whether the newest
// finished one succeeded.
func (s *ScheduleReconciler) observe(sched *grtlv1.MySQLBackupSchedule, backups []*grtlv1.MySQLBackupInstance) {
	var last, lastOK *grtlv1.MySQLBackupInstance
	for _, b := range backups {
		if b.Status.CompletionTime == nil {
			continue
		}
		if last == nil || last.Status.CompletionTime.Before(b.Status.CompletionTime) {
			last = b
		}
		if b.Status.Phase == grtlv1.BackupCompleted && (lastOK == nil || lastOK.Status.CompletionTime.Before(b.Status.CompletionTime)) {
			lastOK = b
		}
	}
	if lastOK != nil {
		sched.Status.LastSuccessfulBackup = lastOK.Name
	}
	if last == nil {
		return
	}
	if last.Status.Phase == grtlv1.BackupCompleted {
		status.SetCondition(&sched.Status.Conditions, sched.Generation, ConditionLastBackupSucceeded, true, "BackupCompleted",
			fmt.Sprintf("MySQLBackupInstance %s completed at %s (%d bytes)", last.Name, last.Status.CompletionTime.UTC().Format(time.RFC3339), last.Status.Size))
		return
	}
	why := ""
	if c := meta.FindStatusCondition(last.Status.Conditions, "Completed"); c != nil {
		why = ": " + c.Message
	}
	msg := fmt.Sprintf("MySQLBackupInstance %s failed%s", last.Name, why)
	if c := meta.FindStatusCondition(sched.Status.Conditions, ConditionLastBackupSucceeded); c == nil || c.Status != metav1.ConditionFalse || c.Message != msg {
		s.Recorder.Eventf(sched, nil, corev1.EventTypeWarning, "BackupFailed", "Schedule", "%s", msg)
	}
	status.SetCondition(&sched.Status.Conditions, sched.Generation, ConditionLastBackupSucceeded, false, "BackupFailed", msg)
}

// applyRetention deletes the schedule's instances its retention no longer
// keeps (the core's rules: the newest completed one and any a restore
// uses are kept); each instance's finalizer deletes its file.
func (s *ScheduleReconciler) applyRetention(ctx context.Context, sched *grtlv1.MySQLBackupSchedule, mc *grtlv1.MySQLCluster, instances []*grtlv1.MySQLBackupInstance) error {
	r := sched.Spec.Retention
	if r == nil {
		return nil
	}
	keep, maxAge := int32(0), time.Duration(0)
	if r.KeepLast != nil {
		keep = *r.KeepLast
	}
	if r.MaxAge != nil {
		maxAge = r.MaxAge.Duration
	}
	return s.Core.Prune(ctx, Kind.Clusters.View(mc), views(instances), keep, maxAge)
}

// views are the core's views of instances.
func views(instances []*grtlv1.MySQLBackupInstance) []*database.Backup {
	out := make([]*database.Backup, len(instances))
	for i, b := range instances {
		out[i] = Kind.Backups.View(b)
	}
	return out
}

// missSchedule counts times that pass while the schedule's previous
// instance has not finished, and says so: they are not queued.
func (s *ScheduleReconciler) missSchedule(sched *grtlv1.MySQLBackupSchedule, waiting string, due time.Time, times int64) {
	sched.Status.MissedSchedules += max(times, 1)
	s.Recorder.Eventf(sched, nil, corev1.EventTypeWarning, "BackupScheduleMissed", "Schedule",
		"no MySQLBackupInstance for the time %s: MySQLBackupInstance %s has not finished, and it stands for this time too (%d times missed so far)",
		due.UTC().Format(time.RFC3339), waiting, sched.Status.MissedSchedules)
}
