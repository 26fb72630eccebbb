package tenantdns_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

var eventually = tenantrytest.Eventually

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// nameserver is what host Pods are told to ask; the test asks the
// server's own address.
const nameserver = "10.96.0.10"

// A tenant Pod resolves its own tenant's names, across its namespaces, as
// on a cluster of its own: Services (cluster IP, headless, ExternalName),
// SRV records of named ports, endpoint and Pod records, the tenant API
// server as kubernetes.default; other names go upstream. Another tenant's
// Pod does not see them, and an address of no tenant Pod is refused. A
// Pod asks "as" a host Pod by giving it a loopback IP and sending from it.
func TestTenantPodsResolveTheirTenantsNames(t *testing.T) {
	upstream := fakeUpstream(t, "example.org.", "192.0.2.1")
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Tenants: 2, HostNodes: 1, TenantControllerManager: true, Syncers: builtin.All(),
		Pods: &pods.Options{DNSConfig: &pods.DNSConfig{Nameserver: nameserver}},
		DNS:  true, DNSUpstream: []string{upstream.addr},
	})
	ctx := t.Context()
	tenant := w.Tenants["tenant-1"]
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	if err := tenant.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the namespace's ServiceAccount", func(ctx context.Context) (bool, error) {
		return true, tenant.Get(ctx, client.ObjectKey{Namespace: "other", Name: "default"}, &corev1.ServiceAccount{})
	})
	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	db := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "db"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{{Name: "pg", Port: 5432, TargetPort: intstr.FromInt32(5432), Protocol: corev1.ProtocolTCP}},
		},
	}
	ext := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "ext"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.org"},
	}
	dbPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "db-0", Labels: map[string]string{"app": "db"}},
		Spec:       corev1.PodSpec{Hostname: "db-0", Subdomain: "db", Containers: []corev1.Container{{Name: "pg", Image: "postgres"}}},
	}
	asker := pod("default", "asker")
	// A Pod of a subdomain that no Service serves: its kubelet's /etc/hosts
	// would name it, for itself alone.
	self := pod("default", "self")
	self.Spec.Hostname, self.Spec.Subdomain = "me", "alone"
	for _, o := range []client.Object{web, db, ext, dbPod, asker, self} {
		if err := tenant.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	asker2 := pod("default", "asker")
	if err := w.Tenants["tenant-2"].Create(ctx, asker2); err != nil {
		t.Fatal(err)
	}

	// The host Pod resolves through the server, with the tenant
	// namespace's search path.
	host := runningHostPod(t, w, "tenant-1", asker)
	want := &corev1.PodDNSConfig{
		Nameservers: []string{nameserver},
		Searches:    []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"},
	}
	if host.Spec.DNSPolicy != corev1.DNSNone || host.Spec.DNSConfig == nil ||
		!slices.Equal(host.Spec.DNSConfig.Nameservers, want.Nameservers) || !slices.Equal(host.Spec.DNSConfig.Searches, want.Searches) ||
		len(host.Spec.DNSConfig.Options) != 1 || *host.Spec.DNSConfig.Options[0].Value != "5" {
		t.Fatalf("host Pod DNS: policy %s, config %+v; want None, %+v, ndots 5", host.Spec.DNSPolicy, host.Spec.DNSConfig, want)
	}
	asAsker := askAs(t, w, host, "127.0.0.77")
	asAsker2 := askAs(t, w, runningHostPod(t, w, "tenant-2", asker2), "127.0.0.78")
	dbHost := runningHostPod(t, w, "tenant-1", dbPod)
	dbIP := dbHost.Status.PodIP
	selfHost := runningHostPod(t, w, "tenant-1", self)
	if dbHost.Spec.Subdomain != "" || selfHost.Spec.Subdomain != "" || selfHost.Spec.Hostname != "me" {
		t.Errorf("host Pods: subdomains %q and %q, hostname %q; want no subdomain (the host's kubelet would name them in the host namespace), the hostname kept",
			dbHost.Spec.Subdomain, selfHost.Spec.Subdomain, selfHost.Spec.Hostname)
	}
	asSelf := askAs(t, w, selfHost, "127.0.0.79")
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
		t.Fatal(err)
	}

	expect := func(ask func(string, uint16) *dns.Msg, name string, qtype uint16, rcode int, want ...string) {
		t.Helper()
		eventually(t, 30*time.Second, fmt.Sprintf("%s %s", dns.TypeToString[qtype], name), func(context.Context) (bool, error) {
			resp := ask(name, qtype)
			var got []string
			for _, rr := range resp.Answer {
				got = append(got, strings.TrimPrefix(rr.String(), rr.Header().String()))
			}
			slices.Sort(got)
			return resp.Rcode == rcode && slices.Equal(got, want),
				fmt.Errorf("%s %v; want %s %v", dns.RcodeToString[resp.Rcode], got, dns.RcodeToString[rcode], want)
		})
	}
	const domain = ".svc.cluster.local."
	expect(asAsker, "web.other"+domain, dns.TypeA, dns.RcodeSuccess, web.Spec.ClusterIP)
	expect(asAsker, "_http._tcp.web.other"+domain, dns.TypeSRV, dns.RcodeSuccess, "0 100 80 web.other"+domain)
	expect(asAsker, "db.other"+domain, dns.TypeA, dns.RcodeSuccess, dbIP)
	expect(asAsker, "db-0.db.other"+domain, dns.TypeA, dns.RcodeSuccess, dbIP)
	expect(asAsker, "_pg._tcp.db.other"+domain, dns.TypeSRV, dns.RcodeSuccess, "0 100 5432 db-0.db.other"+domain)
	// A Pod's own name, for that Pod alone.
	expect(asSelf, "me.alone.default"+domain, dns.TypeA, dns.RcodeSuccess, "127.0.0.79")
	expect(asAsker, "me.alone.default"+domain, dns.TypeA, dns.RcodeNameError)
	// The alias, and its address from upstream, as CoreDNS answers.
	expect(asAsker, "ext.other"+domain, dns.TypeA, dns.RcodeSuccess, "192.0.2.1", "example.org.")
	expect(asAsker, "10-1-2-3.other.pod.cluster.local.", dns.TypeA, dns.RcodeSuccess, "10.1.2.3")
	expect(asAsker, "kubernetes.default"+domain, dns.TypeA, dns.RcodeSuccess, "127.0.0.1")
	expect(asAsker, "web.other"+domain, dns.TypeAAAA, dns.RcodeSuccess)
	expect(asAsker, "nothere.other"+domain, dns.TypeA, dns.RcodeNameError)
	expect(asAsker, "example.org.", dns.TypeA, dns.RcodeSuccess, "192.0.2.1")
	// Another tenant has no such Service, whatever it asks.
	expect(asAsker2, "web.other"+domain, dns.TypeA, dns.RcodeNameError)
	// No tenant Pod has this address.
	expect(queryFrom(t, w, "127.0.0.99", "udp"), "web.other"+domain, dns.TypeA, dns.RcodeRefused)
	// TCP, as a resolver retries a truncated answer.
	expect(queryFrom(t, w, "127.0.0.77", "tcp"), "web.other"+domain, dns.TypeA, dns.RcodeSuccess, web.Spec.ClusterIP)

	// Reverse lookups answer the tenant's own addresses alone, and are
	// never forwarded: the host's Service range (its namespaces, every
	// tenant's Services) stays unnamed.
	arpa := func(ip string) string {
		name, err := dns.ReverseAddr(ip)
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	expect(asAsker, arpa(web.Spec.ClusterIP), dns.TypePTR, dns.RcodeSuccess, "web.other"+domain)
	expect(asAsker, arpa(dbIP), dns.TypePTR, dns.RcodeSuccess, "db-0.db.other"+domain)
	expect(asAsker2, arpa(web.Spec.ClusterIP), dns.TypePTR, dns.RcodeNameError)
	expect(asAsker, arpa("192.0.2.55"), dns.TypePTR, dns.RcodeNameError)
	expect(asAsker, arpa("2001:db8::1"), dns.TypePTR, dns.RcodeNameError)
	if n := upstream.reverse.Load(); n != 0 {
		t.Errorf("the upstream resolver was asked %d reverse lookups; want none", n)
	}
}

