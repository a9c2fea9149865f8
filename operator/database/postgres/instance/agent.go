// Package instance is deckhand's instance channel: a small agent that runs
// beside the server in every pod of a PostgreSQL Database with failover on
// (cmd/deckhand-instance) and answers the operator over mutual TLS, a CA
// per Database (credentials.go), each request within a bound: the
// server's role and WAL positions (GET /status), promoting a standby
// (POST /promote, its replication slots first), fencing a server
// (POST /fence: stopped cleanly and kept stopped; DELETE /fence lifts it),
// the operator's answer to an entrypoint that asks whether to start as the
// primary (POST /role), detaching and attaching a standby (/detach), the
// primary's synchronous_standby_names (POST /synchronous) and a base
// backup now, a request it leaves for the archiver sidecar (POST
// /base-backups; basebackups.go). On its own it fences a server that runs
// as a primary its pod no longer names (selffence.go) or that is cut off
// from the operator, the API server and its standbys (isolation.go). For
// the kubelet it runs the server's readiness check (probe.go). It also
// holds the Go client the operator asks it with, and the pod spec that
// adds it (pod.go).
// docs/design/database-failover.md says why it exists and how it is wired.
package instance

import (
	"bytes"
	"context"
	"crypto/tls"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/lib/pq"
)

// Default bounds of the agent's work (each request's own bound; the
// client's are a little longer, so an answer, not a timeout, comes back).
const (
	DefaultStatusTimeout  = 800 * time.Millisecond
	DefaultPromoteTimeout = 20 * time.Second
	// DefaultStopTimeout bounds the fast shutdown of a fence (its final
	// checkpoint); past it the server is stopped immediately instead.
	DefaultStopTimeout = 20 * time.Second
	// ImmediateStopWait bounds an immediate shutdown (a server that runs
	// ends one well within a second); past it every process of the
	// server is SIGKILLed.
	ImmediateStopWait = 5 * time.Second
	// FenceMarkerWait bounds the wait for the fence marker's write. A
	// disk that takes no writes, the stall a fence may be for, would hold
	// it, and the server's stop behind it, for as long as the stall
	// lasts: past the bound the server is stopped anyway, and the write
	// lands once the disk takes writes again (a server cannot start
	// before that either).
	FenceMarkerWait = 2 * time.Second
	// DefaultPort is the agent's HTTPS port in the pod.
	DefaultPort = 8010
)

// FenceMarker is the file, beside the data directory on the data volume,
// that says the server is fenced: the agent writes it before it stops the
// server, and the server's entrypoint must not start a fenced server (the
// data volume outlives the container, so the fence survives restarts).
const FenceMarker = "deckhand-fenced"

