package tenantdns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationHostClusterIP, on a tenant Service, names the host cluster IP
// that serves it when the tenant's own could not be made the host's (the
// Service syncer sets it; builtin.AnnotationHostClusterIP): the server
// answers with it, since the tenant's IP reaches nothing. A tenant that
// writes it misleads only its own Pods.
const AnnotationHostClusterIP = "tenantry.dev/host-cluster-ip"

// queryTimeout bounds the answer to one query, a forwarded one included.
const queryTimeout = 5 * time.Second

// maxInFlight bounds the queries the server answers at once, of every
// tenant and every source together: beyond, a query is dropped unanswered
// (its client asks again), so that a flood holds a bounded number of
// goroutines and buffers. One tenant's slow names hold at most
// maxForwards of them.
const maxInFlight = 1024

// serve answers one query.
func (s *Server) serve(ctx context.Context, w dns.ResponseWriter, req *dns.Msg) {
	select {
	case s.inFlight <- struct{}{}:
		defer func() { <-s.inFlight }()
	default:
		observe("", "dropped", dns.RcodeRefused, 0)
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	cluster, kind := "", "refused"
	resp := new(dns.Msg)
	defer func() {
		observe(cluster, kind, resp.Rcode, time.Since(start))
		_ = w.WriteMsg(resp)
	}()
	if len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		resp.SetRcode(req, dns.RcodeNotImplemented)
		return
	}
	ip := sourceIP(w.RemoteAddr())
	name, ok, err := s.clusterOf(ctx, ip)
	if err != nil {
		s.opts.Logger.Error(err, "telling which tenant asks", "source", ip)
		resp.SetRcode(req, dns.RcodeServerFailure)
		return
	}
	t, registered := s.tenant(name)
	if !ok || !registered {
		// Not a Pod of a tenant served here: no open resolver.
		resp.SetRcode(req, dns.RcodeRefused)
		return
	}
	cluster = name
	q := req.Question[0]
	qname := strings.ToLower(q.Name)
	if !strings.HasSuffix(qname, s.domain) && !isReverse(qname) {
		kind = "forwarded"
		s.forward(ctx, w, req, resp, t)
		return
	}
	if isReverse(qname) {
		kind = "reverse"
		resp.SetReply(req)
		resp.Authoritative = true
		answers, err := s.reverse(ctx, t, qname, q)
		switch {
		case errors.Is(err, errNoName):
			resp.SetRcode(req, dns.RcodeNameError)
		case err != nil:
			s.opts.Logger.Error(err, "answering a tenant Pod's reverse query", "cluster", t.Name, "name", q.Name)
			resp.SetRcode(req, dns.RcodeServerFailure)
		default:
			resp.Answer = answers
		}
		return
	}
	kind = "cluster"
	resp.SetReply(req)
	resp.Authoritative = true
	answers, extra, err := s.resolve(ctx, t, strings.TrimSuffix(qname, s.domain), ip, q)
	switch {
	case errors.Is(err, errNoName):
		resp.SetRcode(req, dns.RcodeNameError)
		resp.Ns = []dns.RR{s.soa()}
	case err != nil:
		s.opts.Logger.Error(err, "answering a tenant Pod's query", "cluster", t.Name, "name", q.Name)
		resp.SetRcode(req, dns.RcodeServerFailure)
	case len(answers) == 0:
		// The name exists, without records of the asked type.
		resp.Ns = []dns.RR{s.soa()}
	default:
		resp.Answer, resp.Extra = answers, extra
	}
}

// sourceWait bounds how long a query from an address that no tenant Pod
// has waits for one to have it: a container's first query can come before
// its host Pod's IP has reached the manager's cache (the kubelet reports
// the IP as the sandbox starts, and the container resolves names at once).
// Refused at once, it fails the container's first lookup.
const sourceWait = 2 * time.Second

// maxSourceWaits bounds the queries that wait for their source at once:
// beyond, one from an unknown address is refused at once, so that a flood
// of them (from anywhere, since UDP sources are easy to forge) holds no
// more than this many goroutines.
const maxSourceWaits = 64

// clusterOf is Options.ClusterOf, waiting up to sourceWait for an address
// no tenant Pod has yet, while fewer than maxSourceWaits queries wait.
func (s *Server) clusterOf(ctx context.Context, ip string) (string, bool, error) {
	name, ok, err := s.opts.ClusterOf(ctx, ip)
	if ok || err != nil {
		return name, ok, err
	}
	select {
	case s.sourceWaits <- struct{}{}:
		defer func() { <-s.sourceWaits }()
	default:
		return "", false, nil
	}
	wait, cancel := context.WithTimeout(ctx, sourceWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-wait.Done():
			return "", false, nil
		case <-tick.C:
		}
		if name, ok, err = s.opts.ClusterOf(wait, ip); ok || err != nil {
			return name, ok, err
		}
	}
}

