package pods

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// A host Pod gets the tenant's DNS as its tenant's kubelet would give it:
// for ClusterFirst, the server, the tenant namespace's search path and
// ndots, with the Pod's own dnsConfig added; Default and None stay.
func TestDNSConfig(t *testing.T) {
	dns := &DNSConfig{Nameserver: "10.96.0.10"}
	cluster := &corev1.PodDNSConfig{
		Nameservers: []string{"10.96.0.10"},
		Searches:    []string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local"},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("5")}},
	}
	own := &corev1.PodDNSConfig{
		Nameservers: []string{"1.1.1.1"}, Searches: []string{"example.com"},
		Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}},
	}
	for _, tc := range []struct {
		name       string
		policy     corev1.DNSPolicy
		config     *corev1.PodDNSConfig
		wantPolicy corev1.DNSPolicy
		want       *corev1.PodDNSConfig
	}{
		{"unset is ClusterFirst", "", nil, corev1.DNSNone, cluster},
		{"ClusterFirst", corev1.DNSClusterFirst, nil, corev1.DNSNone, cluster},
		{"ClusterFirstWithHostNet", corev1.DNSClusterFirstWithHostNet, nil, corev1.DNSNone, cluster},
		{"ClusterFirst with the Pod's own config added", corev1.DNSClusterFirst, own, corev1.DNSNone, &corev1.PodDNSConfig{
			Nameservers: []string{"10.96.0.10", "1.1.1.1"},
			Searches:    []string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "example.com"},
			Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}},
		}},
		{"Default stays", corev1.DNSDefault, nil, corev1.DNSDefault, nil},
		{"None stays", corev1.DNSNone, own, corev1.DNSNone, own},
	} {
		spec := &corev1.PodSpec{DNSPolicy: tc.policy, DNSConfig: tc.config.DeepCopy(), Hostname: "db-0", Subdomain: "db", SetHostnameAsFQDN: ptr.To(true)}
		dns.apply(spec, "shop")
		if spec.DNSPolicy != tc.wantPolicy || !reflect.DeepEqual(spec.DNSConfig, tc.want) {
			t.Errorf("%s: %s %+v, want %s %+v", tc.name, spec.DNSPolicy, spec.DNSConfig, tc.wantPolicy, tc.want)
		}
		// The host's kubelet would write the host's name for a subdomain.
		resolves := spec.DNSConfig != nil && spec.DNSConfig.Nameservers[0] == dns.Nameserver
		if resolves != (spec.Subdomain == "" && spec.SetHostnameAsFQDN == nil) || spec.Hostname != "db-0" {
			t.Errorf("%s: subdomain %q, setHostnameAsFQDN %v, hostname %q; want the subdomain gone exactly when the server resolves", tc.name, spec.Subdomain, spec.SetHostnameAsFQDN, spec.Hostname)
		}
	}
}
