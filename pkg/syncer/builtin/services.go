package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/tenantdns"
)

// AnnotationHostClusterIP is set on a tenant Service whose cluster IP could
// not be made the host's (the host's IP is outside the tenant's service
// range, or taken there): it names the IP that actually serves it, which
// the tenant DNS answers with (package tenantdns, where it is defined).
const AnnotationHostClusterIP = tenantdns.AnnotationHostClusterIP

// reassignExternalName is the placeholder DNS name a tenant Service has for
// the moment its cluster IP is being replaced.
const reassignExternalName = "cluster-ip-reassignment.tenantry.invalid"

// DefaultServiceTypes are the types of Service the host serves for a
// tenant by default: those that take nothing of the host's beyond a
// cluster IP.
var DefaultServiceTypes = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName}

// Services syncs Services down, and brings the host's cluster IP and
// load-balancer status up. A Service of a type not in types (nil:
// DefaultServiceTypes) is refused: NodePort and LoadBalancer Services
// take ports on every host node and the host's load balancers. External
// IPs, a load balancer IP and a load balancer class are left out (and the
// tenant told): a tenant must not claim host addresses, nor pick the
// host's load balancer.
//
// hostRanges are the host's service ranges (its ServiceCIDRs): a host copy
// asks for the tenant Service's own cluster IPs where they lie in the part
// of a range that the host hands out to any Service (see
// preferTenantIPs), never the first addresses that host admins pin, so
// that the tenant Service keeps them. Elsewhere (nil: everywhere) the host
// picks the IPs, and the tenant Service takes them (serviceClusterIPUp).
func Services(types []corev1.ServiceType, hostRanges []netip.Prefix) syncer.Syncer {
	if types == nil {
		types = DefaultServiceTypes
	}
	return syncer.Syncer{
		Name:             "services",
		Usage:            serviceUsage,
		Object:           func() client.Object { return &corev1.Service{} },
		CopyUserMetadata: true,
		// The tenant's own API server Service is the tenant's business.
		Filter: func(t client.Object) bool {
			return t.GetNamespace() != metav1.NamespaceDefault || t.GetName() != "kubernetes"
		},
		Down: func(t, h client.Object) error {
			tenant, host := t.(*corev1.Service), h.(*corev1.Service)
			if tenant.Spec.ExternalName == reassignExternalName && tenant.Annotations[AnnotationReassigningFrom] != "" && host.ResourceVersion != "" {
				return nil // the tenant Service is taking the host's IP: a moment, not a change
			}
			if err := allowedType(tenant, types); err != nil {
				return err
			}
			host.Spec = serviceSpecDown(tenant.Spec, host.Spec, host.ResourceVersion == "")
			return nil
		},
		Prefer: func(t, h client.Object) []string {
			return preferTenantIPs(t.(*corev1.Service), h.(*corev1.Service), hostRanges)
		},
		Stripped: func(t client.Object) string {
			var out []string
			if ips := t.(*corev1.Service).Spec.ExternalIPs; len(ips) > 0 {
				out = append(out, "externalIPs "+strings.Join(ips, ","))
			}
			if ip := t.(*corev1.Service).Spec.LoadBalancerIP; ip != "" {
				out = append(out, "loadBalancerIP "+ip)
			}
			if c := t.(*corev1.Service).Spec.LoadBalancerClass; c != nil {
				out = append(out, "loadBalancerClass "+*c)
			}
			return strings.Join(out, "; ")
		},
		Up: syncer.UpAll(serviceClusterIPUp, syncer.StatusUp(syncer.CopyStatus(func(s *corev1.Service) *corev1.ServiceStatus {
			return &s.Status
		}))),
	}
}

// allowedType refuses (syncer.Refuse) a Service whose type is not one of
// types.
func allowedType(s *corev1.Service, types []corev1.ServiceType) error {
	t := s.Spec.Type
	if t == "" {
		t = corev1.ServiceTypeClusterIP
	}
	if slices.Contains(types, t) {
		return nil
	}
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = string(t)
	}
	return syncer.Refuse("a Service of type %s is not allowed by the host (allowed: %s): "+
		"allow it in the VirtualCluster's spec.hostPolicy.services.allowedTypes", t, strings.Join(names, ", "))
}