// Config is what the agent serves.
type Config struct {
	Pod string
	// SocketDir and Port reach the server over its unix socket, as User
	// (the local superuser, admitted by pg_hba.conf's "local ... trust").
	SocketDir string
	Port      int
	User      string
	// DataDir is PGDATA: pg_ctl stops the server it holds.
	DataDir string
	// PgCtl is the pg_ctl to run ("pg_ctl": the one on PATH).
	PgCtl string
	// ScriptsDir is the scripts ConfigMap as the pod mounts it (its file
	// "primary" names the primary, as the server's entrypoint reads it);
	// "": not mounted (Status.NamedPrimary stays empty).
	ScriptsDir string
	// RoleDir is where the server's entrypoint asks for its role (its
	// RoleDirEnv; role.go); "": SocketDir, as the pod mounts it.
	RoleDir string

	StatusTimeout, PromoteTimeout, StopTimeout time.Duration
	// GuardInterval is how often the agent checks that its server is not
	// a primary its pod no longer names (selffence.go; 0: the default).
	GuardInterval time.Duration
	// APIServer is the API server's address as the pod reaches it
	// (host:port; the kubelet's KUBERNETES_SERVICE_HOST and _PORT): the
	// isolation check (isolation.go) tries it before it fences. "": the
	// check is off.
	APIServer string
	// PeerSilence is how long a standby may send no reply before the
	// isolation check counts it lost (0: DefaultPeerSilence).
	PeerSilence time.Duration
	Log         *slog.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// Agent serves one instance's channel.
type Agent struct {
	cfg Config
	db  *sql.DB
	// actions serialises promote and fence: one changes the server at a
	// time.
	actions sync.Mutex
	// isolation: the operator's last question and the standbys' replies.
	isolation isolationWatch
	// flush: the primary's WAL flush position across status reads
	// (walflush.go).
	flush flushWatch
	// stall: the WAL receiver's connection across status reads, and
	// link that connection, found once (linkstall.go).
	stall stallWatch
	link  receiverLink
}

// New is an agent for cfg; it does not connect until asked.
func New(cfg Config) (*Agent, error) {
	if cfg.DataDir == "" || cfg.SocketDir == "" || cfg.Port == 0 {
		return nil, errors.New("instance agent: the data directory, the socket directory and the port are required")
	}
	if cfg.User == "" {
		cfg.User = "postgres"
	}
	if cfg.RoleDir == "" {
		cfg.RoleDir = cfg.SocketDir
	}
	if cfg.PgCtl == "" {
		cfg.PgCtl = "pg_ctl"
	}
	if cfg.StatusTimeout == 0 {
		cfg.StatusTimeout = DefaultStatusTimeout
	}
	if cfg.PromoteTimeout == 0 {
		cfg.PromoteTimeout = DefaultPromoteTimeout
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.GuardInterval == 0 {
		cfg.GuardInterval = DefaultGuardInterval
	}
	if cfg.PeerSilence == 0 {
		cfg.PeerSilence = DefaultPeerSilence
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	connector, err := pq.NewConnector(dsn(cfg))
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	// A connection or two, kept: a status a second costs no new backend.
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(time.Minute)
	return &Agent{cfg: cfg, db: db}, nil
}

func dsn(cfg Config) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable connect_timeout=2 application_name=deckhand-instance",
		quoteConninfo(cfg.SocketDir), cfg.Port, quoteConninfo(cfg.User))
}

func quoteConninfo(v string) string {
	out := []byte{'\''}
	for i := 0; i < len(v); i++ {
		if v[i] == '\'' || v[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, v[i])
	}
	return string(append(out, '\''))
}

// Close releases the agent's connections.
func (a *Agent) Close() error { return a.db.Close() }

// Handler routes the channel's endpoints.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", a.serveStatus)
	mux.HandleFunc("POST /promote", a.servePromote)
	mux.HandleFunc("POST /fence", a.serveFence)
	mux.HandleFunc("DELETE /fence", a.serveUnfence)
	mux.HandleFunc("POST /synchronous", a.serveSynchronous)
	mux.HandleFunc("POST /role", a.serveRole)
	mux.HandleFunc("POST /detach", a.serveDetach)
	mux.HandleFunc("DELETE /detach", a.serveAttach)
	mux.HandleFunc("POST /base-backups", a.serveBaseBackup)
	return mux
}

