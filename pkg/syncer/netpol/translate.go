package netpol

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Env is what translating one tenant's NetworkPolicies needs of the tenant
// and the host.
type Env struct {
	// Own are labels that every host namespace of the tenant carries, and
	// no other namespace.
	Own map[string]string
	// IngressEveryone and EgressEveryone are what a rule without peers
	// (everyone) means for the tenant: its open world, as the isolation
	// policy allows it.
	IngressEveryone, EgressEveryone []networkingv1.NetworkPolicyPeer
	// IngressDenied are the prefixes that an ingress ipBlock never admits
	// (the host's Pod networks: no Pod of another tenant comes in by its
	// address), and EgressDenied those that an egress ipBlock never
	// reaches (the isolation policy's denials).
	IngressDenied, EgressDenied []netip.Prefix
	// Services are what Tenantry serves the tenant's Pods from outside
	// its namespaces (its DNS, its API server), which its policies cannot
	// name as peers.
	Services []Service
	// PodLabelCopied says whether host Pods carry a tenant Pod label key
	// (the host's metadata policy); nil: every key.
	PodLabelCopied func(key string) bool
}

// Service is a service of the tenant's that Tenantry serves outside the
// tenant's namespaces: an egress rule to some peers that names one of its
// Ports (alone or in a range) reaches Peers too, so that a tenant that
// allows its Pods DNS (port 53) or its API server gets them, as on a
// cluster of its own.
type Service struct {
	Ports []int32
	Peers []networkingv1.NetworkPolicyPeer
}

// Nothing is a peer that selects no Pod: what a peer that admits nothing
// the tenant may reach becomes, since a rule without peers admits everyone.
func Nothing() networkingv1.NetworkPolicyPeer {
	key := NamespaceLabelPrefix + "nothing"
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: key, Operator: metav1.LabelSelectorOpExists},
		{Key: key, Operator: metav1.LabelSelectorOpDoesNotExist},
	}}}
}

// Translate returns the host's spec of a tenant NetworkPolicy: pod
// selectors as written, namespace selectors over the tenant's own
// namespaces, ipBlocks confined, "everyone" the tenant's open world, the
// tenant's Services where a rule names their ports; ports and policy types as
// written. Warnings say where the host cannot enforce it as written.
func Translate(spec networkingv1.NetworkPolicySpec, env Env) (networkingv1.NetworkPolicySpec, []string, error) {
	t := translation{env: env}
	out := networkingv1.NetworkPolicySpec{
		PodSelector: *spec.PodSelector.DeepCopy(),
		PolicyTypes: slices.Clone(spec.PolicyTypes),
	}
	t.checkPodSelector("spec.podSelector", &spec.PodSelector)
	for i, r := range spec.Ingress {
		from, err := t.peers(fmt.Sprintf("spec.ingress[%d].from", i), r.From, env.IngressEveryone, env.IngressDenied)
		if err != nil {
			return out, nil, err
		}
		out.Ingress = append(out.Ingress, networkingv1.NetworkPolicyIngressRule{Ports: copyPorts(r.Ports), From: from})
	}
	for i, r := range spec.Egress {
		to, err := t.peers(fmt.Sprintf("spec.egress[%d].to", i), r.To, env.EgressEveryone, env.EgressDenied)
		if err != nil {
			return out, nil, err
		}
		if len(r.To) > 0 {
			for _, svc := range env.Services {
				if namesPort(r.Ports, svc.Ports) {
					to = append(to, svc.Peers...)
				}
			}
		}
		out.Egress = append(out.Egress, networkingv1.NetworkPolicyEgressRule{Ports: copyPorts(r.Ports), To: to})
	}
	return out, t.warnings, nil
}

type translation struct {
	env      Env
	warnings []string
}

// peers translates a rule's peers; none is everyone.
func (t *translation) peers(path string, in, everyone []networkingv1.NetworkPolicyPeer, denied []netip.Prefix) ([]networkingv1.NetworkPolicyPeer, error) {
	if len(in) == 0 {
		return slices.Clone(everyone), nil
	}
	var out []networkingv1.NetworkPolicyPeer
	for i, p := range in {
		at := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case p.IPBlock != nil:
			block, err := ConfineIPBlock(*p.IPBlock, denied)
			if err != nil {
				return nil, fmt.Errorf("%s.ipBlock: %w", at, err)
			}
			if block == nil {
				t.warnings = append(t.warnings, fmt.Sprintf("%s.ipBlock %s admits nothing here: every address of it is one that Tenantry keeps out of this rule (the host's own, cloud metadata, other clusters' Pods)", at, p.IPBlock.CIDR))
				out = append(out, Nothing())
				continue
			}
			out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: block})
		case p.NamespaceSelector != nil:
			t.checkPodSelector(at+".podSelector", p.PodSelector)
			out = append(out, networkingv1.NetworkPolicyPeer{
				NamespaceSelector: NamespaceSelector(*p.NamespaceSelector, t.env.Own),
				PodSelector:       p.PodSelector.DeepCopy(),
			})
		default: // a pod selector: this namespace's Pods
			t.checkPodSelector(at+".podSelector", p.PodSelector)
			out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: p.PodSelector.DeepCopy()})
		}
	}
	return out, nil
}

// checkPodSelector warns of a selector's keys that host Pods do not carry.
func (t *translation) checkPodSelector(path string, s *metav1.LabelSelector) {
	if s == nil || t.env.PodLabelCopied == nil {
		return
	}
	keys := slices.Sorted(maps.Keys(s.MatchLabels))
	for _, r := range s.MatchExpressions {
		keys = append(keys, r.Key)
	}
	for _, k := range slices.Compact(keys) {
		if !t.env.PodLabelCopied(k) {
			t.warnings = append(t.warnings, fmt.Sprintf("%s: the host's Pods do not carry label %q (the host's metadata policy), so it selects as if no Pod had it", path, k))
		}
	}
}

// namesPort says whether a rule's ports name one of want, alone or in a
// range: the rule's author meant that service. A rule of every port to
// some peers is about those peers, not the service.
func namesPort(ports []networkingv1.NetworkPolicyPort, want []int32) bool {
	for _, p := range ports {
		if p.Port == nil || p.Port.Type != intstr.Int {
			continue
		}
		end := p.Port.IntVal
		if p.EndPort != nil {
			end = *p.EndPort
		}
		for _, w := range want {
			if p.Port.IntVal <= w && w <= end {
				return true
			}
		}
	}
	return false
}

func copyPorts(in []networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyPort {
	if in == nil {
		return nil
	}
	out := make([]networkingv1.NetworkPolicyPort, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
