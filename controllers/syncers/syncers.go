// Package syncers adds Tenantry's built-in syncers to the management app:
// the shared host Hub, run by the management manager, and a tenant module
// that runs the enabled syncers in every tenant cluster.
package syncers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
	"github.com/tenantry/tenantry/pkg/kubeletapi"
	"github.com/tenantry/tenantry/pkg/sharding"
	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/netpol"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
	"github.com/tenantry/tenantry/pkg/tenantdns"
)

// The host rights the syncers need: Tenantry's copies of tenant objects,
// host namespaces to hold them, reading host nodes, which tenants see as
// virtual nodes, evicting host Pods that tenants evict, the logs, exec,
// attach and port-forward of host Pods, for the kubelet API of virtual
// nodes, the policy objects of host namespaces (NetworkPolicy,
// ResourceQuota, LimitRange), and the host API server's endpoints, which
// the isolation NetworkPolicy keeps tenant Pods from. It reads and writes only objects that
// carry its labels (the hub's cache sees nothing else), but RBAC cannot
// say that.
//
// +kubebuilder:rbac:groups="",resources=configmaps;secrets;serviceaccounts;services;persistentvolumeclaims;pods,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// +kubebuilder:rbac:groups=tenantry.dev,resources=datastores,verbs=list
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=pods/resize,verbs=update
// +kubebuilder:rbac:groups="",resources=pods/ephemeralcontainers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get
// +kubebuilder:rbac:groups="",resources=pods/exec;pods/attach;pods/portforward,verbs=get;create
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=resourcequotas;limitranges,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=list
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=list;watch

// Options choose and tune the built-in syncers.
type Options struct {
	// Resources are the built-in syncers to run, by name (see
	// builtin.Names). Namespaces are always synced.
	Resources []string
	// CustomResources are custom types to sync with the generic
	// unstructured syncer (syncer.CustomResource): no Go code needed.
	CustomResources []schema.GroupVersionKind
	// Syncer tunes every syncer; see syncer.Options.
	Syncer syncer.Options
	// ExposeNodeAddresses copies host nodes' addresses and kubelet port to
	// tenants' virtual nodes; see pods.Options.
	ExposeNodeAddresses bool
	// HostPolicy is the default host policy of every VirtualCluster: what
	// a VirtualCluster's spec.hostPolicy does not set.
	HostPolicy tenantryv1alpha1.HostPolicy
	// HostQPS and HostBurst are the budget of the syncers' requests to the
	// host, shared by the tenants that have work in turn.
	HostQPS   float64
	HostBurst int
	// TenantQPS and TenantBurst, if TenantQPS is set, cap each tenant's
	// requests below its share.
	TenantQPS   float64
	TenantBurst int
	// Kubelet configures the kubelet API of virtual nodes (kubectl logs,
	// exec, attach, port-forward in tenants). A BindAddress of "" or "0"
	// turns it off; the flag defaults it to kubeletapi.DefaultBindAddress.
	// Its Host and Logger come from the app.
	Kubelet kubeletapi.Options
	// DNS configures the tenants' DNS server (package tenantdns). A
	// BindAddress of "" or "0", the flag's default, turns it off: the
	// manager listens for DNS only where it is told to. Its ClusterOf and
	// Logger come from the app.
	DNS tenantdns.Options
	// DNSNameserver is the IP that host Pods ask, on port 53, for the DNS
	// server; "" reads it off DNSService as each tenant starts.
	DNSNameserver string
	// DNSService is the Service (namespace/name) in front of the DNS
	// server, whose cluster IP host Pods ask when DNSNameserver is not set.
	// A tenant that starts while it does not exist keeps the host's DNS.
	DNSService string
	// HostDNSService is the host's cluster DNS Service (namespace/name),
	// which tenants' Pods may not query where the tenant DNS serves them;
	// "" lets them.
	HostDNSService string
	// HostPodCIDRs are the host's Pod networks (syncer.Options.HostPodCIDRs);
	// nil reads them off the host's Nodes (spec.podCIDRs) as each tenant
	// starts.
	HostPodCIDRs []string
}

