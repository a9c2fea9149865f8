package database

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/engine"
)

// A standby's first clone (pg_basebackup) copies the whole primary and
// cannot resume: on a large primary it is what a user waits on for hours.
// Its server container logs the clone's progress (engine.CloneReporter);
// while a standby is not ready, the operator reads the end of its log and
// shows the clone in status.clones, in the Ready condition, and in Events
// (CloneStarted, CloneProgress at each tenth copied, CloneFinished). The
// log is read only for standbys that run and are not ready, and a clone
// is looked at again every cloneRecheck, since nothing about the pod
// changes while it copies.

// cloneRecheck is how often a Database with a clone under way looks again.
const cloneRecheck = 15 * time.Second

// cloneLogLines is how much of a standby's log is read: the clone logs a
// progress line every 30 s and nothing else while it copies.
const cloneLogLines = 40

// cloneLogWait bounds a read of a standby's log. The API server asks the
// pod's kubelet for it, and a node that does not answer held the read,
// the reconcile and the failover watch with it, for minutes on the real
// node's second node. A pod on a node marked as not answering is not
// asked at all.
const cloneLogWait = 2 * time.Second

// PodLogs reads the end of a container's log.
type PodLogs interface {
	Tail(ctx context.Context, namespace, pod, container string, lines int64) (string, error)
}

// apiPodLogs reads logs through the API server (pods/log), as kubectl
// logs does.
type apiPodLogs struct{ clientset kubernetes.Interface }

func (a apiPodLogs) Tail(ctx context.Context, namespace, pod, container string, lines int64) (string, error) {
	b, err := a.clientset.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{
		Container: container, TailLines: ptr.To(lines), LimitBytes: ptr.To(int64(64 << 10)),
	}).DoRaw(ctx)
	return string(b), err
}

// observeClones fills status.clones from the logs of the standbys that
// run and are not ready, and tells of each clone's start, progress and
// end in Events. A log that cannot be read keeps what the status said.
func (r *Reconciler) observeClones(ctx context.Context, db *Cluster, eng engine.Engine, pods map[string]*corev1.Pod) {
	reporter, ok := eng.(engine.CloneReporter)
	if !ok || r.Logs == nil {
		db.Status.Clones = nil
		return
	}
	before := db.Status.Clones
	var now []dbv1.StandbyClone
	for _, p := range standbysStarting(db, pods) {
		var log string
		err := errNodeLost
		if !r.onLostNode(ctx, p) {
			readCtx, cancel := context.WithTimeout(ctx, cloneLogWait)
			log, err = r.Logs.Tail(readCtx, p.Namespace, p.Name, p.Spec.Containers[0].Name, cloneLogLines)
			cancel()
		}
		if err != nil {
			logf.FromContext(ctx).Info("cannot read a standby's log for its clone's progress", "pod", p.Name, "error", err.Error())
			if old := findClone(before, p.Name); old != nil {
				now = append(now, *old)
			}
			continue
		}
		if progress, cloning := reporter.CloneProgress(log); cloning {
			now = append(now, standbyClone(p.Name, progress))
		}
	}
	slices.SortFunc(now, func(a, b dbv1.StandbyClone) int { return strings.Compare(a.Pod, b.Pod) })
	r.announceClones(db, before, now)
	db.Status.Clones = now
}

// errNodeLost: a log not read, its pod's node marked as not answering.
var errNodeLost = errors.New("its node does not answer")

// standbysStarting are the standby pods whose server container runs and
// is not ready: cloning, catching up, or stopped streaming.
func standbysStarting(db *Cluster, pods map[string]*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for name, p := range pods {
		if name == primaryName(db) || !p.DeletionTimestamp.IsZero() || podReady(p) || len(p.Spec.Containers) == 0 {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == p.Spec.Containers[0].Name && cs.State.Running != nil {
				out = append(out, p)
			}
		}
	}
	return out
}

func standbyClone(pod string, p engine.CloneProgress) dbv1.StandbyClone {
	c := dbv1.StandbyClone{Pod: pod, CopiedBytes: p.CopiedBytes, TotalBytes: p.TotalBytes}
	if !p.At.IsZero() {
		c.LastProgressTime = &metav1.Time{Time: p.At}
	}
	return c
}

func findClone(clones []dbv1.StandbyClone, pod string) *dbv1.StandbyClone {
	for i := range clones {
		if clones[i].Pod == pod {
			return &clones[i]
		}
	}
	return nil
}

// announceClones: an Event when a clone starts, at each tenth of it
// copied, and when it ends.
func (r *Reconciler) announceClones(db *Cluster, before, now []dbv1.StandbyClone) {
	for _, c := range now {
		old := findClone(before, c.Pod)
		switch {
		case old == nil:
			r.normal(db, "CloneStarted", "Clone", "standby %s started cloning the primary %s (%s); it is not restarted while it copies", c.Pod, primaryName(db), cloneProgress(c))
		case tenths(c) > tenths(*old):
			r.normal(db, "CloneProgress", "Clone", "standby %s is cloning the primary: %s", c.Pod, cloneProgress(c))
		}
	}
	for _, old := range before {
		if findClone(now, old.Pod) == nil {
			r.normal(db, "CloneFinished", "Clone", "standby %s no longer clones the primary (last seen: %s): it starts and catches up, or its log says why it stopped", old.Pod, cloneProgress(old))
		}
	}
}

func tenths(c dbv1.StandbyClone) int64 {
	if c.TotalBytes <= 0 {
		return 0
	}
	return min(c.CopiedBytes*10/c.TotalBytes, 10)
}

// cloneProgress says how far a clone has got, for messages.
func cloneProgress(c dbv1.StandbyClone) string {
	if c.TotalBytes <= 0 {
		return "no progress reported yet"
	}
	msg := fmt.Sprintf("%s of %s copied (%d%%)", bytesOf(c.CopiedBytes), bytesOf(c.TotalBytes), min(c.CopiedBytes*100/c.TotalBytes, 100))
	if c.LastProgressTime != nil {
		msg += " at " + c.LastProgressTime.UTC().Format(time.RFC3339)
	}
	return msg
}

// bytesOf is n in binary units with one decimal where it matters
// (1.0 GiB, 256 MiB).
func bytesOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	suffix := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}[exp]
	if v >= 100 {
		return fmt.Sprintf("%.0f %s", v, suffix)
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}

// cloneMessages are the Ready condition's words for the clones under way.
func cloneMessages(db *Cluster) []string {
	var out []string
	for _, c := range db.Status.Clones {
		out = append(out, fmt.Sprintf("standby %s is cloning the primary: %s", c.Pod, cloneProgress(c)))
	}
	return out
}

// notCloning are the pods whose clone is not under way.
func notCloning(db *Cluster, pods []string) []string {
	var out []string
	for _, p := range pods {
		if findClone(db.Status.Clones, p) == nil {
			out = append(out, p)
		}
	}
	return out
}

// primaryName is the primary's pod (status.primary, filled before the
// clones are looked at).
func primaryName(db *Cluster) string {
	if db.Status.Primary != "" {
		return db.Status.Primary
	}
	return podName(db, 0)
}
