// Command deckhand-instance is the instance agent of a deckhand
// PostgreSQL pod (package operator/database/postgres/instance).
//
//	deckhand-instance install DEST
//	deckhand-instance serve [flags]
//	deckhand-instance metrics [flags]
//	deckhand-instance supervise [flags] -- COMMAND [ARG...]
//
// install copies this binary to DEST (mode 0755): an init container runs
// it from the operator image, so the agent reaches the database pod
// through an emptyDir and the database image stays the official one.
// serve answers the operator over mutual TLS; its flags default to the
// database container's environment (POD_NAME, PGDATA, PGPORT); with
// --metrics-listen it also serves PostgreSQL's metrics in plain HTTP, and
// with --probe-listen the kubelet's readiness probe (instance/probe.go).
// metrics serves the metrics alone (a Database without failover).
// supervise is the server container's entrypoint in a pod with the agent:
// it runs COMMAND (bootstrap.sh) and starts it again when it ends after
// the agent fenced its server (instance.Supervise), so a demoted server's
// container is never restarted by the kubelet.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/deckhand-dev/deckhand/operator/database/postgres/instance"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: deckhand-instance install DEST | serve [flags] | metrics [flags] | supervise [flags] -- COMMAND [ARG...]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "install":
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: deckhand-instance install DEST")
			os.Exit(2)
		}
		err = install(os.Args[2])
	case "serve":
		err = serve(os.Args[2:])
	case "metrics":
		err = metricsOnly(os.Args[2:])
	case "supervise":
		var code int
		if code, err = supervise(os.Args[2:]); err == nil {
			os.Exit(code)
		}
	default:
		fmt.Fprintf(os.Stderr, "deckhand-instance: unknown command %q (install, serve, metrics, supervise)\n", os.Args[1])
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deckhand-instance:", err)
		os.Exit(1)
	}
}

// install copies the running binary to dest, through a file beside it
// renamed into place (a restarted init container never leaves half a
// binary).
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dest + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dest); err != nil {
		return err
	}
	fmt.Printf("deckhand-instance installed at %s\n", dest)
	return nil
}

// supervise runs the server's entrypoint under instance.Supervise and
// returns its exit code.
func supervise(args []string) (int, error) {
	fs := flag.NewFlagSet("supervise", flag.ContinueOnError)
	dataDir := fs.String("pgdata", os.Getenv("PGDATA"), "the server's data directory (the fence marker is beside it)")
	stateDir := fs.String("state-dir", os.Getenv(instance.RoleDirEnv), "the directory the server's container shares with the agent, where it records a fenced server (default: "+instance.RoleDirEnv+")")
	pause := fs.Duration("restart-pause", time.Second, "the wait before the entrypoint starts again after a fenced end")
	if err := fs.Parse(args); err != nil {
		return 0, err
	}
	if *dataDir == "" || fs.NArg() == 0 {
		return 0, errors.New("usage: deckhand-instance supervise [--pgdata DIR] [--state-dir DIR] -- COMMAND [ARG...] (PGDATA is required)")
	}
	// Before anything can send one: a signal that came first would end
	// this process instead of reaching the entrypoint.
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, instance.SupervisedSignals...)
	return instance.Supervise(instance.SuperviseConfig{
		Command:      fs.Args(),
		FenceMarker:  filepath.Join(filepath.Dir(filepath.Clean(*dataDir)), instance.FenceMarker),
		StateDir:     *stateDir,
		RestartPause: *pause,
		Log:          os.Stderr,
	}, signals)
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	pod := fs.String("pod", os.Getenv("POD_NAME"), "the pod's name: its certificate is <tls-dir>/<pod>.crt")
	dataDir := fs.String("pgdata", os.Getenv("PGDATA"), "the server's data directory")
	port := fs.Int("pgport", envInt("PGPORT", 5432), "the server's port (its socket's name)")
	socketDir := fs.String("socket-dir", "/var/run/postgresql", "the server's unix socket directory")
	user := fs.String("user", "postgres", "the local superuser (pg_hba.conf: local trust)")
	pgCtl := fs.String("pg-ctl", "pg_ctl", "pg_ctl to stop the server with")
	scriptsDir := fs.String("scripts-dir", "", "the scripts ConfigMap as mounted (its file primary names the primary); empty: not mounted")
	roleDir := fs.String("role-dir", "", "where the server's entrypoint asks for its role (its DECKHAND_ROLE_DIR); empty: the socket directory")
	tlsDir := fs.String("tls-dir", "/etc/deckhand/instance-tls", "the pods' TLS Secret, mounted")
	listen := fs.String("listen", ":"+strconv.Itoa(instance.DefaultPort), "address to serve HTTPS on")
	probeListen := fs.String("probe-listen", "", "address to serve the kubelet's readiness probe on (plain HTTP, GET "+instance.ReadyPath+"); empty: not served")
	readinessCommand := fs.String("readiness-command", "", "the server container's readiness command, as a JSON array, run here for each probe")
	readinessTimeout := fs.Duration("readiness-timeout", 9*time.Second, "how long one readiness check may take")
	mf := metricsFlags(fs)
	apiServer := fs.String("api-server", apiServerAddress(), "the API server's address (host:port) the isolation check tries before it fences; empty: no isolation check (default: the kubelet's KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *pod == "" || *dataDir == "" {
		return errors.New("--pod and --pgdata (or POD_NAME and PGDATA) are required")
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	tlsConfig, err := instance.ServerTLSConfig(*tlsDir, *pod)
	if err != nil {
		return fmt.Errorf("TLS: %w", err)
	}
	agent, err := instance.New(instance.Config{
		Pod: *pod, SocketDir: *socketDir, Port: *port, User: *user,
		DataDir: filepath.Clean(*dataDir), PgCtl: *pgCtl, ScriptsDir: *scriptsDir, RoleDir: *roleDir, APIServer: *apiServer, Log: log,
	})
	if err != nil {
		return err
	}
	defer agent.Close()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *mf.listen != "" {
		collector, ml, err := mf.start(*socketDir, *port, *user, log)
		if err != nil {
			return err
		}
		defer collector.Close()
		go func() {
			if err := collector.ServeMetrics(ctx, ml); err != nil {
				log.Error("the metrics server ended", "error", err.Error())
			}
		}()
	}
	if *probeListen != "" {
		readiness, err := readinessProbe(*readinessCommand, *readinessTimeout, *socketDir, *user, log)
		if err != nil {
			return err
		}
		pl, err := net.Listen("tcp", *probeListen)
		if err != nil {
			return err
		}
		go func() {
			if err := instance.ServeProbes(ctx, pl, readiness, log); err != nil {
				log.Error("the probe server ended", "error", err.Error())
			}
		}()
	}
	log.Info("serving the instance channel", "pod", *pod, "listen", l.Addr().String())
	return agent.Serve(ctx, l, tlsConfig)
}