// BindFlags registers the syncers' flags on fs, all syncers on by default.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	o.Resources = builtin.Names()
	fs.Func("sync-resources", fmt.Sprintf("Comma-separated built-in syncers to run (namespaces always run). Default: %s.",
		strings.Join(builtin.Names(), ",")), func(v string) error {
		names := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
		if _, err := builtin.ByName(names, builtin.Options{}); err != nil {
			return err
		}
		o.Resources = names
		return nil
	})
	fs.Func("sync-custom-resources", "Comma-separated group/version/Kind of custom resources to sync generically (spec down, status up); each starts once its CRD is in the tenant.",
		func(v string) error {
			o.CustomResources = nil
			for _, s := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
				gvk, err := parseGVK(s)
				if err != nil {
					return err
				}
				o.CustomResources = append(o.CustomResources, gvk)
			}
			return nil
		})
	fs.BoolVar(&o.Syncer.DisableNetworkIsolation, "disable-network-isolation", false,
		"Do not put the tenantry-isolation NetworkPolicy (ingress only from the same VirtualCluster) in host namespaces.")
	fs.BoolVar(&o.Syncer.DisablePublicCRDs, "disable-public-crds", false,
		`Do not copy host CRDs labelled tenancy.x-k8s.io/super.public: "true" into tenants.`)
	fs.DurationVar(&o.Syncer.PatrolPeriod, "patrol-period", time.Minute,
		"How often each tenant is compared with the host to repair drift; negative turns the patroller off.")
	fs.IntVar(&o.Syncer.Workers, "sync-workers", 4, "Objects of one type one tenant syncs at once.")
	fs.StringVar(&o.Syncer.PodSecurityLevel, "host-pod-security-level", syncer.DefaultPodSecurityLevel,
		"Pod Security level enforced on host namespaces: privileged, baseline or restricted.")
	fs.Func("denied-metadata-prefixes", fmt.Sprintf("Comma-separated label and annotation key prefixes not copied from tenant objects to the host (they steer host add-ons), each covering its subdomains (an entry without a slash names one key without a prefix); replaces the default list: %s.",
		strings.Join(syncer.DefaultDeniedMetadataPrefixes, ",")), func(v string) error {
		return parsePrefixes(v, &o.Syncer.DeniedMetadataPrefixes)
	})
	fs.Func("allowed-metadata-prefixes", fmt.Sprintf("Comma-separated label and annotation key prefixes copied although a shorter denied prefix covers them; replaces the default list: %s.",
		strings.Join(syncer.DefaultAllowedMetadataPrefixes, ",")), func(v string) error {
		return parsePrefixes(v, &o.Syncer.AllowedMetadataPrefixes)
	})
	fs.Func("host-policy", "A YAML file holding the default host policy of every VirtualCluster, as its spec.hostPolicy (priority classes, schedulers, runtime classes, volume types, node selector and tolerations of Pods; metadata prefixes; a ResourceQuota and a LimitRange per host namespace). Default: the safe policy of docs/host-policy.md.",
		func(path string) error {
			p, err := readHostPolicy(path)
			o.HostPolicy = p
			return err
		})
	fs.BoolVar(&o.ExposeNodeAddresses, "expose-node-addresses", false,
		"Copy host nodes' addresses and kubelet port to tenants' virtual nodes (by default a virtual node shows only its name).")
	fs.StringVar(&o.Kubelet.BindAddress, "kubelet-bind-address", kubeletapi.DefaultBindAddress,
		`Address of the kubelet API of tenants' virtual nodes (kubectl logs, exec, attach, port-forward through the tenant's API server); "0" turns it off.`)
	fs.StringVar(&o.Kubelet.AdvertiseAddress, "kubelet-advertise-address", "",
		"Address (IP or DNS name) that tenants' API servers dial for the kubelet API: every virtual node's address. Default: $POD_IP, else the bind address's host, else this machine's default-route address.")
	fs.Func("kubelet-advertise-port", "Kubelet port that virtual nodes give, when a Service in front of the manager maps another (default: the port listened on).", func(v string) error {
		port, err := strconv.ParseUint(v, 10, 16)
		if err != nil || port == 0 {
			return fmt.Errorf("%q is not a port", v)
		}
		o.Kubelet.AdvertisePort = int32(port)
		return nil
	})
	fs.StringVar(&o.Kubelet.CertFile, "kubelet-tls-cert-file", "", "Serving certificate of the kubelet API (default: a self-signed one made at start).")
	fs.StringVar(&o.Kubelet.KeyFile, "kubelet-tls-private-key-file", "", "Key of --kubelet-tls-cert-file.")
	fs.StringVar(&o.DNS.BindAddress, "dns-bind-address", "",
		`Address (UDP and TCP) of the DNS server that answers tenants' Pods with their own tenant's names, for example :10053. Default: none, no DNS server ("0" too).`)
	fs.StringVar(&o.DNS.ClusterDomain, "cluster-domain", tenantdns.DefaultClusterDomain, "The tenants' cluster domain.")
	fs.Func("dns-upstream", "Comma-separated resolvers (host:port) for names outside the cluster domain (default: the nameservers of /etc/resolv.conf, the host's cluster DNS in a Pod).", func(v string) error {
		o.DNS.Upstream = nil
		for _, u := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
			if _, _, err := net.SplitHostPort(u); err != nil {
				return fmt.Errorf("upstream %q is not host:port: %w", u, err)
			}
			o.DNS.Upstream = append(o.DNS.Upstream, u)
		}
		return nil
	})
	fs.StringVar(&o.DNSNameserver, "dns-nameserver", "", "IP at which host Pods reach the DNS server on port 53 (default: the cluster IP of --dns-service).")
	fs.StringVar(&o.DNSService, "dns-service", "tenantry-system/tenantry-dns",
		"Service (namespace/name) that maps port 53 to --dns-bind-address; host Pods ask its cluster IP. Without it, and without --dns-nameserver, Pods keep the host's DNS.")
	fs.StringVar(&o.HostDNSService, "host-dns-service", "kube-system/kube-dns",
		"The host's cluster DNS Service (namespace/name), which tenants' Pods may not query where the tenant DNS serves them (it would name other tenants' namespaces and Services); empty lets them.")
	fs.Func("host-pod-cidrs", "Comma-separated CIDRs of the host's Pod networks, which no ingress ipBlock of a tenant's NetworkPolicy admits (another tenant's Pods). Default: the host's Nodes' spec.podCIDRs, read as each tenant starts.",
		func(v string) error {
			o.HostPodCIDRs = strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
			_, err := syncer.CanonicalCIDRs(o.HostPodCIDRs)
			return err
		})
	fs.Float64Var(&o.HostQPS, "host-qps", syncer.DefaultHostQPS,
		"Requests per second the syncers send the host, all tenants together; the tenants that have work share them in turn.")
	fs.IntVar(&o.HostBurst, "host-burst", syncer.DefaultHostBurst, "Burst of the syncers' requests to the host, all tenants together.")
	fs.Float64Var(&o.TenantQPS, "tenant-host-qps", 0, "A ceiling on each tenant's requests to the host, per second, below its share of --host-qps; 0: none.")
	fs.IntVar(&o.TenantBurst, "tenant-host-burst", 0, "Burst of the ceiling set by --tenant-host-qps (default: its QPS).")
}