// A tenant whose Pods ask, all at once, for names that its upstream never
// answers holds at most maxForwards of the server's queries: the rest are
// refused at once, and another tenant's Pods get their answers meanwhile,
// names of their own and forwarded ones alike, without waiting for the
// hanging resolver.
func TestATenantsSlowNamesDoNotStallAnother(t *testing.T) {
	upstream := fakeUpstream(t, "example.org.", "192.0.2.1")
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Tenants: 2, HostNodes: 1, Syncers: builtin.All(),
		Pods: &pods.Options{DNSConfig: &pods.DNSConfig{Nameserver: nameserver}},
		DNS:  true, DNSUpstream: []string{upstream.addr},
	})
	ctx := t.Context()
	victim, attacker := pod("default", "victim"), pod("default", "attacker")
	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	for _, o := range []client.Object{victim, web} {
		if err := w.Tenants["tenant-1"].Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Tenants["tenant-2"].Create(ctx, attacker); err != nil {
		t.Fatal(err)
	}
	asVictim := askAs(t, w, runningHostPod(t, w, "tenant-1", victim), "127.0.0.81")
	askAs(t, w, runningHostPod(t, w, "tenant-2", attacker), "127.0.0.82")
	eventually(t, 30*time.Second, "the victim's Service resolves", func(context.Context) (bool, error) {
		resp := asVictim("web.default.svc.cluster.local.", dns.TypeA)
		return resp.Rcode == dns.RcodeSuccess && len(resp.Answer) == 1, fmt.Errorf("%v", resp)
	})

	// The attack: three times as many hanging names as a tenant may
	// forward at once, each asked once.
	const attack = 300
	var refused, failed, unanswered atomic.Int32
	var wg sync.WaitGroup
	for i := range attack {
		wg.Go(func() {
			c := &dns.Client{Net: "udp", Timeout: 4 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP("127.0.0.82")}}}
			req := new(dns.Msg)
			req.SetQuestion(fmt.Sprintf("n%d%s", i, slowSuffix), dns.TypeA)
			resp, _, err := c.Exchange(req, w.DNS.Addr().String())
			switch {
			case err != nil:
				unanswered.Add(1)
			case resp.Rcode == dns.RcodeRefused:
				refused.Add(1)
			case resp.Rcode == dns.RcodeServerFailure:
				failed.Add(1) // forwarded, and the upstream did not answer
			}
		})
	}
	// Meanwhile the victim's names, its own and forwarded ones, answer
	// well within the upstream timeout that the attacker's queries wait.
	eventually(t, 10*time.Second, "the attacker's queries past the limit are refused", func(context.Context) (bool, error) {
		return refused.Load() > 0, nil
	})
	for _, q := range []struct {
		name  string
		rcode int
	}{
		{"web.default.svc.cluster.local.", dns.RcodeSuccess},
		{"example.org.", dns.RcodeSuccess},
		{"unknown.example.org.", dns.RcodeNameError},
	} {
		began := time.Now()
		resp := asVictim(q.name, dns.TypeA)
		if took := time.Since(began); resp.Rcode != q.rcode || took > time.Second {
			t.Errorf("during the attack, the victim's %s: %s after %v; want %s at once", q.name, dns.RcodeToString[resp.Rcode], took, dns.RcodeToString[q.rcode])
		}
	}
	wg.Wait()
	if f := failed.Load(); f > 100 || refused.Load() == 0 {
		t.Errorf("of the attacker's %d hanging queries, %d waited for the upstream, %d were refused (%d unanswered); want at most the 100 a tenant may forward at once to wait", attack, f, refused.Load(), unanswered.Load())
	}
}

