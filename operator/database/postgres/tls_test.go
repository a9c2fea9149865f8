package postgres_test

import (
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/postgres"
	"github.com/deckhand-dev/deckhand/operator/database/postgres/pgtest"
	"github.com/deckhand-dev/deckhand/operator/database/servertls"
)

// tlsHost is a host whose Database has TLS on: the server TLS Secret is a
// directory (written as the kubelet writes a Secret volume: each file
// renamed into place), and each server's in-memory copy another.
type tlsHost struct {
	*host
	ca     *servertls.CA
	secret string // the Secret's directory
	// rw is the name clients verify: the read-write Service's, which the
	// certificate carries (as the operator issues it), reached at
	// 127.0.0.1 (libpq's hostaddr).
	rw string
}

func newTLSHost(t *testing.T) *tlsHost {
	h := newHost(t)
	h.cluster.TLSSecret = "name-of-database-server-tls"
	th := &tlsHost{host: h, secret: h.volume("server-tls"), rw: "name-of-database-rw.ns.svc"}
	var err error
	th.ca, err = servertls.NewCA("ns", "name-of-database", time.Now())
	require.NoError(t, err)
	th.issue(th.ca, th.ca.CertPEM)
	th.require(true)
	return th
}

// require writes the scripts ConfigMap's key "tls" as the operator does
// once every server runs with the certificate (or removes it).
func (th *tlsHost) require(on bool) {
	th.t.Helper()
	file := filepath.Join(th.scripts, engine.ScriptsTLSKey)
	require.NoError(th.t, os.RemoveAll(file))
	if on {
		require.NoError(th.t, os.WriteFile(file, []byte("required"), 0o444))
	}
}

// hosts are the certificate's names: every name the operator puts in it,
// and 127.0.0.1, where the host's scripts reach the primary (PRIMARY_HOST
// and SOURCE_HOST are rewritten to it).
func (th *tlsHost) hosts() []string {
	return append(servertls.Hosts("name-of-database-rw", "name-of-database-ro", "name-of-database-headless", "ns",
		[]string{"name-of-database-0", "name-of-database-1"}), "127.0.0.1")
}

// issue writes a server certificate of ca and the bundle into the Secret.
func (th *tlsHost) issue(ca *servertls.CA, bundle []byte) *x509.Certificate {
	th.t.Helper()
	crt, key, err := ca.IssueServer(th.hosts(), time.Now())
	require.NoError(th.t, err)
	for name, data := range map[string][]byte{servertls.TLSKeyKey: key, servertls.TLSCertKey: crt, servertls.BundleKey: bundle} {
		tmp := filepath.Join(th.secret, "."+name+".new")
		require.NoError(th.t, os.WriteFile(tmp, data, 0o444))
		require.NoError(th.t, os.Rename(tmp, filepath.Join(th.secret, name)))
	}
	return servertls.ParseCert(crt)
}

func (th *tlsHost) caFile() string { return filepath.Join(th.secret, servertls.BundleKey) }

// volumes of a server pod: its data, the Secret and its run directory.
func (th *tlsHost) serverVolumes(data string) map[string]string {
	return map[string]string{
		engine.DataVolume:   th.volume(data),
		engine.TLSVolume:    th.secret,
		"tls-run":           th.volume(data + "-tls-run"),
		engine.BackupVolume: th.volume("backup"),
	}
}

func (th *tlsHost) serverEnv(ordinal int, data, primaryPort string) map[string]string {
	th.t.Helper()
	pod := postgres.Engine{}.ServerPod(th.cluster)
	port, ok := th.ports[data]
	if !ok {
		port = pgtest.FreePort(th.t)
		th.ports[data] = port
	}
	env := th.env(pod, fmt.Sprintf("%s-%d", th.cluster.Name, ordinal), port, th.serverVolumes(data))
	if primaryPort != "" {
		env["PRIMARY_PORT"] = primaryPort
	}
	return env
}

func (th *tlsHost) server(ordinal int, data, primaryPort string) *pgtest.Server {
	th.t.Helper()
	pod := postgres.Engine{}.ServerPod(th.cluster)
	return th.u.StartServer(th.t, th.bin, th.serverEnv(ordinal, data, primaryPort), pgtest.HostCommand(th.t, pod.Container, th.scripts))
}

