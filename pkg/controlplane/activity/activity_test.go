package activity

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/pki"
)

func TestPeople(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) metav1.MicroTime { return metav1.NewMicroTime(now.Add(d)) }
	events := []Event{
		{User: UserInfo{Username: "tenantry:admin"}, UserAgent: "kubectl/v1.37.2 (linux/amd64)", StageTimestamp: at(-time.Minute)},
		// Tenantry's syncing, with the same admin credential.
		{User: UserInfo{Username: "tenantry:admin"}, UserAgent: clusterregistry.UserAgent("alpha"), StageTimestamp: at(-time.Second)},
		// The tenant's controllers.
		{User: UserInfo{Username: "system:serviceaccount:shop:operator", Groups: []string{"system:serviceaccounts"}}, StageTimestamp: at(-2 * time.Second)},
		{User: UserInfo{Username: "system:kube-controller-manager"}, StageTimestamp: at(-3 * time.Second)},
		{User: UserInfo{Username: "robot", Groups: []string{"system:nodes"}}, StageTimestamp: at(-4 * time.Second)},
		{User: UserInfo{Username: "alice", Groups: []string{"devs"}}, UserAgent: "Go-http-client/2.0", StageTimestamp: at(-30 * time.Second)},
	}
	latest, n := Latest(events, now)
	if n != 2 || !latest.Equal(now.Add(-30*time.Second)) {
		t.Errorf("Latest: %s, %d people's; want alice's, 30s ago, of 2", latest, n)
	}
	// A clock ahead of the manager's: never later than now.
	if latest, _ := Latest([]Event{{User: UserInfo{Username: "alice"}, StageTimestamp: at(time.Hour)}}, now); !latest.Equal(now) {
		t.Errorf("a report from the future: %s, want now", latest)
	}
	if _, n := Latest(events[1:5], now); n != 0 {
		t.Errorf("%d of Tenantry's and the system's requests counted as people's", n)
	}
}

// world is a control plane's PKI Secret in a host, a Receiver, and the
// TLS of the API server that reports to it.
type world struct {
	receiver *Receiver
	data     map[string][]byte
	mu       sync.Mutex
	noted    map[string]time.Time
}

func newWorld(t *testing.T) *world {
	t.Helper()
	spec := controlplane.Spec{Cluster: "alpha", ServiceCIDR: "10.96.0.0/12", ClusterDomain: "cluster.local", Activity: &controlplane.Activity{URL: "https://127.0.0.1:1"}}
	data, _, err := spec.Certificates(nil, "10.96.0.10", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: controlplane.Namespace("alpha"), Name: controlplane.PKISecretName, Labels: controlplane.Labels("alpha")},
		Data:       data,
	}
	host := fake.NewClientBuilder().WithObjects(secret).Build()
	w := &world{data: data, noted: map[string]time.Time{}}
	if w.receiver, err = New(Options{BindAddress: "127.0.0.1:0", APIReader: host, Logger: testr.New(t)}); err != nil {
		t.Fatal(err)
	}
	w.receiver.OnActivity(func(cluster string, at time.Time) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.noted[cluster] = at
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.receiver.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Error(err)
		}
	})
	return w
}

// client reports as the API server does: the server name, the CA and the
// client certificate of its webhook kubeconfig, unless told otherwise.
func (w *world) client(t *testing.T, serverName string, cert tls.Certificate) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(w.data[controlplane.KeyCACert])
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName, Certificates: []tls.Certificate{cert}}}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport, Timeout: 10 * time.Second}
}

func (w *world) webhookCert(t *testing.T) tls.Certificate {
	t.Helper()
	cert, err := tls.X509KeyPair(w.data[controlplane.KeyAuditWebhookCert], w.data[controlplane.KeyAuditWebhookKey])
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func report(c *http.Client, url string, events ...Event) (*http.Response, error) {
	body, err := json.Marshal(EventList{Items: events})
	if err != nil {
		return nil, err
	}
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

// A control plane's report, over TLS that its CA vouches for both ways,
// notes the latest of people's requests for its cluster; one of only
// Tenantry's requests notes nothing.
func TestReports(t *testing.T) {
	running := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, running) })
	w := newWorld(t)
	c := w.client(t, controlplane.ActivityServerName("alpha"), w.webhookCert(t))
	ours := Event{User: UserInfo{Username: "tenantry:admin"}, UserAgent: clusterregistry.UserAgent("alpha"), StageTimestamp: metav1.NowMicro()}
	if resp, err := report(c, w.receiver.URL(), ours); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a report: %v %v", resp, err)
	}
	w.mu.Lock()
	if len(w.noted) != 0 {
		t.Errorf("Tenantry's own requests noted: %v", w.noted)
	}
	w.mu.Unlock()
	at := metav1.NewMicroTime(time.Now().Add(-5 * time.Second))
	if resp, err := report(c, w.receiver.URL(), ours, Event{User: UserInfo{Username: "tenantry:admin"}, UserAgent: "kubectl/v1.37.2", StageTimestamp: at}); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a report: %v %v", resp, err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.noted["alpha"].Equal(at.Truncate(time.Microsecond)), nil // as JSON carries it
	}); err != nil {
		t.Errorf("noted %v, want alpha at %s", w.noted, at)
	}
}

// Reports that are not a control plane's are refused: another server name,
// a client certificate of another CA, or of another user of its CA.
func TestReportsRefused(t *testing.T) {
	w := newWorld(t)
	people := Event{User: UserInfo{Username: "alice"}, StageTimestamp: metav1.NowMicro()}
	other, err := pki.NewCA("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.Issue(pki.Leaf{CommonName: controlplane.ActivityClientUser, Usage: pki.Client}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forgedCert, err := tls.X509KeyPair(forged.CertPEM, forged.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	adminCert, err := tls.X509KeyPair(w.data[controlplane.KeyControllerManagerCert], w.data[controlplane.KeyControllerManagerKey])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		serverName string
		cert       tls.Certificate
	}{
		{"another control plane's name", controlplane.ActivityServerName("beta"), w.webhookCert(t)},
		{"a name of no control plane", "example.com", w.webhookCert(t)},
		{"a certificate of another CA", controlplane.ActivityServerName("alpha"), forgedCert},
	} {
		if resp, err := report(w.client(t, c.serverName, c.cert), w.receiver.URL(), people); err == nil {
			t.Errorf("%s: answered %d", c.name, resp.StatusCode)
		}
	}
	resp, err := report(w.client(t, controlplane.ActivityServerName("alpha"), adminCert), w.receiver.URL(), people)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("the controller-manager's certificate: %v, %v; want 403", resp, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.noted) != 0 {
		t.Errorf("a refused report noted %v", w.noted)
	}
}
