package waker

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/keyutil"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/pki"
)

// world is a tenant's PKI, an API server that records what reaches it,
// and a Waker's port for the tenant in front of it.
type world struct {
	t      *testing.T
	host   client.Client
	port   *tenant
	ca     *pki.KeyPair
	seen   chan seen
	waiter *Waker
	// backendPort is where the recording API server listens.
	backendPort int
	// saKey signs the tenant's service accounts' tokens (PEM).
	saKey []byte
	// id is the control plane's identity, as Hold reads it.
	id *identity
}

// token is a service account's token for the API server, signed with key
// (PEM), valid for validFor from now (negative: expired).
func token(t *testing.T, key []byte, subject string, validFor time.Duration) string {
	t.Helper()
	return tokenFor(t, key, subject, validFor, apiServerIssuer)
}

const apiServerIssuer = "https://kubernetes.default.svc.cluster.local"

// tokenFor is token, for audience.
func tokenFor(t *testing.T, key []byte, subject string, validFor time.Duration, audience string) string {
	t.Helper()
	issuer := apiServerIssuer
	parsed, err := keyutil.ParsePrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	segment := func(v any) string {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(data)
	}
	signed := segment(map[string]string{"alg": "ES256", "typ": "JWT"}) + "." +
		segment(map[string]any{"sub": subject, "exp": time.Now().Add(validFor).Unix(), "iss": issuer, "aud": []string{audience}})
	digest := sha256.Sum256([]byte(signed))
	r, s, err := ecdsa.Sign(rand.Reader, parsed.(*ecdsa.PrivateKey), digest[:])
	if err != nil {
		t.Fatal(err)
	}
	signature := make([]byte, 64)
	r.FillBytes(signature[:32])
	s.FillBytes(signature[32:])
	return signed + "." + base64.RawURLEncoding.EncodeToString(signature)
}

// seen is what reached the API server.
type seen struct {
	path          string
	clientCert    string
	remoteUser    string
	remoteGroups  []string
	authorization string
}

func newWorld(t *testing.T, opts Options) *world {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("tenant-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	frontProxyCA, err := pki.NewCA("front-proxy-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	loopback := net.IPv4(127, 0, 0, 1)
	serving := issue(t, ca, pki.Leaf{CommonName: "kube-apiserver", Usage: pki.Server, IPs: []net.IP{loopback}})
	frontProxy := issue(t, frontProxyCA, pki.Leaf{CommonName: "front-proxy-client", Usage: pki.Client})
	saKey, saPublic, err := pki.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	id, err := identityOf(map[string][]byte{
		controlplane.KeyCACert: ca.CertPEM, controlplane.KeyServingCert: serving.CertPEM, controlplane.KeyServingKey: serving.KeyPEM,
		controlplane.KeyFrontProxyClientCert: frontProxy.CertPEM, controlplane.KeyFrontProxyClientKey: frontProxy.KeyPEM,
		controlplane.KeyServiceAccountPublic: saPublic,
	}, loopback.String())
	if err != nil {
		t.Fatal(err)
	}

	// The API server: it serves the tenant's serving certificate, and
	// asks for any client certificate, as the requestheader authenticator
	// checks the front proxy's.
	w := &world{t: t, ca: ca, seen: make(chan seen, 10), saKey: saKey}
	servingPair, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{servingPair}, ClientAuth: tls.RequestClientCert})
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			_, _ = io.WriteString(rw, "ok")
			return
		}
		s := seen{path: r.URL.Path, remoteUser: r.Header.Get(headerUser), remoteGroups: r.Header.Values(headerGroup), authorization: r.Header.Get("Authorization")}
		if len(r.TLS.PeerCertificates) > 0 {
			s.clientCert = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		w.seen <- s
		_, _ = io.WriteString(rw, `{"kind":"PodList","apiVersion":"v1","items":[]}`)
	})}
	go func() { _ = backend.Serve(ln) }()
	t.Cleanup(func() { _ = backend.Close() })
	w.backendPort = ln.Addr().(*net.TCPAddr).Port

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := tenantryv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	asleep := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Annotations: map[string]string{
		tenantryv1alpha1.AnnotationSleepRequestedAt: now.UTC().Format(time.RFC3339Nano),
	}}, Spec: tenantryv1alpha1.VirtualClusterSpec{ControlPlane: &tenantryv1alpha1.ControlPlaneSpec{}}}
	w.host = fake.NewClientBuilder().WithScheme(scheme).WithObjects(asleep).Build()
	opts.Address, opts.Host, opts.APIReader, opts.Logger = "127.0.0.1", w.host, w.host, testr.New(t)
	if w.waiter, err = New(opts); err != nil {
		t.Fatal(err)
	}
	w.waiter.apiServerPort = w.backendPort
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = w.waiter.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	// Hold reads the Service and the Secret, then this; the port alone
	// is tested here.
	if w.port, err = w.waiter.hold("alpha", id); err != nil {
		t.Fatal(err)
	}
	w.id = id
	return w
}

