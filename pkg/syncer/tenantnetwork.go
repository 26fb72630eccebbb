package syncer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer/netpol"
)

// OpenPolicyPrefix begins the names of the NetworkPolicies that hold a
// host namespace's open world where the tenant's own NetworkPolicies
// select some of its Pods: tenantry-open-ingress-N and
// tenantry-open-egress-N, for the Pods that no tenant policy of that
// direction selects (docs/design/tenant-network-policies.md). Like
// IsolationPolicyName, it is Tenantry's: a tenant NetworkPolicy of such a
// name is not synced.
const OpenPolicyPrefix = "tenantry-open-"

// reservedPolicyName says whether a tenant NetworkPolicy's name is one of
// Tenantry's own in the host.
func reservedPolicyName(name string) bool {
	return name == IsolationPolicyName || isOpenPolicy(name)
}

func isOpenPolicy(name string) bool { return strings.HasPrefix(name, OpenPolicyPrefix) }

// openWorld is, per direction, the Pods of a host namespace that no tenant
// NetworkPolicy of that direction selects, as label selectors whose union
// they are (netpol.Complement): they keep what the isolation policy let
// them do, as a cluster leaves Pods that no policy selects open.
type openWorld struct {
	ingress, egress []metav1.LabelSelector
	// tooComplex names the directions whose open world took more
	// selectors than Tenantry writes: the namespace stays open in them.
	tooComplex []string
}

// everyPod is the open world of a namespace without tenant
// NetworkPolicies.
var everyPod = openWorld{ingress: []metav1.LabelSelector{{}}, egress: []metav1.LabelSelector{{}}}

// whole says whether selectors are every Pod.
func whole(selectors []metav1.LabelSelector) bool {
	return len(selectors) == 1 && len(selectors[0].MatchLabels) == 0 && len(selectors[0].MatchExpressions) == 0
}

// tenantNetwork is what isolating one tenant's Pods, and translating its
// NetworkPolicies, takes.
type tenantNetwork struct {
	cluster string
	// translate says whether the tenant's NetworkPolicies are translated
	// into the host (Options.DisableNetworkPolicyTranslation).
	translate  bool
	tenantRead client.Reader
	env        netpol.Env
	// controlPlane are the tenant's control plane's peers, which every
	// Pod takes traffic from.
	controlPlane []networkingv1.NetworkPolicyPeer
	// egress are the open world's egress rules.
	egress []networkingv1.NetworkPolicyEgressRule
}

