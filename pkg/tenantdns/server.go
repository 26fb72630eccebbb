// Package tenantdns is one DNS server for every tenant: a tenant's Pods,
// running in the host, resolve their own tenant's names as on a cluster of
// their own. The server knows which tenant asks from the query's source
// address (the IP of a host Pod that Tenantry runs for that tenant), and
// answers from that tenant's objects:
//
//   - <svc>.<ns>.svc.<domain>: A/AAAA with the Service's cluster IPs; for
//     a headless Service, the IPs of its ready endpoints; for an
//     ExternalName Service, a CNAME;
//   - <hostname>.<svc>.<ns>.svc.<domain>: a headless Service's endpoint;
//   - _<port>._<proto>.<svc>.<ns>.svc.<domain>: SRV for a named port;
//   - <a-b-c-d>.<ns>.pod.<domain>: the Pod A record, as CoreDNS's "pods
//     insecure" answers it;
//   - kubernetes.default.svc.<domain>: where the tenant's API server is
//     for its Pods.
//
// Other names in the cluster domain do not exist (NXDOMAIN); every other
// name is forwarded to the upstream resolvers. A query from an address of
// no tenant Pod is refused. Host Pods get the tenant's search path and
// the server as their nameserver from the Pod syncer (see package pods'
// Options.DNSConfig), so that svc, svc.ns and svc.ns.svc resolve as on a
// cluster.
package tenantdns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultBindAddress is where a Server listens (UDP and TCP) unless told
// otherwise. A Service in front of the manager maps port 53 to it.
const DefaultBindAddress = ":10053"

// DefaultClusterDomain is a tenant's cluster domain unless told otherwise.
const DefaultClusterDomain = "cluster.local"

// answerTTL is the TTL of the server's own answers: short, since a
// Service's endpoints change, as CoreDNS's default of 5 s.
const answerTTL = 5

// Options configure a Server.
type Options struct {
	// BindAddress is the host:port the Server listens on, for UDP and TCP.
	// Default DefaultBindAddress; port 0 picks a free port.
	BindAddress string
	// ClusterDomain is the tenants' cluster domain. Default
	// DefaultClusterDomain.
	ClusterDomain string
	// Upstream are the resolvers (host:port) that answer every name
	// outside the cluster domain: the host's cluster DNS, as its own Pods
	// use. Default: the nameservers of /etc/resolv.conf.
	Upstream []string
	// ClusterOf says which tenant cluster runs the host Pod of a source IP;
	// ok is false for none. Required.
	ClusterOf func(ctx context.Context, ip string) (cluster string, ok bool, err error)
	// PodOf says which tenant Pod a source IP is, for the answer to a
	// Pod's own name (<hostname>.<subdomain>.<ns>.svc, which its kubelet
	// would write into its /etc/hosts); nil: no such answers.
	PodOf func(ctx context.Context, ip string) (cluster string, pod types.NamespacedName, ok bool, err error)
	// Logger logs failures; each line carries the key cluster when the
	// tenant is known.
	Logger logr.Logger
}

// Tenant is what the Server needs of one tenant cluster.
type Tenant struct {
	// Name is the tenant cluster's name (its VirtualCluster's).
	Name string
	// Reader reads the tenant's Services, EndpointSlices and Pods, from a
	// cache if it has one.
	Reader client.Reader
	// APIServer is where the tenant's Pods reach its API server, an IP or
	// a host name: kubernetes.default.svc names it.
	APIServer string
}

// Server answers the DNS queries of every registered tenant's Pods. It is
// a manager.Runnable.
type Server struct {
	opts   Options
	domain string // ".cluster.local."
	udp    net.PacketConn
	tcp    net.Listener

	forwarder *forwarder

	mu      sync.RWMutex
	tenants map[string]*tenantEntry

	// inFlight holds a slot for each query being answered, maxInFlight at
	// most: beyond, queries are dropped unanswered.
	inFlight chan struct{}

	// sourceWaits holds a slot for each query waiting for its source
	// (clusterOf), maxSourceWaits at most.
	sourceWaits chan struct{}
}