// Serve answers on l with TLS config tlsConfig until ctx ends, and guards
// the server's role meanwhile (GuardRole).
func (a *Agent) Serve(ctx context.Context, l net.Listener, tlsConfig *tls.Config) error {
	srv := &http.Server{
		Handler:           a.Handler(),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// A promote or a fence takes at most its bound, plus an answer.
		WriteTimeout: a.cfg.PromoteTimeout + a.cfg.StopTimeout + 10*time.Second,
		IdleTimeout:  2 * time.Minute,
		ErrorLog:     slog.NewLogLogger(a.cfg.Log.Handler(), slog.LevelWarn),
	}
	go a.GuardRole(ctx)
	go shutdownWhenDone(ctx, srv)
	err := srv.ServeTLS(l, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Status reads the server's state within the status bound.
func (a *Agent) Status(ctx context.Context) Status {
	return a.statusIn(ctx, a.cfg.StatusTimeout)
}

// statusIn reads the server's state, giving its query bound.
func (a *Agent) statusIn(ctx context.Context, bound time.Duration) Status {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	st, wal := a.statusWithin(ctx)
	st.WALFlushStalledSince = a.flush.observe(wal, st.Role == RolePrimary, st.Time)
	st.ReceiverStalledSeconds = a.watchReceiverLink().Seconds()
	st.Fenced, st.SelfFenced = a.fenceState()
	st.NamedPrimary = a.namedPrimary()
	st.AwaitingRole = a.roleQuestion() != ""
	st.DataDirectoryError = a.dataDirectoryError()
	st.Detached = a.detached()
	if st.Role == RolePrimary {
		st.BaseBackups = a.baseBackups()
	}
	st.DataVolume = volumeUsage(filepath.Dir(filepath.Clean(a.cfg.DataDir)))
	return st
}

// volumeUsage is the size and free space (to an unprivileged user) of the
// file system that holds dir; nil when it cannot be read.
func volumeUsage(dir string) *VolumeUsage {
	var fs syscall.Statfs_t
	if syscall.Statfs(dir, &fs) != nil {
		return nil
	}
	return &VolumeUsage{TotalBytes: int64(fs.Blocks) * fs.Bsize, FreeBytes: int64(fs.Bavail) * fs.Bsize}
}

// baseBackups reads what the archiver sidecar last found in the archive
// (BaseBackupsFile beside PGDATA); nil when it has not written it, or it
// cannot be read.
func (a *Agent) baseBackups() *BaseBackups {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Clean(a.cfg.DataDir)), BaseBackupsFile))
	if err != nil {
		return nil
	}
	var bb BaseBackups
	if json.Unmarshal(b, &bb) != nil {
		return nil
	}
	return &bb
}

// dataDirectoryError says why PGDATA cannot be read ("": it can, or it
// does not exist).
func (a *Agent) dataDirectoryError() string {
	dir, err := os.Open(a.cfg.DataDir)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err == nil {
		defer dir.Close()
		if _, err = dir.Readdirnames(1); errors.Is(err, io.EOF) {
			err = nil
		}
	}
	if err != nil {
		return "cannot read the data directory: " + err.Error()
	}
	return ""
}

// statusWithin returns when the query does or when ctx ends, whichever is
// first: a server that hangs (stopped by a signal, a full disk) must not
// hang the answer, and the driver may not notice ctx while it connects.
func (a *Agent) statusWithin(ctx context.Context) (Status, walPositions) {
	type read struct {
		st  Status
		wal walPositions
	}
	done := make(chan read, 1)
	go func() {
		st, wal := readStatus(ctx, a.db, a.cfg.Pod, a.cfg.Now())
		done <- read{st, wal}
	}()
	select {
	case r := <-done:
		return r.st, r.wal
	case <-ctx.Done():
		return Status{Pod: a.cfg.Pod, Role: RoleUnknown, Time: a.cfg.Now(), Error: describe(ctx, ctx.Err())}, walPositions{}
	}
}

// serveStatus answers the operator's question, once a second; its
// isolationAfter parameter is the isolation check's bound (isolation.go),
// its within parameter a longer bound for the server's answer
// (WithinParam).
func (a *Agent) serveStatus(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := a.statusIn(r.Context(), a.statusBound(q.Get(WithinParam)))
	after := time.Duration(-1) // not given: the last bound stands
	if v := q.Get(IsolationAfterParam); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			after = d
		}
	}
	a.isolation.noteOperator(a.cfg.Now(), after, st)
	writeJSON(w, http.StatusOK, st)
}

// WithinParam is GET /status's query parameter giving the server longer
// than the agent's status bound to answer (a Go duration, at most
// MaxStatusWithin): the operator's second look at a primary that did not
// answer in time (Client.ConfirmPrimaryStatus).
const WithinParam = "within"

// MaxStatusWithin bounds WithinParam.
const MaxStatusWithin = 10 * time.Second