// Module runs the syncers in the management app: the Hub, their host half,
// run by the management manager, and Tenants, their tenant half. It needs
// the host *rest.Config, *runtime.Scheme, manager.Manager and the cluster
// registry, to which the app gives the tenant half with
// providers.ProvideTenantModule(syncers.TenantModule). Without that, no
// tenant would sync, and the app fails to build, saying so.
var Module = fx.Module("syncers",
	fx.Provide(newHub, newKubeletAPI, newTenantDNS, newTenants, newNodeHeartbeat),
	fx.Invoke(startHub),
)

// startHub adds the Hub and the kubelet API to the management manager,
// once the registry (built first, as a parameter) has taken the tenant
// half.
func startHub(mgr manager.Manager, hub *syncer.Hub, _ *clusterregistry.RemoteClusterRegistry, tenants *Tenants, heartbeat *pods.NodeHeartbeat) error {
	if !tenants.given {
		return errors.New("syncers: no tenant would sync, since the registry does not run the syncers' tenant half: " +
			"add providers.ProvideTenantModule(syncers.TenantModule) to the app")
	}
	if tenants.kubelet != nil {
		if err := mgr.Add(tenants.kubelet); err != nil {
			return err
		}
	}
	if tenants.dns != nil {
		if err := mgr.Add(tenants.dns); err != nil {
			return err
		}
	}
	if err := mgr.Add(heartbeat); err != nil {
		return err
	}
	return mgr.Add(hub)
}

