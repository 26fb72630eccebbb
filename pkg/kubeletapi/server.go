package kubeletapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultBindAddress is where a Server listens unless told otherwise: the
// kubelet's own port, on every interface.
const DefaultBindAddress = ":10250"

// Options configure a Server.
type Options struct {
	// BindAddress is the host:port the Server listens on. Default
	// DefaultBindAddress; port 0 picks a free port.
	BindAddress string

	// AdvertiseAddress is the address (an IP or a DNS name, without a
	// port) that tenants' API servers dial: every virtual node's address.
	// Default: the POD_IP environment variable (a manager in a Pod), else
	// the host of BindAddress when it names one, else the machine's
	// default-route address.
	AdvertiseAddress string

	// AdvertisePort is the port that virtual nodes give as their kubelet
	// port, when it differs from the one listened on (a Service in front
	// of the manager). Default: the port listened on.
	AdvertisePort int32

	// CertFile and KeyFile hold the serving certificate. Default: a
	// self-signed certificate for AdvertiseAddress, made at start: a
	// kube-apiserver without --kubelet-certificate-authority accepts it.
	CertFile, KeyFile string

	// Host is the host cluster's config: the Server acts on host Pods
	// through its API server, with these credentials. Required.
	Host *rest.Config

	// Logger logs refusals and failures; each line carries the key
	// cluster when the tenant is known.
	Logger logr.Logger

	// ClusterOf, if set, says which tenant cluster's host Pod has a source
	// IP, Pods being deleted included. A connection from a tenant's Pod is
	// closed at once, before its TLS handshake: the kubelet API is for
	// tenants' API servers, and a virtual node's address, the manager's,
	// is in reach of every tenant Pod.
	ClusterOf func(ctx context.Context, ip string) (cluster string, ok bool, err error)
}

// Server serves the kubelet API of every registered tenant's virtual
// nodes. It is a manager.Runnable: add it to the management manager. It
// runs on every replica, leader or not: a tenant's virtual nodes point at
// the replica that runs the tenant.
type Server struct {
	opts      Options
	listener  net.Listener
	tlsConfig *tls.Config
	host      *url.URL
	// transport carries non-upgrade requests to the host API server, with
	// its credentials; upgrades dial through upgrade.
	transport http.RoundTripper
	upgrade   proxy.UpgradeRequestRoundTripper

	mu sync.RWMutex
	// tenants are the registered tenants, by name.
	tenants map[string]*registered
	// byIssuer holds, by the raw subject of a client CA, the tenants that
	// trust it: a client certificate is verified only against the CAs of
	// its issuer's name.
	byIssuer map[string]map[string]bool
}

// Tenant is what the Server needs of one tenant cluster.
type Tenant struct {
	// Name is the tenant cluster's name (its VirtualCluster's).
	Name string
	// ClientCAs are the CAs the tenant's API server trusts for client
	// certificates, in PEM, as the tenant publishes them.
	ClientCAs []byte
	// HostCAs are CAs of the tenant that the host holds (the CA of its
	// kubeconfig, in PEM; optional). A certificate that one tenant's
	// HostCAs verify is that tenant's, whatever CAs other tenants publish:
	// a tenant cannot shut another out by publishing the other's CA.
	HostCAs []byte
	// Client is the tenant's client: it reads the tenant's Pods (from a
	// cache, if it has one) and creates SubjectAccessReviews.
	Client client.Client
	// HostPod names the host Pod that runs the tenant Pod, if it is
	// Tenantry's copy of that very Pod (the tenant Pod's UID matches) and,
	// for a container named (not ""), runs that container of the tenant
	// Pod's as the tenant's: one the Pod was made with, or an ephemeral
	// container that Tenantry added for the tenant, never one the host
	// added. ok is false otherwise.
	HostPod func(ctx context.Context, pod *corev1.Pod, container string) (key types.NamespacedName, ok bool, err error)
}

type registered struct {
	Tenant
	pool, hostPool *x509.CertPool
	issuers        []string
	// requests holds a slot for each open request of the tenant's,
	// maxRequestsPerTenant at most.
	requests chan struct{}
}

// New checks opts, listens and makes the serving certificate. The Server
// serves once started.
func New(opts Options) (*Server, error) {
	if opts.Host == nil {
		return nil, errors.New("kubelet API: no host config")
	}
	if opts.BindAddress == "" {
		opts.BindAddress = DefaultBindAddress
	}
	bindHost, _, err := net.SplitHostPort(opts.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("kubelet API: bind address %q: %w", opts.BindAddress, err)
	}
	if opts.AdvertiseAddress == "" {
		if opts.AdvertiseAddress, err = defaultAdvertiseAddress(bindHost); err != nil {
			return nil, err
		}
	}
	host, transport, upgrade, err := hostTransports(opts.Host)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts: opts, host: host, transport: transport, upgrade: upgrade,
		tenants: map[string]*registered{}, byIssuer: map[string]map[string]bool{},
	}
	serving, err := s.servingCertificate()
	if err != nil {
		return nil, err
	}
	s.tlsConfig = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{serving},
		// Verified per tenant in the handler: which CA applies depends on
		// which tenant the certificate's issuer names.
		ClientAuth: tls.RequestClientCert,
		NextProtos: []string{"http/1.1"},
	}
	if s.listener, err = net.Listen("tcp", opts.BindAddress); err != nil {
		return nil, fmt.Errorf("kubelet API: listening on %s: %w", opts.BindAddress, err)
	}
	return s, nil
}

