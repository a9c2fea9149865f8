package pooler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/deckhand-dev/deckhand/operator/apis/imaginedata/v1"
	"github.com/deckhand-dev/deckhand/operator/database/pooler/pgbouncer"
	"github.com/deckhand-dev/deckhand/operator/database/servertls"
)

// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list
// +kubebuilder:rbac:groups="",resources=pods,verbs=list

// Pausing around a switchover. Before the Database controller stops the
// old primary, it pauses every transaction-mode rw Pooler of the Database
// on PgBouncer's admin console (PAUSE: the transactions in flight finish,
// the server connections close, new queries wait in PgBouncer). The
// Pooler controller resumes each one (RESUME) once the switchover has
// ended and the -rw Service's endpoints are the new primary, so a client
// waits for the switchover instead of failing. The operator logs in to
// the console as the pooler's own role (PgBouncer's one admin user), with
// the password it generated, over TLS verified against the pooler's CA.
// A session-mode pooler is not paused: its clients hold their server
// connections for their whole session, and PAUSE would wait for them to
// leave.

// Bounds of the console's commands: a transaction longer than pauseWait
// is not waited for (the switchover goes on; PgBouncer finishes pausing
// by itself). A pause that no switchover followed is lifted after
// unusedPause.
const (
	pauseWait   = 5 * time.Second
	unusedPause = 30 * time.Second
)

// Console sends PgBouncer's admin commands to the pods of Poolers.
type Console struct {
	// Client writes the Poolers' status.
	Client client.Client
	// API reads pods, Secrets and EndpointSlices uncached.
	API      client.Reader
	Recorder events.EventRecorder
	// Dial connects to a pod (nil: the network's).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Now is the clock of the pause records (nil: time.Now).
	Now func() time.Time
}

func (c Console) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

// PauseFor pauses the Poolers of Database db that clients would see fail
// during a switchover (rw, transaction mode), records the pause on each
// and says so in an Event. It is best effort: a pod that cannot be paused
// in time is named in the error, and the switchover goes on.
func (c Console) PauseFor(ctx context.Context, namespace, db, why string) error {
	var list dbv1.PoolerList
	if err := c.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.Database != db || typeOf(p) != dbv1.PoolerReadWrite || poolModeOf(p) != dbv1.PoolModeTransaction {
			continue
		}
		start := c.now()
		// Recorded first: a pause is only ever sent when the Pooler
		// controller will find it and lift it.
		if err := c.recordPause(ctx, p, &dbv1.PoolerPause{Since: metav1.NewTime(start), Reason: why}); err != nil {
			errs = append(errs, fmt.Errorf("pooler %s: recording the pause: %w", p.Name, err))
			continue
		}
		err := c.onEveryPod(ctx, p, "PAUSE", pauseWait)
		took := c.now().Sub(start)
		if err != nil {
			c.Recorder.Eventf(p, nil, corev1.EventTypeWarning, "PauseIncomplete", "Pause",
				"%s: not every PgBouncer pod finished its transactions within %s (clients of those may see errors): %v", why, pauseWait, err)
			errs = append(errs, fmt.Errorf("pooler %s: %w", p.Name, err))
			continue
		}
		c.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "Paused", "Pause",
			"%s: PgBouncer paused (transactions in flight finished in %.1f s); new queries wait until the switchover ends", why, took.Seconds())
	}
	return errors.Join(errs...)
}

// recordPause writes the pause into the Pooler's status with a merge
// patch: the Pooler controller may have written the status meanwhile.
func (c Console) recordPause(ctx context.Context, p *dbv1.Pooler, pause *dbv1.PoolerPause) error {
	before := p.DeepCopy()
	p.Status.Paused = pause
	return c.Client.Status().Patch(ctx, p, client.MergeFrom(before))
}

// resumeIfDone resumes a paused Pooler once what it was paused for is
// over: the switchover that began after the pause has ended and the
// Database's -rw Service sends clients to the current primary, or no
// switchover began within unusedPause. It returns how soon to look again
// while the Pooler stays paused.
func (c Console) resumeIfDone(ctx context.Context, p *dbv1.Pooler, db *dbv1.Database, rwService string) (time.Duration, error) {
	pause := p.Status.Paused
	if pause == nil {
		return 0, nil
	}
	servesPrimary := func() bool { return c.servesPrimary(ctx, db, rwService) }
	if again := stillPaused(pause, db, servesPrimary, c.now()); again > 0 {
		return again, nil
	}
	if err := c.onEveryPod(ctx, p, "RESUME", pauseWait); err != nil {
		return time.Second, err
	}
	c.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "Resumed", "Pause",
		"PgBouncer resumed after %.1f s paused (%s)", c.now().Sub(pause.Since.Time).Seconds(), pause.Reason)
	p.Status.Paused = nil
	return 0, nil
}