func newTenantNetwork(tr translator, tenantRead client.Reader, opts Options, apiServerIPs []string) (*tenantNetwork, error) {
	denied, err := egressDenials(apiServerIPs, opts.DeniedEgressCIDRs)
	if err != nil {
		return nil, err
	}
	controlPlaneCIDRs, err := CanonicalCIDRs(opts.ControlPlaneCIDRs)
	if err != nil {
		return nil, fmt.Errorf("control plane addresses: %w", err)
	}
	hostPods, err := CanonicalCIDRs(opts.HostPodCIDRs)
	if err != nil {
		return nil, fmt.Errorf("the host's Pod networks: %w", err)
	}
	ingressDenied := prefixes(hostPods)
	if len(ingressDenied) == 0 {
		// Without the host's Pod networks, any address may be another
		// tenant's Pod: an ingress ipBlock admits nothing.
		ingressDenied = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	}
	n := &tenantNetwork{
		cluster: tr.Cluster, translate: !opts.DisableNetworkPolicyTranslation, tenantRead: tenantRead,
		// The tenant's control plane, where Tenantry runs it: its API
		// server calls webhooks, aggregated APIs and proxied Pods.
		controlPlane: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{LabelManagedBy: ManagedByValue, LabelControlPlane: tr.Cluster},
		}}},
	}
	egressDenied, openDenied := denied, denied
	var pods []networkingv1.NetworkPolicyPeer // nil: every Pod
	if dns := opts.HostDNS; dns != nil {
		// Its Pods are kept out of the Pods the tenant's Pods reach, by
		// selector; by address, its addresses, and, for the open world,
		// whose Pods the selectors reach, every Pod's.
		addresses := addressCIDRs(dns.Addresses)
		if egressDenied, err = CanonicalCIDRs(slices.Concat(denied, addresses)); err != nil {
			return nil, fmt.Errorf("the host DNS's addresses: %w", err)
		}
		if openDenied, err = CanonicalCIDRs(slices.Concat(denied, addresses, hostPods)); err != nil {
			return nil, err
		}
		if pods, err = podsBut(dns); err != nil {
			return nil, err
		}
	}
	n.egress = egressBut(openDenied, pods)
	for _, cidr := range controlPlaneCIDRs {
		n.controlPlane = append(n.controlPlane, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}})
	}
	own := map[string]string{LabelManagedBy: ManagedByValue, LabelCluster: tr.Cluster}
	n.env = netpol.Env{
		Own: own,
		IngressEveryone: slices.Concat([]networkingv1.NetworkPolicyPeer{
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: own}},
			// The host's own namespaces: ingress controllers, monitoring.
			{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: LabelManagedBy, Operator: metav1.LabelSelectorOpDoesNotExist},
			}}},
		}, n.controlPlane),
		IngressDenied: ingressDenied,
		EgressDenied:  prefixes(egressDenied),
		// The tenant's API server where Tenantry knows its addresses,
		// at the port of its kubernetes Service and the usual port of
		// its endpoints.
		Services: append(slices.Clone(opts.NetworkPolicyServices),
			netpol.Service{Ports: []int32{443, 6443}, Peers: n.controlPlane}),
		PodLabelCopied: func(key string) bool { return !tr.denied(key) },
	}
	for _, rule := range n.egress {
		n.env.EgressEveryone = append(n.env.EgressEveryone, rule.To...)
	}
	return n, nil
}

// podsBut are peers of every Pod but the host DNS's: every namespace
// but its own, and the Pods of its namespace that its selector does not
// select.
func podsBut(dns *HostDNS) ([]networkingv1.NetworkPolicyPeer, error) {
	name := corev1.LabelMetadataName
	peers := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: name, Operator: metav1.LabelSelectorOpNotIn, Values: []string{dns.Namespace}},
	}}}}
	others, err := netpol.Complement([]metav1.LabelSelector{{MatchLabels: dns.Selector}})
	if err != nil {
		return nil, fmt.Errorf("the Pods of %s beside the host DNS's: %w", dns.Namespace, err)
	}
	for _, sel := range others {
		peers = append(peers, networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{name: dns.Namespace}},
			PodSelector:       &sel,
		})
	}
	return peers, nil
}

func prefixes(cidrs []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		out = append(out, netip.MustParsePrefix(c))
	}
	return out
}

// isolation is the spec of the isolation policy of a host namespace whose
// open world is open (see IsolationPolicyName): every Pod isolated in
// both directions, and ingress from the tenant's control plane; where no
// tenant policy selects any Pod (the open world is every Pod both ways),
// the open world's ingress and egress too. Else the open world is in
// policies of one direction each (openPolicies): a network plugin may
// weigh a policy's egress rules in the ingress of the Pods it selects
// (kube-router does, for a policy of both types), which would let the
// namespace's own Pods past a tenant's ingress policy.
func (n *tenantNetwork) isolation(open openWorld) networkingv1.NetworkPolicySpec {
	spec := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: n.controlPlane}},
	}
	if open.everyPod() {
		spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: n.env.IngressEveryone}}
		spec.Egress = n.egress
	}
	return spec
}

// everyPod says whether the open world is every Pod, both ways: the
// isolation policy holds it.
func (w openWorld) everyPod() bool { return whole(w.ingress) && whole(w.egress) }