// errNoName: the name does not exist in the tenant.
var errNoName = errors.New("no such name")

// resolve answers q, asked from the Pod address from, for the name in the
// cluster domain, given without the domain ("web.default.svc").
func (s *Server) resolve(ctx context.Context, t *tenantEntry, name, from string, q dns.Question) (answers, extra []dns.RR, err error) {
	labels := strings.Split(name, ".")
	n := len(labels)
	switch {
	case n == 3 && labels[2] == "svc":
		return s.service(ctx, t, labels[1], labels[0], q)
	case n == 4 && labels[3] == "svc":
		return s.endpointHost(ctx, t, labels[2], labels[1], labels[0], from, q)
	case n == 5 && labels[4] == "svc" && strings.HasPrefix(labels[0], "_") && strings.HasPrefix(labels[1], "_"):
		return s.srv(ctx, t, labels[3], labels[2], labels[0][1:], labels[1][1:], q)
	case n == 3 && labels[2] == "pod":
		return podRecord(labels[0], q)
	}
	return nil, nil, errNoName
}

// service answers for Service ns/name.
func (s *Server) service(ctx context.Context, t *tenantEntry, ns, name string, q dns.Question) ([]dns.RR, []dns.RR, error) {
	if ns == "default" && name == "kubernetes" && t.APIServer != "" {
		return addressOrAlias(q, t.APIServer), nil, nil
	}
	svc, err := s.getService(ctx, t, ns, name)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return s.alias(ctx, t, svc, q, 0, ""), nil, nil
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		eps, err := s.endpoints(ctx, t, ns, name)
		if err != nil {
			return nil, nil, err
		}
		var out []dns.RR
		for _, e := range eps {
			out = append(out, addressRecords(q, e.ips)...)
		}
		return out, nil, nil
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	if hostIP := svc.Annotations[AnnotationHostClusterIP]; net.ParseIP(hostIP) != nil {
		ips = []string{hostIP}
	}
	return addressRecords(q, ips), nil, nil
}

// maxAliasChain bounds how many ExternalName aliases one answer follows.
const maxAliasChain = 8

// alias answers q for ExternalName Service svc, depth aliases deep: its
// CNAME, and what the name it names resolves to for an address query, as
// a recursive resolver answers (CoreDNS's kubernetes plugin too): a stub
// resolver that gets the CNAME alone does not ask again, and finds no
// address. A name in the cluster domain is the tenant's own; any other is
// asked of the upstream resolvers. Nothing found (no such name, no
// upstream answer, a chain too long) leaves the CNAME alone.
func (s *Server) alias(ctx context.Context, t *tenantEntry, svc *corev1.Service, q dns.Question, depth int, from string) []dns.RR {
	target := dns.Fqdn(svc.Spec.ExternalName)
	out := []dns.RR{&dns.CNAME{Hdr: header(q.Name, dns.TypeCNAME), Target: target}}
	if depth >= maxAliasChain || (q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA && q.Qtype != dns.TypeANY) {
		return out
	}
	next := dns.Question{Name: target, Qtype: q.Qtype, Qclass: q.Qclass}
	lower := strings.ToLower(target)
	if !strings.HasSuffix(lower, s.domain) {
		req := new(dns.Msg)
		req.SetQuestion(target, q.Qtype)
		if in, err := s.forwarder.exchange(ctx, t, "udp", req); err == nil && in.Rcode == dns.RcodeSuccess {
			out = append(out, in.Answer...)
		}
		return out
	}
	name := strings.TrimSuffix(lower, s.domain)
	if labels := strings.Split(name, "."); len(labels) == 3 && labels[2] == "svc" {
		if svc, err := s.getService(ctx, t, labels[1], labels[0]); err == nil && svc.Spec.Type == corev1.ServiceTypeExternalName {
			return append(out, s.alias(ctx, t, svc, next, depth+1, from)...)
		}
	}
	if answers, _, err := s.resolve(ctx, t, name, from, next); err == nil {
		out = append(out, answers...)
	}
	return out
}

