package mysql_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/operator/database/engine"
	"github.com/deckhand-dev/deckhand/operator/database/mysql"
	"github.com/deckhand-dev/deckhand/operator/database/mysql/mysqltest"
	"github.com/deckhand-dev/deckhand/operator/database/servertls"
)

// TLS on the host's MariaDB with the shipped scripts: the server TLS
// Secret as a directory, its certificate naming 127.0.0.1 (where the
// host's scripts reach the servers, as a pod reaches <name>-rw), and the
// scripts' "tls" file as the operator writes it.

type tlsFiles struct {
	h  *host
	ca *servertls.CA
}

// withTLS turns TLS on for h's servers and Jobs, with the file "tls"
// saying state ("offered" or "required").
func withTLS(h *host, state string) *tlsFiles {
	h.t.Helper()
	h.cluster.TLSSecret = "my-cluster-server-tls"
	h.tlsDir = mysqltest.Dir(h.t, h.u, h.root, "server-tls")
	ca, err := servertls.NewCA("default", "my-cluster", time.Now())
	require.NoError(h.t, err)
	tf := &tlsFiles{h: h, ca: ca}
	tf.issue(time.Now())
	tf.state(state)
	return tf
}

// issue writes a certificate of the CA valid from now, each file replaced
// whole, as the kubelet swaps a Secret's files.
func (tf *tlsFiles) issue(now time.Time) {
	tf.h.t.Helper()
	crt, key, err := tf.ca.IssueServer([]string{"my-cluster-rw", "127.0.0.1"}, now)
	require.NoError(tf.h.t, err)
	for name, data := range map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": tf.ca.CertPEM} {
		tmp := filepath.Join(tf.h.tlsDir, "."+name+".new")
		require.NoError(tf.h.t, os.WriteFile(tmp, data, 0o444))
		require.NoError(tf.h.t, os.Rename(tmp, filepath.Join(tf.h.tlsDir, name)))
	}
}

// state writes the scripts ConfigMap's key "tls".
func (tf *tlsFiles) state(s string) {
	tf.h.t.Helper()
	require.NoError(tf.h.t, os.WriteFile(filepath.Join(tf.h.scripts, engine.ScriptsTLSKey), []byte(s), 0o444))
}

// plain connects without TLS (--skip-ssl): what a client that never asks
// for it, or a downgrading attacker, gets.
func plain(port string) (string, error) {
	return client(port, "--skip-ssl", "-e", "SELECT 1")
}

// verified connects as a verify-full client does: the CA bundle and the
// server's name checked.
func verified(port, caFile, sql string) (string, error) {
	return client(port, "--ssl-ca="+caFile, "--ssl-verify-server-cert", "-e", sql)
}

func client(port string, args ...string) (string, error) {
	return mysqltest.Client(port, "root", rootPassword, args...)
}

// replicationVerifies is the replica's Master_SSL_Verify_Server_Cert.
func replicationVerifies(h *host, replica *mysqltest.Server) string {
	// Not h.sql: without column names (-N) \G prints values alone.
	out, err := client(replica.Port, "--column-names", "-e", "SHOW SLAVE STATUS\\G")
	require.NoError(h.t, err, out)
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Master_SSL_Verify_Server_Cert: "); ok {
			return v
		}
	}
	return ""
}

