package kubeletapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca testCA) client(t *testing.T, user string) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: user},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

// A tenant that publishes another tenant's CA among its own client CAs
// does not shut the other out when the host holds the other's CA; where
// neither holds it, the two cannot be told apart and both are refused.
func TestAuthenticatePrefersHostHeldCAs(t *testing.T) {
	caA, caB := newTestCA(t, "a"), newTestCA(t, "b")
	s := &Server{tenants: map[string]*registered{}, byIssuer: map[string]map[string]bool{}}
	register := func(t *testing.T, tenant Tenant) {
		if _, err := s.Register(tenant); err != nil {
			t.Fatal(err)
		}
	}
	// a publishes b's CA beside its own; the host holds each one's own.
	register(t, Tenant{Name: "a", ClientCAs: append(append([]byte{}, caA.pem...), caB.pem...), HostCAs: caA.pem})
	register(t, Tenant{Name: "b", ClientCAs: caB.pem, HostCAs: caB.pem})
	who := func(c *x509.Certificate) (string, error) {
		got, _, err := s.authenticate(&http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}})
		if err != nil {
			return "", err
		}
		return got.Name, nil
	}
	if got, err := who(caB.client(t, "kube-apiserver-kubelet-client")); got != "b" {
		t.Fatalf("b's API server is taken for %q (%v), want b", got, err)
	}
	if got, err := who(caA.client(t, "kube-apiserver-kubelet-client")); got != "a" {
		t.Fatalf("a's API server is taken for %q (%v), want a", got, err)
	}
	// Without host-held CAs, b's certificate verifies for both.
	register(t, Tenant{Name: "b", ClientCAs: caB.pem})
	register(t, Tenant{Name: "a", ClientCAs: append(append([]byte{}, caA.pem...), caB.pem...)})
	if _, err := who(caB.client(t, "x")); err == nil || !strings.Contains(err.Error(), "cannot be told apart") {
		t.Fatalf("a certificate two tenants' CAs verify: %v, want refused", err)
	}
	if _, err := who(newTestCA(t, "c").client(t, "x")); err == nil || !strings.Contains(err.Error(), "not signed by the client CA of any tenant") {
		t.Fatalf("a certificate of no tenant: %v, want refused", err)
	}
}

// A tenant's API server has at most maxRequestsPerTenant requests open at
// once (streams that users hold open among them): the next is refused
// with 429, naming the bound, and another tenant's still gets through.
func TestRequestsPerTenantAreBounded(t *testing.T) {
	caA, caB := newTestCA(t, "a"), newTestCA(t, "b")
	s := &Server{tenants: map[string]*registered{}, byIssuer: map[string]map[string]bool{}}
	for name, ca := range map[string]testCA{"a": caA, "b": caB} {
		if _, err := s.Register(Tenant{Name: name, ClientCAs: ca.pem, HostCAs: ca.pem}); err != nil {
			t.Fatal(err)
		}
	}
	for range maxRequestsPerTenant {
		s.tenants["a"].requests <- struct{}{} // a's streams, all open
	}
	serve := func(c *x509.Certificate, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	if rec := serve(caA.client(t, "kube-apiserver-kubelet-client"), "/containerLogs/default/web/app"); rec.Code != http.StatusTooManyRequests ||
		!strings.Contains(rec.Body.String(), "tenant a has 256 kubelet API requests open") {
		t.Errorf("a's request past its bound: %d %q; want 429 naming the bound", rec.Code, rec.Body.String())
	}
	// b's gets past the bound, to the path's check (an endpoint not
	// served, so that the test needs no tenant API server).
	if rec := serve(caB.client(t, "kube-apiserver-kubelet-client"), "/pods"); rec.Code != http.StatusNotFound {
		t.Errorf("b's request: %d %q; want b unaffected by a's streams (404 for the path)", rec.Code, rec.Body.String())
	}
}