// preferTenantIPs asks, in host, the copy of tenant about to be written
// with no cluster IP (a new one, or one turning from ExternalName), for
// tenant's own cluster IPs, when each lies in one of hostRanges past its
// first addresses (see dynamicPart). It says which fields it set, none if
// it asked for nothing.
//
// The tenant Service then keeps its IPs, rather than passing through
// ExternalName for a moment to take the host's, which its API server's
// webhook and aggregator calls, and its clients, would see. The first
// addresses of a range are where a host admin pins Services by hand (the
// cluster DNS's, say): a tenant never asks for one of those, lest it take
// one before the admin does. Beyond them, it asks for a free IP as any
// namespace of the host may.
func preferTenantIPs(tenant, host *corev1.Service, hostRanges []netip.Prefix) []string {
	if host.Spec.ClusterIP != "" || host.Spec.Type == corev1.ServiceTypeExternalName ||
		tenant.Spec.ClusterIP == "" || tenant.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil
	}
	ips := clusterIPs(tenant.Spec)
	for _, ip := range ips {
		addr, err := netip.ParseAddr(ip)
		if err != nil || !slices.ContainsFunc(hostRanges, func(r netip.Prefix) bool { return dynamicPart(r, addr) }) {
			return nil
		}
	}
	host.Spec.ClusterIP, host.Spec.ClusterIPs = ips[0], slices.Clone(ips)
	host.Spec.IPFamilies, host.Spec.IPFamilyPolicy = slices.Clone(tenant.Spec.IPFamilies), tenant.Spec.IPFamilyPolicy
	return []string{"spec.clusterIP", "spec.clusterIPs", "spec.ipFamilies", "spec.ipFamilyPolicy"}
}

// dynamicPart says whether addr lies in r past the addresses that
// Kubernetes' allocator keeps for Services that name their IP (the first
// min(max(16, size/16), 256) after the network's own), which it hands out
// only when the rest is full.
func dynamicPart(r netip.Prefix, addr netip.Addr) bool {
	if !r.Contains(addr) {
		return false
	}
	hostBits := r.Addr().BitLen() - r.Bits()
	reserved := 256
	if hostBits < 12 {
		size := 1 << hostBits
		reserved = min(max(16, size/16), 256)
		if size < 16 {
			reserved = 0
		}
	}
	first := r.Masked().Addr()
	for range reserved {
		first = first.Next()
	}
	return addr.Compare(first) > 0
}

// serviceSpecDown is the host spec for a tenant spec: the tenant's, with
// what the host allocates (cluster IPs, node ports) left to the host.
func serviceSpecDown(tenant, host corev1.ServiceSpec, creating bool) corev1.ServiceSpec {
	spec := *tenant.DeepCopy()
	spec.ExternalIPs = nil
	spec.LoadBalancerIP = ""     // a host address, the host's to give
	spec.LoadBalancerClass = nil // the host's load balancer, the host's to choose
	if spec.Type != corev1.ServiceTypeNodePort && spec.Type != corev1.ServiceTypeLoadBalancer {
		spec.ExternalTrafficPolicy = "" // set only because of external IPs, which are gone
	}
	if creating {
		if spec.ClusterIP != corev1.ClusterIPNone {
			spec.ClusterIP, spec.ClusterIPs = "", nil // the host's to allocate; see preferTenantIPs
		}
		spec.HealthCheckNodePort = 0
		for i := range spec.Ports {
			spec.Ports[i].NodePort = 0
		}
		return spec
	}
	spec.ClusterIP, spec.ClusterIPs = host.ClusterIP, host.ClusterIPs
	if host.ClusterIP == "" {
		// Turning from ExternalName: the host allocates, under the
		// tenant's families.
		spec.ClusterIPs = nil
	} else {
		spec.IPFamilies, spec.IPFamilyPolicy = host.IPFamilies, host.IPFamilyPolicy
	}
	spec.HealthCheckNodePort = host.HealthCheckNodePort
	spec.LoadBalancerClass = host.LoadBalancerClass
	for i := range spec.Ports {
		spec.Ports[i].NodePort = hostNodePort(host.Ports, spec.Ports[i])
	}
	return spec
}

