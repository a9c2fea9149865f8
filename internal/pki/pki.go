// Package pki holds the certificate steps deckhand's CAs share: the
// instance channel's (operator/database/postgres/instance) and the
// servers' (operator/database/servertls).
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
)

// Sign issues tmpl for pub, signed by signer as parent (tmpl itself for a
// self-signed CA), with a random 128-bit serial number. It returns the
// certificate as PEM and parsed.
func Sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert, nil
}

// KeyPEM is an ECDSA private key as PEM.
func KeyPEM(key *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(key) // a P-256 key always marshals
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}