// statusBound is the status bound a request asks for (within, when
// valid), never below the agent's own.
func (a *Agent) statusBound(within string) time.Duration {
	d, err := time.ParseDuration(within)
	if err != nil || d <= a.cfg.StatusTimeout {
		return a.cfg.StatusTimeout
	}
	return min(d, MaxStatusWithin)
}

// ActionResult is the answer of POST /promote and POST /fence.
type ActionResult struct {
	// Done says what happened: "promoted", "fenced", "unfenced"; empty on
	// a refusal or an error.
	Done  string `json:"done,omitempty"`
	Error string `json:"error,omitempty"`
	// CleanShutdown (a fence): the server stopped with a shutdown
	// checkpoint (pg_rewind's precondition); false when it did not answer
	// or the fast shutdown did not end within its bound, and it was
	// stopped at once. For a server found stopped, what its control file
	// says.
	CleanShutdown bool `json:"cleanShutdown,omitempty"`
	// Killed (a fence): not even an immediate shutdown ended the server
	// within ImmediateStopWait (it is hung: frozen, or stuck on its
	// storage), so every process of it was sent SIGKILL. Each is gone or
	// dies the moment it runs again, before it answers a client. A fence
	// again finds such a server stopped, and says Killed while its
	// processes have not died yet.
	Killed bool `json:"killed,omitempty"`
	// MarkerPending (a fence): the fence marker's write had not ended
	// within FenceMarkerWait (the disk takes no writes); it lands when
	// the disk does.
	MarkerPending bool `json:"markerPending,omitempty"`
	// WasRunning (a fence): the server was running when the fence began.
	WasRunning bool `json:"wasRunning,omitempty"`
	// FinalLSN (a fence of a server stopped cleanly, now or before): its
	// shutdown checkpoint's location, the last record it wrote; 0 when it
	// was not stopped cleanly. A switchover promotes its standby only once
	// it has replayed up to it.
	FinalLSN LSN    `json:"finalLSN"`
	Status   Status `json:"status"`
}

// servePromote promotes a standby: 200 when it is a primary (now, or
// already promoted by an earlier call still under way), 409 when it was
// a primary before the call or is fenced, 503 when its server is down.
func (a *Agent) servePromote(w http.ResponseWriter, r *http.Request) {
	req, err := readPromoteRequest(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ActionResult{Error: err.Error(), Status: a.Status(r.Context())})
		return
	}
	a.actions.Lock()
	defer a.actions.Unlock()
	before := a.Status(r.Context())
	switch {
	case before.Fenced:
		writeJSON(w, http.StatusConflict, ActionResult{Error: "the instance is fenced: it is never promoted", Status: before})
		return
	case !before.ServerUp:
		writeJSON(w, http.StatusServiceUnavailable, ActionResult{Error: "the server is down: " + before.Error, Status: before})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.PromoteTimeout+2*time.Second)
	defer cancel()
	// Before the promotion (see slots.go); a primary already (promoted
	// by an earlier call, or by its entrypoint) gets its missing slots
	// too.
	if err := ensureSlots(ctx, a.db, req.Slots); err != nil {
		writeJSON(w, http.StatusInternalServerError, ActionResult{Error: describe(ctx, err), Status: a.Status(r.Context())})
		return
	}
	if before.Role == RolePrimary {
		writeJSON(w, http.StatusConflict, ActionResult{Error: "the instance is already a primary: nothing to promote", Status: before})
		return
	}
	// Before the promotion: the primary the pod names now, which its own
	// guard (selffence.go) must not take for a newer name.
	if err := a.notePromotion(); err != nil {
		writeJSON(w, http.StatusInternalServerError, ActionResult{Error: "recording the promotion beside the data directory: " + err.Error(), Status: before})
		return
	}
	a.cfg.Log.Info("promoting the standby", "pod", a.cfg.Pod, "replayLSN", before.ReplayLSN.String(), "timeline", before.Timeline, "slots", req.Slots)
	// pg_promote(wait) returns once the server accepts writes, or false
	// after wait_seconds; a second call while a promotion is under way
	// signals the same promotion again, so retries are harmless.
	var promoted bool
	err = a.db.QueryRowContext(ctx, "SELECT pg_catalog.pg_promote(true, $1)", int(a.cfg.PromoteTimeout/time.Second)).Scan(&promoted)
	after := a.Status(context.Background())
	switch {
	case err != nil && after.Role == RolePrimary:
		// The promotion ended meanwhile (pg_promote fails when recovery
		// ended before it asked): the standby is a primary.
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, ActionResult{Error: "pg_promote: " + describe(ctx, err), Status: after})
		return
	case !promoted:
		writeJSON(w, http.StatusGatewayTimeout, ActionResult{Error: fmt.Sprintf("the promotion did not end within %s", a.cfg.PromoteTimeout), Status: after})
		return
	}
	// A promotion ends recovery without a checkpoint, and the control
	// file names the new timeline only after the next one: pg_rewind,
	// which the old primary runs against this server when it rejoins,
	// reads the timeline there, and before that checkpoint it sees both
	// on timeline 1, answers "no rewind required", and the old primary,
	// whose WAL goes past the fork, can never follow (the PostgreSQL
	// manual's pg_rewind notes). So a checkpoint now, before answering.
	if _, err := a.db.ExecContext(ctx, "CHECKPOINT"); err != nil {
		a.cfg.Log.Warn("checkpoint after the promotion failed (pg_rewind against this server may see the old timeline until the next one)", "pod", a.cfg.Pod, "error", err.Error())
	}
	// A primary streams from nobody: a detach before the promotion is
	// over (its primary_conninfo is written again at a start as a standby).
	if err := a.forgetDetach(); err != nil {
		a.cfg.Log.Warn("removing the saved primary_conninfo after the promotion failed", "pod", a.cfg.Pod, "error", err.Error())
	}
	after.Detached = a.detached()
	a.cfg.Log.Info("promoted: the instance is a primary", "pod", a.cfg.Pod, "timeline", after.Timeline)
	writeJSON(w, http.StatusOK, ActionResult{Done: "promoted", Status: after})
}