func hostNodePort(ports []corev1.ServicePort, p corev1.ServicePort) int32 {
	for _, hp := range ports {
		if hp.Name == p.Name && hp.Protocol == p.Protocol && hp.Port == p.Port {
			return hp.NodePort
		}
	}
	return 0
}

// AnnotationReassigningFrom holds, on a tenant Service that is passing
// through ExternalName to take the host's cluster IP, its spec from before
// (JSON). It is written with the first step and removed with the second, so
// that a swap cut short (the manager killed, the connection lost) is
// finished from it by the next sync. The tenant can write it too, but only
// to its own harm: it concerns the tenant's own Service, whose host copy
// Down still writes only what the tenant may ask.
const AnnotationReassigningFrom = "tenantry.dev/reassigning-from"

// serviceClusterIPUp gives the tenant Service the host's cluster IP, so that
// what tenants resolve is what the host serves. A cluster IP cannot be
// changed in place, but it may be set when a Service turns from ExternalName
// into another type: the Service passes through ExternalName for a moment
// and keeps its UID, ports and everything else. If the tenant cannot take the
// host's IP (outside its service range, or in use), the Service gets its
// former IP back and an annotation naming the host's.
func serviceClusterIPUp(ctx context.Context, c client.Client, h, t client.Object) (bool, error) {
	host, tenant := h.(*corev1.Service), t.(*corev1.Service)
	if saved, ok := tenant.Annotations[AnnotationReassigningFrom]; ok {
		return resumeReassignment(ctx, c, host, tenant, saved)
	}
	want := host.Spec.ClusterIP
	if _, named := tenant.Annotations[AnnotationHostClusterIP]; named && want != "" && tenant.Spec.ClusterIP == want {
		// The tenant's IP is the host's: a host IP named before is not
		// what serves it now (the tenant DNS answers with the annotation).
		done := tenant.DeepCopy()
		delete(done.Annotations, AnnotationHostClusterIP)
		if err := c.Update(ctx, done); err != nil {
			return false, fmt.Errorf("dropping the host cluster IP named before: %w", err)
		}
		return true, nil
	}
	if want == "" || want == corev1.ClusterIPNone || tenant.Spec.ClusterIP == corev1.ClusterIPNone ||
		tenant.Spec.Type == corev1.ServiceTypeExternalName || tenant.Spec.ClusterIP == want ||
		tenant.Annotations[AnnotationHostClusterIP] == want {
		return false, nil
	}
	before, err := json.Marshal(tenant.Spec)
	if err != nil {
		return false, fmt.Errorf("recording the Service's spec: %w", err)
	}
	placeholder := tenant.DeepCopy()
	if placeholder.Annotations == nil {
		placeholder.Annotations = map[string]string{}
	}
	placeholder.Annotations[AnnotationReassigningFrom] = string(before)
	placeholder.Spec.Type = corev1.ServiceTypeExternalName
	placeholder.Spec.ExternalName = reassignExternalName
	placeholder.Spec.ClusterIP, placeholder.Spec.ClusterIPs = "", nil
	placeholder.Spec.IPFamilies, placeholder.Spec.IPFamilyPolicy = nil, nil
	placeholder.Spec.ExternalTrafficPolicy, placeholder.Spec.InternalTrafficPolicy = "", nil
	placeholder.Spec.HealthCheckNodePort = 0
	placeholder.Spec.AllocateLoadBalancerNodePorts, placeholder.Spec.LoadBalancerClass = nil, nil
	for i := range placeholder.Spec.Ports {
		placeholder.Spec.Ports[i].NodePort = 0
	}
	if err := c.Update(ctx, placeholder); err != nil {
		return false, fmt.Errorf("making way for the host's cluster IP: %w", err)
	}
	return finishReassignment(ctx, c, host, placeholder, tenant.Spec)
}

