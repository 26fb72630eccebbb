package netpol

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestTranslate(t *testing.T) {
	own := map[string]string{"tenantry.dev/cluster": "alpha"}
	ownNamespaces := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: own}}
	dns := networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.255.0.1/32"}}
	env := Env{
		Own:             own,
		IngressEveryone: []networkingv1.NetworkPolicyPeer{ownNamespaces},
		EgressEveryone:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}},
		IngressDenied:   []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		EgressDenied:    []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("10.96.0.1/32")},
		Services:        []Service{{Ports: []int32{53}, Peers: []networkingv1.NetworkPolicyPeer{dns}}},
		PodLabelCopied:  func(key string) bool { return !strings.HasPrefix(key, "kubernetes.io/") },
	}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	app := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	in := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db", "kubernetes.io/role": "x"}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}, Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(5432)), EndPort: ptr.To[int32](5440)}}},
			{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}, {PodSelector: app}}},
			{}, // everyone
		},
		Egress: []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: ptr.To(intstr.FromInt32(53))}}},
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}, Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("http"))}}},
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "169.254.169.254/32"}}}},
		},
	}
	got, warnings, err := Translate(in, env)
	if err != nil {
		t.Fatal(err)
	}
	want := networkingv1.NetworkPolicySpec{
		PodSelector: in.PodSelector,
		PolicyTypes: in.PolicyTypes,
		Ingress: []networkingv1.NetworkPolicyIngressRule{
			{From: []networkingv1.NetworkPolicyPeer{ownNamespaces}, Ports: in.Ingress[0].Ports},
			{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.244.0.0/16"}}}, {PodSelector: app}}},
			{From: []networkingv1.NetworkPolicyPeer{ownNamespaces}},
		},
		Egress: []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{
				{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenantry.dev/cluster": "alpha", NamespaceLabelKey("kubernetes.io/metadata.name"): "kube-system"}}},
				dns,
			}, Ports: in.Egress[0].Ports},
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.96.0.1/32", "169.254.0.0/16"}}}}, Ports: in.Egress[1].Ports},
			{To: []networkingv1.NetworkPolicyPeer{Nothing()}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Translate:\n got %+v\nwant %+v", got, want)
	}
	for _, w := range []string{`spec.podSelector: the host's Pods do not carry label "kubernetes.io/role"`, "spec.egress[2].to[0].ipBlock 169.254.169.254/32 admits nothing here"} {
		if !strings.Contains(strings.Join(warnings, "\n"), w) {
			t.Errorf("warnings %q lack %q", warnings, w)
		}
	}
	if len(warnings) != 2 {
		t.Errorf("%d warnings, want 2: %q", len(warnings), warnings)
	}
}

func TestNamesPort(t *testing.T) {
	for _, tc := range []struct {
		ports []networkingv1.NetworkPolicyPort
		want  bool
	}{
		{nil, false},
		{[]networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(53))}}, true},
		{[]networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(50)), EndPort: ptr.To[int32](60)}}, true},
		{[]networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(54)), EndPort: ptr.To[int32](60)}}, false},
		{[]networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("dns"))}}, false},
		{[]networkingv1.NetworkPolicyPort{{}}, false},
		{[]networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(443))}, {Port: ptr.To(intstr.FromInt32(6000)), EndPort: ptr.To[int32](7000)}}, true},
	} {
		if got := namesPort(tc.ports, []int32{53, 6443}); got != tc.want {
			t.Errorf("namesPort(%+v, 53 and 6443) = %v, want %v", tc.ports, got, tc.want)
		}
	}
}
