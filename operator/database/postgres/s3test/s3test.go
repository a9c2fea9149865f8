// Package s3test runs an S3-compatible object store for tests: versitygw
// (built from its Go module by hack/tools.sh, like the other tools) over a
// POSIX directory, on a free port of 127.0.0.1, serving TLS from a CA made
// for the test. The archiving scripts of the PostgreSQL engine are proven
// against it (docs/design/database-backup.md, Continuous archiving).
package s3test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deckhand-dev/deckhand/internal/freeport"
	"github.com/deckhand-dev/deckhand/internal/syncbuf"
	"github.com/deckhand-dev/deckhand/internal/testenv"
)

// Region is the store's region (versitygw's default).
const Region = "us-east-1"

// Store is a running versitygw. Its files (the CA, the keys) are readable
// by any user, so scripts run as another user (pgtest.Unprivileged) can
// use them; the keys are a test's throwaway ones.
type Store struct {
	// Endpoint is https://127.0.0.1:<port>.
	Endpoint string
	// Bucket exists when Start returns.
	Bucket string
	// AccessKey and SecretKey are the root account's; AccessKeyFile and
	// SecretKeyFile hold them, as a mounted Secret's keys would.
	AccessKey, SecretKey         string
	AccessKeyFile, SecretKeyFile string
	// CAFile is the PEM of the CA that signed the server's certificate
	// (for 127.0.0.1 and localhost).
	CAFile string
	// Root is the POSIX directory the store serves: bucket/key is a file
	// there.
	Root string
	// Log is the server's output, across restarts.
	Log *syncbuf.Buffer

	port, bin, cert, key string
	pool                 *x509.CertPool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
}

// Start builds versitygw if it is missing (hack/tools.sh build
// versitygw), starts it and creates bucket. It is stopped, and its files
// removed, when the test ends.
func Start(t testing.TB, bucket string) *Store {
	t.Helper()
	dir, err := os.MkdirTemp("", "dh-s3-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Store{
		Bucket:    bucket,
		AccessKey: "deckhand" + randomHex(t, 6),
		SecretKey: randomHex(t, 20),
		Root:      filepath.Join(dir, "data"),
		Log:       &syncbuf.Buffer{},
		port:      freeport.String(t),
		bin:       Binary(t),
	}
	s.Endpoint = "https://127.0.0.1:" + s.port
	require.NoError(t, os.Mkdir(s.Root, 0o755))
	s.AccessKeyFile = writeFile(t, dir, "access-key", s.AccessKey)
	s.SecretKeyFile = writeFile(t, dir, "secret-key", s.SecretKey)
	s.CAFile, s.cert, s.key, s.pool = makeTLS(t, dir)
	t.Cleanup(func() { s.Stop(t) })
	s.Restart(t)
	s.request(t, http.MethodPut, "/"+bucket, nil)
	return s
}

// Binary is the path of the pinned versitygw, built the first time it is
// asked for on this machine (about 3 minutes on 2 cores).
func Binary(t testing.TB) string {
	t.Helper()
	tools := filepath.Join(testenv.Root(t), "hack", "tools.sh")
	out, err := exec.Command(tools, "dir", "versitygw").Output()
	require.NoError(t, err)
	bin := filepath.Join(strings.TrimSpace(string(out)), "versitygw")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	// Test processes of one run may all ask at once: one builds.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "deckhand-versitygw.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	b, err := exec.Command(tools, "build", "versitygw").CombinedOutput()
	require.NoError(t, err, "hack/tools.sh build versitygw:\n%s", b)
	return bin
}

// Restart starts the server again (on the same port, over the same
// directory) after Stop; a running server is left as it is.
func (s *Store) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command(s.bin, "--port", "127.0.0.1:"+s.port, "--cert", s.cert, "--key", s.key, "--quiet",
		"posix", s.Root)
	// The keys go through the environment, never the command line.
	cmd.Env = []string{"ROOT_ACCESS_KEY_ID=" + s.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s.SecretKey, "PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = s.Log, s.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	s.cmd, s.done = cmd, done
	client := s.client()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			s.cmd = nil
			t.Fatalf("versitygw exited: %v\n%s", err, s.Log.String())
		default:
		}
		resp, err := client.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw did not answer on %s within 30 s: %v\n%s", s.Endpoint, err, s.Log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the server (the store "down"); Restart brings it back.