// resumeReassignment finishes a swap that tenant, carrying
// AnnotationReassigningFrom with saved, is in the middle of.
func resumeReassignment(ctx context.Context, c client.Client, host, tenant *corev1.Service, saved string) (bool, error) {
	var before corev1.ServiceSpec
	err := json.Unmarshal([]byte(saved), &before)
	if err != nil || tenant.Spec.Type != corev1.ServiceTypeExternalName || tenant.Spec.ExternalName != reassignExternalName {
		// Changed since by the tenant, whose spec now stands, or not
		// Tenantry's record: nothing to finish.
		done := tenant.DeepCopy()
		delete(done.Annotations, AnnotationReassigningFrom)
		if err := c.Update(ctx, done); err != nil {
			return false, fmt.Errorf("dropping a cluster IP swap that cannot be finished: %w", err)
		}
		return true, nil
	}
	log.FromContext(ctx).Info("finishing a cluster IP swap that was cut short", "service", client.ObjectKeyFromObject(tenant))
	return finishReassignment(ctx, c, host, tenant, before)
}

// finishReassignment turns placeholder, the tenant Service as stored while
// it passes through ExternalName, back into before with the host's cluster
// IP, or with its own if the tenant cannot take the host's.
func finishReassignment(ctx context.Context, c client.Client, host, placeholder *corev1.Service, before corev1.ServiceSpec) (bool, error) {
	withIP := func(ips []string) *corev1.Service {
		s := placeholder.DeepCopy()
		delete(s.Annotations, AnnotationReassigningFrom)
		// A host IP named before (the tenant DNS answers with it) is no
		// longer what serves; the failure below names the new one.
		delete(s.Annotations, AnnotationHostClusterIP)
		s.Spec = *before.DeepCopy()
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
		if len(s.Spec.IPFamilies) != len(ips) {
			s.Spec.IPFamilies = nil
		}
		return s
	}
	want := host.Spec.ClusterIP
	if want == "" || want == corev1.ClusterIPNone {
		// No IP to take (a record the tenant wrote itself, or a host copy
		// replaced since): the Service gets its own back.
		if err := c.Update(ctx, withIP(clusterIPs(before))); err != nil {
			return false, fmt.Errorf("restoring the Service's cluster IP %s: %w", before.ClusterIP, err)
		}
		return true, nil
	}
	err := c.Update(ctx, withIP(clusterIPs(host.Spec)))
	if err == nil {
		return true, nil
	}
	if !apierrors.IsInvalid(err) {
		// No answer about the IP (a conflict, the tenant throttling or
		// away): the record stays, and the next sync tries again.
		return true, fmt.Errorf("taking the host's cluster IP %s: %w", host.Spec.ClusterIP, err)
	}
	// The tenant cannot take the host's IP (outside its service range, or
	// in use): restore its own, and say where the host serves.
	restored := withIP(clusterIPs(before))
	if restored.Annotations == nil {
		restored.Annotations = map[string]string{}
	}
	restored.Annotations[AnnotationHostClusterIP] = host.Spec.ClusterIP
	rerr := c.Update(ctx, restored)
	if apierrors.IsInvalid(rerr) {
		// Its own was taken meanwhile: a new one, which the tenant's API
		// server allocates, rather than an ExternalName for good.
		restored.Spec.ClusterIP, restored.Spec.ClusterIPs, restored.Spec.IPFamilies = "", nil, nil
		rerr = c.Update(ctx, restored)
	}
	if rerr != nil {
		return true, fmt.Errorf("taking the host's cluster IP %s failed (%v), and restoring %s too (the next sync finishes it): %w",
			host.Spec.ClusterIP, err, before.ClusterIP, rerr)
	}
	return true, nil
}

// clusterIPs are a spec's cluster IPs, primary first.
func clusterIPs(spec corev1.ServiceSpec) []string {
	if len(spec.ClusterIPs) > 0 {
		return spec.ClusterIPs
	}
	return []string{spec.ClusterIP}
}