// newNodeHeartbeat renews the virtual nodes' Leases of the tenants whose
// apps do not run (paused, not started yet, or failed): the VirtualCluster
// controller tells it which tenants to keep, and the registry whether
// their apps run.
func newNodeHeartbeat(p dnsParams, registry *clusterregistry.RemoteClusterRegistry) *pods.NodeHeartbeat {
	return pods.NewNodeHeartbeat(pods.NodeHeartbeatOptions{
		HostNodes: p.Hub.Reader(),
		Log:       p.Logger.WithName("node-heartbeat"),
		AppRuns: func(cluster string) bool {
			status, err := registry.Status(cluster)
			return err == nil && status.State == clusterregistry.StateRunning
		},
	})
}

// syncersGroup is the fx value group of the syncers that Provide adds.
const syncersGroup = "syncers"

// Provide adds the syncer that newSyncer returns to every tenant, beside
// the built-in ones. newSyncer is an fx constructor: it may ask for the
// management app's objects.
func Provide(newSyncer any) fx.Option {
	return fx.Provide(fx.Annotate(newSyncer, fx.ResultTags(`group:"`+syncersGroup+`"`)))
}

type hubParams struct {
	fx.In
	Config  *rest.Config
	Scheme  *runtime.Scheme
	Options *Options `optional:"true"`
	// Fence, on sharded replicas, fences each tenant's host requests on
	// its Lease.
	Fence clusterregistry.Fence `optional:"true"`
	// Shards, on sharded replicas, gives the fencing margin that bounds
	// each host request.
	Shards *sharding.Coordinator `optional:"true"`
}

// options are the supplied Options, or all built-in syncers.
func options(supplied *Options) Options {
	if supplied != nil {
		return *supplied
	}
	return Options{Resources: builtin.Names()}
}

func newHub(p hubParams) (*syncer.Hub, error) {
	o := options(p.Options)
	opts := syncer.HubOptions{
		Scheme: p.Scheme, HostQPS: o.HostQPS, HostBurst: o.HostBurst,
		TenantQPS: o.TenantQPS, TenantBurst: o.TenantBurst,
		Fence: p.Fence, Indexes: []syncer.HubIndex{pods.IPIndex},
	}
	if p.Shards != nil {
		// A request the fence let go lands within the margin, or never.
		opts.RequestTimeout = p.Shards.WriteMargin() * 2 / 3
	}
	return syncer.NewHub(p.Config, opts)
}

// Tenants is the syncers' tenant half, which Module provides: the module
// that runs them in every tenant cluster. TenantModule gives it to the
// registry.
type Tenants struct {
	module fx.Option
	given  bool
	// kubelet serves the virtual nodes' kubelet API, and dns the tenants'
	// DNS, if on.
	kubelet *kubeletapi.Server
	dns     *tenantdns.Server
}

// TenantModule is Tenants' module, for providers.ProvideTenantModule.
func TenantModule(t *Tenants) fx.Option {
	t.given = true
	return t.module
}

type tenantParams struct {
	fx.In
	Hub *syncer.Hub
	// Manager is the management manager: its API reader reads each
	// VirtualCluster's spec (inClusterServer, hostPolicy) as its tenant
	// starts.
	Manager manager.Manager
	Options *Options `optional:"true"`
	// Extra are the syncers added with Provide.
	Extra []syncer.Syncer `group:"syncers"`
	// Kubelet serves the virtual nodes' kubelet API, DNS the tenants' DNS;
	// nil when off.
	Kubelet *kubeletapi.Server `optional:"true"`
	DNS     *tenantdns.Server  `optional:"true"`
}