// probe runs the server's readiness probe, as the kubelet does every 5 s.
func (th *tlsHost) probe(ordinal int, data string) string {
	th.t.Helper()
	pod := postgres.Engine{}.ServerPod(th.cluster)
	argv := pgtest.HostCommand(th.t, corev1Probe(pod), th.scripts)
	// Its verdict is not the point here (a standby whose WAL receiver has
	// just restarted is not ready for a moment): what it did is.
	out, _ := th.u.Command(th.serverEnv(ordinal, data, ""), argv).CombinedOutput()
	return string(out)
}

// job runs a Job's pod with the Secret's ca.crt mounted, as the pod does.
func (th *tlsHost) job(pod engine.Pod, name, port string) (engine.Report, string, error) {
	return th.host.job(pod, name, port, map[string]string{engine.TLSVolume: th.secret, engine.BackupVolume: th.volume("backup")})
}

// dsn is a libpq connection string to the server on port, as the app
// role, verifying the certificate against the bundle for the name host.
func (th *tlsHost) dsn(port, host, sslmode string) string {
	return fmt.Sprintf("host=%s hostaddr=127.0.0.1 port=%s user=%s password=%s dbname=%s sslmode=%s sslrootcert=%s connect_timeout=5",
		host, port, th.cluster.AppUser, quoteDSN(th.appPassword()), quoteDSN(th.cluster.Database), sslmode, th.caFile())
}

// psqlTLS runs SQL through psql with a connection string.
func (th *tlsHost) psqlTLS(dsn, sql string) (string, error) {
	cmd := exec.Command(filepath.Join(th.bin, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", dsn, "-c", sql)
	cmd.Env = []string{"PGCONNECT_TIMEOUT=5"}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// servedCertificate is the certificate the server on port presents: a
// PostgreSQL SSLRequest, then a TLS handshake that verifies it against
// the bundle for name.
func servedCertificate(t *testing.T, port, name string, bundle []byte) *x509.Certificate {
	t.Helper()
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	req := make([]byte, 8)
	binary.BigEndian.PutUint32(req[0:4], 8)
	binary.BigEndian.PutUint32(req[4:8], 80877103) // SSLRequest
	_, err = conn.Write(req)
	require.NoError(t, err)
	answer := make([]byte, 1)
	_, err = io.ReadFull(conn, answer)
	require.NoError(t, err)
	require.Equal(t, "S", string(answer), "the server offers TLS")
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(bundle))
	c := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12})
	require.NoError(t, c.Handshake(), "the certificate verifies against the bundle for %s", name)
	return c.ConnectionState().PeerCertificates[0]
}

