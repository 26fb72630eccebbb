package syncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// IsolationPolicyName is the NetworkPolicy that Tenantry puts in every host
// namespace: its Pods take traffic only from Pods of the same
// VirtualCluster (every host namespace of it carries its
// tenantry.dev/cluster label), from the host's own namespaces (ingress
// controllers, monitoring) and from the tenant's control plane
// (Options.ControlPlaneCIDRs, or its namespace where Tenantry runs it),
// never from another tenant's. They reach every
// Pod (another tenant's Pods are kept out by that tenant's own isolation
// policy) and every address outside the cluster (DNS, their tenant API
// server, the internet) but the host API server's (the kubernetes
// Service's cluster IPs and endpoints), those where clouds serve their
// instance metadata and credentials (DefaultDeniedEgressCIDRs), and
// Options.DeniedEgressCIDRs. Traffic from outside the cluster (NodePort
// and LoadBalancer Services) needs a policy of the host admin's.
const IsolationPolicyName = "tenantry-isolation"

// QuotaName is the ResourceQuota, and LimitRangeName the LimitRange, that
// Tenantry keeps in every host namespace of a tenant whose Options set
// ResourceQuota or LimitRange.
const (
	QuotaName      = "tenantry-quota"
	LimitRangeName = "tenantry-limits"
)

// namespacePolicy is one object that Tenantry keeps in each host namespace
// of a tenant: the host's rules for what the namespace's Pods may do.
type namespacePolicy struct {
	resource  string // plural, for logs and metrics
	name      string
	newObject func() client.Object
	// fill sets obj's content for a namespace whose open world is open,
	// or says that the namespace has no such object.
	fill func(obj client.Object, open openWorld) bool
	// wanted is what fill says of a namespace without tenant
	// NetworkPolicies: what a new namespace needs before its first object.
	wanted bool
	// exact says that the host adds nothing to the object: what it holds
	// must be what was written, to the last field (a NetworkPolicy whose
	// egress rules went must lose them).
	exact bool
}

// namespacePolicies keeps the policy objects in each of one tenant's host
// namespaces: made with the namespace, before anything goes in it, and
// restored when they are changed or deleted by hand. With the tenant's
// NetworkPolicies translated (docs/design/tenant-network-policies.md),
// the isolation policy and the open-world policies of a namespace follow
// the tenant's NetworkPolicies in it.
type namespacePolicies struct {
	translator translator
	hostRead   client.Reader
	host       client.Client
	excluded   map[string]bool
	policies   []namespacePolicy
	// network is the tenant's network, where it is isolated (nil: it is
	// not).
	network *tenantNetwork
	// created are the policy objects this tenant created that the cache
	// may not show yet; its mutex serializes keep.
	created recentCreates
}

// DefaultDeniedEgressCIDRs are where the major clouds serve instance
// metadata, credentials and platform services to the machines of a
// cluster, which the isolation NetworkPolicy always keeps tenant Pods
// from: a Pod there would get the host node's identity.
var DefaultDeniedEgressCIDRs = []string{
	"169.254.0.0/16",     // IPv4 link-local: the metadata of AWS, GCP, Azure, OpenStack and most others, EKS Pod Identity (169.254.170.23), ECS credentials (169.254.170.2), Tencent (169.254.0.23)
	"100.100.100.200/32", // Alibaba Cloud's metadata
	"168.63.129.16/32",   // Azure's WireServer and its DNS and health probes
	"fe80::/10",          // IPv6 link-local
	"fd00:ec2::254/128",  // AWS instance metadata over IPv6
	"fd00:ec2::23/128",   // EKS Pod Identity over IPv6
	"fd20:ce::254/128",   // GCP's metadata over IPv6
}