type kubeletParams struct {
	fx.In
	Config  *rest.Config
	Hub     *syncer.Hub
	Logger  logr.Logger `optional:"true"`
	Options *Options    `optional:"true"`
}

// newKubeletAPI listens for the kubelet API of virtual nodes, unless the
// options turn it off (or leave it unset, as a library user who supplies
// no Options and syncs no Pods would).
// dnsParams are what the DNS server and the node heartbeat need.
type dnsParams struct {
	fx.In
	Hub     *syncer.Hub
	Logger  logr.Logger `optional:"true"`
	Options *Options    `optional:"true"`
}

// newTenantDNS listens for the tenants' Pods' DNS queries, unless the
// options turn it off (or leave it unset).
func newTenantDNS(p dnsParams) (*tenantdns.Server, error) {
	if p.Options == nil || p.Options.DNS.BindAddress == "0" || p.Options.DNS.BindAddress == "" {
		return nil, nil
	}
	o := p.Options.DNS
	addresses := pods.Addresses{Hub: p.Hub}
	o.ClusterOf, o.PodOf, o.Logger = addresses.PodCluster, addresses.PodAt, p.Logger.WithName("dns")
	return tenantdns.New(o)
}

func newKubeletAPI(p kubeletParams) (*kubeletapi.Server, error) {
	if p.Options == nil || p.Options.Kubelet.BindAddress == "0" || p.Options.Kubelet.BindAddress == "" {
		return nil, nil
	}
	o := p.Options.Kubelet
	o.Host, o.Logger, o.ClusterOf = p.Config, p.Logger.WithName("kubelet-api"), pods.Addresses{Hub: p.Hub}.TenantPodAt
	return kubeletapi.New(o)
}

