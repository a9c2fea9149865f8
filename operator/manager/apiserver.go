package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/deckhand-dev/deckhand/operator/registration"
)

// apiServerPoll is how often the operator asks whether the API server is
// ready while it waits to start; apiServerAsk bounds one question;
// buildRetryFor is how long building the manager is tried again when it
// fails on an API server that said it was ready.
const (
	apiServerPoll = 500 * time.Millisecond
	apiServerAsk  = 2 * time.Second
	buildRetryFor = 30 * time.Second
)

// errCreatingManager marks New's failure to create the manager, which asks
// the API server (discovery), as opposed to a configuration New refuses.
var errCreatingManager = errors.New("creating manager")

// newWhenAPIServerServes builds the manager once the API server serves:
// it waits for /readyz, and tries again, for up to buildRetryFor, when
// creating the manager still fails (a restarted API server may say it is
// ready a moment before every group's discovery answers). While it waits
// it answers the kubelet's liveness probe (answerLivenessWhileWaiting).
func newWhenAPIServerServes(ctx context.Context, cfg Config, rc *rest.Config) (ctrl.Manager, []registration.Controller, error) {
	giveUp := time.Now().Add(buildRetryFor)
	for {
		stop := answerLivenessWhileWaiting(cfg.HealthProbeBindAddress)
		err := waitForAPIServer(ctx, rc)
		stop() // the manager listens on the same address
		if err != nil {
			return nil, nil, err
		}
		mgr, selected, err := New(cfg, rc)
		if err == nil || !errors.Is(err, errCreatingManager) || time.Now().After(giveUp) {
			return mgr, selected, err
		}
		ctrl.Log.WithName("setup").Info("creating the manager failed although the API server said it was ready; trying again", "error", err.Error())
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// answerLivenessWhileWaiting serves the health probe address until stop:
// /healthz answers 200 and /readyz 503. A process waiting for the API
// server is alive; a liveness probe that failed meanwhile would get the
// container restarted, into one more wait, and each restart grows the
// kubelet's back-off, which holds the operator down after the API server
// is back. An address it cannot listen on is logged, not fatal.
func answerLivenessWhileWaiting(addr string) (stop func()) {
	if addr == "" || addr == "0" {
		return func() {}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		ctrl.Log.WithName("setup").Info("cannot answer health probes while waiting for the API server", "address", addr, "error", err.Error())
		return func() {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok: waiting for the API server")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "waiting for the API server", http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return func() { _ = srv.Close() }
}

// waitForAPIServer returns once the API server says it is ready
// (/readyz), or ctx ends. Building the manager needs the API server
// (discovery); without this wait, an operator that starts while the API
// server is down (its container restarted, or its process started afresh
// after the lost Lease of an outage) exits, and each exit grows the
// kubelet's back-off: after a 20 s outage the operator came back 20 s
// after the API server did, with a failover waiting on it. /readyz, not
// just an answer: a restarted API server answers before its RBAC caches
// are filled, and refuses requests it will allow a few seconds later.
// A server that will not say (401, 403, 404: /readyz is not public
// there) is taken as ready; building the manager tells the rest.
func waitForAPIServer(ctx context.Context, rc *rest.Config) error {
	ask := rest.CopyConfig(rc)
	ask.Timeout = apiServerAsk
	cs, err := kubernetes.NewForConfig(ask)
	if err != nil {
		return err
	}
	log := ctrl.Log.WithName("setup")
	began, lastLog := time.Now(), time.Time{}
	return wait.PollUntilContextCancel(ctx, apiServerPoll, true, func(ctx context.Context) (bool, error) {
		var code int
		err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code).Error()
		switch code {
		case http.StatusOK, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			if !lastLog.IsZero() {
				log.Info("the API server is ready", "waited", time.Since(began).Round(time.Millisecond).String())
			}
			return true, nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			log.Info("waiting for the API server to be ready before starting", "host", rc.Host, "status", code, "error", err)
			lastLog = time.Now()
		}
		return false, nil
	})
}
