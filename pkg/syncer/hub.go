package syncer

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/syncer/internal/hostcache"
)

// HubOptions configure a Hub.
type HubOptions struct {
	// Scheme knows every synced type. Required.
	Scheme *runtime.Scheme

	// HostQPS and HostBurst are the budget of requests that the tenants'
	// syncers send the host, all tenants together. The tenants that have
	// work share it in turn (fair queuing), so a tenant alone gets all of
	// it and a flood by one tenant does not hold another back. Default to
	// DefaultHostQPS and DefaultHostBurst.
	HostQPS   float64
	HostBurst int

	// TenantQPS and TenantBurst, if TenantQPS is set, are also a ceiling
	// on each tenant's requests, below its share of the budget. Default:
	// none.
	TenantQPS   float64
	TenantBurst int

	// Fence, if set, is asked before every request of a tenant's host
	// client: a sharded replica writes for a tenant only while
	// it holds the tenant's Lease. The tenant's app gets the same Fence
	// from the registry (clusterregistry.Options.Fence).
	Fence clusterregistry.Fence
	// RequestTimeout, if set, bounds each of a tenant's host requests.
	// With a Fence, keep it under the fencing margin (see
	// sharding.Coordinator.WriteMargin), so that a request the fence let
	// go lands before another replica may write for the tenant, or not at
	// all.
	RequestTimeout time.Duration

	// Indexes are more indexes of the hub's cache, each added to its
	// type's informer with the cluster index, when a tenant first routes
	// the type. Read through them with ListBy.
	Indexes []HubIndex
}

// HubIndex is an index of the hub's cache of one synced type: Values
// gives the values under which an object of Object's type is found by
// Name (as client.MatchingFields{Name: value}).
type HubIndex struct {
	Object client.Object
	Name   string
	Values client.IndexerFunc
}

// The default budget of requests to the host, shared by every tenant.
const (
	DefaultHostQPS   = 1000
	DefaultHostBurst = 1000
)

// Hub is the host side of syncing, shared by every tenant: one host
// informer per synced type, for all tenants, that sees only objects Tenantry
// manages, and whose events it routes to the tenant they belong to by the
// tenantry.dev/cluster label. It also hands each tenant a host client with a
// rate limit of its own (HubOptions.HostQPS).
//
// Run a Hub with Start (it is a manager.Runnable: add it to the management
// manager) before tenants route through it.
type Hub struct {
	cache  *hostcache.Cache
	scheme *runtime.Scheme
	// apiServer tells where the host API server is, to keep tenant Pods
	// from it.
	apiServer *hostAPIServer
}

// NewHub builds a hub on the host cluster's config. The hub asks the host
// for uncompressed responses whatever config says: its watches carry an
// event for every synced object, and gzipping each would cost the host API
// server more CPU than the event itself.
func NewHub(config *rest.Config, opts HubOptions) (*Hub, error) {
	if opts.Scheme == nil {
		return nil, fmt.Errorf("hub needs a scheme")
	}
	if opts.HostQPS <= 0 {
		opts.HostQPS = DefaultHostQPS
	}
	if opts.HostBurst <= 0 {
		opts.HostBurst = DefaultHostBurst
	}
	if opts.TenantBurst <= 0 {
		opts.TenantBurst = max(1, int(opts.TenantQPS))
	}
	managed, err := labels.NewRequirement(LabelManagedBy, selection.Equals, []string{ManagedByValue})
	if err != nil {
		return nil, fmt.Errorf("building label selector: %w", err)
	}
	public, err := labels.NewRequirement(LabelPublicCRD, selection.Equals, []string{"true"})
	if err != nil {
		return nil, fmt.Errorf("building label selector: %w", err)
	}
	indexes := make([]hostcache.Index, 0, len(opts.Indexes))
	for _, idx := range opts.Indexes {
		indexes = append(indexes, hostcache.Index(idx))
	}
	c, err := hostcache.New(config, hostcache.Options{
		Scheme:   opts.Scheme,
		Selector: labels.NewSelector().Add(*managed),
		// Public CRDs and nodes are the host's own, not Tenantry's copies.
		ByObject: map[client.Object]cache.ByObject{
			&apiextensionsv1.CustomResourceDefinition{}: {Label: labels.NewSelector().Add(*public)},
			&corev1.Node{}: {Label: labels.Everything(), Transform: trimNode},
		},
		ClusterLabel: LabelCluster,
		HostQPS:      opts.HostQPS, HostBurst: opts.HostBurst, TenantQPS: opts.TenantQPS, TenantBurst: opts.TenantBurst,
		Fence: opts.Fence, RequestTimeout: opts.RequestTimeout,
		Indexes: indexes,
	})
	if err != nil {
		return nil, err
	}
	return &Hub{cache: c, scheme: opts.Scheme, apiServer: &hostAPIServer{reader: c.Uncached()}}, nil
}

// Reader reads the hub's cache: Tenantry's host copies, the host's nodes
// and its public CRDs, whole (a large ConfigMap's or Secret's data, which
// the cache holds as a digest, is read from the host).
func (h *Hub) Reader() client.Reader { return h.cache.Reader() }

// heldReader reads the hub's cache as it holds objects (see
// hostcache.Cache.HeldReader): for what counts or compares, never for what
// is written back.
func (h *Hub) heldReader() client.Reader { return h.cache.HeldReader() }

// Start runs the hub's informers and hands out the host budget until ctx
// ends.
func (h *Hub) Start(ctx context.Context) error { return h.cache.Start(ctx) }

// NeedLeaderElection is false: every replica keeps its host cache warm.
func (h *Hub) NeedLeaderElection() bool { return false }

// ListBy lists into list the objects of the hub's cache that index (one
// of HubOptions.Indexes) finds under value. While no tenant routes the
// index's type, the hub has no informer of it and ListBy reports false,
// without starting one.
func (h *Hub) ListBy(ctx context.Context, list client.ObjectList, index, value string) (informed bool, err error) {
	return h.cache.ListBy(ctx, list, index, value)
}

// watchPublicCRDs calls handle with the name of every public host CRD now,
// and of every one that is added, changed, deleted or loses its label later,
// until the returned cancel is called.
func (h *Hub) watchPublicCRDs(ctx context.Context, handle func(name string)) (cancel func(), err error) {
	return h.cache.Watch(ctx, "public CRDs", &apiextensionsv1.CustomResourceDefinition{}, &apiextensionsv1.CustomResourceDefinitionList{}, handle)
}

// watchNodes calls handle with the name of every host node now, and of
// every one that is added, changed or deleted later, until the returned
// cancel is called. Read the nodes through
// Reader: the hub caches every host node (they carry no Tenantry label),
// without its managed fields and image list.
func (h *Hub) watchNodes(ctx context.Context, handle func(name string)) (cancel func(), err error) {
	return h.cache.Watch(ctx, "nodes", &corev1.Node{}, &corev1.NodeList{}, handle)
}

// trimNode drops what the hub never reads from a cached host node, and
// what makes nodes large: managed fields and the list of images.
func trimNode(o any) (any, error) {
	if n, ok := o.(*corev1.Node); ok {
		n.ManagedFields = nil
		n.Status.Images = nil
	}
	return o, nil
}
