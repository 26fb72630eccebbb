package testing

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// kubeletClientUser is the identity a cluster's API server presents to
// kubelets, as kubeadm names it. It is no member of system:masters: the
// cluster binds it to the ClusterRole system:kubelet-api-admin (see
// bindKubeletClient), which is all that a kubelet's webhook authorization,
// or Tenantry's kubelet API, lets it do.
var kubeletClientUser = envtest.User{Name: "kube-apiserver-kubelet-client"}

// kubeletClientBinding binds kubeletClientUser to system:kubelet-api-admin.
const kubeletClientBinding = "tenantry-kit:kube-apiserver-kubelet-client"

// clientCertAuthn authenticates a control plane's clients by certificates
// of a client CA of its own, as envtest's default does, and also gives its
// API server a kubelet client certificate from that CA
// (--kubelet-client-certificate), as a kubeadm cluster has: a kubelet of
// the cluster, or Tenantry's kubelet API of virtual nodes, then knows the
// API server by it.
//
// It also sets up the aggregation layer as kubeadm does: a front proxy CA
// of its own, whose client certificate (frontProxyUser) the API server
// presents to aggregated API servers and webhooks that read
// extension-apiserver-authentication, and whose requests carry the user
// in X-Remote-* headers.
type clientCertAuthn struct {
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	// frontProxyCA and its key sign frontProxyUser's certificate.
	frontProxyCA    *x509.Certificate
	frontProxyCAKey *ecdsa.PrivateKey
	dir             string
}

// frontProxyUser is the identity the API server presents to aggregated
// API servers, as kubeadm names it.
var frontProxyUser = envtest.User{Name: "front-proxy-client"}

var _ envtest.Authn = (*clientCertAuthn)(nil)

func newClientCertAuthn() (*clientCertAuthn, error) {
	ca, key, err := NewCA("tenantry-test-client-ca")
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	proxyCA, proxyKey, err := NewCA("tenantry-test-front-proxy-ca")
	if err != nil {
		return nil, fmt.Errorf("front proxy CA: %w", err)
	}
	return &clientCertAuthn{ca: ca, caKey: key, frontProxyCA: proxyCA, frontProxyCAKey: proxyKey}, nil
}

// NewCA makes a self-signed CA of commonName and its key (ECDSA P-256),
// valid from an hour ago for ten years, for tests that issue
// certificates, such as a signer of PodCertificateRequests.
func NewCA(commonName string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return ca, key, nil
}

// CACertificatePEM is the PEM CERTIFICATE block of a new self-signed CA
// of commonName, for tests that need a certificate, such as the trust
// anchors of a ClusterTrustBundle; its key is thrown away.
func CACertificatePEM(commonName string) ([]byte, error) {
	ca, _, err := NewCA(commonName)
	if err != nil {
		return nil, fmt.Errorf("a CA certificate of %s: %w", commonName, err)
	}
	return pemBlock("CERTIFICATE", ca.Raw), nil
}

func (a *clientCertAuthn) caPath() string { return filepath.Join(a.dir, "client-ca.crt") }

// Configure points the API server at the client CA and its kubelet client
// certificate, which Start writes.
func (a *clientCertAuthn) Configure(dir string, args *envtest.Arguments) error {
	a.dir = dir
	args.Set("client-ca-file", a.caPath())
	args.Set("kubelet-client-certificate", filepath.Join(dir, "kubelet-client.crt"))
	args.Set("kubelet-client-key", filepath.Join(dir, "kubelet-client.key"))
	args.Set("requestheader-client-ca-file", filepath.Join(dir, "front-proxy-ca.crt"))
	args.Set("requestheader-allowed-names", frontProxyUser.Name)
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", filepath.Join(dir, "front-proxy-client.crt"))
	args.Set("proxy-client-key-file", filepath.Join(dir, "front-proxy-client.key"))
	return nil
}

// Start writes the client CA, the front proxy CA and the client
// certificates the API server presents (to kubelets, and to aggregated API
// servers), anew at each start, from the same CAs: an API server restarted
// on the same directory trusts and is trusted as before.
func (a *clientCertAuthn) Start() error {
	if a.dir == "" {
		return fmt.Errorf("client certificate authn started before it was configured")
	}
	if err := os.WriteFile(a.caPath(), pemBlock("CERTIFICATE", a.ca.Raw), 0o600); err != nil {
		return fmt.Errorf("writing the client CA: %w", err)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "front-proxy-ca.crt"), pemBlock("CERTIFICATE", a.frontProxyCA.Raw), 0o600); err != nil {
		return fmt.Errorf("writing the front proxy CA: %w", err)
	}
	for _, c := range []struct {
		file  string
		user  envtest.User
		ca    *x509.Certificate
		caKey *ecdsa.PrivateKey
		what  string
	}{
		{"kubelet-client", kubeletClientUser, a.ca, a.caKey, "kubelet client"},
		{"front-proxy-client", frontProxyUser, a.frontProxyCA, a.frontProxyCAKey, "front proxy client"},
	} {
		crt, key, err := issueClientCertificate(c.user, c.ca, c.caKey)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(a.dir, c.file+".crt"), crt, 0o600); err != nil {
			return fmt.Errorf("writing the %s certificate: %w", c.what, err)
		}
		if err := os.WriteFile(filepath.Join(a.dir, c.file+".key"), key, 0o600); err != nil {
			return fmt.Errorf("writing the %s key: %w", c.what, err)
		}
	}
	return nil
}

// AddUser gives base a client certificate for user.
func (a *clientCertAuthn) AddUser(user envtest.User, base *rest.Config) (*rest.Config, error) {
	crt, key, err := issueClientCertificate(user, a.ca, a.caKey)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(base)
	cfg.CertData, cfg.KeyData = crt, key
	return cfg, nil
}

func (a *clientCertAuthn) Stop() error { return nil }

// issueClientCertificate signs a client certificate for user with ca, in
// PEM.
func issueClientCertificate(user envtest.User, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (crt, key []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("client key of %s: %w", user.Name, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: user.Name, Organization: user.Groups},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("client certificate of %s: %w", user.Name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
