package instance

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"maps"
	"slices"
	"time"
)

// SecretData is what the two Secrets must hold for instances at now,
// given what they hold (nil maps: they do not exist yet), and whether
// that differs. The reconciler writes both when changed:
//
//   - the CA is kept while it reads back and is within two thirds of its
//     life; else a new CA, and every certificate is issued under it (the
//     channel is refused until the kubelet has updated the pods' copy,
//     about a minute, once in years);
//   - the operator's certificate, and each instance's, is kept unless it
//     is missing, not from this CA, past two thirds of its life, or (a
//     server's) names other hosts;
//   - pods no longer listed lose their pair.
func SecretData(operator, pods map[string][]byte, namespace, name string, instances []Instance, now time.Time) (op, pod map[string][]byte, changed bool, err error) {
	ca, err := LoadCA(operator[CACertKey], operator[CAKeyKey])
	if err != nil || NeedsRenewal(ca.CertPEM, now) {
		if ca, err = NewCA(namespace, name, now); err != nil {
			return nil, nil, false, err
		}
	}
	op = map[string][]byte{CACertKey: ca.CertPEM, CAKeyKey: ca.KeyPEM}
	op[ClientCertKey], op[ClientKeyKey] = operator[ClientCertKey], operator[ClientKeyKey]
	if !current(op[ClientCertKey], ca, now, nil) {
		p, err := ca.IssueClient(now)
		if err != nil {
			return nil, nil, false, err
		}
		op[ClientCertKey], op[ClientKeyKey] = p.CertPEM, p.KeyPEM
	}
	pod = map[string][]byte{CACertKey: ca.CertPEM}
	for _, inst := range instances {
		certKey, keyKey := ServerCertKey(inst.Pod), ServerKeyKey(inst.Pod)
		pod[certKey], pod[keyKey] = pods[certKey], pods[keyKey]
		if !current(pod[certKey], ca, now, inst.Hosts) {
			p, err := ca.IssueServer(inst, now)
			if err != nil {
				return nil, nil, false, err
			}
			pod[certKey], pod[keyKey] = p.CertPEM, p.KeyPEM
		}
	}
	changed = !maps.EqualFunc(op, operator, bytes.Equal) || !maps.EqualFunc(pod, pods, bytes.Equal)
	return op, pod, changed, nil
}

// current: certPEM was issued by ca, needs no renewal at now, and (when
// hosts is given) names exactly hosts.
func current(certPEM []byte, ca *CA, now time.Time, hosts []string) bool {
	if NeedsRenewal(certPEM, now) {
		return false
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes) // NeedsRenewal parsed it
	if err != nil || cert.CheckSignatureFrom(ca.Cert) != nil {
		return false
	}
	return hosts == nil || slices.Equal(cert.DNSNames, hosts)
}
