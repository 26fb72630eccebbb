package syncer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/syncer/internal/hostcache"
	"github.com/tenantry/tenantry/pkg/syncer/netpol"
)

// Options tune how syncers run in each tenant.
type Options struct {
	// PatrolPeriod is how often the patroller compares each type's tenant
	// objects with their host copies. Defaults to a minute; negative turns
	// patrolling off.
	PatrolPeriod time.Duration

	// Workers is how many objects of one type one tenant syncs at once.
	// Defaults to 4.
	Workers int

	// PodSecurityLevel is enforced on every host namespace. Defaults to
	// DefaultPodSecurityLevel.
	PodSecurityLevel string

	// DisableNetworkIsolation leaves host namespaces without the isolation
	// NetworkPolicy (IsolationPolicyName), for hosts that isolate tenants
	// otherwise; the ones made before are deleted.
	DisableNetworkIsolation bool

	// DeniedEgressCIDRs are more addresses (IPv4 or IPv6 CIDRs) that the
	// isolation NetworkPolicy keeps the tenant's Pods from, beside the host
	// API server's and DefaultDeniedEgressCIDRs, which it always denies.
	DeniedEgressCIDRs []string

	// ControlPlaneCIDRs are the addresses (IPv4 or IPv6 CIDRs) that the
	// tenant's own API server connects from when it calls into the
	// tenant's Pods (webhooks, aggregated APIs, pods/proxy): the isolation
	// NetworkPolicy lets them in. They must be this tenant's alone: a
	// tenant commands its API server, and another tenant's API server at
	// one of them would reach this tenant's Pods.
	ControlPlaneCIDRs []string

	// DisableNetworkPolicyTranslation leaves the tenant's own
	// NetworkPolicies out of the host: each gets a Warning Event
	// (ReasonNotEnforced), and the isolation policy treats every Pod as
	// one that no policy selects. Otherwise (and while the isolation
	// policy is on) they are translated into its host namespaces and
	// enforced there (docs/design/tenant-network-policies.md).
	DisableNetworkPolicyTranslation bool

	// HostPodCIDRs are the host's Pod networks (IPv4 or IPv6 CIDRs): an
	// ingress ipBlock of a tenant NetworkPolicy never admits them, so
	// that no Pod of another tenant comes in by its address. None: a
	// tenant's ingress ipBlocks admit nothing, and each policy that has
	// one is told so.
	HostPodCIDRs []string

	// NetworkPolicyServices are what Tenantry serves the tenant's Pods
	// outside its namespaces (its DNS, its API server): an egress rule of
	// a tenant NetworkPolicy that names one's port reaches its peers.
	NetworkPolicyServices []netpol.Service

	// HostDNS, if set, is the host's cluster DNS, which the tenant's Pods
	// may not query: it would tell them of other tenants' namespaces and
	// Services (a reverse lookup of another tenant's address gives its
	// name). Set it where the tenant's own DNS serves its Pods.
	HostDNS *HostDNS

	// DisablePublicCRDs turns off copying the host's public CRDs into
	// tenants.
	DisablePublicCRDs bool

	// ResourceQuota, if set, is kept as the ResourceQuota QuotaName in every
	// host namespace of the tenant, and LimitRange as the LimitRange
	// LimitRangeName: the host's budget and Pod defaults per tenant
	// namespace. They are made with the namespace, before anything goes in
	// it.
	ResourceQuota *corev1.ResourceQuotaSpec
	LimitRange    *corev1.LimitRangeSpec

	// DeniedMetadataPrefixes are the label and annotation key prefixes not
	// copied from tenant objects to their host copies, each covering its
	// domain and subdomains; nil means DefaultDeniedMetadataPrefixes, an
	// empty list none (Tenantry's own tenantry.dev/ keys are never copied).
	DeniedMetadataPrefixes []string
	// AllowedMetadataPrefixes are copied although a denied prefix covers
	// them, where they are the longer; nil means
	// DefaultAllowedMetadataPrefixes.
	AllowedMetadataPrefixes []string

	// Budget, if set, is the most the tenant may have in the host, over
	// all its host namespaces together, by ResourceQuota's names (see
	// ValidateBudget): a write of a host copy that would take a total over
	// it is refused (Refuse), naming the resource, and retried as refusals
	// are. BudgetReporter, if set, hears the totals when they change.
	Budget         corev1.ResourceList
	BudgetReporter BudgetReporter

	// StatusReporter, if set, hears the tenant's SyncReport (its host
	// copies by type, host namespaces, last error, recent refusals) when
	// it changes, looked at every ReportPeriod (default
	// DefaultReportPeriod).
	StatusReporter StatusReporter
	ReportPeriod   time.Duration

	// CacheLimits, where set, bound what the tenant's manager holds in its
	// cache (see clusterregistry.CacheLimits); fields left 0 keep the
	// registry's.
	CacheLimits clusterregistry.CacheLimits

	// ExcludeNamespaces are tenant namespaces whose objects are never
	// synced. Defaults to the tenant's system namespaces: kube-system,
	// kube-public and kube-node-lease.
	ExcludeNamespaces []string
}

func (o *Options) setDefaults() {
	if o.PatrolPeriod == 0 {
		o.PatrolPeriod = time.Minute
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.ReportPeriod <= 0 {
		o.ReportPeriod = DefaultReportPeriod
	}
	if o.PodSecurityLevel == "" {
		o.PodSecurityLevel = DefaultPodSecurityLevel
	}
	if o.ExcludeNamespaces == nil {
		o.ExcludeNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}
	}
}