// stillPaused is how soon to look again when the pause must last, 0 when
// it may end: the switchover it was for has ended (completed, with the
// -rw Service at the new primary or unusedPause after the promotion; or
// aborted), or none began within unusedPause.
func stillPaused(pause *dbv1.PoolerPause, db *dbv1.Database, servesPrimary func() bool, now time.Time) time.Duration {
	rec := switchoverSince(db, pause.Since.Time)
	switch {
	case rec == nil && now.Sub(pause.Since.Time) < unusedPause:
		return time.Second // the switchover has not been recorded yet
	case rec != nil && rec.Finished == nil:
		return time.Second // under way
	case rec != nil && rec.Phase == dbv1.FailoverCompleted && now.Sub(rec.Finished.Time) < unusedPause && !servesPrimary():
		return 500 * time.Millisecond // the Service does not send clients to the new primary yet
	}
	return 0
}

// switchoverSince is the Database's last failover record when it is a
// switchover that began at or after since (less a second: the pause and
// the record's clock are the operator's, but a second apart at most).
func switchoverSince(db *dbv1.Database, since time.Time) *dbv1.FailoverRecord {
	n := len(db.Status.Failovers)
	if n == 0 {
		return nil
	}
	rec := &db.Status.Failovers[n-1]
	if rec.Kind != dbv1.KindSwitchover || rec.Started.Time.Before(since.Add(-time.Second)) {
		return nil
	}
	return rec
}

// servesPrimary: the -rw Service's EndpointSlices list the Database's
// current primary, ready, and no other pod: kube-proxy sends PgBouncer's
// next connection there.
func (c Console) servesPrimary(ctx context.Context, db *dbv1.Database, rwService string) bool {
	var slices discoveryv1.EndpointSliceList
	if err := c.API.List(ctx, &slices, client.InNamespace(db.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: rwService}); err != nil {
		return true // nothing better to wait for
	}
	ready := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			if e.TargetRef == nil || e.TargetRef.Name != db.Status.CurrentPrimary {
				return false
			}
			ready++
		}
	}
	return ready > 0
}

// onEveryPod sends an admin command to every running PgBouncer pod of the
// Pooler at once, each within timeout.
func (c Console) onEveryPod(ctx context.Context, p *dbv1.Pooler, command string, timeout time.Duration) error {
	var pods corev1.PodList
	if err := c.API.List(ctx, &pods, client.InNamespace(p.Namespace), client.MatchingLabels(selectorOf(p))); err != nil {
		return err
	}
	cfg, err := c.consoleConfig(ctx, p)
	if err != nil {
		return err
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, pod := range pods.Items {
		if pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.send(ctx, cfg, pod.Status.PodIP, command, timeout); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s on %s: %w", command, pod.Name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// consoleConfig is how the operator logs in to a Pooler's admin console:
// as its role, with its password, verifying its certificate for the
// Service's name.
func (c Console) consoleConfig(ctx context.Context, p *dbv1.Pooler) (*pgx.ConnConfig, error) {
	var auth, tlsSecret corev1.Secret
	n := namesOf(p)
	if err := c.API.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: n.Auth}, &auth); err != nil {
		return nil, err
	}
	if err := c.API.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: n.TLS}, &tlsSecret); err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(tlsSecret.Data[servertls.BundleKey]) {
		return nil, fmt.Errorf("secret %s holds no CA certificate", n.TLS)
	}
	// Only the fields set here: no PG* variable of the operator's
	// environment may change where it logs in.
	cfg, err := pgx.ParseConfig("host=127.0.0.1 dbname=pgbouncer sslmode=disable")
	if err != nil {
		return nil, err
	}
	cfg.Port = pgbouncer.Port
	cfg.User = Role(p)
	cfg.Password = string(auth.Data[authPasswordKey])
	cfg.TLSConfig = &tls.Config{RootCAs: roots, ServerName: n.Service + "." + p.Namespace + ".svc", MinVersion: tls.VersionTLS12}
	cfg.ConnectTimeout = 3 * time.Second
	// The console speaks the simple query protocol only.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	if c.Dial != nil {
		cfg.DialFunc = c.Dial
	}
	return cfg, nil
}

func (c Console) send(ctx context.Context, cfg *pgx.ConnConfig, ip, command string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	podCfg := cfg.Copy()
	podCfg.Host = ip
	conn, err := pgx.ConnectConfig(ctx, podCfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, command)
	if alreadyDone(command, err) {
		return nil
	}
	return err
}

// alreadyDone: PgBouncer refuses a PAUSE when it is paused already, and a
// RESUME when it is not paused (restarted since, or resumed by an earlier
// pass); either is what was wanted.
func alreadyDone(command string, err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return (command == "PAUSE" && strings.Contains(msg, "already")) || (command == "RESUME" && strings.Contains(msg, "not paused"))
}
