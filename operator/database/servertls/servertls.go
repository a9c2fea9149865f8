// Package servertls decides the certificates a Database's servers present
// to their clients (applications, standbys, backup Jobs): a server CA per
// Database, a sibling of the instance channel's CA and never that CA
// itself (the agent trusts every client certificate its CA signs, so a
// key signed by it must never reach a pod as a server key), or a
// certificate the user brings. Pure: no API server, a clock given.
//
// The material is kept in two Secrets the operator owns:
//   - the operator's (OperatorData): the CA's key, and the CA being
//     introduced during a CA change; never mounted in a pod;
//   - the pods' (PodData, type kubernetes.io/tls): tls.crt and tls.key,
//     the one server certificate every server of the Database presents
//     (its names are every name a client uses), and ca.crt, the bundle a
//     client trusts: during a CA change it holds the old and the new CA.
package servertls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/deckhand-dev/deckhand/internal/pki"
)

// Keys of the operator's Secret.
const (
	CACertKey     = "ca.crt"
	CAKeyKey      = "ca.key"
	NextCACertKey = "next-ca.crt"
	NextCAKeyKey  = "next-ca.key"
	// RetiredKey holds the CA certificates that left the bundle's core
	// (a CA replaced, a user's CA changed), each with a PEM header
	// Retired-Until: they stay in the bundle until then.
	RetiredKey = "retired-ca.crt"
	// UserCAIntroducedKey is when the CA of a user's certificate that is
	// not served yet entered the bundle (RFC 3339).
	UserCAIntroducedKey = "user-ca-introduced"
)

// Keys of the pods' Secret (those of a kubernetes.io/tls Secret, and
// cert-manager's ca.crt).
const (
	TLSCertKey = "tls.crt"
	TLSKeyKey  = "tls.key"
	BundleKey  = "ca.crt"
)

// Lifetimes. The server certificate lives 90 days and is issued again
// once two thirds of its life have passed (day 60), or at once when the
// names it must carry change. The CA lives 5 years; at two thirds of its
// life a new CA is introduced into the bundle, and it signs the server
// certificate only CAOverlap later, so clients that read the bundle in
// between trust both. A CA that left the bundle's core stays in it for
// CAOverlap more.
const (
	CALifetime   = 5 * 365 * 24 * time.Hour
	LeafLifetime = 90 * 24 * time.Hour
	CAOverlap    = 7 * 24 * time.Hour
	// UserCAPropagation is how long the CA of a user's certificate is in
	// the bundle before the servers present the certificate: the kubelet
	// refreshes a mounted Secret within about a minute, so a client that
	// reads ca.crt from its volume trusts the new CA before it meets it.
	UserCAPropagation = 3 * time.Minute
	retiredHeader     = "Retired-Until"
	clockAllowance    = time.Hour // clocks of nodes differ a little
)

// Hosts are the names a Database's servers answer to: the read-write and
// read-only Services and every pod under the headless Service, each bare
// and with .<namespace>, .<namespace>.svc and .<namespace>.svc.cluster.local.
func Hosts(rw, ro, headless, namespace string, pods []string) []string {
	var bases []string
	bases = append(bases, rw, ro)
	for _, p := range pods {
		bases = append(bases, p+"."+headless)
	}
	var out []string
	for _, b := range bases {
		out = append(out, b, b+"."+namespace, b+"."+namespace+".svc", b+"."+namespace+".svc.cluster.local")
	}
	return out
}

// Event says what Plan changed.
type Event string

const (
	// Issued: the first CA and server certificate.
	Issued Event = "CertificateIssued"
	// Renewed: a new server certificate under the same CA (due, or the
	// names changed).
	Renewed Event = "CertificateRenewed"
	// CAIntroduced: a new CA is in the bundle; it signs from CAOverlap on.
	CAIntroduced Event = "CAIntroduced"
	// CARotated: the introduced CA signs the server certificate now.
	CARotated Event = "CARotated"
	// UserCertificate: the user's certificate is now the one served (new,
	// or renewed by its issuer).
	UserCertificate Event = "UserCertificateInstalled"
	// UserCAIntroduced: the CA of the user's certificate is in the bundle;
	// the servers present the certificate UserCAPropagation later.
	UserCAIntroduced Event = "UserCAIntroduced"
)

