package syncer

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
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
		func(lc fx.Lifecycle, mgr manager.Manager, cluster string, log logr.Logger, meter *clusterregistry.CacheMeter) error {
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
			}
			all := append([]Syncer{namespaceSyncer(opts.PodSecurityLevel)}, syncers...)
			return setup(mgr, cluster, log, hub, opts, all)
		},
		fx.ParamTags(``, ``, clusterregistry.ClusterNameTag, ``, `optional:"true"`),
	)))
}

func setup(mgr manager.Manager, cluster string, log logr.Logger, hub *Hub, opts Options, syncers []Syncer) error {
	host, err := hub.clientFor(cluster)
	if err != nil {
		return err
	}
	tr := translator{Cluster: cluster, DeniedMetadataPrefixes: opts.DeniedMetadataPrefixes, AllowedMetadataPrefixes: opts.AllowedMetadataPrefixes}
	excluded := map[string]bool{}
	for _, ns := range opts.ExcludeNamespaces {
		excluded[ns] = true
	}
	var apiServerIPs []string
	if !opts.DisableNetworkIsolation {
		ctx, cancel := context.WithTimeout(context.Background(), perClusterTimeout)
		apiServerIPs, err = hub.apiServer.addresses(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("isolating cluster %s's Pods from the host API server: %w", cluster, err)
		}
	}
	policies, err := newNamespacePolicies(tr, hub.Reader(), host, excluded, opts, apiServerIPs)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", cluster, err)
	}
	namespaces := &hostNamespaces{
		syncer: namespaceSyncer(opts.PodSecurityLevel), translator: tr,
		tenant: mgr.GetClient(), hostRead: hub.Reader(), host: host, policies: policies,
	}
	recorder := mgr.GetEventRecorder("tenantry-syncer")
	controllers, err := newTenantControllers(mgr)
	if err != nil {
		return err
	}
	scope := &TenantScope{cluster: cluster, mgr: mgr, log: log, hub: hub, host: host, translator: tr, excluded: excluded, controllers: controllers}
	var budget *resourceBudget
	if len(opts.Budget) > 0 {
		if err := ValidateBudget(opts.Budget); err != nil {
			return fmt.Errorf("the budget of cluster %s: %w", cluster, err)
		}
		budget = newResourceBudget(cluster, opts.Budget, opts.LimitRange, hub.Reader(), mgr.GetScheme())
		namespaces.budget = budget
		if opts.BudgetReporter != nil {
			if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
				budget.report(ctx, log.WithName("budget"), opts.BudgetReporter)
				return nil
			})); err != nil {
				return err
			}
		}
	}

	act := &activity{}
	rep := &reporter{cluster: cluster, read: hub.Reader(), scheme: mgr.GetScheme(), activity: act, types: map[string]syncedType{}}
	if opts.StatusReporter != nil {
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			rep.run(ctx, log.WithName("report"), opts.ReportPeriod, opts.StatusReporter, controllers.group.Settled)
			return nil
		})); err != nil {
			return err
		}
	}

	start := func(s *Syncer, gvk schema.GroupVersionKind) error {
		// The hub's informer of the type, with its cluster index, before
		// the patroller may read through the index.
		ctx, cancel := context.WithTimeout(context.Background(), perClusterTimeout)
		defer cancel()
		if err := hub.inform(ctx, gvk, s.Object()); err != nil {
			return fmt.Errorf("syncer %s: %w", s.Name, err)
		}
		if budget != nil {
			// count/<resource>.<group> names a type by its plural resource,
			// as ResourceQuota does.
			mapping, err := hub.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("syncer %s: the host's resource name of %s: %w", s.Name, gvk, err)
			}
			budget.count(s, gvk, mapping.Resource.Resource)
		}
		rep.add(s, gvk)
		r := &reconciler{
			syncer: s, gvk: gvk, budget: budget, translator: tr, namespaces: namespaces,
			tenant: mgr.GetClient(), hostRead: hub.Reader(), host: host,
			recorder: recorder, excluded: excluded, rejections: newRejections(), activity: act,
		}
		if s.Up == nil {
			r.echoes = &echoes{}
		}
		sources := []source.TypedSource[reconcile.Request]{
			controllers.objects(s.Object(), predicate.NewPredicateFuncs(func(o client.Object) bool { return !excluded[namespaceOf(s, o)] })),
			hostEvents(hub, s, tr, r.echoes),
		}
		if opts.PatrolPeriod > 0 {
			p := &patroller{r: r, period: opts.PatrolPeriod, gvk: gvk, scheme: mgr.GetScheme()}
			sources = append(sources, source.TypedFunc[reconcile.Request](p.start))
		}
		if err := controllers.run(log, s.Name+"-syncer", opts.Workers, r, sources...); err != nil {
			return fmt.Errorf("syncer %s: %w", s.Name, err)
		}
		for _, e := range s.Extensions {
			if err := e.Setup(scope); err != nil {
				return fmt.Errorf("syncer %s: %w", s.Name, err)
			}
		}
		return nil
	}

	if err := policies.setup(controllers, hub); err != nil {
		return err
	}
	if err := setupNetworkPolicyNotice(controllers, recorder, excluded); err != nil {
		return err
	}
	if !opts.DisablePublicCRDs {
		if err := setupPublicCRDs(controllers, cluster, hub); err != nil {
			return err
		}
	}
	pending := &pendingSyncers{log: log, tenantMapper: mgr.GetRESTMapper(), hub: hub, start: start}
	seen := map[string]bool{}
	for i := range syncers {
		s := &syncers[i]
		if err := s.Validate(); err != nil {
			return err
		}
		if seen[s.Name] {
			return fmt.Errorf("two syncers named %s", s.Name)
		}
		seen[s.Name] = true
		gvk, err := s.gvk(mgr.GetScheme())
		if err != nil {
			return err
		}
		ready, err := pending.ready(gvk)
		if err != nil {
			return err
		}
		if !ready {
			pending.add(s, gvk)
			continue
		}
		if err := start(s, gvk); err != nil {
			return err
		}
	}
	return pending.setup(controllers)
}