// newTenants builds the tenant half: each tenant runs the built-in syncers
// that Options name (all when none are supplied), those added with Provide
// and the custom resource syncers, under its VirtualCluster's host policy
// over the default, read from the host as the tenant starts.
func newTenants(p tenantParams) (*Tenants, error) {
	o := options(p.Options)
	if _, err := builtin.ByName(o.Resources, builtin.Options{}); err != nil {
		return nil, err
	}
	dnsService := &sharedRead[podDNSAnswer]{read: func(ctx context.Context) (podDNSAnswer, error) {
		return podDNS(ctx, p.Manager.GetAPIReader(), o)
	}}
	hostDNS := &sharedRead[*syncer.HostDNS]{read: func(ctx context.Context) (*syncer.HostDNS, error) {
		return readHostDNS(ctx, p.Manager.GetAPIReader(), o.HostDNSService)
	}}
	podCIDRs := &sharedRead[[]string]{read: func(ctx context.Context) ([]string, error) {
		if o.HostPodCIDRs != nil {
			return o.HostPodCIDRs, nil
		}
		return nodePodCIDRs(ctx, p.Manager.GetAPIReader())
	}}
	serviceRanges := &sharedRead[[]netip.Prefix]{read: func(ctx context.Context) ([]netip.Prefix, error) {
		return hostServiceRanges(ctx, p.Manager.GetAPIReader())
	}}
	dataStores := &sharedRead[[]string]{read: func(ctx context.Context) ([]string, error) {
		return dataStoreCIDRs(ctx, p.Manager.GetAPIReader())
	}}
	return &Tenants{kubelet: p.Kubelet, dns: p.DNS, module: syncer.TenantModulePerCluster(p.Hub, func(ctx context.Context, cluster string) (syncer.Options, []syncer.Syncer, error) {
		// Read from the same cache as the VirtualCluster's reconciler,
		// after it: the tenant runs with the spec that made the reconciler
		// (re)spawn it, or a newer one.
		var vc tenantryv1alpha1.VirtualCluster
		if err := p.Manager.GetClient().Get(ctx, client.ObjectKey{Name: cluster}, &vc); err != nil {
			return syncer.Options{}, nil, fmt.Errorf("reading VirtualCluster %s: %w", cluster, err)
		}
		policy := overDefault(o.HostPolicy, vc.Spec.HostPolicy)
		opts := o.Syncer
		opts.DeniedMetadataPrefixes, opts.AllowedMetadataPrefixes = metadataPrefixes(
			o.Syncer.DeniedMetadataPrefixes, o.Syncer.AllowedMetadataPrefixes, policy)
		opts.ResourceQuota, opts.LimitRange = policy.ResourceQuota, policy.LimitRange
		if level := policy.Pods.PodSecurityLevel; level != "" {
			opts.PodSecurityLevel = level
		}
		if policy.Network != nil {
			opts.DeniedEgressCIDRs = policy.Network.DeniedEgressCIDRs
			opts.ControlPlaneCIDRs = policy.Network.ControlPlaneCIDRs
			if t := policy.Network.TranslatePolicies; t != nil {
				opts.DisableNetworkPolicyTranslation = !*t
			}
		}
		hostPods, err := podCIDRs.get(ctx)
		if err != nil {
			return syncer.Options{}, nil, err
		}
		opts.HostPodCIDRs = hostPods
		// No tenant's Pods reach a shared DataStore: only the control
		// planes that use it, under their own policy.
		stores, err := dataStores.get(ctx)
		if err != nil {
			return syncer.Options{}, nil, err
		}
		opts.DeniedEgressCIDRs = slices.Concat(opts.DeniedEgressCIDRs, stores)
		opts.Budget = policy.Budget
		opts.CacheLimits = cacheLimits(policy)
		opts.StatusReporter = syncStatusReporter(p.Manager.GetClient(), cluster)
		if len(opts.Budget) > 0 {
			opts.BudgetReporter = budgetReporter(p.Manager.GetClient(), cluster, opts.Budget)
		} else if vc.Status.Budget != nil {
			if err := clearBudgetStatus(ctx, p.Manager.GetClient(), &vc); err != nil {
				return syncer.Options{}, nil, err
			}
		}
		podOpts := pods.Options{
			Policy:              podPolicy(policy),
			KubeletAPI:          p.Kubelet,
			AllNodes:            vc.Spec.NodeSync == tenantryv1alpha1.NodeSyncAll,
			ExposeNodeAddresses: o.ExposeNodeAddresses,
			InClusterServer:     vc.Spec.InClusterServer,
		}
		if policy.Metadata != nil {
			podOpts.CopyUnprefixedAnnotations = policy.Metadata.CopyUnprefixedPodAnnotations
		}
		if policy.Pods != nil {
			podOpts.NodeSelector = policy.Pods.NodeSelector
		}
		if p.DNS != nil {
			podOpts.DNS = p.DNS
			dns, err := dnsService.get(ctx)
			if err != nil {
				return syncer.Options{}, nil, err
			}
			if dns.config != nil {
				own := *dns.config // each tenant's own
				podOpts.DNSConfig = &own
				opts.NetworkPolicyServices = append(opts.NetworkPolicyServices, netpol.Service{Ports: []int32{53}, Peers: dns.peers})
				if opts.HostDNS, err = hostDNS.get(ctx); err != nil {
					return syncer.Options{}, nil, err
				}
			}
		}
		ranges, err := serviceRanges.get(ctx)
		if err != nil {
			return syncer.Options{}, nil, err
		}
		builtinOpts := builtin.Options{Pods: podOpts, PodCluster: pods.Addresses{Hub: p.Hub}.PodCluster, HostServiceRanges: ranges}
		if policy.Services != nil {
			builtinOpts.ServiceTypes = policy.Services.AllowedTypes
		}
		syncers, err := builtin.ByName(o.Resources, builtinOpts)
		if err != nil {
			return syncer.Options{}, nil, err
		}
		syncers = append(syncers, p.Extra...)
		for _, gvk := range o.CustomResources {
			syncers = append(syncers, syncer.CustomResource(gvk))
		}
		return opts, syncers, nil
	})}, nil
}

// sharedReadTTL is how long an answer of a sharedRead is reused for the
// tenants that start next.
const sharedReadTTL = time.Minute

