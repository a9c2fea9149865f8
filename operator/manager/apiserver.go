package manager

import (
	"context"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// apiServerPoll is how often the operator asks whether the API server is
// ready while it waits to start; apiServerAsk bounds one question.
const (
	apiServerPoll = 500 * time.Millisecond
	apiServerAsk  = 2 * time.Second
)

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
			log.Info("waiting for the API server to be ready before starting", "host", rc.Host, "status", code, "error", errString(err))
			lastLog = time.Now()
		}
		return false, nil
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