func (s *Store) Stop(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	s.cmd = nil
}

// Keys are the objects of the bucket under prefix, sorted, as the POSIX
// directory holds them (versitygw writes an object to a temporary file and
// links it in when it is complete, so a listed key is a whole object).
func (s *Store) Keys(t testing.TB, prefix string) []string {
	t.Helper()
	bucket := filepath.Join(s.Root, s.Bucket)
	var keys []string
	err := filepath.WalkDir(filepath.Join(bucket, prefix), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".sgwtmp") {
			return filepath.SkipDir // uploads under way
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(bucket, path)
			keys = append(keys, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(keys)
	return keys
}

// Path is where key's object is a file (a test may damage it there).
func (s *Store) Path(key string) string {
	return filepath.Join(s.Root, s.Bucket, filepath.FromSlash(key))
}

func (s *Store) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: s.pool, MinVersion: tls.VersionTLS12},
	}}
}

// request sends a request signed with AWS Signature Version 4, path-style,
// and requires a 2xx answer.
func (s *Store) request(t testing.TB, method, path string, body []byte) []byte {
	t.Helper()
	req, err := http.NewRequest(method, s.Endpoint+path, bytes.NewReader(body))
	require.NoError(t, err)
	sign(req, body, s.AccessKey, s.SecretKey, time.Now().UTC())
	resp, err := s.client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	require.True(t, resp.StatusCode/100 == 2, "%s %s: %s\n%s", method, path, resp.Status, out)
	return out
}

// sign adds SigV4 headers for S3 (no query string, payload hashed).
func sign(req *http.Request, body []byte, access, secret string, now time.Time) {
	date, stamp := now.Format("20060102"), now.Format("20060102T150405Z")
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	req.Header.Set("x-amz-date", stamp)
	req.Header.Set("x-amz-content-sha256", payload)
	signed := "host;x-amz-content-sha256;x-amz-date"
	canonical := strings.Join([]string{
		req.Method, req.URL.EscapedPath(), req.URL.RawQuery,
		"host:" + req.URL.Host + "\nx-amz-content-sha256:" + payload + "\nx-amz-date:" + stamp + "\n",
		signed, payload,
	}, "\n")
	scope := date + "/" + Region + "/s3/aws4_request"
	csum := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + stamp + "\n" + scope + "\n" + hex.EncodeToString(csum[:])
	k := hmacSHA256([]byte("AWS4"+secret), date)
	for _, part := range []string{Region, "s3", "aws4_request"} {
		k = hmacSHA256(k, part)
	}
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		access, scope, signed, hex.EncodeToString(hmacSHA256(k, toSign))))
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// makeTLS writes a fresh CA (ca.crt) and a server certificate it signed
// for 127.0.0.1 and localhost (server.crt, server.key) into dir.
func makeTLS(t testing.TB, dir string) (caFile, certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	pems := ServerTLS(t, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	caFile = writeFile(t, dir, "ca.crt", string(pems.CA))
	certFile = writeFile(t, dir, "server.crt", string(pems.Cert))
	keyFile = writeFile(t, dir, "server.key", string(pems.Key))
	require.NoError(t, os.Chmod(keyFile, 0o600))
	pool = x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pems.CA))
	return caFile, certFile, keyFile, pool
}

// TLS is a store's TLS material, PEM-encoded: a CA made for it, and a
// server certificate that CA signed with its key.
type TLS struct{ CA, Cert, Key []byte }

// ServerTLS makes a fresh CA, valid for a day, and a server certificate
// it signed for the names and addresses given.
func ServerTLS(t testing.TB, names []string, ips []net.IP) TLS {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: "deckhand test store CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	common := ""
	if len(names) > 0 {
		common = names[0]
	} else if len(ips) > 0 {
		common = ips[0].String()
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: common},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips, DNSNames: names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return TLS{
		CA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	require.NoError(t, err)
	return n
}

func writeFile(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