// Result is what the two Secrets must hold.
type Result struct {
	Operator, Pods map[string][]byte
	// Changed: either differs from what was given.
	Changed bool
	// Events: what changed, in order.
	Events []Event
	// NotAfter is when the served certificate expires; Next is when Plan
	// must run again at the latest (a renewal, a CA step, a retired CA
	// leaving the bundle).
	NotAfter, Next time.Time
}

// Generated is the plan for a generated certificate, given what the
// Secrets hold (nil maps: they do not exist yet).
func Generated(operator, pods map[string][]byte, namespace, name string, hosts []string, now time.Time) (*Result, error) {
	res := &Result{Operator: map[string][]byte{}}
	ca, caErr := loadCA(operator[CACertKey], operator[CAKeyKey])
	next, _ := loadCA(operator[NextCACertKey], operator[NextCAKeyKey])
	first := caErr != nil
	switch {
	case caErr != nil:
		var err error
		if ca, err = NewCA(namespace, name, now); err != nil {
			return nil, err
		}
		next = nil
		res.Events = append(res.Events, Issued)
	case next != nil && !now.Before(next.Cert.NotBefore.Add(clockAllowance+CAOverlap)):
		ca, next = next, nil
		res.Events = append(res.Events, CARotated)
	case next == nil && pastTwoThirds(ca.Cert, now):
		var err error
		if next, err = NewCA(namespace, name, now); err != nil {
			return nil, err
		}
		res.Events = append(res.Events, CAIntroduced)
	}
	res.Operator[CACertKey], res.Operator[CAKeyKey] = ca.CertPEM, ca.KeyPEM
	core := [][]byte{ca.CertPEM}
	if next != nil {
		res.Operator[NextCACertKey], res.Operator[NextCAKeyKey] = next.CertPEM, next.KeyPEM
		core = append(core, next.CertPEM)
		res.Next = next.Cert.NotBefore.Add(clockAllowance + CAOverlap)
	} else {
		res.Next = twoThirds(ca.Cert)
	}

	res.Pods = map[string][]byte{TLSCertKey: pods[TLSCertKey], TLSKeyKey: pods[TLSKeyKey]}
	leaf := parseCert(pods[TLSCertKey])
	if leaf == nil || leaf.CheckSignatureFrom(ca.Cert) != nil || pastTwoThirds(leaf, now) || !slices.Equal(leaf.DNSNames, dnsNames(hosts)) || !keyMatches(pods[TLSCertKey], pods[TLSKeyKey]) {
		certPEM, keyPEM, err := ca.IssueServer(hosts, now)
		if err != nil {
			return nil, err
		}
		res.Pods[TLSCertKey], res.Pods[TLSKeyKey] = certPEM, keyPEM
		leaf = parseCert(certPEM)
		if !first && !slices.Contains(res.Events, CARotated) {
			res.Events = append(res.Events, Renewed)
		}
	}
	res.NotAfter = leaf.NotAfter
	res.Next = earliest(res.Next, twoThirds(leaf))
	bundle(res, operator, pods, core, now)
	res.Changed = !maps.EqualFunc(res.Operator, operator, bytes.Equal) || !maps.EqualFunc(res.Pods, pods, bytes.Equal)
	return res, nil
}