func issue(t *testing.T, ca *pki.KeyPair, leaf pki.Leaf) *pki.KeyPair {
	t.Helper()
	kp, err := ca.Issue(leaf, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// client is a client of the Waker's port that trusts the tenant's CA, with
// cert if not nil.
func (w *world) client(cert *pki.KeyPair) *http.Client {
	w.t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(w.ca.Cert)
	config := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
		if err != nil {
			w.t.Fatal(err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	transport := &http.Transport{TLSClientConfig: config, ForceAttemptHTTP2: true}
	w.t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport, Timeout: 30 * time.Second}
}

func (w *world) get(c *http.Client, header http.Header) (*http.Response, string, error) {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/api/v1/pods", w.port.port), nil)
	if err != nil {
		return nil, "", err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

// createPod makes the control plane's Pod, at the API server's address.
func (w *world) createPod() {
	w.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: controlplane.Namespace("alpha"), Name: controlplane.WorkloadName + "-0", Labels: controlplane.APIServerLabels("alpha")},
		Status:     corev1.PodStatus{PodIP: "127.0.0.1"},
	}
	if err := w.host.Create(context.Background(), pod); err != nil {
		w.t.Fatal(err)
	}
}

// waitFor polls cond for up to ten seconds.
func waitFor(cond func() bool) error {
	return wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
}

// A request with a client certificate of the tenant's CA, to a sleeping
// control plane, asks it to wake, is held until its API server answers
// ready, and reaches it under the front proxy's certificate, its user in
// X-Remote-User and X-Remote-Group; what the client put in those headers
// itself is dropped.
func TestHeldUntilReadyThenProxiedAsTheUser(t *testing.T) {
	// Checked once the world is gone: its cleanups run first.
	running := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, running) })
	w := newWorld(t, Options{})
	alice := issue(t, w.ca, pki.Leaf{CommonName: "alice", Organization: []string{"devs", "ops"}, Usage: pki.Client})
	var woken []string
	w.waiter.OnWake(func(cluster, user, request string) { woken = append(woken, cluster, user, request) })

	type answer struct {
		resp *http.Response
		body string
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, body, err := w.get(w.client(alice), http.Header{"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}})
		answered <- answer{resp, body, err}
	}()

	// Asked to wake, and held: no Pod yet.
	if err := waitFor(func() bool {
		var vc tenantryv1alpha1.VirtualCluster
		if err := w.host.Get(context.Background(), client.ObjectKey{Name: "alpha"}, &vc); err != nil {
			t.Fatal(err)
		}
		return !vc.Asleep()
	}); err != nil {
		t.Fatal("the request did not ask the VirtualCluster to wake")
	}
	select {
	case a := <-answered:
		t.Fatalf("answered before the API server runs: %+v", a)
	case <-time.After(3 * readyPoll):
	}
	w.createPod()
	a := <-answered
	if a.err != nil || a.resp.StatusCode != http.StatusOK || !strings.Contains(a.body, "PodList") {
		t.Fatalf("the held request: %v, %+v, %s", a.err, a.resp, a.body)
	}
	got := <-w.seen
	if got.clientCert != "front-proxy-client" || got.remoteUser != "alice" || !sameSet(got.remoteGroups, []string{"devs", "ops"}) || got.path != "/api/v1/pods" {
		t.Errorf("the API server saw %+v, want the front proxy's certificate naming alice of devs and ops", got)
	}
	if strings.Join(woken, " ") != "alpha \"alice\" GET /api/v1/pods" {
		t.Errorf("told of the wake: %q", woken)
	}

	// Ready now: the next request is not held, and wakes nothing again.
	if _, _, err := w.get(w.client(alice), nil); err != nil {
		t.Fatal(err)
	}
	<-w.seen
	if len(woken) != 3 {
		t.Errorf("told of a wake again: %q", woken)
	}
}

// A service account's token reaches the API server as it came, with no
// certificate and no user headers; a bearer token that is not one of the
// tenant's, or expired, wakes nothing.
func TestBearerToken(t *testing.T) {
	w := newWorld(t, Options{})
	good := "Bearer " + token(t, w.saKey, "system:serviceaccount:shop:deployer", time.Hour)
	otherKey, _, err := pki.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	for name, auth := range map[string]string{
		"not a JWT":            "Bearer abc",
		"another tenant's":     "Bearer " + token(t, otherKey, "system:serviceaccount:shop:deployer", time.Hour),
		"expired":              "Bearer " + token(t, w.saKey, "system:serviceaccount:shop:deployer", -time.Hour),
		"for another audience": "Bearer " + tokenFor(t, w.saKey, "system:serviceaccount:shop:deployer", time.Hour, "vault"),
	} {
		resp, body, err := w.get(w.client(nil), http.Header{"Authorization": {auth}})
		if err != nil || resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "bearer token wakes nothing") {
			t.Errorf("%s: %v %+v %s", name, err, resp, body)
		}
	}
	var vc tenantryv1alpha1.VirtualCluster
	if err := w.host.Get(context.Background(), client.ObjectKey{Name: "alpha"}, &vc); err != nil || !vc.Asleep() {
		t.Errorf("a bad token woke it: %v", err)
	}

	w.createPod()
	resp, body, err := w.get(w.client(nil), http.Header{"Authorization": {good}, "X-Remote-User": {"system:admin"}})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%v %+v %s", err, resp, body)
	}
	got := <-w.seen
	if got.clientCert != "" || got.remoteUser != "" || got.authorization != good {
		t.Errorf("the API server saw %+v, want the token alone", got)
	}

	// Awake, a request that would not wake it goes as it came: the API
	// server judges it, as if reached directly.
	resp, body, err = w.get(w.client(nil), http.Header{"Authorization": {"Bearer abc"}, "X-Remote-User": {"system:admin"}})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("awake, a request of a made-up token: %v %+v %s", err, resp, body)
	}
	if got := <-w.seen; got.clientCert != "" || got.remoteUser != "" || got.authorization != "Bearer abc" {
		t.Errorf("the API server saw %+v, want the request as it came", got)
	}
}