func TestWithTLSTheServersServeTheirCertificateAndRefuseConnectionsWithout(t *testing.T) {
	t.Parallel()
	th := newTLSHost(t)
	primary := th.server(0, "data-0", "")
	assert.Contains(t, primary.Log.String(), "TLS on: serving the certificate")
	_, out, err := th.job(postgres.Engine{}.InitPod(th.cluster), "init", primary.Port)
	require.NoError(t, err, "the init Job connects with verify-full:\n%s", out)

	// The server presents the certificate of the Secret, for the names a
	// client uses.
	bundle, err := os.ReadFile(th.caFile())
	require.NoError(t, err)
	served := servedCertificate(t, primary.Port, th.rw, bundle)
	leaf, err := os.ReadFile(filepath.Join(th.secret, servertls.TLSCertKey))
	require.NoError(t, err)
	assert.Equal(t, servertls.ParseCert(leaf).SerialNumber, served.SerialNumber)
	for _, name := range []string{"name-of-database-rw", "name-of-database-ro.ns.svc.cluster.local", "name-of-database-1.name-of-database-headless.ns"} {
		servedCertificate(t, primary.Port, name, bundle)
	}

	// A verify-full client connects, encrypted; its statements run.
	out, err = th.psqlTLS(th.dsn(primary.Port, th.rw, "verify-full"), "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1); SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
	require.NoError(t, err, out)
	assert.Equal(t, "t", out)
	// A name the certificate does not carry is refused by the client.
	out, err = th.psqlTLS(th.dsn(primary.Port, "elsewhere.example", "verify-full"), "SELECT 1")
	require.Error(t, err, out)
	assert.Contains(t, out, `does not match host name "elsewhere.example"`)
	// Without TLS, pg_hba.conf has no line for it.
	out, err = th.psqlTLS(th.dsn(primary.Port, th.rw, "disable"), "SELECT 1")
	require.Error(t, err, out)
	assert.Contains(t, out, `no pg_hba.conf entry for host "127.0.0.1", user "name-of-database", database "name-of-database", no encryption`)
	out, err = replicationConnect(th.host, primary.Port+" sslmode=disable", postgres.ReplicationUser, th.replicationPassword())
	require.Error(t, err, out)
	assert.Contains(t, out, "no encryption")
	// libpq's default (prefer), which the app Secret's uri leaves as it
	// is, encrypts.
	out, err = th.appSQL(primary.Port, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
	require.NoError(t, err, out)
	assert.Equal(t, "t", out)

	// A standby clones and streams over TLS, verifying the primary.
	standby := th.server(1, "data-1", primary.Port)
	waitForStreaming(t, th.host, primary.Port, "deckhand_replication name-of-database-1 streaming")
	assert.Equal(t, "t", th.sql(primary.Port, "postgres", "SELECT s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE r.application_name = 'name-of-database-1'"))
	setting := th.sql(standby.Port, "postgres", "SELECT setting FROM pg_settings WHERE name = 'primary_conninfo'")
	assert.Contains(t, setting, "sslmode=verify-full")
	assert.Contains(t, setting, "sslrootcert=")
	hba, err := os.ReadFile(filepath.Join(th.volume("data-1"), "pgdata", "pg_hba.conf"))
	require.NoError(t, err)
	assert.Contains(t, string(hba), "\nhostssl all all all scram-sha-256\n")
	assert.NotRegexp(t, `(?m)^host\s`, string(hba), "no line admits a connection without TLS")

	// A backup Job reads over TLS, verifying the server.
	th.standbyPort = standby.Port
	report, out, err := th.job(postgres.Engine{}.BackupPod(th.cluster, engine.Backup{File: "tls.dump", Host: th.cluster.Name + "-rw", ClaimName: "backup"}), "backup", primary.Port)
	require.NoError(t, err, out)
	assert.NotEmpty(t, report.SHA256)

	// Turned off (the pods' template without the Secret), the same data
	// directory admits plain connections again.
	standby.Stop(t)
	primary.Stop(t)
	th.cluster.TLSSecret = ""
	plain := th.host.primary("data-0")
	out, err = pgtest.PSQL(th.bin, plain.Port, th.cluster.AppUser, th.appPassword(), th.cluster.Database, "SELECT count(*) FROM rows")
	require.NoError(t, err, out)
	out, err = th.psqlTLS(th.dsn(plain.Port, th.rw, "disable"), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
	require.NoError(t, err, out)
	assert.Equal(t, "f", out)
}

func TestARenewedCertificateAndANewCAAreReloadedWhileAWriterLosesNoWrite(t *testing.T) {
	t.Parallel()
	th := newTLSHost(t)
	primary := th.server(0, "data-0", "")
	_, out, err := th.job(postgres.Engine{}.InitPod(th.cluster), "init", primary.Port)
	require.NoError(t, err, out)
	out, err = th.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY)")
	require.NoError(t, err, out)
	first := servedCertificate(t, primary.Port, th.rw, th.ca.CertPEM)

	// The writer opens a new verify-full connection for every write, so
	// every write goes through the certificate served at that moment.
	// The bundle it trusts is the one of the CA change (old and new), as
	// a client that read the app Secret during the change has.
	next, err := servertls.NewCA("ns", "name-of-database", time.Now())
	require.NoError(t, err)
	both := append(append([]byte{}, th.ca.CertPEM...), next.CertPEM...)
	bundle := filepath.Join(th.root, "client-ca.crt")
	require.NoError(t, os.WriteFile(bundle, both, 0o444))
	dsn := strings.Replace(th.dsn(primary.Port, th.rw, "verify-full"), "sslrootcert="+th.caFile(), "sslrootcert="+bundle, 1)
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxIdleConns(0)
	var acked []int
	var failures atomic.Int32
	var lastErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := 1; ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.Exec("INSERT INTO rows VALUES ($1)", id); err != nil {
				failures.Add(1)
				lastErr.Store(err.Error())
				continue
			}
			acked = append(acked, id)
		}
	}()
	pause := func() { time.Sleep(500 * time.Millisecond) }
	pause()

	// 1. Renewed under the same CA: the probe sees the Secret's new files,
	// copies them and reloads; new connections get the new certificate.
	renewed := th.issue(th.ca, th.ca.CertPEM)
	assert.Contains(t, th.probe(0, "data-0"), "reloaded")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, renewed.SerialNumber, servedCertificate(t, primary.Port, th.rw, both).SerialNumber)
	}, 30*time.Second, 100*time.Millisecond)
	assert.NotEqual(t, first.SerialNumber, renewed.SerialNumber)
	pause()

	// 2. A new CA: first in the bundle, then signing the certificate.
	th.issue(th.ca, both)
	th.probe(0, "data-0")
	rotated := th.issue(next, both)
	assert.Contains(t, th.probe(0, "data-0"), "reloaded")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, rotated.SerialNumber, servedCertificate(t, primary.Port, th.rw, next.CertPEM).SerialNumber)
	}, 30*time.Second, 100*time.Millisecond)
	// Nothing changed: no reload.
	assert.NotContains(t, th.probe(0, "data-0"), "reloaded")
	pause()
	close(stop)
	wg.Wait()

	require.Greater(t, len(acked), 10, "the writer wrote")
	assert.Zero(t, failures.Load(), "no write failed across the reloads (last error: %v)", lastErr.Load())
	count := th.sql(primary.Port, th.cluster.Database, "SELECT count(*) FROM rows WHERE id = ANY('{"+joinInts(acked)+"}'::int[])")
	assert.Equal(t, fmt.Sprint(len(acked)), count, "every acknowledged write is there")
	assert.Contains(t, primary.Log.String(), "received SIGHUP, reloading configuration files")
}