// sharedRead is a read of the host whose answer is the same for every
// tenant: the tenants that start within sharedReadTTL of it reuse it,
// since a thousand tenants that start together would otherwise each make
// it.
type sharedRead[T any] struct {
	read   func(ctx context.Context) (T, error)
	mu     sync.Mutex
	value  T
	readAt time.Time
}

func (r *sharedRead[T]) get(ctx context.Context) (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readAt.IsZero() || time.Since(r.readAt) >= sharedReadTTL {
		v, err := r.read(ctx)
		if err != nil {
			var zero T
			return zero, err
		}
		r.value, r.readAt = v, time.Now()
	}
	return r.value, nil
}

// dataStoreCIDRs are the addresses of the host's DataStores' endpoints;
// none where the host has no DataStore CRD. A DataStore whose endpoints
// do not resolve is logged and left out: it stops no tenant (its control
// planes cannot reach it either, and say so).
func dataStoreCIDRs(ctx context.Context, host client.Reader) ([]string, error) {
	var list tenantryv1alpha1.DataStoreList
	if err := host.List(ctx, &list); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing DataStores: %w", err)
	}
	var out []string
	for _, ds := range list.Items {
		cidrs, err := datastore.EndpointCIDRs(ctx, ds.Spec.Etcd.Endpoints)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "the addresses of a DataStore, which tenant Pods are denied, are unknown", "dataStore", ds.Name)
			continue
		}
		out = append(out, cidrs...)
	}
	return out, nil
}

// hostServiceRanges are the host's service ranges: the CIDRs of its
// ServiceCIDRs (networking.k8s.io/v1); none where the host serves no
// ServiceCIDRs.
func hostServiceRanges(ctx context.Context, host client.Reader) ([]netip.Prefix, error) {
	var list networkingv1.ServiceCIDRList
	if err := host.List(ctx, &list); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the host's service ranges (ServiceCIDRs): %w", err)
	}
	var out []netip.Prefix
	for _, sc := range list.Items {
		if !sc.DeletionTimestamp.IsZero() {
			continue // being drained: no new IPs from it
		}
		for _, cidr := range sc.Spec.CIDRs {
			if p, err := netip.ParsePrefix(cidr); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	return out, nil
}

// podDNSAnswer is the DNS that host Pods get (nil: the host's), and the
// peers of a NetworkPolicy that reach it.
type podDNSAnswer struct {
	config *pods.DNSConfig
	peers  []networkingv1.NetworkPolicyPeer
}

// podDNS is the DNS that host Pods get: the tenant DNS server at the
// configured nameserver, or at the cluster IP of its Service, reached by
// its address and by its Pods; none (the host's DNS) when that Service
// does not exist.
func podDNS(ctx context.Context, host client.Reader, o Options) (podDNSAnswer, error) {
	dns := &pods.DNSConfig{Nameserver: o.DNSNameserver, ClusterDomain: o.DNS.ClusterDomain}
	if dns.Nameserver != "" {
		return podDNSAnswer{config: dns, peers: []networkingv1.NetworkPolicyPeer{addressPeer(dns.Nameserver)}}, nil
	}
	if o.DNSService == "" {
		return podDNSAnswer{config: dns}, nil
	}
	ns, name, ok := strings.Cut(o.DNSService, "/")
	if !ok {
		return podDNSAnswer{}, fmt.Errorf("--dns-service %q is not namespace/name", o.DNSService)
	}
	var svc corev1.Service
	if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return podDNSAnswer{}, nil
		}
		return podDNSAnswer{}, fmt.Errorf("reading the DNS Service %s: %w", o.DNSService, err)
	}
	if net.ParseIP(svc.Spec.ClusterIP) == nil {
		return podDNSAnswer{}, fmt.Errorf("the DNS Service %s has no cluster IP (%q)", o.DNSService, svc.Spec.ClusterIP)
	}
	dns.Nameserver = svc.Spec.ClusterIP
	// A NetworkPolicy sees a Service's endpoints, not its cluster IP:
	// the Pods it selects in its namespace.
	peers := []networkingv1.NetworkPolicyPeer{addressPeer(dns.Nameserver)}
	if len(svc.Spec.Selector) > 0 {
		peers = append(peers, networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: svc.Spec.Selector},
		})
	}
	return podDNSAnswer{config: dns, peers: peers}, nil
}

