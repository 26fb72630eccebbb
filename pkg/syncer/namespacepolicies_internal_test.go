package syncer

import (
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

// The isolation policy lets the tenant's control plane in, at the
// addresses Options.ControlPlaneCIDRs gives, each once and canonical, and
// nothing more; a bad address is an error that names it.
func TestIsolationPolicyAdmitsTheControlPlane(t *testing.T) {
	isolation := func(t *testing.T, opts Options) (networkingv1.NetworkPolicySpec, error) {
		t.Helper()
		p, err := newNamespacePolicies(translator{Cluster: "alpha"}, nil, nil, nil, nil, opts, []string{"10.0.0.1"})
		if err != nil {
			return networkingv1.NetworkPolicySpec{}, err
		}
		for _, policy := range p.policies {
			if policy.name == IsolationPolicyName {
				o := policy.newObject()
				policy.fill(o, everyPod)
				return o.(*networkingv1.NetworkPolicy).Spec, nil
			}
		}
		t.Fatal("no isolation policy")
		return networkingv1.NetworkPolicySpec{}, nil
	}
	ipBlocks := func(spec networkingv1.NetworkPolicySpec) []string {
		var out []string
		for _, rule := range spec.Ingress {
			for _, peer := range rule.From {
				if peer.IPBlock != nil {
					out = append(out, peer.IPBlock.CIDR)
				}
			}
		}
		return out
	}

	spec, err := isolation(t, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ipBlocks(spec); len(got) != 0 {
		t.Errorf("without control plane addresses, ingress from %v; want only the namespace selectors", got)
	}

	spec, err = isolation(t, Options{ControlPlaneCIDRs: []string{"10.9.0.5/32", "10.9.0.5/32", "10.9.1.7/24", "FD00::5/128"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.9.0.5/32", "10.9.1.0/24", "fd00::5/128"}
	if got := ipBlocks(spec); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ingress from %v; want %v", got, want)
	}
	if len(spec.Ingress) != 1 || len(spec.Ingress[0].From) != 3+len(want) {
		t.Errorf("ingress %+v: want one rule, the three namespace selectors and the control plane's addresses", spec.Ingress)
	}

	for _, bad := range []string{"10.9.0.5", "0.0.0.0/0", "::ffff:10.9.0.5/128"} {
		_, err := isolation(t, Options{ControlPlaneCIDRs: []string{bad}})
		if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "control plane addresses") {
			t.Errorf("control plane address %q: error %v; want one that names it", bad, err)
		}
	}
}