// User is the plan for the user's certificate (the data of a
// kubernetes.io/tls Secret with ca.crt), checked by CheckUser first. The
// operator's Secret keeps its CA (a way back to a generated certificate)
// and the retired CAs.
//
// A certificate whose CA the bundle lacks is not served at once: its CA
// enters the bundle first (beside the CAs there, which stay for
// CAOverlap), and the servers present it UserCAPropagation later, so
// that clients verifying with verify-full against a mounted ca.crt never
// meet a certificate they cannot verify. A first certificate (no client
// yet) and one from a CA the bundle has (a renewal by the same issuer)
// are served at once.
func User(user, operator, pods map[string][]byte, now time.Time) *Result {
	res := &Result{Operator: map[string][]byte{}, Pods: map[string][]byte{TLSCertKey: user[TLSCertKey], TLSKeyKey: user[TLSKeyKey]}}
	for _, k := range []string{CACertKey, CAKeyKey, NextCACertKey, NextCAKeyKey} {
		if v, ok := operator[k]; ok {
			res.Operator[k] = v
		}
	}
	userCAs := splitPEM(user[BundleKey])
	switching := len(pods[TLSCertKey]) > 0 && !bytes.Equal(pods[TLSCertKey], user[TLSCertKey])
	if introduced, waiting := userCAWait(operator, pods, userCAs, now); switching && waiting {
		// Serve what is served; publish the user's CA.
		res.Pods[TLSCertKey], res.Pods[TLSKeyKey] = pods[TLSCertKey], pods[TLSKeyKey]
		if introduced.IsZero() {
			introduced = now
			res.Events = append(res.Events, UserCAIntroduced)
		}
		res.Operator[UserCAIntroducedKey] = []byte(introduced.UTC().Format(time.RFC3339))
		res.NotAfter = parseCert(pods[TLSCertKey]).NotAfter
		res.Next = introduced.Add(UserCAPropagation)
		bundle(res, operator, pods, userCAs, now)
		res.Changed = !maps.EqualFunc(res.Operator, operator, bytes.Equal) || !maps.EqualFunc(res.Pods, pods, bytes.Equal)
		return res
	}
	if !bytes.Equal(pods[TLSCertKey], user[TLSCertKey]) {
		res.Events = append(res.Events, UserCertificate)
	}
	leaf := parseCert(user[TLSCertKey])
	res.NotAfter = leaf.NotAfter
	res.Next = leaf.NotAfter
	bundle(res, operator, pods, userCAs, now)
	res.Changed = !maps.EqualFunc(res.Operator, operator, bytes.Equal) || !maps.EqualFunc(res.Pods, pods, bytes.Equal)
	return res
}

// userCAWait says whether the user's CAs must wait in the bundle before
// their certificate is served, and since when they are there (zero: not
// yet, or not all of them: they enter now).
func userCAWait(operator, pods map[string][]byte, userCAs [][]byte, now time.Time) (introduced time.Time, waiting bool) {
	inBundle := map[string]bool{}
	for _, b := range pemBlocks(pods[BundleKey]) {
		inBundle[string(b.Bytes)] = true
	}
	for _, c := range userCAs {
		for _, b := range pemBlocks(c) {
			if !inBundle[string(b.Bytes)] {
				return time.Time{}, true
			}
		}
	}
	since, err := time.Parse(time.RFC3339, string(operator[UserCAIntroducedKey]))
	if err != nil {
		return time.Time{}, false // in the bundle before this switch: trusted already
	}
	return since, now.Before(since.Add(UserCAPropagation))
}

// bundle sets the pods' ca.crt: the core CAs, then every CA the previous
// bundle held that is not in the core and has not expired, for CAOverlap
// from when it left (recorded in the operator's RetiredKey).
func bundle(res *Result, operator, pods map[string][]byte, core [][]byte, now time.Time) {
	retired := map[string]time.Time{} // DER -> until
	// known: retired before, its time over or not (never retired again).
	known := map[string]bool{}
	var order []string
	for _, b := range pemBlocks(operator[RetiredKey]) {
		known[string(b.Bytes)] = true
		until, err := time.Parse(time.RFC3339, b.Headers[retiredHeader])
		if err != nil || !now.Before(until) {
			continue
		}
		if _, ok := retired[string(b.Bytes)]; !ok {
			order = append(order, string(b.Bytes))
		}
		retired[string(b.Bytes)] = until
	}
	inCore := map[string]bool{}
	for _, c := range core {
		for _, b := range pemBlocks(c) {
			inCore[string(b.Bytes)] = true
		}
	}
	for _, b := range pemBlocks(pods[BundleKey]) {
		if inCore[string(b.Bytes)] {
			continue
		}
		if known[string(b.Bytes)] {
			continue
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil || !now.Before(cert.NotAfter) {
			continue
		}
		retired[string(b.Bytes)] = now.Add(CAOverlap)
		order = append(order, string(b.Bytes))
	}
	var out, kept bytes.Buffer
	for _, c := range core {
		for _, b := range pemBlocks(c) {
			_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})
		}
	}
	for _, der := range order {
		if inCore[der] {
			continue
		}
		until := retired[der]
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: []byte(der)})
		_ = pem.Encode(&kept, &pem.Block{Type: "CERTIFICATE", Headers: map[string]string{retiredHeader: until.UTC().Format(time.RFC3339)}, Bytes: []byte(der)})
		res.Next = earliest(res.Next, until)
	}
	res.Pods[BundleKey] = out.Bytes()
	if kept.Len() > 0 {
		res.Operator[RetiredKey] = kept.Bytes()
	}
}