func joinInts(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

// TLS turned on under a running primary and standby: the pods restart one
// at a time, the standby first, and each still reaches the other (TLS
// offered, not yet required); once the operator says every server runs
// with its certificate (the key "tls"), the readiness probes make
// pg_hba.conf hostssl only and the standby's primary_conninfo verify-full,
// with a reload, and the standby streams over TLS, verified.
func TestTurningTLSOnUnderRunningServersNeverCutsTheStandbyOff(t *testing.T) {
	t.Parallel()
	th := newTLSHost(t)
	th.require(false)
	secret := th.cluster.TLSSecret
	th.cluster.TLSSecret = ""
	primary := th.host.primary("data-0")
	th.host.init(primary.Port)
	out, err := th.appSQL(primary.Port, "CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1)")
	require.NoError(t, err, out)
	standby := th.host.standby(1, "data-1", primary.Port)
	waitForStreaming(t, th.host, primary.Port, "deckhand_replication name-of-database-1 streaming")

	// The roll: the standby first, with TLS, against a primary without.
	th.cluster.TLSSecret = secret
	standby.Stop(t)
	standby = th.server(1, "data-1", primary.Port)
	waitForStreaming(t, th.host, primary.Port, "deckhand_replication name-of-database-1 streaming")
	primary.Stop(t)
	primary = th.server(0, "data-0", "")
	waitForStreaming(t, th.host, primary.Port, "deckhand_replication name-of-database-1 streaming")
	// Not required yet: a client without TLS still gets in.
	out, err = th.psqlTLS(th.dsn(primary.Port, th.rw, "disable"), "SELECT 1")
	require.NoError(t, err, out)

	// Every server runs with the certificate: required.
	th.require(true)
	assert.Contains(t, th.probe(0, "data-0"), "pg_hba.conf rewritten (TLS required: yes): reloaded")
	assert.Contains(t, th.probe(1, "data-1"), "primary_conninfo sslmode=verify-full: reloaded")
	out, err = th.psqlTLS(th.dsn(primary.Port, th.rw, "disable"), "SELECT 1")
	require.Error(t, err, out)
	assert.Contains(t, out, "no encryption")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, "t", th.sql(primary.Port, "postgres", "SELECT s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE r.application_name = 'name-of-database-1' AND r.state = 'streaming'"))
	}, 30*time.Second, 200*time.Millisecond, "the standby streams over TLS")
	assert.Contains(t, th.sql(standby.Port, "postgres", "SELECT setting FROM pg_settings WHERE name = 'primary_conninfo'"), "sslmode=verify-full")
	out, err = th.psqlTLS(th.dsn(primary.Port, th.rw, "verify-full"), "INSERT INTO rows VALUES (2)")
	require.NoError(t, err, out)
	waitForRow(t, th.host, standby.Port, "2")
	// Settled: the next probes change nothing.
	assert.NotContains(t, th.probe(0, "data-0"), "reloaded")
	assert.NotContains(t, th.probe(1, "data-1"), "reloaded")
}

// corev1Probe is the server container with its readiness probe's command
// as its command.
func corev1Probe(pod engine.Pod) corev1.Container {
	c := pod.Container
	c.Command, c.Args = c.ReadinessProbe.Exec.Command, nil
	return c
}