// serveFence fences the instance at the operator's request (fence).
func (a *Agent) serveFence(w http.ResponseWriter, r *http.Request) {
	a.actions.Lock()
	defer a.actions.Unlock()
	res := a.fence(r.Context(), "fenced by the deckhand operator")
	if res.Error != "" {
		a.cfg.Log.Error("fence failed", "pod", a.cfg.Pod, "error", res.Error)
		writeJSON(w, http.StatusInternalServerError, res)
		return
	}
	a.cfg.Log.Info("fenced: the server is stopped", "pod", a.cfg.Pod, "cleanShutdown", res.CleanShutdown, "killed", res.Killed, "finalLSN", res.FinalLSN.String())
	writeJSON(w, http.StatusOK, res)
}

// fence fences the instance: the marker first (a restart of the
// container must not bring the server back; why says who fenced it),
// then the server stopped (stop). A fenced, stopped server is fenced
// again without a change. The caller holds a.actions.
func (a *Agent) fence(ctx context.Context, why string) ActionResult {
	landed, err := a.writeFenceMarkerWithin(why, FenceMarkerWait)
	if err != nil {
		return ActionResult{Error: "writing the fence marker: " + err.Error(), Status: a.Status(ctx)}
	}
	res := ActionResult{Done: "fenced", WasRunning: a.postmasterRunning(), MarkerPending: !landed}
	if !landed {
		a.cfg.Log.Warn("the fence marker is not written yet (the disk takes no writes): stopping the server anyway", "pod", a.cfg.Pod, "waited", FenceMarkerWait.String())
	}
	var stopErr error
	if res.WasRunning {
		a.cfg.Log.Info("fencing: stopping the server", "pod", a.cfg.Pod, "why", why)
		res.CleanShutdown, res.Killed, stopErr = a.stop(ctx)
	}
	res.Status = a.Status(ctx)
	switch {
	case stopErr != nil:
		res.Done, res.Error = "", stopErr.Error()
	case a.postmasterRunning():
		res.Done, res.Error = "", "the server did not stop"
	case res.Status.ServerUp:
		// The agent saw no postmaster, yet the server answers on its
		// socket: the agent cannot stop it (no shared process namespace,
		// another data directory). Never report such a server fenced.
		res.Done, res.Error = "", "the server still answers on its socket but the agent sees no postmaster in "+a.cfg.DataDir+": it cannot stop it (is the process namespace shared, and is PGDATA the server's?)"
	}
	if res.Error == "" {
		res.FinalLSN = a.shutdownCheckpoint(ctx)
		if !res.WasRunning {
			res.CleanShutdown, res.Killed = stoppedBefore(res.FinalLSN, a.postmasterPID())
		}
	}
	return res
}

