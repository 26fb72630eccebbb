package tenantdns

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// isReverse says whether qname (lower case, fully qualified) is a reverse
// lookup: in in-addr.arpa or ip6.arpa.
func isReverse(qname string) bool {
	return strings.HasSuffix(qname, ".in-addr.arpa.") || strings.HasSuffix(qname, ".ip6.arpa.")
}

// reverse answers a reverse lookup from the tenant's own objects alone,
// as CoreDNS's kubernetes plugin answers its cluster's: a Service's
// cluster IP (or the host IP serving it) names the Service, and a ready
// endpoint of a Service names the endpoint (its hostname, or its dashed
// IP, under the Service's name). Any other address
// does not exist for the tenant: reverse lookups are never forwarded, so
// that a tenant cannot walk the host's Service range and learn the names
// of other tenants' host namespaces and Services.
func (s *Server) reverse(ctx context.Context, t *tenantEntry, qname string, q dns.Question) ([]dns.RR, error) {
	ip := reverseIP(qname)
	if ip == nil {
		return nil, errNoName
	}
	var services corev1.ServiceList
	// Read only: the cache's own objects, not a copy of each.
	if err := t.Reader.List(ctx, &services, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	var names []string
	for _, svc := range services.Items {
		ips := append(slices.Clone(svc.Spec.ClusterIPs), svc.Spec.ClusterIP, svc.Annotations[AnnotationHostClusterIP])
		if slices.ContainsFunc(ips, func(s string) bool { return sameIP(s, ip) }) {
			names = append(names, svc.Name+"."+svc.Namespace+".svc"+s.domain)
		}
	}
	if len(names) == 0 {
		var endpointSlices discoveryv1.EndpointSliceList
		if err := t.Reader.List(ctx, &endpointSlices, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing EndpointSlices: %w", err)
		}
		for _, es := range endpointSlices.Items {
			svc := es.Labels[discoveryv1.LabelServiceName]
			for _, e := range es.Endpoints {
				if svc == "" || e.Conditions.Ready != nil && !*e.Conditions.Ready || !slices.ContainsFunc(e.Addresses, func(s string) bool { return sameIP(s, ip) }) {
					continue
				}
				host := strings.NewReplacer(".", "-", ":", "-").Replace(e.Addresses[0])
				if e.Hostname != nil && *e.Hostname != "" {
					host = *e.Hostname
				}
				names = append(names, host+"."+svc+"."+es.Namespace+".svc"+s.domain)
			}
		}
	}
	if len(names) == 0 {
		return nil, errNoName
	}
	if q.Qtype != dns.TypePTR && q.Qtype != dns.TypeANY {
		return nil, nil
	}
	slices.Sort(names)
	out := make([]dns.RR, 0, len(names))
	for _, n := range slices.Compact(names) {
		out = append(out, &dns.PTR{Hdr: header(q.Name, dns.TypePTR), Ptr: n})
	}
	return out, nil
}

// reverseIP is the address a reverse name spells, or nil.
func reverseIP(qname string) net.IP {
	if v4, ok := strings.CutSuffix(qname, ".in-addr.arpa."); ok {
		labels := strings.Split(v4, ".")
		if len(labels) != 4 {
			return nil
		}
		slices.Reverse(labels)
		return net.ParseIP(strings.Join(labels, ".")).To4()
	}
	v6, ok := strings.CutSuffix(qname, ".ip6.arpa.")
	if !ok {
		return nil
	}
	nibbles := strings.Split(v6, ".")
	if len(nibbles) != 32 {
		return nil
	}
	slices.Reverse(nibbles)
	var b strings.Builder
	for i, n := range nibbles {
		if len(n) != 1 {
			return nil
		}
		if i > 0 && i%4 == 0 {
			b.WriteByte(':')
		}
		b.WriteString(n)
	}
	return net.ParseIP(b.String())
}

// sameIP says whether s spells ip.
func sameIP(s string, ip net.IP) bool {
	parsed := net.ParseIP(s)
	return parsed != nil && parsed.Equal(ip)
}