// newNamespacePolicies keeps opts' policy objects in the host namespaces of
// a tenant; apiServerIPs are the host API server's addresses, which its
// Pods may not reach. tenantRead reads the tenant's NetworkPolicies where
// they are translated.
func newNamespacePolicies(tr translator, tenantRead, hostRead client.Reader, host client.Client, excluded map[string]bool, opts Options, apiServerIPs []string) (*namespacePolicies, error) {
	p := &namespacePolicies{translator: tr, hostRead: hostRead, host: host, excluded: excluded}
	// The quota first: it counts what follows.
	p.policies = append(p.policies, namespacePolicy{
		resource: "resourcequotas", name: QuotaName,
		newObject: func() client.Object { return &corev1.ResourceQuota{} },
		fill: func(o client.Object, _ openWorld) bool {
			if opts.ResourceQuota != nil {
				o.(*corev1.ResourceQuota).Spec = *opts.ResourceQuota.DeepCopy()
			}
			return opts.ResourceQuota != nil
		},
	}, namespacePolicy{
		resource: "limitranges", name: LimitRangeName,
		newObject: func() client.Object { return &corev1.LimitRange{} },
		fill: func(o client.Object, _ openWorld) bool {
			if opts.LimitRange != nil {
				o.(*corev1.LimitRange).Spec = *opts.LimitRange.DeepCopy()
			}
			return opts.LimitRange != nil
		},
	})
	if !opts.DisableNetworkIsolation {
		network, err := newTenantNetwork(tr, tenantRead, opts, apiServerIPs)
		if err != nil {
			return nil, err
		}
		p.network = network
	}
	// Kept even when isolation is off, to delete the ones made before.
	p.policies = append(p.policies, namespacePolicy{
		resource: "networkpolicies", name: IsolationPolicyName, exact: true,
		newObject: func() client.Object { return &networkingv1.NetworkPolicy{} },
		fill: func(o client.Object, open openWorld) bool {
			if p.network == nil {
				return false
			}
			o.(*networkingv1.NetworkPolicy).Spec = p.network.isolation(open)
			return true
		},
	})
	for i := range p.policies {
		p.policies[i].wanted = p.policies[i].fill(p.policies[i].newObject(), everyPod)
	}
	return p, nil
}

// egressDenials are the CIDRs the isolation policy keeps Pods from: the
// host API server's addresses, DefaultDeniedEgressCIDRs and more, each
// in its canonical form, once.
func egressDenials(apiServerIPs, more []string) ([]string, error) {
	out, err := CanonicalCIDRs(slices.Concat(addressCIDRs(apiServerIPs), DefaultDeniedEgressCIDRs, more))
	if err != nil {
		return nil, fmt.Errorf("denied egress: %w", err)
	}
	return out, nil
}

// addressCIDRs are the CIDRs of single addresses ips.
func addressCIDRs(ips []string) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		bits := 32
		if net.ParseIP(ip).To4() == nil {
			bits = 128
		}
		out = append(out, fmt.Sprintf("%s/%d", ip, bits))
	}
	return out
}

// CanonicalCIDRs are cidrs each in its canonical form (CanonicalCIDR),
// once, in their order; the first that is not a CIDR is an error.
func CanonicalCIDRs(cidrs []string) ([]string, error) {
	var out []string
	for _, cidr := range cidrs {
		prefix, err := CanonicalCIDR(cidr)
		if err != nil {
			return nil, err
		}
		if c := prefix.String(); !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// setup runs the controller that restores the policy objects: a request
// names a tenant namespace.
func (p *namespacePolicies) setup(controllers *tenantControllers, hub *Hub) error {
	cluster := p.translator.Cluster
	byHostNamespace := func(o client.Object) (types.NamespacedName, bool) {
		key, ok := p.translator.tenantKey(o)
		return types.NamespacedName{Name: key.Name}, ok
	}
	sources := []source.TypedSource[reconcile.Request]{
		controllers.objects(&corev1.Namespace{}),
		routed(hub, &corev1.Namespace{}, cluster, byHostNamespace),
	}
	for _, policy := range p.policies {
		byPolicy := func(o client.Object) (types.NamespacedName, bool) {
			ns, ok := o.GetAnnotations()[AnnotationTenantNamespace]
			return types.NamespacedName{Name: ns}, ok && p.translator.owns(o) && p.kept(policy, o.GetName())
		}
		sources = append(sources, routed(hub, policy.newObject(), cluster, byPolicy))
	}
	if p.network != nil && p.network.translate {
		// A tenant NetworkPolicy changes its namespace's open world.
		sources = append(sources, controllers.namespacesOf(&networkingv1.NetworkPolicy{}))
	}
	return controllers.run(controllers.mgr.GetLogger(), "namespace-policies", 1, p, sources...)
}

func (p *namespacePolicies) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if p.excluded[req.Name] {
		return reconcile.Result{}, nil
	}
	hostNS := HostNamespace(p.translator.Cluster, req.Name)
	var ns corev1.Namespace
	if err := p.hostRead.Get(ctx, client.ObjectKey{Name: hostNS}, &ns); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err) // made on demand; its creation brings us back
	}
	if !p.translator.owns(&ns) || !ns.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	foreign, err := p.keep(ctx, hostNS, req.Name)
	if err == nil && foreign {
		return reconcile.Result{RequeueAfter: foreignRetry}, nil
	}
	return reconcile.Result{}, err
}