// stoppedBefore says how a server this fence found stopped had stopped:
// cleanly (its control file holds a shutdown checkpoint, at finalLSN), or
// SIGKILLed by an earlier stop and not dead yet (a hung process acts on
// it only when it runs again). An operator that fences again, after a
// pass that failed once the first fence was done, must hear what the
// first one did, not "stopped cleanly".
func stoppedBefore(finalLSN LSN, postmaster int) (clean, killed bool) {
	killed = postmaster > 0 && processAlive(postmaster) && processDoomed(postmaster)
	return finalLSN != 0 && !killed, killed
}

// serveUnfence removes the marker; it does not start the server (its
// entrypoint does, once the marker is gone).
func (a *Agent) serveUnfence(w http.ResponseWriter, r *http.Request) {
	a.actions.Lock()
	defer a.actions.Unlock()
	if err := os.Remove(a.markerPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		writeJSON(w, http.StatusInternalServerError, ActionResult{Error: err.Error(), Status: a.Status(r.Context())})
		return
	}
	a.cfg.Log.Info("fence lifted", "pod", a.cfg.Pod)
	writeJSON(w, http.StatusOK, ActionResult{Done: "unfenced", Status: a.Status(r.Context())})
}

// stop ends the server, and says whether a fast shutdown did (clean:
// every session ended, a shutdown checkpoint, its last WAL sent to the
// standbys) or its processes were SIGKILLed (killed); an error when the
// SIGKILL did not reach every one.
//
// A server that answers and flushes its WAL gets a fast shutdown within
// the stop bound. One that does not answer (hung: frozen, stuck on a
// stalled disk) or whose WAL flush is stalled (Status.WALFlushStalled:
// its disk takes no writes) cannot run a fast shutdown's checkpoint, so
// waiting for one would only add the bound to the failover: it gets an
// immediate shutdown at once. A server that ends neither within
// ImmediateStopWait has every process SIGKILLed (killTree): a hung
// process acts on it only when it runs again, and then dies before it
// answers a client, which is all a fence needs.
func (a *Agent) stop(ctx context.Context) (clean, killed bool, err error) {
	a.recordFencedServer()
	if st := a.Status(ctx); st.ServerUp && !st.WALFlushStalled() {
		secs := strconv.Itoa(max(1, int(a.cfg.StopTimeout/time.Second)))
		out, err := a.pgCtl(ctx, "stop", "-m", "fast", "-w", "-t", secs)
		if err == nil || !a.postmasterRunning() {
			return true, false, nil // pg_ctl may fail as the server stops meanwhile
		}
		a.cfg.Log.Warn("fast shutdown did not end in time; stopping immediately", "pod", a.cfg.Pod, "pg_ctl", out)
	} else {
		a.cfg.Log.Warn("the server does not answer or its WAL flush is stalled: stopping it immediately (a fast shutdown's checkpoint needs a server that runs and writes)", "pod", a.cfg.Pod)
	}
	secs := strconv.Itoa(int(ImmediateStopWait / time.Second))
	out, err := a.pgCtl(ctx, "stop", "-m", "immediate", "-w", "-t", secs)
	if err == nil || !a.postmasterRunning() {
		return false, false, nil
	}
	pid := a.postmasterPID()
	if !killTree(pid) {
		return false, false, fmt.Errorf("the server ended neither a shutdown nor SIGKILL: a process of it (postmaster %d) is not bound to die", pid)
	}
	a.cfg.Log.Warn("immediate shutdown did not end in time (the server is hung): SIGKILLed every process of it", "pod", a.cfg.Pod, "postmaster", pid, "pg_ctl", out)
	return false, true, nil
}