// readHostDNS reads the host's cluster DNS off its Service (namespace/name)
// and its EndpointSlices: nil where service is "" or there is no such
// Service.
func readHostDNS(ctx context.Context, host client.Reader, service string) (*syncer.HostDNS, error) {
	if service == "" {
		return nil, nil
	}
	ns, name, ok := strings.Cut(service, "/")
	if !ok {
		return nil, fmt.Errorf("--host-dns-service %q is not namespace/name", service)
	}
	var svc corev1.Service
	if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the host's DNS Service %s: %w", service, err)
	}
	dns := &syncer.HostDNS{Namespace: ns, Selector: svc.Spec.Selector}
	for _, ip := range svc.Spec.ClusterIPs {
		if net.ParseIP(ip) != nil {
			dns.Addresses = append(dns.Addresses, ip)
		}
	}
	var endpoints discoveryv1.EndpointSliceList
	if err := host.List(ctx, &endpoints, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return nil, fmt.Errorf("reading the endpoints of the host's DNS Service %s: %w", service, err)
	}
	for _, es := range endpoints.Items {
		for _, e := range es.Endpoints {
			dns.Addresses = append(dns.Addresses, e.Addresses...)
		}
	}
	return dns, nil
}

// addressPeer is a NetworkPolicy peer of one IP address.
func addressPeer(ip string) networkingv1.NetworkPolicyPeer {
	bits := 32
	if net.ParseIP(ip).To4() == nil {
		bits = 128
	}
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("%s/%d", ip, bits)}}
}

// nodePodCIDRs are the host's Pod networks as its Nodes hold them
// (spec.podCIDRs), each once.
func nodePodCIDRs(ctx context.Context, host client.Reader) ([]string, error) {
	var nodes corev1.NodeList
	if err := host.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing the host's Nodes for their Pod networks: %w", err)
	}
	var cidrs []string
	for _, n := range nodes.Items {
		cidrs = append(cidrs, n.Spec.PodCIDRs...)
		if n.Spec.PodCIDR != "" {
			cidrs = append(cidrs, n.Spec.PodCIDR)
		}
	}
	return syncer.CanonicalCIDRs(cidrs)
}

// parseGVK parses "group/version/Kind" (or "version/Kind" for the core
// group), as --sync-custom-resources takes them.
func parseGVK(s string) (schema.GroupVersionKind, error) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != "":
		return schema.GroupVersionKind{Group: parts[0], Version: parts[1], Kind: parts[2]}, nil
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return schema.GroupVersionKind{Version: parts[0], Kind: parts[1]}, nil
	}
	return schema.GroupVersionKind{}, fmt.Errorf("%q is not group/version/Kind", s)
}

// parsePrefixes reads a comma-separated list of key prefixes, in lower
// case, into list (an empty value: none).
func parsePrefixes(v string, list *[]string) error {
	*list = []string{}
	for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		p = strings.ToLower(p)
		if err := checkPrefix(p); err != nil {
			return err
		}
		*list = append(*list, p)
	}
	return nil
}

// checkPrefix checks an entry of a list of label and annotation key
// prefixes: a DNS subdomain and a slash, as in example.com/, or a key
// without a prefix and without a dot, as in aadpodidbinding (with a dot,
// it would read as a prefix whose slash was forgotten).
func checkPrefix(p string) error {
	domain, ok := strings.CutSuffix(p, "/")
	if !ok && !strings.ContainsAny(p, "/.") && len(validation.IsQualifiedName(p)) == 0 && p == strings.ToLower(p) {
		return nil // a key without a prefix
	}
	if errs := validation.IsDNS1123Subdomain(domain); !ok || len(errs) > 0 {
		return fmt.Errorf("prefix %q: a key prefix is a DNS subdomain and a slash, as in example.com/, or a key without a prefix or a dot, as in aadpodidbinding", p)
	}
	return nil
}
