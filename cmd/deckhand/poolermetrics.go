package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"

	"github.com/deckhand-dev/deckhand/operator/database/pooler/pgbouncer"
)

// poolerMetricsUsage is `deckhand pooler-metrics --help`.
const poolerMetricsUsage = `Usage: deckhand pooler-metrics [flags]

Serves PgBouncer's metrics (SHOW POOLS, SHOW STATS, SHOW LISTS of its admin
console, read at each scrape) at /metrics in plain HTTP. A Pooler's PgBouncer
pods run it beside PgBouncer; it logs in to the admin console over loopback
with TLS, as the pooler's role, with the password in $PGBOUNCER_PASSWORD.

Flags:
`

// runPoolerMetrics is `deckhand pooler-metrics`; it returns the process's
// exit code.
func runPoolerMetrics(args []string, stderr io.Writer) int {
	fs := pflag.NewFlagSet("pooler-metrics", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":"+strconv.Itoa(pgbouncer.MetricsPort), "address to serve /metrics on")
	port := fs.Int("pgbouncer-port", pgbouncer.Port, "PgBouncer's port on 127.0.0.1")
	user := fs.String("user", os.Getenv("PGBOUNCER_USER"), "admin console user (default $PGBOUNCER_USER)")
	fs.Usage = func() {
		fmt.Fprint(stderr, poolerMetricsUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	password, ok := os.LookupEnv("PGBOUNCER_PASSWORD")
	if *user == "" || !ok || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "deckhand pooler-metrics: --user (or $PGBOUNCER_USER) and $PGBOUNCER_PASSWORD are required; no positional arguments are taken")
		return 2
	}
	// sslmode=require: PgBouncer refuses clients without TLS, and its
	// certificate names the Service, not 127.0.0.1; the connection never
	// leaves the pod.
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d dbname=pgbouncer sslmode=require connect_timeout=5", *port))
	if err != nil {
		fmt.Fprintln(stderr, "deckhand pooler-metrics:", err)
		return 2
	}
	cfg.User, cfg.Password = *user, password
	log := slog.New(slog.NewTextHandler(stderr, nil))

	reg := prometheus.NewRegistry()
	reg.MustRegister(&pgbouncer.Collector{Console: cfg, Log: log})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("serving PgBouncer's metrics", "listen", *listen, "pgbouncer", cfg.Host+":"+strconv.Itoa(*port), "user", *user)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("serving metrics", "error", err)
		return 1
	}
	return 0
}