// openWorld reads the open world of tenant namespace ns off the tenant's
// NetworkPolicies in it (all of them: an error of one's translation is
// its own business, and it selects its Pods all the same).
func (n *tenantNetwork) openWorld(ctx context.Context, ns string) (openWorld, error) {
	if !n.translate {
		return everyPod, nil
	}
	var list networkingv1.NetworkPolicyList
	if err := n.tenantRead.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return openWorld{}, fmt.Errorf("listing the tenant's NetworkPolicies in %s: %w", ns, err)
	}
	var ingress, egress []metav1.LabelSelector
	for _, p := range list.Items {
		if reservedPolicyName(p.Name) {
			continue // not synced: it selects nothing in the host
		}
		if policyType(p.Spec, networkingv1.PolicyTypeIngress) {
			ingress = append(ingress, p.Spec.PodSelector)
		}
		if policyType(p.Spec, networkingv1.PolicyTypeEgress) {
			egress = append(egress, p.Spec.PodSelector)
		}
	}
	var out openWorld
	var err error
	for _, dir := range []struct {
		name      string
		selectors []metav1.LabelSelector
		open      *[]metav1.LabelSelector
	}{{"ingress", ingress, &out.ingress}, {"egress", egress, &out.egress}} {
		*dir.open, err = netpol.Complement(dir.selectors)
		if errors.Is(err, netpol.ErrTooComplex) {
			*dir.open = []metav1.LabelSelector{{}}
			out.tooComplex = append(out.tooComplex, dir.name)
		} else if err != nil {
			return openWorld{}, fmt.Errorf("the Pods of %s that no NetworkPolicy selects for %s: %w", ns, dir.name, err)
		}
	}
	return out, nil
}

// policyType says whether a policy isolates its Pods for t, as the API
// server defaults policyTypes: Ingress always, Egress where it has egress
// rules.
func policyType(spec networkingv1.NetworkPolicySpec, t networkingv1.PolicyType) bool {
	if len(spec.PolicyTypes) == 0 {
		return t == networkingv1.PolicyTypeIngress || len(spec.Egress) > 0
	}
	return slices.Contains(spec.PolicyTypes, t)
}

// openPolicies are the policies that hold host namespace hostNS's open
// world, one direction each, where it is not every Pod both ways (want),
// and those of Tenantry's that it holds no more, to delete (stale).
func (n *tenantNetwork) openPolicies(ctx context.Context, hostRead client.Reader, hostNS string, open openWorld) (want, stale []namespacePolicy, err error) {
	newObject := func() client.Object { return &networkingv1.NetworkPolicy{} }
	wanted := map[string]bool{}
	add := func(direction string, selectors []metav1.LabelSelector, rules func(*networkingv1.NetworkPolicySpec)) {
		if open.everyPod() {
			return // the isolation policy's
		}
		for i, sel := range selectors {
			name := OpenPolicyPrefix + direction + "-" + strconv.Itoa(i)
			wanted[name] = true
			want = append(want, namespacePolicy{resource: "networkpolicies", name: name, newObject: newObject, exact: true,
				fill: func(o client.Object, _ openWorld) bool {
					spec := &o.(*networkingv1.NetworkPolicy).Spec
					spec.PodSelector = *sel.DeepCopy()
					rules(spec)
					return true
				}})
		}
	}
	add("ingress", open.ingress, func(spec *networkingv1.NetworkPolicySpec) {
		spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: n.env.IngressEveryone}}
	})
	add("egress", open.egress, func(spec *networkingv1.NetworkPolicySpec) {
		spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		spec.Egress = n.egress
	})
	var existing networkingv1.NetworkPolicyList
	if err := hostRead.List(ctx, &existing, client.InNamespace(hostNS),
		client.MatchingLabels{LabelManagedBy: ManagedByValue, LabelCluster: n.cluster}); err != nil {
		return nil, nil, fmt.Errorf("listing the NetworkPolicies of %s: %w", hostNS, err)
	}
	for _, p := range existing.Items {
		if isOpenPolicy(p.Name) && !wanted[p.Name] {
			stale = append(stale, namespacePolicy{resource: "networkpolicies", name: p.Name, newObject: newObject,
				fill: func(client.Object, openWorld) bool { return false }})
		}
	}
	return want, stale, nil
}
