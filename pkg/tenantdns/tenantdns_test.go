package tenantdns_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
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
		DNS:  true, DNSUpstream: []string{upstream},
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
	for _, o := range []client.Object{web, db, ext, dbPod, asker} {
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
	dbIP := runningHostPod(t, w, "tenant-1", dbPod).Status.PodIP
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

// fakeUpstream answers name with ip, and nothing else.
func fakeUpstream(t *testing.T, name, ip string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
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
	return pc.LocalAddr().String()
}