// keep makes host namespace hostNS, which holds tenant namespace tenantNS,
// have the policy objects it should, and no other of Tenantry's; foreign
// says that an object not Tenantry's holds one's name.
func (p *namespacePolicies) keep(ctx context.Context, hostNS, tenantNS string) (foreign bool, err error) {
	p.created.Lock()
	defer p.created.Unlock()
	open := everyPod
	policies := p.policies
	if p.network != nil {
		if open, err = p.network.openWorld(ctx, tenantNS); err != nil {
			return false, err
		}
		// The open world's own policies before the isolation policy
		// gives up its part: never a moment with neither.
		// and the stale ones deleted after it took its part back.
		want, stale, err := p.network.openPolicies(ctx, p.hostRead, hostNS, open)
		if err != nil {
			return false, err
		}
		policies = slices.Concat(want, policies, stale)
	}
	var errs []error
	for _, policy := range policies {
		f, err := p.keepOne(ctx, policy, hostNS, tenantNS, open)
		foreign = foreign || f
		errs = append(errs, err)
	}
	return foreign, errors.Join(errs...)
}

func (p *namespacePolicies) keepOne(ctx context.Context, policy namespacePolicy, hostNS, tenantNS string, open openWorld) (foreign bool, err error) {
	cluster := p.translator.Cluster
	key := client.ObjectKey{Namespace: hostNS, Name: policy.name}
	current := policy.newObject()
	found := true
	created := policy.resource + "/" + key.String()
	if err := p.hostRead.Get(ctx, key, current); apierrors.IsNotFound(err) {
		found = false
	} else if err != nil {
		return false, fmt.Errorf("reading %s %s: %w", policy.resource, key, err)
	} else {
		p.created.forget(created)
	}
	desired := policy.newObject()
	desired.SetNamespace(hostNS)
	desired.SetName(policy.name)
	desired.SetLabels(map[string]string{LabelManagedBy: ManagedByValue, LabelCluster: cluster})
	desired.SetAnnotations(map[string]string{AnnotationTenantNamespace: tenantNS})
	wanted := policy.fill(desired, open)
	switch {
	case found && !p.translator.owns(current):
		return true, nil // the cache holds Tenantry's objects only, but of every cluster
	case !wanted && !found:
		return false, nil
	case !wanted:
		err := p.host.Delete(ctx, current, client.Preconditions{UID: ptr.To(current.GetUID())})
		if client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting %s %s, which the policy no longer has: %w", policy.resource, key, err)
		}
		writes.WithLabelValues(cluster, policy.resource, "down", "delete").Inc()
		return false, nil
	case !found && p.created.has(created):
		return false, nil // made a moment ago, as it is wanted now
	case !found:
		err := p.host.Create(ctx, desired)
		if apierrors.IsAlreadyExists(err) {
			return p.alreadyExists(ctx, policy, key)
		}
		if err != nil {
			return false, fmt.Errorf("creating %s %s: %w", policy.resource, key, err)
		}
		p.created.add(created)
		writes.WithLabelValues(cluster, policy.resource, "down", "create").Inc()
		ctrl.LoggerFrom(ctx).V(1).Info("created a host namespace policy", "resource", policy.resource, "namespace", hostNS, "name", policy.name)
		return false, nil
	}
	// The API server fills in defaults (a LimitRange's defaultRequest from
	// its default): what is stored holds what we wrote, and more, but no
	// list element more (an ingress rule added in the host would let
	// others in).
	have, err := content(current)
	if err != nil {
		return false, err
	}
	want, err := content(desired)
	if err != nil {
		return false, err
	}
	settled := containsExactLists(have, want)
	if policy.exact {
		settled = equality.Semantic.DeepEqual(have, want)
	}
	if settled && equality.Semantic.DeepEqual(current.GetAnnotations(), desired.GetAnnotations()) {
		return false, nil
	}
	desired.SetResourceVersion(current.GetResourceVersion())
	if err := p.host.Update(ctx, desired); err != nil {
		return false, fmt.Errorf("restoring %s %s: %w", policy.resource, key, err)
	}
	writes.WithLabelValues(cluster, policy.resource, "down", "update").Inc()
	return false, nil
}

// kept says whether a host object of that name is policy: the isolation
// policy's source also brings the open-world policies.
func (p *namespacePolicies) kept(policy namespacePolicy, name string) bool {
	return name == policy.name || policy.name == IsolationPolicyName && isOpenPolicy(name)
}