func TestWithTLSTheServersRefusePlainConnectionsAndReplicasVerifyThePrimary(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	tf := withTLS(h, "offered")
	caFile := filepath.Join(h.tlsDir, "ca.crt")

	// TLS being turned on: offered, nothing required yet.
	primary := h.server("primary", 0, "")
	replica := h.server("replica", 1, primary.Port)
	out, err := plain(primary.Port)
	require.NoError(t, err, "offered, not required: %s", out)
	out, err = verified(primary.Port, caFile, "SHOW STATUS LIKE 'Ssl_version'")
	require.NoError(t, err, out)
	assert.Contains(t, out, "TLS", "the server presents the Secret's certificate")
	out, err = h.probe(replica, "ready")
	require.NoError(t, err, out)
	assert.Equal(t, "No", replicationVerifies(h, replica), "nothing verified while TLS is only offered")

	// Required (every server presents the certificate): the probes apply it
	// to the running servers, without a restart.
	tf.state("required")
	out, err = h.probe(primary, "ready")
	require.NoError(t, err, out)
	assert.Equal(t, "1", h.sql(primary.Port, "SELECT @@require_secure_transport"))
	out, err = plain(primary.Port)
	require.Error(t, err, "a connection without TLS from another host is refused: %s", out)
	require.Eventually(t, func() bool {
		_, err := h.probe(replica, "ready")
		return err == nil && replicationVerifies(h, replica) == "Yes"
	}, 60*time.Second, time.Second, "the replica verifies the primary's certificate and is ready")
	h.sql(primary.Port, "CREATE DATABASE tlsdb; CREATE TABLE tlsdb.t (v INT); INSERT INTO tlsdb.t VALUES (1)")
	require.Eventually(t, func() bool {
		out, _ := mysqltest.SQL(replica.Port, "root", rootPassword, "", "SELECT v FROM tlsdb.t")
		return out == "1"
	}, 30*time.Second, 200*time.Millisecond, "a row written on the primary reaches the replica over verified TLS")

	// The Jobs verify the server: the init Job and a backup with the
	// cluster's CA bundle work; the scripts' client with another CA's
	// bundle is refused, saying why.
	e := mysql.Engine{}
	rep, out, err := h.job(e.InitPod(h.cluster), map[string]string{"PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": primary.Port})
	require.NoError(t, err, out)
	assert.Contains(t, rep.ServerVersion, "MariaDB")
	backupDir := mysqltest.Dir(t, h.u, h.root, "backup")
	rep, out, err = h.job(e.BackupPod(h.cluster, engine.Backup{File: "my-cluster/tls.sql", Host: "x", ClaimName: "b"}), map[string]string{
		"SOURCE_HOST": "127.0.0.1", "SOURCE_PORT": replica.Port, "BACKUP_DIR": backupDir,
	})
	require.NoError(t, err, out)
	assert.Equal(t, int64(1), rep.Rows, "the backup over verified TLS holds the row")
	other, err := servertls.NewCA("default", "someone-else", time.Now())
	require.NoError(t, err)
	otherCA := filepath.Join(mysqltest.Dir(t, h.u, h.root, "other-ca"), "ca.crt")
	require.NoError(t, os.WriteFile(otherCA, other.CertPEM, 0o444))
	remote := func(caFile string) (string, error) {
		return mysqltest.Run(h.u, map[string]string{"MYSQL_PWD": rootPassword, "PATH": mysqltest.Path, "HOME": h.root, "TLS_CA_FILE": caFile},
			[]string{"sh", "-c", `. "$(dirname "$0")/lib.sh"; pick_commands; remote 127.0.0.1 "$1" -N -B -e 'SELECT 1'`, filepath.Join(h.scripts, "remote"), primary.Port})
	}
	out, err = remote(caFile)
	require.NoError(t, err, out)
	out, err = remote(otherCA)
	require.Error(t, err, "a server whose certificate another CA issued is not trusted: %s", out)
	assert.Contains(t, out, "certificate")

	// A replica made while TLS is required clones and replicates verifying.
	second := h.server("replica2", 2, primary.Port)
	assert.Equal(t, "Yes", replicationVerifies(h, second))
	out, err = h.probe(second, "ready")
	require.NoError(t, err, out)

	// A renewed certificate is loaded by the probe, without a restart.
	before := h.sql(primary.Port, "SHOW STATUS LIKE 'Ssl_server_not_after'")
	// Half an hour on: valid now (issued an hour back), expiring later.
	tf.issue(time.Now().Add(30 * time.Minute))
	out, err = h.probe(primary, "ready")
	require.NoError(t, err, out)
	after := h.sql(primary.Port, "SHOW STATUS LIKE 'Ssl_server_not_after'")
	assert.NotEqual(t, before, after, "the server presents the renewed certificate")
	out, err = verified(primary.Port, caFile, "SELECT 1")
	require.NoError(t, err, out)

	// TLS being turned off: nothing required or verified any more.
	tf.state("offered")
	out, err = h.probe(primary, "ready")
	require.NoError(t, err, out)
	assert.Equal(t, "0", h.sql(primary.Port, "SELECT @@require_secure_transport"))
	require.Eventually(t, func() bool {
		_, err := h.probe(replica, "ready")
		return err == nil && replicationVerifies(h, replica) == "No"
	}, 60*time.Second, time.Second, "the replica stops verifying and is ready")
}