// New checks opts and listens. The Server answers once started.
func New(opts Options) (*Server, error) {
	if opts.ClusterOf == nil {
		return nil, errors.New("tenant DNS: no ClusterOf")
	}
	if opts.BindAddress == "" {
		opts.BindAddress = DefaultBindAddress
	}
	if opts.ClusterDomain == "" {
		opts.ClusterDomain = DefaultClusterDomain
	}
	if _, ok := dns.IsDomainName(opts.ClusterDomain); !ok {
		return nil, fmt.Errorf("tenant DNS: cluster domain %q is not a domain name", opts.ClusterDomain)
	}
	if opts.Upstream == nil {
		conf, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return nil, fmt.Errorf("tenant DNS: no upstream given, and reading /etc/resolv.conf: %w", err)
		}
		for _, s := range conf.Servers {
			opts.Upstream = append(opts.Upstream, net.JoinHostPort(s, conf.Port))
		}
	}
	s := &Server{
		opts: opts, domain: "." + dns.Fqdn(strings.ToLower(opts.ClusterDomain)),
		forwarder: newForwarder(opts.Upstream),
		tenants:   map[string]*tenantEntry{}, sourceWaits: make(chan struct{}, maxSourceWaits),
		inFlight: make(chan struct{}, maxInFlight),
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	return s, nil
}

// listenTries is how often a picked port is tried again, when another
// process holds its TCP side.
const listenTries = 10

// listen listens on UDP and on TCP at the same port: when the port is
// picked (0), UDP picks it, and another port is picked while TCP's is
// taken.
func (s *Server) listen() error {
	_, port, err := net.SplitHostPort(s.opts.BindAddress)
	if err != nil {
		return fmt.Errorf("tenant DNS: bind address %q: %w", s.opts.BindAddress, err)
	}
	for try := 1; ; try++ {
		if s.udp, err = net.ListenPacket("udp", s.opts.BindAddress); err != nil {
			return fmt.Errorf("tenant DNS: listening on udp %s: %w", s.opts.BindAddress, err)
		}
		if s.tcp, err = net.Listen("tcp", s.udp.LocalAddr().String()); err == nil {
			return nil
		}
		_ = s.udp.Close()
		if port != "0" || try == listenTries {
			return fmt.Errorf("tenant DNS: listening on tcp %s: %w", s.udp.LocalAddr(), err)
		}
	}
}

// Addr is the address the Server listens on.
func (s *Server) Addr() *net.UDPAddr { return s.udp.LocalAddr().(*net.UDPAddr) }

// Register lets tenant t's Pods resolve its names, or updates what the
// Server knows of it. unregister forgets the tenant again (its Pods'
// queries are then refused), unless a later Register of the same name (a
// re-spawned tenant's app, while this one still stops) replaced this one.
func (s *Server) Register(t Tenant) (unregister func()) {
	entry := &tenantEntry{Tenant: t, forwards: make(chan struct{}, maxForwards)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tenants[t.Name] = entry
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.tenants[t.Name] == entry {
			delete(s.tenants, t.Name)
			forgetCluster(t.Name)
		}
	}
}

// tenantEntry is a registered tenant, with the slots of its queries
// that wait for an upstream resolver (maxForwards).
type tenantEntry struct {
	Tenant
	forwards chan struct{}
}

func (s *Server) tenant(name string) (*tenantEntry, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tenants[name]
	return t, ok
}

// Start answers until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) { s.serve(ctx, w, req) })
	servers := []*dns.Server{
		{PacketConn: s.udp, Handler: handler},
		{Listener: s.tcp, Handler: handler, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second},
	}
	errs := make(chan error, len(servers))
	started := make(chan struct{}, len(servers))
	for _, srv := range servers {
		srv.NotifyStartedFunc = func() { started <- struct{}{} }
		go func() { errs <- srv.ActivateAndServe() }()
	}
	// Shutdown stops only a server that has started.
	for range servers {
		select {
		case <-started:
		case err := <-errs:
			for _, srv := range servers {
				_ = srv.Shutdown()
			}
			return fmt.Errorf("tenant DNS: serving: %w", err)
		}
	}
	s.opts.Logger.Info("serving tenants' DNS", "address", s.udp.LocalAddr().String(), "domain", s.opts.ClusterDomain)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
		err = fmt.Errorf("tenant DNS: serving: %w", err)
	}
	for _, srv := range servers {
		_ = srv.Shutdown()
	}
	return err
}

// NeedLeaderElection is false: every replica answers for the tenants it
// runs.
func (s *Server) NeedLeaderElection() bool { return false }
