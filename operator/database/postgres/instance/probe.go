package instance

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The server's readiness, asked by the kubelet over plain HTTP on
// DefaultProbePort: GET ReadyPath runs the server container's readiness
// command (probe.sh ready) here, in the agent's container, and answers
// 200 when it passes, 503 with its output when it fails. An exec probe
// costs the node a runc exec, a shim's work and a process tree in the
// server's container every period; a request to the agent costs a fork
// of the same script. The liveness and startup probes stay exec probes:
// through the agent, a stopped agent would restart a healthy server.
const (
	DefaultProbePort = 8011
	ReadyPath        = "/ready"
)

// Readiness runs a readiness command for the kubelet's HTTP probe.
type Readiness struct {
	// Command is the server container's readiness probe command.
	Command []string
	// Env is added to the agent's environment for the command.
	Env []string
	// Timeout bounds one run (a little less than the probe's own
	// timeout, so the kubelet gets the answer); the whole process
	// group is killed past it.
	Timeout time.Duration
	Log     *slog.Logger

	// one run at a time: the kubelet does not overlap its probes, and a
	// retry after its timeout waits for the run it gave up on.
	run sync.Mutex
	// said is the last outcome logged: a change is logged once, not
	// every period.
	said string
}

// maxOutput bounds what a run's output may take in an answer or a log.
const maxOutput = 2048

func (p *Readiness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out, err := p.check(r.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(out))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// check runs the command once and logs what changed: a readiness that
// fails, fails for another reason, or passes again, and any output of a
// run that passed (probe.sh says there what it changed, such as a
// reload for a renewed certificate).
func (p *Readiness) check(ctx context.Context) (string, error) {
	p.run.Lock()
	defer p.run.Unlock()
	out, err := p.runCommand(ctx)
	switch {
	case err != nil:
		if why := failure(out, err); why != p.said {
			p.Log.Warn("the server is not ready", "reason", why)
			p.said = why
		}
		return out, err
	case p.said != "":
		p.Log.Info("the server is ready again")
		p.said = ""
	}
	if s := strings.TrimSpace(out); s != "" {
		p.Log.Info("readiness check", "output", s)
	}
	return out, nil
}

// failure is what a failed run says: its output, or how it ended.
func failure(out string, err error) string {
	if s := strings.TrimSpace(out); s != "" {
		return s
	}
	return err.Error()
}

// runCommand runs the command in a process group of its own, bounded by
// Timeout and by ctx (the kubelet gone), and returns its output.
func (p *Readiness) runCommand(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.Command[0], p.Command[1:]...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The script's children (psql) go with it: a psql left behind would
	// hold a backend until it noticed.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil && err != nil {
		err = errors.New("the readiness check did not end within " + p.Timeout.String())
	}
	s := out.String()
	if len(s) > maxOutput {
		s = s[len(s)-maxOutput:]
	}
	return s, err
}

// ServeProbes answers the kubelet on l until ctx ends.
func ServeProbes(ctx context.Context, l net.Listener, p *Readiness, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+ReadyPath, p)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      p.Timeout + 5*time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go shutdownWhenDone(ctx, srv)
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// shutdownWhenDone shuts srv down once ctx ends, giving its requests 5 s
// to finish.
func shutdownWhenDone(ctx context.Context, srv *http.Server) {
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
}
