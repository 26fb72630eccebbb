package pki_test

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"k8s.io/client-go/util/keyutil"

	"github.com/tenantry/tenantry/pkg/controlplane/pki"
)

func TestIssueServesAndAuthenticates(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("tenant-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(pki.Leaf{CommonName: "kube-apiserver", Usage: pki.Server,
		DNSNames: []string{"kubernetes.default.svc"}, IPs: []net.IP{net.ParseIP("10.96.0.1")}}, now)
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(pki.Leaf{CommonName: "admin", Organization: []string{"system:masters"}, Usage: pki.Client}, now)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := server.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "kubernetes.default.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	if err := server.Cert.VerifyHostname("10.96.0.1"); err != nil {
		t.Errorf("serving certificate's address: %v", err)
	}
	if _, err := client.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := client.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate serves TLS")
	}
	peer, err := ca.Issue(pki.Leaf{CommonName: "etcd-peer", Usage: pki.Peer, IPs: []net.IP{net.ParseIP("10.96.0.20")}}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := peer.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("peer certificate, for usage %d: %v", usage, err)
		}
	}
	if _, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM); err != nil {
		t.Errorf("the PEM pair does not load for TLS: %v", err)
	}
	if got := client.Cert.NotAfter.Sub(now); got > pki.LeafLifetime || got < pki.LeafLifetime-time.Minute {
		t.Errorf("a leaf lives %s, want %s", got, pki.LeafLifetime)
	}
}

func TestParseChecksKeyAndSigner(t *testing.T) {
	now := time.Now()
	ca, _ := pki.NewCA("tenant-ca", now)
	other, _ := pki.NewCA("other-ca", now)
	leaf, err := ca.Issue(pki.Leaf{CommonName: "admin", Usage: pki.Client}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Parse(leaf.CertPEM, leaf.KeyPEM, ca); err != nil {
		t.Errorf("its own pair: %v", err)
	}
	if _, err := pki.Parse(leaf.CertPEM, leaf.KeyPEM, other); !errors.Is(err, pki.ErrNotSignedBy) {
		t.Errorf("against another CA: %v, want ErrNotSignedBy", err)
	}
	if _, err := pki.Parse(leaf.CertPEM, other.KeyPEM, nil); err == nil {
		t.Error("a key of another certificate was taken")
	}
	if _, err := pki.Parse([]byte("not a certificate"), leaf.KeyPEM, nil); err == nil {
		t.Error("garbage was taken for a certificate")
	}
}

func TestRenew(t *testing.T) {
	now := time.Now()
	ca, _ := pki.NewCA("tenant-ca", now)
	leaf := pki.Leaf{CommonName: "kube-apiserver", Usage: pki.Server, DNSNames: []string{"api.alpha.svc"}, IPs: []net.IP{net.ParseIP("10.96.0.10")}}
	cert, err := ca.Issue(leaf, now)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		at   time.Time
		leaf *pki.Leaf
		want bool
	}{
		"fresh":                       {now, &leaf, false},
		"half its life on":            {now.Add(pki.LeafLifetime / 2), &leaf, false},
		"a third of its life left":    {now.Add(pki.LeafLifetime*2/3 + time.Hour), &leaf, true},
		"expired":                     {now.Add(2 * pki.LeafLifetime), nil, true},
		"a new address to serve":      {now, &pki.Leaf{CommonName: leaf.CommonName, DNSNames: leaf.DNSNames, IPs: []net.IP{net.ParseIP("10.96.0.11")}}, true},
		"a new name to serve":         {now, &pki.Leaf{CommonName: leaf.CommonName, DNSNames: []string{"api.alpha.svc.cluster.local"}}, true},
		"another subject":             {now, &pki.Leaf{CommonName: "admin"}, true},
		"fewer names than it carries": {now, &pki.Leaf{CommonName: leaf.CommonName}, false},
	} {
		if got := pki.Renew(cert.Cert, tc.leaf, tc.at); got != tc.want {
			t.Errorf("%s: Renew = %v, want %v", name, got, tc.want)
		}
	}
}

func TestSigningKey(t *testing.T) {
	private, public, err := pki.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(private)
	if err != nil {
		t.Fatal(err)
	}
	publics, err := keyutil.ParsePublicKeysPEM(public)
	if err != nil || len(publics) != 1 {
		t.Fatalf("public keys %v: %v", publics, err)
	}
	if !key.(*ecdsa.PrivateKey).PublicKey.Equal(publics[0]) {
		t.Error("the public key is not the private key's")
	}
}
