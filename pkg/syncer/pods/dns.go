package pods

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// DNSConfig is the DNS that host Pods get: a Pod whose dnsPolicy is
// ClusterFirst (the default) or ClusterFirstWithHostNet resolves through
// Nameserver (Tenantry's tenant DNS server, package tenantdns), with the
// search path and ndots of its own tenant namespace, as on a cluster of its
// own; its own dnsConfig adds to them, as a kubelet merges it. A Pod with
// dnsPolicy Default or None keeps what it asked for.
//
// Such a host Pod has no subdomain (nor setHostnameAsFQDN): the host's
// kubelet would write the host's name of it into its /etc/hosts
// ("<hostname>.<subdomain>.<host namespace>.svc..."). The Pod's own
// fully qualified name in its tenant resolves through the server instead,
// for the Pod itself, as its /etc/hosts would give it, and for every
// Pod through its headless Service, as in any cluster; its hostname is
// its short name.
type DNSConfig struct {
	// Nameserver is the IP of the tenant DNS server, on port 53.
	Nameserver string
	// ClusterDomain is the tenants' cluster domain, "cluster.local" by
	// default.
	ClusterDomain string
}

// maxDNSSearches is how many search domains a Pod may have, as the API
// server validates.
const maxDNSSearches = 32

// apply gives spec, the host copy of a Pod of tenant namespace ns, the
// tenant's DNS.
func (d *DNSConfig) apply(spec *corev1.PodSpec, ns string) {
	switch spec.DNSPolicy {
	case "", corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet:
	default:
		return
	}
	domain := d.ClusterDomain
	if domain == "" {
		domain = "cluster.local"
	}
	own := spec.DNSConfig
	cfg := &corev1.PodDNSConfig{
		Nameservers: []string{d.Nameserver},
		Searches:    []string{ns + ".svc." + domain, "svc." + domain, domain},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("5")}},
	}
	if own != nil {
		cfg.Nameservers = append(cfg.Nameservers, own.Nameservers...)
		cfg.Searches = append(cfg.Searches, own.Searches...)
		if len(cfg.Searches) > maxDNSSearches {
			cfg.Searches = cfg.Searches[:maxDNSSearches]
		}
		for _, o := range own.Options {
			i := slices.IndexFunc(cfg.Options, func(c corev1.PodDNSConfigOption) bool { return c.Name == o.Name })
			if i >= 0 {
				cfg.Options[i] = o
			} else {
				cfg.Options = append(cfg.Options, o)
			}
		}
	}
	spec.DNSPolicy, spec.DNSConfig = corev1.DNSNone, cfg
	spec.Subdomain, spec.SetHostnameAsFQDN = "", nil
}