// metricsFlagSet are the collector's flags, of serve and metrics.
type metricsFlagSet struct {
	listen, appUser, appDatabase, queries *string
}

// readinessProbe is the readiness check the agent runs for the kubelet:
// the server container's command, which connects over the Unix socket as
// the local superuser (the agent's container holds no password).
func readinessProbe(command string, timeout time.Duration, socketDir, user string, log *slog.Logger) (*instance.Readiness, error) {
	var argv []string
	if err := json.Unmarshal([]byte(command), &argv); err != nil || len(argv) == 0 {
		return nil, fmt.Errorf("--readiness-command must be a JSON array of at least one word, not %q", command)
	}
	return &instance.Readiness{
		Command: argv, Timeout: timeout, Log: log,
		Env: []string{"PGHOST=" + socketDir, "PGUSER=" + user},
	}, nil
}

func metricsFlags(fs *flag.FlagSet) metricsFlagSet {
	return metricsFlagSet{
		listen:      fs.String("metrics-listen", "", "address to serve PostgreSQL's metrics on, in plain HTTP (GET /metrics); empty: none"),
		appUser:     fs.String("app-user", "", "the app role, which runs the user's queries; empty: they do not run"),
		appDatabase: fs.String("app-database", "", "the app database the user's queries run in (default: the app role's name)"),
		queries:     fs.String("queries", "", "the user's queries file (CloudNativePG's custom-queries format); empty: none"),
	}
}

func (mf metricsFlagSet) start(socketDir string, port int, user string, log *slog.Logger) (*instance.Collector, net.Listener, error) {
	collector, err := instance.NewCollector(instance.MetricsConfig{
		SocketDir: socketDir, Port: port, User: user,
		AppUser: *mf.appUser, AppDatabase: *mf.appDatabase, QueriesFile: *mf.queries, Log: log,
	})
	if err != nil {
		return nil, nil, err
	}
	l, err := net.Listen("tcp", *mf.listen)
	if err != nil {
		collector.Close()
		return nil, nil, err
	}
	log.Info("serving PostgreSQL's metrics", "listen", l.Addr().String())
	return collector, l, nil
}

// metricsOnly serves the metrics alone: the pod of a Database without
// failover has no channel, and the collector needs no certificate.
func metricsOnly(args []string) error {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	port := fs.Int("pgport", envInt("PGPORT", 5432), "the server's port (its socket's name)")
	socketDir := fs.String("socket-dir", "/var/run/postgresql", "the server's unix socket directory")
	user := fs.String("user", "postgres", "the local superuser (pg_hba.conf: local trust); the collector drops to pg_monitor")
	mf := metricsFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *mf.listen == "" {
		*mf.listen = ":" + strconv.Itoa(instance.MetricsPort)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	collector, l, err := mf.start(*socketDir, *port, *user, log)
	if err != nil {
		return err
	}
	defer collector.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return collector.ServeMetrics(ctx, l)
}

// apiServerAddress is the API server's Service address the kubelet gives
// every container; "" outside a pod.
func apiServerAddress() string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ""
	}
	return net.JoinHostPort(host, port)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