// recordFencedServer tells the server's supervisor (Supervise) that the
// postmaster about to be stopped is stopped by a fence, in RoleDir, which
// the server's container shares: the supervisor then starts the
// entrypoint again instead of ending the container. The marker alone
// cannot say so: a hung server's processes die only once they run again,
// and the fence may be lifted by then.
func (a *Agent) recordFencedServer() {
	pid := a.postmasterPID()
	if pid <= 0 {
		return
	}
	path := filepath.Join(a.cfg.RoleDir, FencedServerRecord)
	if err := os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		a.cfg.Log.Warn("could not record the fenced server for its supervisor: its container may be restarted instead", "pod", a.cfg.Pod, "path", path, "error", err.Error())
	}
}

func (a *Agent) pgCtl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StopTimeout+15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, a.cfg.PgCtl, append([]string{"-D", a.cfg.DataDir}, args...)...).CombinedOutput()
	return string(out), err
}

// postmasterRunning: postmaster.pid names a live process that is not
// doomed (processDoomed: a hung one SIGKILLed by stop runs no more).
// pg_ctl removes nothing itself: the server removes the file as its last
// act, and a killed one leaves it.
func (a *Agent) postmasterRunning() bool {
	pid := a.postmasterPID()
	return pid > 0 && processAlive(pid) && !processDoomed(pid)
}

// postmasterPID is the process postmaster.pid names (0: none).
func (a *Agent) postmasterPID() int {
	l, _ := ReadLockFile(filepath.Join(a.cfg.DataDir, "postmaster.pid"))
	return l.PID
}

func (a *Agent) markerPath() string {
	return filepath.Join(filepath.Dir(filepath.Clean(a.cfg.DataDir)), FenceMarker)
}

func (a *Agent) fenced() bool {
	fenced, _ := a.fenceState()
	return fenced
}

// fenceState: the marker is there, and it says the agent fenced its own
// server (selfFence), not the operator.
func (a *Agent) fenceState() (fenced, self bool) {
	b, err := os.ReadFile(a.markerPath())
	if err != nil {
		// A marker that cannot be read is still a fence.
		_, statErr := os.Stat(a.markerPath())
		return statErr == nil, false
	}
	return true, bytes.HasPrefix(b, []byte(selfFenceReason))
}

// writeFenceMarker writes the marker durably (synced, renamed into
// place, the directory synced) before anything is stopped; its line says
// why and when.
func (a *Agent) writeFenceMarker(why string) error {
	return a.writeFileDurably(a.markerPath(), fmt.Sprintf("%s at %s\n", why, a.cfg.Now().UTC().Format(time.RFC3339)))
}

// writeFenceMarkerWithin writes the marker, waiting at most wait for it:
// landed is false when the write goes on in the background.
func (a *Agent) writeFenceMarkerWithin(why string, wait time.Duration) (landed bool, err error) {
	done := make(chan error, 1)
	go func() { done <- a.writeFenceMarker(why) }()
	select {
	case err := <-done:
		return true, err
	case <-time.After(wait):
		return false, nil
	}
}

// writeFileDurably writes content to path through a file beside it,
// synced and renamed into place, the directory synced: what it says
// outlives a crash of the pod.
func (a *Agent) writeFileDurably(path, content string) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, content)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// ScriptsPrimaryFile is the file of the scripts ConfigMap that names the
// primary (engine.ScriptsPrimaryKey).
const ScriptsPrimaryFile = "primary"

// namedPrimary reads the pod's view of the primary's name.
func (a *Agent) namedPrimary() string {
	if a.cfg.ScriptsDir == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(a.cfg.ScriptsDir, ScriptsPrimaryFile))
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}