// endpointHost answers for one endpoint of headless Service ns/svc, by its
// hostname or dashed IP; or, asked from the Pod address from, for that
// Pod's own name, if it is hostname host in subdomain svc (see ownName).
func (s *Server) endpointHost(ctx context.Context, t *tenantEntry, ns, svc, host, from string, q dns.Question) ([]dns.RR, []dns.RR, error) {
	answers, err := s.serviceEndpointHost(ctx, t, ns, svc, host, q)
	if !errors.Is(err, errNoName) {
		return answers, nil, err
	}
	if ips, err := s.ownName(ctx, t, ns, svc, host, from); err != nil || len(ips) > 0 {
		return addressRecords(q, ips), nil, err
	}
	return nil, nil, errNoName
}

// serviceEndpointHost answers for the endpoint of headless Service ns/svc
// of hostname or dashed IP host.
func (s *Server) serviceEndpointHost(ctx context.Context, t *tenantEntry, ns, svc, host string, q dns.Question) ([]dns.RR, error) {
	if _, err := s.getService(ctx, t, ns, svc); err != nil {
		return nil, err
	}
	eps, err := s.endpoints(ctx, t, ns, svc)
	if err != nil {
		return nil, err
	}
	for _, e := range eps {
		if e.host == host {
			return addressRecords(q, e.ips), nil
		}
	}
	return nil, errNoName
}

// ownName is the addresses of the tenant Pod at address from, if its
// own fully qualified name is hostname host in subdomain svc of namespace
// ns: the name its kubelet would write into its /etc/hosts. The host's
// kubelet would write the host's name there instead, so a host Pod has
// no subdomain (see package pods) and asks this server; no other Pod gets
// the answer, as no other Pod reads that /etc/hosts.
func (s *Server) ownName(ctx context.Context, t *tenantEntry, ns, svc, host, from string) ([]string, error) {
	if s.opts.PodOf == nil || from == "" {
		return nil, nil
	}
	cluster, key, ok, err := s.opts.PodOf(ctx, from)
	if err != nil || !ok || cluster != t.Name || key.Namespace != ns {
		return nil, err
	}
	var p corev1.Pod
	if err := t.Reader.Get(ctx, key, &p); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if p.Spec.Subdomain != svc || p.Spec.HostnameOverride != nil || podHostname(&p) != host {
		return nil, nil
	}
	ips := make([]string, 0, len(p.Status.PodIPs))
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	return ips, nil
}

// podHostname is a Pod's hostname as its kubelet gives it: spec.hostname,
// else its name, cut to 63 characters without a trailing "-" or ".".
func podHostname(p *corev1.Pod) string {
	if p.Spec.Hostname != "" {
		return p.Spec.Hostname
	}
	name := p.Name
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-.")
	}
	return name
}

// srv answers SRV for the named port of Service ns/svc.
func (s *Server) srv(ctx context.Context, t *tenantEntry, ns, svc, port, proto string, q dns.Question) ([]dns.RR, []dns.RR, error) {
	service, err := s.getService(ctx, t, ns, svc)
	if err != nil {
		return nil, nil, err
	}
	var found *corev1.ServicePort
	for i, p := range service.Spec.Ports {
		if p.Name == port && strings.EqualFold(string(p.Protocol), proto) {
			found = &service.Spec.Ports[i]
		}
	}
	if found == nil {
		return nil, nil, errNoName
	}
	if q.Qtype != dns.TypeSRV && q.Qtype != dns.TypeANY {
		return nil, nil, nil
	}
	svcName := svc + "." + ns + ".svc" + s.domain
	if service.Spec.ClusterIP != corev1.ClusterIPNone {
		return []dns.RR{s.srvRecord(q, svcName, uint16(found.Port))}, nil, nil
	}
	eps, err := s.endpoints(ctx, t, ns, svc)
	if err != nil {
		return nil, nil, err
	}
	var answers, extra []dns.RR
	for _, e := range eps {
		target := e.host + "." + svcName
		port := found.TargetPort.IntValue()
		if e.ports[port] == 0 {
			if p, ok := e.namedPorts[found.Name]; ok {
				port = int(p)
			}
		}
		if port == 0 {
			port = int(found.Port)
		}
		answers = append(answers, s.srvRecord(q, target, uint16(port)))
		extra = append(extra, addressRecords(dns.Question{Name: target, Qtype: dns.TypeANY}, e.ips)...)
	}
	return answers, extra, nil
}

func (s *Server) srvRecord(q dns.Question, target string, port uint16) dns.RR {
	return &dns.SRV{Hdr: header(q.Name, dns.TypeSRV), Priority: 0, Weight: 100, Port: port, Target: target}
}

