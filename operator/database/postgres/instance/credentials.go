package instance

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/deckhand-dev/deckhand/internal/pki"
)

// Mutual TLS between the operator and the agents, per Database: a CA of
// its own, a server certificate per instance (its names under the
// headless Service) and one client certificate, the operator's. Nothing
// but that CA's certificates is trusted either way, so a client
// certificate of another Database, or of the cluster's CA, is refused.
//
// The material is kept in two Secrets the operator owns:
//   - the operator's (OperatorSecretData): the CA's key and the client
//     certificate and key; never mounted in a pod;
//   - the pods' (PodSecretData): the CA certificate and each instance's
//     server certificate and key (<pod>.crt, <pod>.key), mounted in every
//     pod of the StatefulSet (one template); the agent serves the pair
//     named by its pod. Server certificates are for server authentication
//     only, so no pod can call another's agent as the operator.

// Secret keys.
const (
	CACertKey     = "ca.crt"
	CAKeyKey      = "ca.key"
	ClientCertKey = "client.crt"
	ClientKeyKey  = "client.key"
)

// ServerCertKey and ServerKeyKey name pod's pair in the pods' Secret.
func ServerCertKey(pod string) string { return pod + ".crt" }
func ServerKeyKey(pod string) string  { return pod + ".key" }

// ClientCommonName is the operator's certificate's subject.
const ClientCommonName = "deckhand-operator"

// Lifetimes: the CA outlives many leaf renewals; a leaf is renewed once
// two thirds of its life have passed (NeedsRenewal), so a missed
// reconcile or two never lets one expire.
const (
	CALifetime   = 5 * 365 * 24 * time.Hour
	LeafLifetime = 90 * 24 * time.Hour
)

// Instance names a pod and the DNS names it answers to.
type Instance struct {
	Pod string
	// Hosts are the pod's names under the headless Service (PodHosts).
	Hosts []string
}

// PodHosts are pod's DNS names under the headless Service headless of
// namespace: the fully qualified one first, which the client dials.
func PodHosts(pod, headless, namespace string) []string {
	base := pod + "." + headless
	return []string{base + "." + namespace + ".svc", base + "." + namespace + ".svc.cluster.local", base + "." + namespace, base}
}

// CA is a Database's certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a CA named after the Database namespace/name.
func NewCA(namespace, name string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "deckhand instance CA " + namespace + "/" + name},
		NotBefore:             now.Add(-time.Hour), // clocks of nodes differ a little
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	certPEM, cert, err := pki.Sign(tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: pki.KeyPEM(key)}, nil
}

// LoadCA reads a CA from its PEM certificate and key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("instance CA: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("instance CA: the key is not an ECDSA key")
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("instance CA: the certificate is not a CA's")
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Pair is a PEM certificate and its key.
type Pair struct{ CertPEM, KeyPEM []byte }

// IssueServer is inst's server certificate.
func (ca *CA) IssueServer(inst Instance, now time.Time) (Pair, error) {
	if len(inst.Hosts) == 0 {
		return Pair{}, fmt.Errorf("server certificate of %s: no DNS names", inst.Pod)
	}
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: inst.Hosts[0]},
		DNSNames:    inst.Hosts,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, now)
}

// IssueClient is the operator's client certificate.
func (ca *CA) IssueClient(now time.Time) (Pair, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: ClientCommonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, now)
}

func (ca *CA) issue(tmpl *x509.Certificate, now time.Time) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(LeafLifetime)
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	certPEM, _, err := pki.Sign(tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: certPEM, KeyPEM: pki.KeyPEM(key)}, nil
}

// Credentials are a Database's whole set.
type Credentials struct {
	CA      *CA
	Client  Pair
	Servers map[string]Pair // by pod
}

// IssueCredentials makes a new CA and every certificate under it.
func IssueCredentials(namespace, name string, instances []Instance, now time.Time) (*Credentials, error) {
	ca, err := NewCA(namespace, name, now)
	if err != nil {
		return nil, err
	}
	return ca.IssueAll(instances, now)
}

// IssueAll issues the client certificate and every instance's under ca
// (a renewal keeps the CA, so the pods' trust does not change).
func (ca *CA) IssueAll(instances []Instance, now time.Time) (*Credentials, error) {
	c := &Credentials{CA: ca, Servers: map[string]Pair{}}
	var err error
	if c.Client, err = ca.IssueClient(now); err != nil {
		return nil, err
	}
	for _, inst := range instances {
		if c.Servers[inst.Pod], err = ca.IssueServer(inst, now); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// OperatorSecretData is the operator's Secret: never mounted in a pod.
func (c *Credentials) OperatorSecretData() map[string][]byte {
	return map[string][]byte{
		CACertKey: c.CA.CertPEM, CAKeyKey: c.CA.KeyPEM,
		ClientCertKey: c.Client.CertPEM, ClientKeyKey: c.Client.KeyPEM,
	}
}

// PodSecretData is the pods' Secret: the CA certificate (never its key)
// and each instance's server pair.
func (c *Credentials) PodSecretData() map[string][]byte {
	data := map[string][]byte{CACertKey: c.CA.CertPEM}
	for pod, p := range c.Servers {
		data[ServerCertKey(pod)], data[ServerKeyKey(pod)] = p.CertPEM, p.KeyPEM
	}
	return data
}

// NeedsRenewal says whether the PEM certificate must be issued again at
// now: unreadable, not yet valid, or past two thirds of its life.
func NeedsRenewal(certPEM []byte, now time.Time) bool {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return true
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return true
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	return now.Before(cert.NotBefore) || now.After(cert.NotBefore.Add(life*2/3))
}

// ClientTLSConfig is the operator's side: its certificate, and only the
// Database's CA trusted for the agents' certificates, whose names are
// checked against the host dialled (the pod's name under the headless
// Service).
func ClientTLSConfig(caPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("instance client: no CA certificate in the PEM")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("instance client certificate: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}, nil
}

// ServerTLSConfig is the agent's side: the files are read from dir (the
// pods' Secret mounted) at every handshake, so a renewed certificate or a
// CA bundle updated by the kubelet takes effect without a restart. Only
// clients with a certificate from that CA are accepted.
func ServerTLSConfig(dir, pod string) (*tls.Config, error) {
	if _, err := loadServerConfig(dir, pod); err != nil {
		return nil, err // refuse to start without usable files
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return loadServerConfig(dir, pod)
		},
	}, nil
}

func loadServerConfig(dir, pod string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(filepath.Join(dir, CACertKey))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no CA certificate", filepath.Join(dir, CACertKey))
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerCertKey(pod)), filepath.Join(dir, ServerKeyKey(pod)))
	if err != nil {
		return nil, fmt.Errorf("server certificate of %s: %w", pod, err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}