func pod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
}

// runningHostPod waits for the host Pod of the cluster's tenant Pod to run.
func runningHostPod(t *testing.T, w *syncertest.World, cluster string, tenant *corev1.Pod) *corev1.Pod {
	t.Helper()
	var host corev1.Pod
	eventually(t, time.Minute, "the host Pod of "+tenant.Name+" runs", func(ctx context.Context) (bool, error) {
		if err := w.Host.Get(ctx, w.HostKey(cluster, tenant.Namespace, tenant.Name), &host); err != nil {
			return false, err
		}
		return host.Status.Phase == corev1.PodRunning && host.Status.PodIP != "", fmt.Errorf("phase %s", host.Status.Phase)
	})
	return &host
}

// askAs gives the host Pod the loopback address ip, and returns a client
// that asks the server from it, as the Pod would.
func askAs(t *testing.T, w *syncertest.World, host *corev1.Pod, ip string) func(string, uint16) *dns.Msg {
	t.Helper()
	patch := client.MergeFrom(host.DeepCopy())
	host.Status.PodIP, host.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	if err := w.Host.Status().Patch(t.Context(), host, patch); err != nil {
		t.Fatalf("giving host Pod %s the address %s: %v", host.Name, ip, err)
	}
	return queryFrom(t, w, ip, "udp")
}

// queryFrom returns a client that asks the server from ip.
func queryFrom(t *testing.T, w *syncertest.World, ip, network string) func(string, uint16) *dns.Msg {
	return func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		var local net.Addr = &net.UDPAddr{IP: net.ParseIP(ip)}
		if network == "tcp" {
			local = &net.TCPAddr{IP: net.ParseIP(ip)}
		}
		c := &dns.Client{Net: network, Timeout: 5 * time.Second, Dialer: &net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}}
		req := new(dns.Msg)
		req.SetQuestion(name, qtype)
		resp, _, err := c.Exchange(req, w.DNS.Addr().String())
		if err != nil {
			t.Fatalf("asking %s %s from %s: %v", dns.TypeToString[qtype], name, ip, err)
		}
		return resp
	}
}

// upstream is a resolver of the test's own.
type upstream struct {
	addr string
	// reverse counts the reverse lookups asked of it.
	reverse atomic.Int32
}

// slowSuffix ends the names the fake upstream never answers: a resolver
// that hangs.
const slowSuffix = ".slow.example."

// fakeUpstream answers name with ip, names ending in slowSuffix never, and
// others with NXDOMAIN.
func fakeUpstream(t *testing.T, name, ip string) *upstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{addr: pc.LocalAddr().String()}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		if q := req.Question[0].Name; strings.HasSuffix(q, ".arpa.") {
			u.reverse.Add(1)
		} else if strings.HasSuffix(q, slowSuffix) {
			return
		}
		resp := new(dns.Msg)
		resp.SetReply(req)
		if q := req.Question[0]; q.Name == name && q.Qtype == dns.TypeA {
			resp.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(ip)}}
		} else {
			resp.SetRcode(req, dns.RcodeNameError)
		}
		_ = w.WriteMsg(resp)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return u
}