// defaultAdvertiseAddress is the address virtual nodes get when none is
// configured.
func defaultAdvertiseAddress(bindHost string) (string, error) {
	if ip := os.Getenv("POD_IP"); ip != "" {
		return ip, nil
	}
	if ip := net.ParseIP(bindHost); bindHost != "" && (ip == nil || !ip.IsUnspecified()) {
		return bindHost, nil
	}
	ip, err := utilnet.ChooseHostInterface()
	if err != nil {
		return "", fmt.Errorf("kubelet API: no advertise address given and none found: %w", err)
	}
	return ip.String(), nil
}

// servingCertificate loads the configured certificate, or makes a
// self-signed one for the advertised address.
func (s *Server) servingCertificate() (tls.Certificate, error) {
	if s.opts.CertFile != "" || s.opts.KeyFile != "" {
		c, err := tls.LoadX509KeyPair(s.opts.CertFile, s.opts.KeyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("kubelet API: loading the serving certificate: %w", err)
		}
		return c, nil
	}
	var ips []net.IP
	var names []string
	if ip := net.ParseIP(s.opts.AdvertiseAddress); ip != nil {
		ips = append(ips, ip)
	} else {
		names = append(names, s.opts.AdvertiseAddress)
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("tenantry-kubelet", ips, names)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubelet API: making a serving certificate: %w", err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubelet API: reading the serving certificate made: %w", err)
	}
	return c, nil
}

// Endpoint is where tenants' API servers reach the Server: a virtual
// node's address and kubelet port.
func (s *Server) Endpoint() (address string, port int32) {
	port = s.opts.AdvertisePort
	if port == 0 {
		port = int32(s.listener.Addr().(*net.TCPAddr).Port)
	}
	return s.opts.AdvertiseAddress, port
}

// Register lets tenant's API server in, or updates what the Server knows
// of it (a rotated client CA). A PEM bundle without a certificate is an
// error, and leaves the tenant as it was. unregister shuts the tenant out
// again, unless a later Register of the same name (a re-spawned tenant's
// app, while this one still stops) replaced this one.
func (s *Server) Register(t Tenant) (unregister func(), err error) {
	certs, err := cert.ParseCertsPEM(t.ClientCAs)
	if err != nil {
		return nil, fmt.Errorf("kubelet API: tenant %s's client CAs: %w", t.Name, err)
	}
	entry := &registered{Tenant: t, pool: x509.NewCertPool(), hostPool: x509.NewCertPool(), requests: make(chan struct{}, maxRequestsPerTenant)}
	for _, c := range certs {
		entry.pool.AddCert(c)
		entry.issuers = append(entry.issuers, string(c.RawSubject))
	}
	if len(entry.issuers) == 0 {
		return nil, fmt.Errorf("kubelet API: tenant %s has no client CA", t.Name)
	}
	if len(t.HostCAs) > 0 {
		hostCerts, err := cert.ParseCertsPEM(t.HostCAs)
		if err != nil {
			return nil, fmt.Errorf("kubelet API: tenant %s's host-held CAs: %w", t.Name, err)
		}
		for _, c := range hostCerts {
			entry.hostPool.AddCert(c)
			entry.issuers = append(entry.issuers, string(c.RawSubject))
		}
	}
	issuers := entry.issuers
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unregisterLocked(t.Name)
	s.tenants[t.Name] = entry
	for _, i := range issuers {
		if s.byIssuer[i] == nil {
			s.byIssuer[i] = map[string]bool{}
		}
		s.byIssuer[i][t.Name] = true
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.tenants[t.Name] == entry {
			s.unregisterLocked(t.Name)
			forgetCluster(t.Name)
		}
	}, nil
}

func (s *Server) unregisterLocked(name string) {
	old, ok := s.tenants[name]
	if !ok {
		return
	}
	delete(s.tenants, name)
	for _, i := range old.issuers {
		delete(s.byIssuer[i], name)
		if len(s.byIssuer[i]) == 0 {
			delete(s.byIssuer, i)
		}
	}
}

// clusterOfTimeout bounds the look-up of a connection's source.
const clusterOfTimeout = time.Second