// TenantModule is the fx module that runs syncers in every tenant cluster
// it is spawned for (give it to clusterregistry.New): one controller per
// syncer, fed by the tenant's own watch, by the hub's shared host watch for
// this tenant, and by the patroller; and each syncer's Extensions, set up
// as the syncer starts. The Namespace syncer is always added, since the
// others create host namespaces on demand.
func TenantModule(hub *Hub, opts Options, syncers ...Syncer) fx.Option {
	return TenantModulePerCluster(hub, func(context.Context, string) (Options, []Syncer, error) {
		return opts, syncers, nil
	})
}

// PerCluster says, as one tenant cluster starts, how syncers run in it:
// the options and the syncers for that cluster, such as a host policy of
// its own.
type PerCluster func(ctx context.Context, cluster string) (Options, []Syncer, error)

// perClusterTimeout bounds a PerCluster call.
const perClusterTimeout = 30 * time.Second

// TenantModulePerCluster is TenantModule with options and syncers chosen
// for each cluster as it starts. An error from perCluster fails the
// cluster's start.
func TenantModulePerCluster(hub *Hub, perCluster PerCluster) fx.Option {
	return fx.Module("syncer", fx.Invoke(fx.Annotate(
		func(lc fx.Lifecycle, mgr manager.Manager, cluster string, log logr.Logger, meter *clusterregistry.CacheMeter) (err error) {
			// Its series go with the cluster. The hook runs as the app
			// stops, before the manager drains: a sync that ends during
			// the drain can leave a series behind, until the cluster is
			// forgotten again.
			lc.Append(fx.Hook{OnStop: func(context.Context) error {
				forgetCluster(cluster)
				return nil
			}})
			ctx, cancel := context.WithTimeout(context.Background(), perClusterTimeout)
			defer cancel()
			opts, syncers, err := perCluster(ctx, cluster)
			if err != nil {
				return fmt.Errorf("choosing the syncers of cluster %s: %w", cluster, err)
			}
			opts.setDefaults()
			if meter != nil {
				meter.SetLimits(opts.CacheLimits)
				var stop func()
				if stop, err = countHostCopies(ctx, hub, cluster, meter); err != nil {
					return err
				}
				// An app that never starts is never stopped.
				defer func() {
					if err != nil {
						stop()
					}
				}()
				lc.Append(fx.Hook{OnStop: func(context.Context) error {
					stop()
					return nil
				}})
			}
			all := append([]Syncer{namespaceSyncer(opts.PodSecurityLevel)}, syncers...)
			t, err := newTenant(mgr, cluster, log, hub, opts)
			if err != nil {
				return err
			}
			return t.setup(all)
		},
		fx.ParamTags(``, ``, clusterregistry.ClusterNameTag, ``, `optional:"true"`),
	)))
}

// HostDNS is the host's cluster DNS (Options.HostDNS).
type HostDNS struct {
	// Namespace holds its Pods, which Selector selects (its Service's
	// selector).
	Namespace string
	Selector  map[string]string
	// Addresses are its Service's cluster IPs and its Pods' addresses,
	// as they are when the tenant starts.
	Addresses []string
}

// countHostCopies counts the cluster's copies in the hub's host cache,
// which every cluster shares, against the cluster's cache limits, until
// stop is called: a tenant's limits bound what it makes the manager hold
// on both sides, not only in its own cache. The count starts now, before
// the cluster's caches list: copies that outlive an app (a tenant stopped
// past its limits keeps its copies in the host) leave its next app only
// what is left of its limits.
func countHostCopies(ctx context.Context, hub *Hub, cluster string, meter *clusterregistry.CacheMeter) (stop func(), err error) {
	copies := &heldCopies{meter: meter, byType: map[schema.GroupVersionKind]*clusterregistry.Holding{}}
	cancel, err := hub.cache.Count(ctx, cluster, copies)
	if err != nil {
		copies.release()
		return nil, fmt.Errorf("counting cluster %s's host copies: %w", cluster, err)
	}
	return func() {
		cancel()
		copies.release()
	}, nil
}

// heldCopies counts a cluster's copies in the hub's host cache, a
// Holding by type, so that a limit's error names the type whose copies
// hold the most ("host copies of ConfigMap").
type heldCopies struct {
	meter *clusterregistry.CacheMeter

	mu       sync.Mutex
	byType   map[schema.GroupVersionKind]*clusterregistry.Holding
	released bool
}

// of is the Holding of gvk's copies; nil once released.
func (h *heldCopies) of(gvk schema.GroupVersionKind) *clusterregistry.Holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return nil
	}
	held, ok := h.byType[gvk]
	if !ok {
		held = h.meter.Hold("host copies of " + gvk.Kind)
		h.byType[gvk] = held
	}
	return held
}

// Hold counts a copy at its size in the host, whether the hub holds its
// data or its digest: the limit bounds what the tenant puts through the
// manager, which reads a copy whole whenever it syncs it.
func (h *heldCopies) Hold(gvk schema.GroupVersionKind, obj client.Object) {
	left, _ := hostcache.HeldAsDigest(obj)
	h.of(gvk).SetPart(client.ObjectKeyFromObject(obj).String(), obj, left)
}

func (h *heldCopies) Drop(gvk schema.GroupVersionKind, obj client.Object) {
	h.of(gvk).Forget(client.ObjectKeyFromObject(obj).String())
}

// release takes every copy off the count; no more are counted.
func (h *heldCopies) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = true
	for _, held := range h.byType {
		held.Release()
	}
}
