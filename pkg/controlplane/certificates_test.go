package controlplane_test

import (
	"bytes"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/pki"
)

func spec() controlplane.Spec {
	return controlplane.Spec{Cluster: "alpha", ServiceCIDR: "10.96.0.0/16", ClusterDomain: "cluster.local"}
}

// The PKI is made once, kept while good, and only what is due changes.
func TestCertificatesKeptAndRenewed(t *testing.T) {
	now := time.Now()
	s := spec()
	first, expires, err := s.Certificates(nil, "10.96.0.50", now)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{controlplane.KeyCACert, controlplane.KeyCAKey, controlplane.KeyServingCert, controlplane.KeyServingKey,
		controlplane.KeyKubeletClientCert, controlplane.KeyFrontProxyCACert, controlplane.KeyFrontProxyClientCert,
		controlplane.KeyServiceAccountPrivate, controlplane.KeyServiceAccountPublic, controlplane.KeyControllerManagerKubeconfig} {
		if len(first[key]) == 0 {
			t.Errorf("no %s", key)
		}
	}
	if d := expires.Sub(now); d < pki.LeafLifetime-time.Hour || d > pki.LeafLifetime {
		t.Errorf("first expiry in %s, want a leaf's life", d)
	}

	ca, err := controlplane.CA(first)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.Parse(first[controlplane.KeyServingCert], first[controlplane.KeyServingKey], ca)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, name := range []string{"10.96.0.50", "10.96.0.1", "127.0.0.1", "kubernetes.default.svc.cluster.local", "kube-apiserver.tenantry-cp-alpha.svc"} {
		if _, err := serving.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("the serving certificate for %s: %v", name, err)
		}
	}

	again, _, err := s.Certificates(first, "10.96.0.50", now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range first {
		if !bytes.Equal(again[key], v) {
			t.Errorf("%s changed although it was good", key)
		}
	}

	// A new Service address: the serving certificate alone is made anew.
	moved, _, err := s.Certificates(first, "10.96.0.51", now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range first {
		changed := !bytes.Equal(moved[key], v)
		if want := key == controlplane.KeyServingCert || key == controlplane.KeyServingKey; changed != want {
			t.Errorf("%s changed: %v, want %v", key, changed, want)
		}
	}

	// Nine months on, every leaf is renewed, under the same CAs and key.
	later, expires, err := s.Certificates(first, "10.96.0.50", now.Add(9*30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range first {
		changed := !bytes.Equal(later[key], v)
		// The controller-manager's kubeconfig names its files, which
		// change.
		kept := strings.HasPrefix(key, "ca.") || strings.HasPrefix(key, "front-proxy-ca.") || strings.HasPrefix(key, "sa.") ||
			key == controlplane.KeyControllerManagerKubeconfig
		if changed == kept {
			t.Errorf("%s changed: %v, want %v", key, changed, !kept)
		}
	}
	if !expires.After(now.Add(pki.LeafLifetime)) {
		t.Errorf("after renewal the first expiry is %s", expires)
	}
}

// A CA that is there but unreadable is an error, never replaced: a new
// CA would lock out every client.
func TestCertificatesRefuseABrokenCA(t *testing.T) {
	s := spec()
	data, _, err := s.Certificates(nil, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data[controlplane.KeyCAKey] = []byte("garbage")
	if _, _, err := s.Certificates(data, "", time.Now()); err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Errorf("got %v, want an error naming ca.crt", err)
	}
}

// An admin kubeconfig reaches its server as a member of system:masters,
// and is kept while good.
func TestKubeconfig(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("alpha-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	leaf := pki.Leaf{CommonName: controlplane.AdminUser, Organization: []string{"system:masters"}, Usage: pki.Client}
	kubeconfig, kp, err := controlplane.Kubeconfig(ca, nil, "https://10.96.0.50:443", leaf, now)
	if err != nil {
		t.Fatal(err)
	}
	config, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if config.Host != "https://10.96.0.50:443" || !bytes.Equal(config.CAData, ca.CertPEM) || !bytes.Equal(config.CertData, kp.CertPEM) {
		t.Errorf("config %s, CA and client not the ones made", config.Host)
	}
	if kp.Cert.Subject.Organization[0] != "system:masters" {
		t.Errorf("organization %v", kp.Cert.Subject.Organization)
	}
	same, _, err := controlplane.Kubeconfig(ca, kubeconfig, "https://10.96.0.50:443", leaf, now.Add(time.Hour))
	if err != nil || !bytes.Equal(same, kubeconfig) {
		t.Errorf("a good kubeconfig was made anew (%v)", err)
	}
	moved, _, err := controlplane.Kubeconfig(ca, kubeconfig, "https://10.96.0.51:443", leaf, now.Add(time.Hour))
	if err != nil || bytes.Equal(moved, kubeconfig) {
		t.Errorf("a kubeconfig for another server was kept (%v)", err)
	}
}

func TestServingNamesRefuseBadInput(t *testing.T) {
	s := spec()
	if _, err := s.ServingNames("not-an-ip"); err == nil {
		t.Error("a Service IP that is not an address was taken")
	}
	s.ServiceCIDR = "10.96.0.0"
	if _, err := s.ServingNames(""); err == nil {
		t.Error("a Service range that is not a CIDR was taken")
	}
	s.ServiceCIDR = "10.96.0.0/16"
	leaf, err := s.ServingNames("")
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.IPs[len(leaf.IPs)-1].Equal(net.ParseIP("10.96.0.1")) {
		t.Errorf("the tenant's kubernetes Service address: %v", leaf.IPs)
	}
}