// fromTenantPod says whether source, an IP, is a tenant Pod's (a look-up
// that fails lets the connection through, to the handshake and the
// tenant's authentication).
func (s *Server) fromTenantPod(source string) bool {
	if s.opts.ClusterOf == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterOfTimeout)
	defer cancel()
	cluster, ok, err := s.opts.ClusterOf(ctx, source)
	if err != nil {
		s.opts.Logger.Error(err, "telling whether a connection comes from a tenant Pod", "source", source)
		return false
	}
	if ok {
		s.opts.Logger.V(1).Info("closed a connection from a tenant Pod", "cluster", cluster, "source", source)
	}
	return ok
}

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	srv := &http.Server{
		Handler:   s,
		TLSConfig: s.tlsConfig,
		// No write timeout: logs -f writes for as long as it follows.
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan error, 1)
	limited := newLimitListener(s.listener, maxConnections, maxConnectionsPerSource, s.fromTenantPod)
	go func() { done <- srv.Serve(tls.NewListener(limited, s.tlsConfig)) }()
	s.opts.Logger.Info("serving the kubelet API of virtual nodes", "address", s.listener.Addr().String())
	select {
	case err := <-done:
		return fmt.Errorf("kubelet API: serving: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Streams (follow, exec) end with the context; Close cuts what is left.
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	<-done
	return nil
}

// NeedLeaderElection is false: every replica serves the tenants it runs.
func (s *Server) NeedLeaderElection() bool { return false }

// authenticate finds the one tenant whose client CA verified the request's
// client certificate.
func (s *Server) authenticate(r *http.Request) (*registered, *x509.Certificate, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, nil, errors.New("no client certificate: only a tenant's API server, with its kubelet client certificate, is let in")
	}
	leaf := r.TLS.PeerCertificates[0]
	intermediates := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		intermediates.AddCert(c)
	}
	s.mu.RLock()
	candidates := make([]*registered, 0, len(s.byIssuer[string(leaf.RawIssuer)]))
	for name := range s.byIssuer[string(leaf.RawIssuer)] {
		candidates = append(candidates, s.tenants[name])
	}
	s.mu.RUnlock()
	verifiedBy := func(pool func(*registered) *x509.CertPool) []*registered {
		var found []*registered
		for _, t := range candidates {
			_, err := leaf.Verify(x509.VerifyOptions{
				Roots: pool(t), Intermediates: intermediates,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			})
			if err == nil && !slices.Contains(found, t) {
				found = append(found, t)
			}
		}
		return found
	}
	// The CAs the host holds for a tenant first; those a tenant publishes
	// only when no host-held CA knows the certificate.
	found := verifiedBy(func(t *registered) *x509.CertPool { return t.hostPool })
	if len(found) == 0 {
		found = verifiedBy(func(t *registered) *x509.CertPool { return t.pool })
	}
	switch len(found) {
	case 0:
		return nil, nil, fmt.Errorf("client certificate of %q is not signed by the client CA of any tenant served here", leaf.Subject.CommonName)
	case 1:
		return found[0], leaf, nil
	}
	return nil, nil, fmt.Errorf("client certificate of %q verifies against the client CA of %d tenants: tenants that share a client CA cannot be told apart", leaf.Subject.CommonName, len(found))
}

// authorize asks the tenant whether the certificate's user may use the
// node's kubelet API as the request does, as a kubelet with webhook
// authorization asks its cluster.
func authorize(ctx context.Context, t *registered, user *x509.Certificate, r *http.Request, node string) (bool, string, error) {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user.Subject.CommonName,
		Groups: user.Subject.Organization,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verbOf(r.Method), Resource: "nodes", Subresource: "proxy", Name: node,
		},
	}}
	if err := t.Client.Create(ctx, review); err != nil {
		return false, "", fmt.Errorf("asking tenant %s whether %s may use node %s's kubelet: %w", t.Name, user.Subject.CommonName, node, err)
	}
	return review.Status.Allowed, review.Status.Reason, nil
}

// verbOf is the authorization verb of an HTTP method, as a kubelet maps it.
func verbOf(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return "get"
}

// hostTransports builds what carries requests to the host API server: a
// transport with the host's credentials, and for upgraded (streaming)
// requests a dialer with the same TLS identity and a wrapper that adds
// the other credentials (a bearer token) to the request.
func hostTransports(cfg *rest.Config) (*url.URL, http.RoundTripper, proxy.UpgradeRequestRoundTripper, error) {
	host, err := url.Parse(cfg.Host)
	if err != nil || host.Host == "" {
		return nil, nil, nil, fmt.Errorf("kubelet API: host config's server %q is not a URL", cfg.Host)
	}
	if host.Scheme == "" {
		host.Scheme = "https"
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubelet API: host transport: %w", err)
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubelet API: host TLS config: %w", err)
	}
	dialer := &http.Transport{TLSClientConfig: tlsConfig, Proxy: http.ProxyFromEnvironment}
	if cfg.Dial != nil {
		dialer.DialContext = cfg.Dial
	}
	if tlsConfig != nil {
		// An upgrade is HTTP/1.1 only.
		tlsConfig.NextProtos = []string{"http/1.1"}
	}
	wrapper, err := rest.HTTPWrappersForConfig(cfg, proxy.MirrorRequest)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubelet API: host credentials: %w", err)
	}
	return host, transport, proxy.NewUpgradeRequestRoundTripper(dialer, wrapper), nil
}
