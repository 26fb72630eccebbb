package bench

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/tenantdns"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// The DNS run's sizes: Services in the tenant, queries timed one at a
// time, and the clients and time of the load.
const (
	dnsNamespaces     = 20
	dnsServicesPerNS  = 5
	dnsLatencyQueries = 2000
	dnsLoadClients    = 16
	dnsLoadDuration   = 5 * time.Second
	// dnsUpstreamAnswer is the upstream resolver's answer to every name.
	dnsUpstreamAnswer = "192.0.2.1"
)

// runDNS measures the tenant DNS server (package tenantdns) as the
// manager runs it: answering from a real tenant API server's Services
// through an informer cache, forwarding other names to an upstream
// resolver on loopback. It times single queries of a tenant's Service
// name and of a forwarded name (against the same upstream asked
// directly: the added latency), and counts the answers that
// dnsLoadClients clients, each on a socket of its own, get per second.
func runDNS(ctx context.Context, o Options) ([]result, error) {
	env, err := tenantrytest.Start(ctx, tenantrytest.Options{Tenants: 1, BinaryAssetsDirectory: o.Assets})
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Stop() }()
	tenant := env.ControlPlanes()[1]
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(tenant.Config(), client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	if err := dnsServices(ctx, c); err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	cache, err := ctrlcache.New(tenant.Config(), ctrlcache.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	for _, obj := range []client.Object{&corev1.Service{}, &discoveryv1.EndpointSlice{}} {
		if _, err := cache.GetInformer(ctx, obj); err != nil {
			return nil, err
		}
	}
	wg.Go(func() { _ = cache.Start(ctx) })
	if !cache.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the tenant's cache did not sync")
	}

	upstream, err := fixedResolver(ctx, &wg)
	if err != nil {
		return nil, err
	}
	server, err := tenantdns.New(tenantdns.Options{
		BindAddress: "127.0.0.1:0", Upstream: []string{upstream}, Logger: logr.Discard(),
		// Every loopback source is a Pod of the one tenant.
		ClusterOf: func(context.Context, string) (string, bool, error) { return tenant.Name(), true, nil },
	})
	if err != nil {
		return nil, err
	}
	server.Register(tenantdns.Tenant{Name: tenant.Name(), Reader: cache, APIServer: "127.0.0.1"})
	served := make(chan error, 1)
	wg.Go(func() { served <- server.Start(ctx) })
	addr := server.Addr().String()

	serviceName := func(i int) string {
		return fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local.", i%dnsServicesPerNS, i%dnsNamespaces)
	}
	forwardedName := func(i int) string { return fmt.Sprintf("name-%d.example.", i) }
	cluster, err := timeQueries(addr, serviceName)
	if err != nil {
		return nil, fmt.Errorf("tenant names: %w", err)
	}
	forwarded, err := timeQueries(addr, forwardedName)
	if err != nil {
		return nil, fmt.Errorf("forwarded names: %w", err)
	}
	direct, err := timeQueries(upstream, forwardedName)
	if err != nil {
		return nil, fmt.Errorf("the upstream alone: %w", err)
	}
	qps, err := dnsLoad(addr, serviceName)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	cancel()
	if err := <-served; err != nil {
		return nil, err
	}

	setup := fmt.Sprintf("%d Services of a tenant API server, from the informer cache; UDP on loopback", dnsNamespaces*dnsServicesPerNS)
	return []result{
		ms("dns: a tenant Service name, latency p50", percentile(cluster, 50), "", setup+fmt.Sprintf("; %d queries one at a time", dnsLatencyQueries)),
		ms("dns: a tenant Service name, latency p99", percentile(cluster, 99), "", ""),
		ms("dns: a forwarded name, added latency p50", percentile(forwarded, 50)-percentile(direct, 50), "",
			fmt.Sprintf("through the server, less the same upstream asked directly (%.2f ms)", float64(percentile(direct, 50))/float64(time.Millisecond))),
		{Name: "dns: tenant Service names answered per second", Value: round(qps, 0), Unit: "queries/s",
			Note: fmt.Sprintf("%d clients, a socket each, for %s", dnsLoadClients, dnsLoadDuration)},
	}, nil
}

// dnsServices creates the Services the DNS run asks for.
func dnsServices(ctx context.Context, c client.Client) error {
	return parallel(8, dnsNamespaces, func(n int) error {
		ns := fmt.Sprintf("ns-%d", n)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		for i := range dnsServicesPerNS {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("svc-%d", i)},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
			}
			if err := c.Create(ctx, svc); err != nil {
				return err
			}
		}
		return nil
	})
}

// fixedResolver serves, on a loopback port until ctx ends, an A record
// for every name: the upstream of the DNS run. It returns its address.
func fixedResolver(ctx context.Context, wg *sync.WaitGroup) (string, error) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &dns.Server{PacketConn: conn, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		for _, q := range req.Question {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
				A:   net.ParseIP(dnsUpstreamAnswer),
			})
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	wg.Go(func() { _ = srv.ActivateAndServe() })
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		return "", fmt.Errorf("the upstream resolver did not start")
	}
	context.AfterFunc(ctx, func() { _ = srv.Shutdown() })
	return conn.LocalAddr().String(), nil
}

// exchange asks, over conn, for name's A record and checks that an answer
// came.
func exchange(c *dns.Client, conn *dns.Conn, name string) error {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	reply, _, err := c.ExchangeWithConn(m, conn)
	if err != nil {
		return err
	}
	if reply.Rcode != dns.RcodeSuccess || len(reply.Answer) == 0 {
		return fmt.Errorf("%s: %s, %d answers", name, dns.RcodeToString[reply.Rcode], len(reply.Answer))
	}
	return nil
}

// timeQueries times dnsLatencyQueries queries of name(i) to addr, one at
// a time over one socket.
func timeQueries(addr string, name func(i int) string) ([]time.Duration, error) {
	c := &dns.Client{Timeout: 5 * time.Second}
	conn, err := c.Dial(addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	took := make([]time.Duration, 0, dnsLatencyQueries)
	for i := range dnsLatencyQueries {
		began := time.Now()
		if err := exchange(c, conn, name(i)); err != nil {
			return nil, err
		}
		took = append(took, time.Since(began))
	}
	return took, nil
}

// dnsLoad counts the answers per second that dnsLoadClients clients get
// from addr, each asking name(i) as fast as it is answered.
func dnsLoad(addr string, name func(i int) string) (float64, error) {
	var answered atomic.Int64
	deadline := time.Now().Add(dnsLoadDuration)
	err := parallel(dnsLoadClients, dnsLoadClients, func(w int) error {
		c := &dns.Client{Timeout: 5 * time.Second}
		conn, err := c.Dial(addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		for i := w; time.Now().Before(deadline); i += dnsLoadClients {
			if err := exchange(c, conn, name(i)); err != nil {
				return err
			}
			answered.Add(1)
		}
		return nil
	})
	return float64(answered.Load()) / dnsLoadDuration.Seconds(), err
}
