// Package pki makes and renews the certificates and keys of a control
// plane that Tenantry runs for a tenant: its certificate authorities, the
// API server's serving certificate, the client certificates of its
// components and its users, and the service account signing key.
//
// Certificates are ECDSA P-256, as kubeadm makes them by choice. A CA
// lives for ten years; a leaf for a year, and is renewed once a third of
// its life is left (see Renew).
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Lifetimes of what this package makes.
const (
	CALifetime   = 10 * 365 * 24 * time.Hour
	LeafLifetime = 365 * 24 * time.Hour
)

// ErrNotSignedBy is returned by Parse when a certificate was not signed by
// the CA it is checked against.
var ErrNotSignedBy = errors.New("certificate not signed by the CA")

// KeyPair is a certificate and its private key, parsed and in PEM.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// Usage is what a leaf certificate is for.
type Usage int

const (
	// Server certificates serve TLS.
	Server Usage = iota
	// Client certificates authenticate to a server.
	Client
	// Peer certificates do both: a member of a cluster (etcd's) serves
	// its peers and is their client.
	Peer
)

// Leaf describes a certificate for Issue: its subject, and for a server,
// the names and addresses it serves.
type Leaf struct {
	CommonName   string
	Organization []string
	Usage        Usage
	DNSNames     []string
	IPs          []net.IP
}

// NewCA makes a self-signed certificate authority named commonName, valid
// from now for CALifetime.
func NewCA(commonName string, now time.Time) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of CA %s: %w", commonName, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute).UTC(),
		NotAfter:              now.Add(CALifetime).UTC(),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing CA %s: %w", commonName, err)
	}
	return pair(der, key)
}

// Issue makes a certificate for leaf, signed by ca, valid from now for
// LeafLifetime (never past the CA's own end).
func (ca *KeyPair) Issue(leaf Leaf, now time.Time) (*KeyPair, error) {
	if leaf.CommonName == "" {
		return nil, errors.New("issuing a certificate: no common name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of %s: %w", leaf.CommonName, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(LeafLifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: leaf.CommonName, Organization: leaf.Organization},
		NotBefore:    now.Add(-time.Minute).UTC(),
		NotAfter:     notAfter.UTC(),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     leaf.DNSNames,
		IPAddresses:  leaf.IPs,
	}
	switch leaf.Usage {
	case Server:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	case Client:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case Peer:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	default:
		return nil, fmt.Errorf("issuing %s: unknown usage %d", leaf.CommonName, leaf.Usage)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", leaf.CommonName, err)
	}
	return pair(der, key)
}

// Parse reads a certificate and its key from PEM; with ca, it also checks
// that ca signed the certificate.
func Parse(certPEM, keyPEM []byte, ca *KeyPair) (*KeyPair, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("reading the certificate: %w", err)
	}
	parsed, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("reading the key: %w", err)
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the key is a %T, which cannot sign", parsed)
	}
	if !publicKeysEqual(certs[0].PublicKey, key.Public()) {
		return nil, errors.New("the key is not the certificate's")
	}
	if ca != nil {
		if err := certs[0].CheckSignatureFrom(ca.Cert); err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrNotSignedBy, ca.Cert.Subject.CommonName, err)
		}
	}
	return &KeyPair{Cert: certs[0], Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Renew says whether cert should be made anew at now: once a third of its
// life is left, or when it no longer matches leaf (a name or address it
// must serve, its subject).
func Renew(cert *x509.Certificate, leaf *Leaf, now time.Time) bool {
	life := cert.NotAfter.Sub(cert.NotBefore)
	if now.After(cert.NotAfter.Add(-life / 3)) {
		return true
	}
	if leaf == nil {
		return false
	}
	if cert.Subject.CommonName != leaf.CommonName || !slices.Equal(cert.Subject.Organization, leaf.Organization) {
		return true
	}
	for _, name := range leaf.DNSNames {
		if !slices.Contains(cert.DNSNames, name) {
			return true
		}
	}
	for _, ip := range leaf.IPs {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return true
		}
	}
	return false
}

// NewSigningKey makes a key for signing service account tokens, and its
// public key, in PEM.
func NewSigningKey() (private, public []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the service account signing key: %w", err)
	}
	private, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the service account signing key: %w", err)
	}
	public, err = encodePublicKey(key.Public())
	return private, public, err
}

func pair(der []byte, key *ecdsa.PrivateKey) (*KeyPair, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("reading the certificate just made: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the key: %w", err)
	}
	return &KeyPair{Cert: cert, Key: key, CertPEM: pemBlock(certutil.CertificateBlockType, der), KeyPEM: keyPEM}, nil
}

func serialNumber() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("drawing a serial number: %w", err)
	}
	return serial, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

func encodePublicKey(key crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the public key: %w", err)
	}
	return pemBlock("PUBLIC KEY", der), nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
