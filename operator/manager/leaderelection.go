package manager

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The leader elector's times by default. The lease is shorter than
// controller-runtime's 15 s: a new operator pod (the old one's node lost)
// waits that long before any failover resumes, and the renew deadline
// shrinks with it (it must stay below the lease), which costs little since
// a leader that stops leading starts afresh in its process instead of
// exiting (docs/design/database-failover.md, The operator's Lease).
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultRenewDeadline = 8 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// podNameEnv holds the operator pod's name (the chart sets it from the
// downward API); empty outside a pod.
const podNameEnv = "POD_NAME"

// leaderIdentity is the holder identity the operator writes in its leader
// Lease. In a pod it is the pod's name: a container the kubelet restarts
// in the same pod (only once the previous one has exited) finds its own
// name in the Lease and takes it back at once, where a new identity would
// wait for the dead process's Lease to expire. Client-go's elector treats
// a record whose holder is its own identity as its own. Outside a pod it
// is controller-runtime's default, unique to the process: two operators on
// one host must never share an identity, or both would lead.
func leaderIdentity() (string, error) {
	if pod := os.Getenv(podNameEnv); pod != "" {
		return pod, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("leader identity: %w", err)
	}
	return host + "_" + string(uuid.NewUUID()), nil
}

// leaderElectionTimes are the configured times, the defaults for those
// left zero (a Config built in code rather than loaded).
func (c Config) leaderElectionTimes() (lease, renew, retry time.Duration) {
	lease, renew, retry = c.LeaderElectionLeaseDuration, c.LeaderElectionRenewDeadline, c.LeaderElectionRetryPeriod
	if lease == 0 {
		lease = DefaultLeaseDuration
	}
	if renew == 0 {
		renew = DefaultRenewDeadline
	}
	if retry == 0 {
		retry = DefaultRetryPeriod
	}
	return lease, renew, retry
}

// checkLeaderElectionTimes refuses what client-go's elector would refuse
// only once the manager starts, and a lease it would store wrongly: the
// Lease keeps whole seconds (leaseDurationSeconds), and the others wait
// that long, so 1.5s would be cut to 1 s while the leader renews as if
// it had 1.5 s.
func checkLeaderElectionTimes(lease, renew, retry time.Duration) error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"leader-election-lease-duration", lease},
		{"leader-election-renew-deadline", renew},
		{"leader-election-retry-period", retry},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: must be positive", d.flag, d.v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if lease%time.Second != 0 {
		errs = append(errs, fmt.Errorf("leader-election-lease-duration %s: must be whole seconds (the Lease stores leaseDurationSeconds)", lease))
	}
	if lease <= renew {
		errs = append(errs, fmt.Errorf("leader-election-lease-duration %s must be longer than leader-election-renew-deadline %s: a leader that cannot renew must stop before another may take over", lease, renew))
	}
	if renew <= time.Duration(leaderelection.JitterFactor*float64(retry)) {
		errs = append(errs, fmt.Errorf("leader-election-renew-deadline %s must be longer than %.1f × leader-election-retry-period %s (renewals come every retry period, %.0f%% later at most)",
			renew, leaderelection.JitterFactor, retry, (leaderelection.JitterFactor-1)*100))
	}
	return errors.Join(errs...)
}

// newLeaseLock is the leader Lease lock controller-runtime would make
// (leaderelection.NewResourceLock: its own clients, a request timeout of
// half the renew deadline so one hung request cannot cost the lead, and
// Events on the Lease) but held by identity. Its Events go to the
// recorder set once the manager exists.
func newLeaseLock(rc *rest.Config, namespace, name, identity string, renew time.Duration) (resourcelock.Interface, *laterRecorder, error) {
	lc := rest.AddUserAgent(rest.CopyConfig(rc), "leader-election")
	lc.Timeout = max(renew/2, time.Second)
	core, err := corev1client.NewForConfig(lc)
	if err != nil {
		return nil, nil, err
	}
	coordination, err := coordinationv1client.NewForConfig(lc)
	if err != nil {
		return nil, nil, err
	}
	events := &laterRecorder{}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, name, core, coordination,
		resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: events})
	if err != nil {
		return nil, nil, err
	}
	return lock, events, nil
}

// laterRecorder passes Events on to a recorder set after it is made: the
// lock must exist before the manager, the manager's recorders after. The
// lock records only while the manager runs, so none is dropped.
type laterRecorder struct {
	mu sync.RWMutex
	to resourcelock.EventRecorder
}

func (r *laterRecorder) set(to resourcelock.EventRecorder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.to = to
}

func (r *laterRecorder) Eventf(obj runtime.Object, eventType, reason, message string, args ...any) {
	r.mu.RLock()
	to := r.to
	r.mu.RUnlock()
	if to != nil {
		to.Eventf(obj, eventType, reason, message, args...)
	}
}