// CheckUser says what is wrong with the user's Secret data, in words a
// person can act on; nil when it can be served: tls.crt and tls.key are a
// pair, the certificate is valid now and for serverAuth, ca.crt holds
// the CA that issued it, and it carries every name in required (the names
// the servers reach each other by: replication and backups verify them).
func CheckUser(secret string, data map[string][]byte, required []string, now time.Time) error {
	for _, k := range []string{TLSCertKey, TLSKeyKey, BundleKey} {
		if len(data[k]) == 0 {
			return fmt.Errorf("Secret %s has no %s: it must be a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt (the CA that issued tls.crt, as cert-manager writes it)", secret, k)
		}
	}
	pair, err := tls.X509KeyPair(data[TLSCertKey], data[TLSKeyKey])
	if err != nil {
		return fmt.Errorf("Secret %s: tls.crt and tls.key are not a certificate and its key: %v", secret, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("Secret %s: tls.crt: %v", secret, err)
	}
	if now.Before(leaf.NotBefore) || !now.Before(leaf.NotAfter) {
		return fmt.Errorf("Secret %s: tls.crt is valid from %s to %s, not now", secret, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data[BundleKey]) {
		return fmt.Errorf("Secret %s: ca.crt holds no PEM certificate", secret)
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("Secret %s: tls.crt does not verify against its ca.crt for server authentication: %v", secret, err)
	}
	var missing []string
	for _, h := range required {
		if leaf.VerifyHostname(h) != nil {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("Secret %s: tls.crt does not name %s, which standbys and backups connect to with sslmode=verify-full (add them to its DNS names)", secret, strings.Join(missing, ", "))
	}
	return nil
}

// CA is a server CA.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a server CA named after the Database namespace/name.
func NewCA(namespace, name string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "deckhand server CA " + namespace + "/" + name},
		NotBefore:             now.Add(-clockAllowance),
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

func loadCA(certPEM, keyPEM []byte) (*CA, error) {
	if len(certPEM) == 0 {
		return nil, errors.New("no CA")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("the CA's key is not an ECDSA key")
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("not a CA certificate")
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// IssueServer is a server certificate for hosts (names that are IP
// addresses become IP SANs), valid LeafLifetime or until the CA expires.
func (ca *CA) IssueServer(hosts []string, now time.Time) (certPEM, keyOut []byte, err error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("server certificate: no names")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		DNSNames:    dnsNames(hosts),
		IPAddresses: ipAddresses(hosts),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		NotBefore:   now.Add(-clockAllowance),
		NotAfter:    now.Add(LeafLifetime),
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	certPEM, _, err = pki.Sign(tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, pki.KeyPEM(key), nil
}

func dnsNames(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		if net.ParseIP(h) == nil {
			out = append(out, h)
		}
	}
	return out
}

func ipAddresses(hosts []string) []net.IP {
	var out []net.IP
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			out = append(out, ip)
		}
	}
	return out
}

func keyMatches(certPEM, keyPEM []byte) bool {
	_, err := tls.X509KeyPair(certPEM, keyPEM)
	return err == nil
}

// parseCert is the first certificate of a PEM text, nil when there is
// none.
func parseCert(certPEM []byte) *x509.Certificate {
	for _, b := range pemBlocks(certPEM) {
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			return c
		}
		return nil
	}
	return nil
}

// ParseCert is the first certificate of a PEM text, nil when there is
// none.
func ParseCert(certPEM []byte) *x509.Certificate { return parseCert(certPEM) }

func pemBlocks(text []byte) []*pem.Block {
	var out []*pem.Block
	for {
		var b *pem.Block
		b, text = pem.Decode(text)
		if b == nil {
			return out
		}
		if b.Type == "CERTIFICATE" {
			out = append(out, b)
		}
	}
}

func splitPEM(text []byte) [][]byte {
	var out [][]byte
	for _, b := range pemBlocks(text) {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes}))
	}
	return out
}

func twoThirds(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

func pastTwoThirds(c *x509.Certificate, now time.Time) bool {
	return now.Before(c.NotBefore) || !now.Before(twoThirds(c))
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