// errPolicyPending says that a host namespace's policy objects are not all
// there and in force yet.
var errPolicyPending = errors.New("the host namespace's policy objects are not all there, or its ResourceQuota is not in force yet")

// ready says whether host namespace hostNS has every policy object that a
// namespace without tenant NetworkPolicies has (in the cache, or created
// by this tenant a moment ago: the open-world policies may come later,
// and their Pods are isolated until they do), and its
// quota, if it should have one, is in force: the host's quota controller
// has taken it up (its status holds its limits), until when the host's
// admission lets anything in. Every sync of a new namespace asks, not only
// the one that made it: another sync of the same moment would otherwise
// put a Pod in before its isolation policy or LimitRange exists. It only
// reads the cache: it runs before every first object of a namespace.
func (p *namespacePolicies) ready(ctx context.Context, hostNS string) (bool, error) {
	for _, policy := range p.policies {
		if !policy.wanted {
			continue
		}
		key := client.ObjectKey{Namespace: hostNS, Name: policy.name}
		obj := policy.newObject()
		err := p.hostRead.Get(ctx, key, obj)
		switch {
		case apierrors.IsNotFound(err):
			p.created.Lock()
			made := p.created.has(policy.resource + "/" + key.String())
			p.created.Unlock()
			if !made || policy.name == QuotaName {
				return false, nil // made a moment ago, or its making failed: the controller makes it
			}
			continue
		case err != nil:
			return false, fmt.Errorf("reading %s %s: %w", policy.resource, key, err)
		}
		if quota, ok := obj.(*corev1.ResourceQuota); ok && !equality.Semantic.DeepEqual(quota.Spec.Hard, quota.Status.Hard) {
			return false, nil
		}
	}
	return true, nil
}

// alreadyExists tells a policy object of ours that the cache has not seen
// yet from someone else's, which is never written.
func (p *namespacePolicies) alreadyExists(ctx context.Context, policy namespacePolicy, key client.ObjectKey) (foreign bool, err error) {
	existing := policy.newObject()
	if err := p.host.Get(ctx, key, existing); err != nil {
		return false, fmt.Errorf("reading %s %s: %w", policy.resource, key, err)
	}
	if p.translator.owns(existing) {
		return false, nil
	}
	conflicts.WithLabelValues(p.translator.Cluster, policy.resource, "not-owned").Inc()
	ctrl.LoggerFrom(ctx).Info("an object that is not Tenantry's holds the name of a host namespace policy; it is left alone, and the namespace goes without Tenantry's",
		"resource", policy.resource, "namespace", key.Namespace, "name", key.Name)
	return true, nil
}

// CanonicalCIDR is cidr as a NetworkPolicy's ipBlock takes it: its network
// address, IPv4 as IPv4 (an IPv4-mapped IPv6 prefix is refused, as the
// family it names is unclear), and narrower than every address of its
// family, which would leave a Pod nothing to reach.
func CanonicalCIDR(cidr string) (netip.Prefix, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR: %w", cidr, err)
	}
	if prefix.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%s is an IPv4-mapped IPv6 prefix: write the IPv4 CIDR", cidr)
	}
	if prefix.Bits() == 0 {
		return netip.Prefix{}, fmt.Errorf("%s is every address of its family (a Pod would reach nothing)", cidr)
	}
	return prefix.Masked(), nil
}

// IsolatedEgress are the egress rules of the isolation policy (see
// IsolationPolicyName): every Pod, and every address but the host API
// server's (apiServerIPs, see HostAPIServerAddresses), those of
// DefaultDeniedEgressCIDRs and more. What Tenantry runs for a tenant
// beside its Pods (its control plane) is held to them too.
func IsolatedEgress(apiServerIPs, more []string) ([]networkingv1.NetworkPolicyEgressRule, error) {
	denied, err := egressDenials(apiServerIPs, more)
	if err != nil {
		return nil, err
	}
	return egressBut(denied, nil), nil
}

// egressBut are egress rules to the Pods of pods (nil: every Pod), and
// every address but denied (canonical CIDRs).
func egressBut(denied []string, pods []networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyEgressRule {
	if pods == nil {
		pods = []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}
	}
	var v4, v6 []string
	for _, cidr := range denied {
		if netip.MustParsePrefix(cidr).Addr().Is4() {
			v4 = append(v4, cidr)
		} else {
			v6 = append(v6, cidr)
		}
	}
	return []networkingv1.NetworkPolicyEgressRule{
		{To: pods},
		{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: v4}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: v6}},
		}},
	}
}