// A request without credentials is refused at once, as the API server's
// Status, and wakes nothing; a certificate of another CA is refused in
// the handshake.
func TestWithoutCredentialsRefused(t *testing.T) {
	w := newWorld(t, Options{})
	resp, body, err := w.get(w.client(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	var status metav1.Status
	if err := json.Unmarshal([]byte(body), &status); err != nil || resp.StatusCode != http.StatusUnauthorized ||
		status.Reason != metav1.StatusReasonUnauthorized || !strings.Contains(status.Message, "VirtualCluster alpha is asleep") {
		t.Errorf("answered %d %s (%v)", resp.StatusCode, body, err)
	}
	var vc tenantryv1alpha1.VirtualCluster
	if err := w.host.Get(context.Background(), client.ObjectKey{Name: "alpha"}, &vc); err != nil || !vc.Asleep() {
		t.Errorf("a request without credentials woke it: %v", err)
	}

	other, err := pki.NewCA("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	mallory := issue(t, other, pki.Leaf{CommonName: "system:admin", Usage: pki.Client})
	forged := w.client(nil)
	pair, err := tls.X509KeyPair(mallory.CertPEM, mallory.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	// Sent although the Waker asks for certificates of the tenant's CA.
	forged.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &pair, nil
	}
	if resp, body, err := w.get(forged, nil); err == nil {
		t.Errorf("a certificate of another CA was let in: %d %s", resp.StatusCode, body)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// A control plane that does not answer within the hold timeout: the
// request gets 503 with Retry-After, which client-go retries.
func TestHoldTimeout(t *testing.T) {
	w := newWorld(t, Options{HoldTimeout: time.Second})
	resp, body, err := w.get(w.client(nil), http.Header{"Authorization": {"Bearer " + token(t, w.saKey, "system:serviceaccount:shop:deployer", time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "did not answer within 1s") {
		t.Errorf("answered %d (Retry-After %q): %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// A tenant put to sleep again a moment after a request woke it is woken
// again by the next request: a wake is asked for once per sleep, not
// once per ten seconds.
func TestAsleepAgainWakesAgain(t *testing.T) {
	w := newWorld(t, Options{})
	alice := issue(t, w.ca, pki.Leaf{CommonName: "alice", Usage: pki.Client})
	asleep := func() bool {
		var vc tenantryv1alpha1.VirtualCluster
		if err := w.host.Get(context.Background(), client.ObjectKey{Name: "alpha"}, &vc); err != nil {
			t.Fatal(err)
		}
		return vc.Asleep()
	}
	for round := range 2 {
		answered := make(chan error, 1)
		go func() {
			resp, body, err := w.get(w.client(alice), nil)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("answered %d: %s", resp.StatusCode, body)
			}
			answered <- err
		}()
		if err := waitFor(func() bool { return !asleep() }); err != nil {
			t.Fatalf("round %d: not asked to wake", round)
		}
		w.createPod()
		if err := <-answered; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		<-w.seen
		// Asleep again, as the reconciler holds it again.
		if err := controlplane.AskToSleep(context.Background(), w.host, "alpha"); err != nil {
			t.Fatal(err)
		}
		if err := w.host.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: controlplane.Namespace("alpha"), Name: controlplane.WorkloadName + "-0"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.waiter.hold("alpha", w.id); err != nil {
			t.Fatal(err)
		}
	}
}

// Tenantry's own requests (its user agent) wake nothing: refused while
// the tenant sleeps; held, once it was woken otherwise, until its API
// server answers, and handed over.
func TestTenantrysOwnRequestsWakeNothing(t *testing.T) {
	w := newWorld(t, Options{})
	alice := issue(t, w.ca, pki.Leaf{CommonName: "alice", Usage: pki.Client})
	tenantry := http.Header{"User-Agent": {clusterregistry.UserAgent("alpha")}}
	resp, body, err := w.get(w.client(alice), tenantry)
	if err != nil {
		t.Fatal(err)
	}
	var vc tenantryv1alpha1.VirtualCluster
	if err := w.host.Get(context.Background(), client.ObjectKey{Name: "alpha"}, &vc); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "Tenantry's own requests do not wake it") || !vc.Asleep() {
		t.Fatalf("asleep: answered %d: %s; asleep %v, want 503 and still asleep", resp.StatusCode, body, vc.Asleep())
	}
	// Woken by hand: held until its API server answers.
	if err := controlplane.AskToWake(context.Background(), w.host, "alpha"); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		resp, body, err := w.get(w.client(alice), tenantry)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("answered %d: %s", resp.StatusCode, body)
		}
		answered <- err
	}()
	w.createPod()
	if err := <-answered; err != nil {
		t.Fatalf("woken by hand: %v", err)
	}
}
