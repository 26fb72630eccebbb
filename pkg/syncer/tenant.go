package syncer

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tenantry/tenantry/pkg/syncer/internal/hostcache"
	"github.com/tenantry/tenantry/pkg/syncer/internal/quota"
)

// tenant is the syncing of one tenant cluster, as its app starts: what
// every syncer of the tenant shares.
type tenant struct {
	cluster  string
	mgr      manager.Manager
	log      logr.Logger
	hub      *Hub
	opts     Options
	host     client.Client // the tenant's host client, with its turn in the hub's budget
	tr       translator
	excluded map[string]bool // tenant namespaces never synced

	policies    *namespacePolicies
	namespaces  *hostNamespaces
	recorder    events.EventRecorder
	controllers *tenantControllers
	scope       *TenantScope
	budget      *quota.Budget // nil: none
	activity    *activity
	reporter    *reporter
}

// newTenant makes what the syncers of cluster share.
func newTenant(mgr manager.Manager, cluster string, log logr.Logger, hub *Hub, opts Options) (*tenant, error) {
	host, err := hub.cache.ClientFor(cluster)
	if err != nil {
		return nil, err
	}
	t := &tenant{
		cluster: cluster, mgr: mgr, log: log, hub: hub, opts: opts, host: host,
		tr:       translator{Cluster: cluster, DeniedMetadataPrefixes: opts.DeniedMetadataPrefixes, AllowedMetadataPrefixes: opts.AllowedMetadataPrefixes},
		excluded: map[string]bool{},
		recorder: mgr.GetEventRecorder("tenantry-syncer"),
		activity: &activity{},
	}
	for _, ns := range opts.ExcludeNamespaces {
		t.excluded[ns] = true
	}
	var apiServerIPs []string
	if !opts.DisableNetworkIsolation {
		ctx, cancel := context.WithTimeout(context.Background(), perClusterTimeout)
		apiServerIPs, err = hub.apiServer.addresses(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("isolating cluster %s's Pods from the host API server: %w", cluster, err)
		}
	}
	if t.policies, err = newNamespacePolicies(t.tr, mgr.GetClient(), hub.Reader(), host, t.excluded, opts, apiServerIPs); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cluster, err)
	}
	t.namespaces = &hostNamespaces{
		syncer: namespaceSyncer(opts.PodSecurityLevel), translator: t.tr,
		tenant: mgr.GetClient(), hostRead: hub.Reader(), host: host, policies: t.policies,
	}
	if t.controllers, err = newTenantControllers(mgr); err != nil {
		return nil, err
	}
	t.scope = &TenantScope{cluster: cluster, mgr: mgr, log: log, hub: hub, host: host, translator: t.tr, excluded: t.excluded, controllers: t.controllers}
	if len(opts.Budget) > 0 {
		if err := ValidateBudget(opts.Budget); err != nil {
			return nil, fmt.Errorf("the budget of cluster %s: %w", cluster, err)
		}
		t.budget = quota.New(quota.Options{
			Limits: opts.Budget, Read: hub.heldReader(), Refuse: Refuse,
			Copies:     []client.ListOption{client.MatchingFields{hostcache.ClusterIndex: cluster}},
			Namespaces: []client.ListOption{client.MatchingLabels{LabelManagedBy: ManagedByValue, LabelCluster: cluster}},
		})
		t.namespaces.budget = t.budget
	}
	t.reporter = &reporter{cluster: cluster, read: hub.heldReader(), scheme: mgr.GetScheme(), activity: t.activity, types: map[string]syncedType{}}
	return t, nil
}

