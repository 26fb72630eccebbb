package virtualcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/controlplane/pki"
)

// A renewed client certificate of the same identity is swapped into the
// running clients: every request after the swap presents it, on a
// connection of its own, and none presents the old one.
func TestClientCertificateSwappedInPlace(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("test-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue(pki.Leaf{CommonName: "server", DNSNames: []string{"localhost"}, Usage: pki.Server}, now)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.TLS.PeerCertificates[0].SerialNumber.String())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cert, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	server.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	server.EnableHTTP2 = true
	server.StartTLS()
	defer server.Close()

	user := pki.Leaf{CommonName: "tenantry", Organization: []string{"system:masters"}, Usage: pki.Client}
	config := func() *rest.Config {
		kp, err := ca.Issue(user, now)
		if err != nil {
			t.Fatal(err)
		}
		return &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM, CertData: kp.CertPEM, KeyData: kp.KeyPEM, ServerName: "localhost"}}
	}
	serial := func(c *rest.Config) string {
		certs, err := tls.X509KeyPair(c.CertData, c.KeyData)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(certs.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.String()
	}
	var certs clientCertificates
	first := config()
	spawned, err := certs.spawnConfig("c1", first)
	if err != nil {
		t.Fatal(err)
	}
	defer certs.drop("c1")
	// As the registry does: a dialer of the cluster's own, which the
	// transports of every certificate dial through.
	var dials atomic.Int32
	spawned.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}
	httpClient, err := rest.HTTPClientFor(spawned)
	if err != nil {
		t.Fatal(err)
	}
	get := func() string {
		t.Helper()
		resp, err := httpClient.Get(server.URL + "/api")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("HTTP/%d.%d, want HTTP/2 as client-go's transports", resp.ProtoMajor, resp.ProtoMinor)
		}
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}
	if got := get(); got != serial(first) {
		t.Fatalf("first request presented %s, want %s", got, serial(first))
	}
	if renewed, err := certs.renew("c1", first); err != nil || renewed {
		t.Fatalf("the same certificate: renewed %v, %v", renewed, err)
	}
	second := config()
	if renewed, err := certs.renew("c1", second); err != nil || !renewed {
		t.Fatalf("a renewed certificate: renewed %v, %v", renewed, err)
	}
	for range 3 {
		if got := get(); got != serial(second) {
			t.Fatalf("after the renewal a request presented %s, want the renewed %s", got, serial(second))
		}
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d connections dialed through the cluster's dialer, want 2: one per certificate", n)
	}
}

// A kubeconfig Secret that brings a renewed certificate of the same user
// for the same server keeps the tenant's app running; one of another user
// re-spawns it.
func TestRenewedKubeconfigKeepsTheTenantRunning(t *testing.T) {
	env, host := startHost(t, 1)
	tenant := env.Tenants[0]
	kubeconfig := func(user string) []byte {
		t.Helper()
		c, err := tenant.AddUser(user, "system:masters")
		if err != nil {
			t.Fatal(err)
		}
		kc := clientcmdapi.NewConfig()
		kc.Clusters["t"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData}
		kc.AuthInfos["t"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.CertData, ClientKeyData: c.KeyData}
		kc.Contexts["t"] = &clientcmdapi.Context{Cluster: "t", AuthInfo: "t"}
		kc.CurrentContext = "t"
		data, err := clientcmd.Write(*kc)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	ctx := t.Context()
	secret, vc := createVirtualCluster(t, host, "renewed", kubeconfig("tenantry-admin"))
	r, registry := newReconciler(t, host, host)
	recorder := events.NewFakeRecorder(100)
	r.Recorder = recorder
	reconcile := func() clusterregistry.Status {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: vc.Name}}); err != nil {
			t.Fatal(err)
		}
		status, err := registry.Status(vc.Name)
		if err != nil || status.State != clusterregistry.StateRunning {
			t.Fatalf("the tenant's app: %+v, %v", status, err)
		}
		return status
	}
	drain := func() []string {
		var out []string
		for {
			select {
			case e := <-recorder.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}
	started := reconcile()
	drain()
	setKubeconfig := func(data []byte) {
		t.Helper()
		patch := client.MergeFrom(secret.DeepCopy())
		secret.Data = map[string][]byte{"kubeconfig": data}
		if err := host.Patch(ctx, secret, patch); err != nil {
			t.Fatal(err)
		}
	}
	setKubeconfig(kubeconfig("tenantry-admin"))
	if now := reconcile(); !now.Since.Equal(started.Since) {
		t.Errorf("the app was re-spawned for a renewed certificate (running since %s, was %s)", now.Since, started.Since)
	}
	if got := strings.Join(drain(), "\n"); !strings.Contains(got, corev1.EventTypeNormal+" ClientCertificateRenewed") || strings.Contains(got, "Respawning") {
		t.Errorf("events %q: want ClientCertificateRenewed and no Respawning", got)
	}
	// The app works on, through its clients.
	if err := registry.WithClient(vc.Name, func(c client.Client) error {
		return c.List(ctx, &corev1.NamespaceList{})
	}); err != nil {
		t.Errorf("the tenant's client after the renewal: %v", err)
	}

	setKubeconfig(kubeconfig("someone-else"))
	if now := reconcile(); now.Since.Equal(started.Since) {
		t.Error("a kubeconfig of another user did not re-spawn the app")
	}
	if got := strings.Join(drain(), "\n"); !strings.Contains(got, "Respawning") {
		t.Errorf("events %q: want Respawning", got)
	}
}