// podRecord answers <a-b-c-d>.<ns>.pod: the IP the name spells.
func podRecord(dashed string, q dns.Question) ([]dns.RR, []dns.RR, error) {
	ip := net.ParseIP(strings.ReplaceAll(dashed, "-", "."))
	if ip == nil {
		// An IPv6 address spells its colons as dashes.
		ip = net.ParseIP(strings.ReplaceAll(dashed, "-", ":"))
	}
	if ip == nil {
		return nil, nil, errNoName
	}
	return addressRecords(q, []string{ip.String()}), nil, nil
}

func (s *Server) getService(ctx context.Context, t *tenantEntry, ns, name string) (*corev1.Service, error) {
	var svc corev1.Service
	if err := t.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errNoName
		}
		return nil, fmt.Errorf("reading Service %s/%s: %w", ns, name, err)
	}
	return &svc, nil
}

// endpoint is one ready endpoint of a headless Service.
type endpoint struct {
	// host is its DNS label: its hostname, else its first IP, dashed.
	host       string
	ips        []string
	ports      map[int]int32
	namedPorts map[string]int32
}

// endpoints are the ready endpoints of Service ns/svc, from its
// EndpointSlices.
func (s *Server) endpoints(ctx context.Context, t *tenantEntry, ns, svc string) ([]endpoint, error) {
	var slices discoveryv1.EndpointSliceList
	if err := t.Reader.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of Service %s/%s: %w", ns, svc, err)
	}
	var out []endpoint
	for _, sl := range slices.Items {
		named := map[string]int32{}
		ports := map[int]int32{}
		for _, p := range sl.Ports {
			if p.Port == nil {
				continue
			}
			ports[int(*p.Port)] = *p.Port
			if p.Name != nil {
				named[*p.Name] = *p.Port
			}
		}
		for _, e := range sl.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready || len(e.Addresses) == 0 {
				continue
			}
			host := strings.NewReplacer(".", "-", ":", "-").Replace(e.Addresses[0])
			if e.Hostname != nil && *e.Hostname != "" {
				host = *e.Hostname
			}
			out = append(out, endpoint{host: host, ips: e.Addresses, ports: ports, namedPorts: named})
		}
	}
	return out, nil
}

// addressRecords are the A (or AAAA) records of ips that q asks for.
func addressRecords(q dns.Question, ips []string) []dns.RR {
	var out []dns.RR
	for _, s := range ips {
		ip := net.ParseIP(s)
		switch {
		case ip == nil:
		case ip.To4() != nil && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
			out = append(out, &dns.A{Hdr: header(q.Name, dns.TypeA), A: ip.To4()})
		case ip.To4() == nil && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY):
			out = append(out, &dns.AAAA{Hdr: header(q.Name, dns.TypeAAAA), AAAA: ip})
		}
	}
	return out
}

// addressOrAlias answers with host's address, or a CNAME to a host name.
func addressOrAlias(q dns.Question, host string) []dns.RR {
	if net.ParseIP(host) != nil {
		return addressRecords(q, []string{host})
	}
	return []dns.RR{&dns.CNAME{Hdr: header(q.Name, dns.TypeCNAME), Target: dns.Fqdn(host)}}
}

func header(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: answerTTL}
}

// soa is the cluster domain's SOA, for negative answers.
func (s *Server) soa() dns.RR {
	zone := strings.TrimPrefix(s.domain, ".")
	return &dns.SOA{
		Hdr: header(zone, dns.TypeSOA), Ns: "ns.dns." + zone, Mbox: "hostmaster." + zone,
		Serial: 1, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: answerTTL,
	}
}

// forward asks the upstream resolvers, in turn, and relays the first
// answer; over TCP when UDP's is truncated.
func (s *Server) forward(ctx context.Context, w dns.ResponseWriter, req, resp *dns.Msg, t *tenantEntry) {
	network := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}
	in, err := s.forwarder.exchange(ctx, t, network, req)
	switch {
	case errors.Is(err, errTooManyForwards):
		resp.SetRcode(req, dns.RcodeRefused)
	case err != nil:
		s.opts.Logger.V(1).Info("no upstream resolver answered", "cluster", t.Name, "name", req.Question[0].Name, "error", err.Error())
		resp.SetRcode(req, dns.RcodeServerFailure)
	default:
		if network == "udp" {
			// An answer kept from a TCP query, or an upstream's own, may be
			// larger than this client takes over UDP: cut it, marked
			// truncated, and the client asks again over TCP.
			size := dns.MinMsgSize
			if opt := req.IsEdns0(); opt != nil {
				size = max(size, int(opt.UDPSize()))
			}
			in.Truncate(size)
		}
		*resp = *in
	}
}

// sourceIP is the IP of a query's source address.
func sourceIP(a net.Addr) string {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