// setup runs, in the tenant's manager, its reporters, the host namespace
// policy controllers, the public CRD copier, and syncers: each now, or,
// for a type the tenant does not serve yet, once it does.
func (t *tenant) setup(syncers []Syncer) error {
	if err := t.runReporters(); err != nil {
		return err
	}
	if err := t.policies.setup(t.controllers, t.hub); err != nil {
		return err
	}
	if err := setupNetworkPolicyNotice(t.controllers, t.recorder, t.excluded, t.policies.network); err != nil {
		return err
	}
	if !t.opts.DisablePublicCRDs {
		if err := setupPublicCRDs(t.controllers, t.cluster, t.hub); err != nil {
			return err
		}
	}
	pending := &pendingSyncers{log: t.log, tenantMapper: t.mgr.GetRESTMapper(), hub: t.hub, start: t.start}
	seen := map[string]bool{}
	{
		// Run even where the translation is off: it deletes the copies
		// made while it was on.
		s := networkPolicySyncer(t.policies.network)
		gvk, err := s.gvk(t.mgr.GetScheme())
		if err != nil {
			return err
		}
		if err := t.start(&s, gvk); err != nil {
			return err
		}
		seen[s.Name] = true
	}
	for i := range syncers {
		s := &syncers[i]
		if err := s.Validate(); err != nil {
			return err
		}
		if seen[s.Name] {
			return fmt.Errorf("two syncers named %s", s.Name)
		}
		seen[s.Name] = true
		gvk, err := s.gvk(t.mgr.GetScheme())
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
		if err := t.start(s, gvk); err != nil {
			return err
		}
	}
	return pending.setup(t.controllers)
}

// runReporters tells Options.BudgetReporter and StatusReporter, where set,
// what they hear of while the tenant's manager runs.
func (t *tenant) runReporters() error {
	if t.budget != nil && t.opts.BudgetReporter != nil {
		if err := t.mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			t.budget.Report(ctx, t.log.WithName("budget"), t.opts.BudgetReporter)
			return nil
		})); err != nil {
			return err
		}
	}
	if t.opts.StatusReporter != nil {
		if err := t.mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			t.reporter.run(ctx, t.log.WithName("report"), t.opts.ReportPeriod, t.opts.StatusReporter, t.controllers.group.Settled)
			return nil
		})); err != nil {
			return err
		}
	}
	return nil
}

// start runs syncer s, of type gvk, in the tenant: its controller, fed by
// the tenant's watch, the hub's host events and the patroller, and its
// Extensions.
func (t *tenant) start(s *Syncer, gvk schema.GroupVersionKind) error {
	// The hub's informer of the type, with its cluster index, before
	// the patroller may read through the index.
	ctx, cancel := context.WithTimeout(context.Background(), perClusterTimeout)
	defer cancel()
	if err := t.hub.cache.Inform(ctx, gvk, s.Object()); err != nil {
		return fmt.Errorf("syncer %s: %w", s.Name, err)
	}
	if t.budget != nil {
		// count/<resource>.<group> names a type by its plural resource,
		// as ResourceQuota does.
		mapping, err := t.hub.cache.Mapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("syncer %s: the host's resource name of %s: %w", s.Name, gvk, err)
		}
		t.budget.Count(quota.Counted{
			GVK: gvk, Resource: mapping.Resource.Resource,
			NewList: func() client.ObjectList { return hostcache.NewList(s.Object(), gvk, t.mgr.GetScheme()) },
			Usage:   s.usage(t.opts.Budget, t.opts.LimitRange, t.hub.heldReader()),
		})
	}
	t.reporter.add(s, gvk)
	r := &reconciler{
		syncer: s, gvk: gvk, budget: t.budget, translator: t.tr, namespaces: t.namespaces,
		tenant: t.mgr.GetClient(), hostRead: t.hub.heldReader(), host: t.host,
		recorder: t.recorder, excluded: t.excluded, rejections: newRejections(), activity: t.activity,
	}
	if s.Up == nil {
		r.echoes = &echoes{}
	}
	sources := []source.TypedSource[reconcile.Request]{
		t.controllers.objects(s.Object(), predicate.NewPredicateFuncs(func(o client.Object) bool { return !t.excluded[namespaceOf(s, o)] })),
		hostEvents(t.hub, s, t.tr, r.echoes),
	}
	if t.opts.PatrolPeriod > 0 {
		p := &patroller{r: r, period: t.opts.PatrolPeriod, gvk: gvk, scheme: t.mgr.GetScheme()}
		sources = append(sources, source.TypedFunc[reconcile.Request](p.start))
	}
	if err := t.controllers.run(t.log, s.Name+"-syncer", t.opts.Workers, r, sources...); err != nil {
		return fmt.Errorf("syncer %s: %w", s.Name, err)
	}
	for _, e := range s.Extensions {
		if err := e.Setup(t.scope); err != nil {
			return fmt.Errorf("syncer %s: %w", s.Name, err)
		}
	}
	return nil
}
