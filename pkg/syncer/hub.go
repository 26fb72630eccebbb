package syncer

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/syncer/internal/fairqueue"
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
// rate limit of its own.
//
// Run a Hub with Start (it is a manager.Runnable: add it to the management
// manager) before tenants route through it.
type Hub struct {
	mapper     meta.RESTMapper
	httpClient *http.Client
	requests   *fairqueue.Queue
	config     *rest.Config
	opts       HubOptions
	cache      cache.Cache
	// apiServer tells where the host API server is, to keep tenant Pods
	// from it.
	apiServer *hostAPIServer

	mu sync.RWMutex
	// routes hold, by type and cluster, the handlers of host events, each
	// under the id it was given: a cluster re-spawned while its old app
	// still shuts down has two, and cancelling one leaves the other.
	routes map[routeKey]map[int]func(client.Object)
	nextID int
	// informed holds the informers that have the hub's handler, by type
	// (and by watched kind: "public CRDs", "nodes").
	informed map[string]bool
	// watchers get, by watched kind and then by id, the name of every
	// watched host object that changes.
	watchers map[string]map[int]func(name string)

	// indexOnce guards indexed: the routed types whose informer has the
	// cluster index.
	indexOnce sync.Mutex
	indexed   map[schema.GroupVersionKind]bool
	// indexes are HubOptions.Indexes by type, and indexType their types by
	// name.
	indexes   map[schema.GroupVersionKind][]HubIndex
	indexType map[string]schema.GroupVersionKind
}

type routeKey struct {
	gvk     schema.GroupVersionKind
	cluster string
}

// NewHub builds a hub on the host cluster's config. The hub asks the host
// for uncompressed responses whatever config says: its watches carry an
// event for every synced object, and gzipping each would cost the host API
// server more CPU than the event itself.
func NewHub(config *rest.Config, opts HubOptions) (*Hub, error) {
	if opts.Scheme == nil {
		return nil, fmt.Errorf("hub needs a scheme")
	}
	config = rest.CopyConfig(config)
	config.DisableCompression = true
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
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("host HTTP client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("host REST mapper: %w", err)
	}
	c, err := cache.New(config, cache.Options{
		HTTPClient:           httpClient,
		Mapper:               mapper,
		Scheme:               opts.Scheme,
		DefaultLabelSelector: labels.NewSelector().Add(*managed),
		// Nothing reads them, and they would be most of a small copy's
		// memory; an update leaves the API server's as they are.
		DefaultTransform: cache.TransformStripManagedFields(),
		// Public CRDs and nodes are the host's own, not Tenantry's copies.
		ByObject: map[client.Object]cache.ByObject{
			&apiextensionsv1.CustomResourceDefinition{}: {Label: labels.NewSelector().Add(*public)},
			&corev1.Node{}: {Label: labels.Everything(), Transform: trimNode},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("building host cache: %w", err)
	}
	indexes, indexType := map[schema.GroupVersionKind][]HubIndex{}, map[string]schema.GroupVersionKind{}
	for _, idx := range opts.Indexes {
		gvk, err := gvkOf(idx.Object, opts.Scheme)
		if err != nil {
			return nil, fmt.Errorf("hub index %s: %w", idx.Name, err)
		}
		if _, taken := indexType[idx.Name]; taken || idx.Name == clusterIndex || idx.Values == nil {
			return nil, fmt.Errorf("hub index %q: a name of its own and a Values function are required", idx.Name)
		}
		indexes[gvk] = append(indexes[gvk], idx)
		indexType[idx.Name] = gvk
	}
	uncached, err := client.New(config, client.Options{HTTPClient: httpClient, Scheme: opts.Scheme, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("host client: %w", err)
	}
	return &Hub{
		apiServer:  &hostAPIServer{reader: uncached},
		mapper:     mapper,
		httpClient: httpClient,
		requests:   fairqueue.New(opts.HostQPS, opts.HostBurst),
		config:     rest.CopyConfig(config),
		opts:       opts,
		cache:      c,
		routes:     map[routeKey]map[int]func(client.Object){},
		informed:   map[string]bool{},
		watchers:   map[string]map[int]func(string){},
		indexed:    map[schema.GroupVersionKind]bool{},
		indexes:    indexes,
		indexType:  indexType,
	}, nil
}

// Reader reads the hub's cache: Tenantry's host copies, the host's nodes
// and its public CRDs.
func (h *Hub) Reader() client.Reader { return h.cache }

// Start runs the hub's informers and hands out the host budget until ctx
// ends.
func (h *Hub) Start(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.requests.Run(ctx)
	}()
	err := h.cache.Start(ctx)
	<-done
	return err
}

// NeedLeaderElection is false: every replica keeps its host cache warm.
func (h *Hub) NeedLeaderElection() bool { return false }

// serves says whether the host serves gvk.
func (h *Hub) serves(gvk schema.GroupVersionKind) (bool, error) {
	return serves(h.mapper, gvk)
}

// serves says whether mapper knows gvk; an unknown kind is no error.
func serves(mapper meta.RESTMapper, gvk schema.GroupVersionKind) (bool, error) {
	_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking up %s: %w", gvk, err)
	}
	return true, nil
}

// clientFor returns a host client for one tenant's writes, whose requests
// wait for the tenant's turn in the host budget. It shares the hub's
// connections and REST mapper. Reads belong to Reader.
func (h *Hub) clientFor(cluster string) (client.Client, error) {
	cfg := rest.CopyConfig(h.config)
	limiter := fairqueue.Limiter{Queue: h.requests, Tenant: cluster, Fence: h.opts.Fence}
	if h.opts.TenantQPS > 0 {
		limiter.Ceiling = rate.NewLimiter(rate.Limit(h.opts.TenantQPS), h.opts.TenantBurst)
	}
	cfg.RateLimiter = limiter
	// The shared connections, under the tenant's own User-Agent, which the
	// host's audit log shows (the shared transport's own is set only where
	// a request has none).
	httpClient := *h.httpClient
	if h.opts.RequestTimeout > 0 {
		httpClient.Timeout = h.opts.RequestTimeout
	}
	httpClient.Transport = transport.NewUserAgentRoundTripper(
		rest.DefaultKubernetesUserAgent()+" tenantry-syncer/"+cluster, h.httpClient.Transport)
	c, err := client.New(cfg, client.Options{Scheme: h.opts.Scheme, Mapper: h.mapper, HTTPClient: &httpClient})
	if err != nil {
		return nil, fmt.Errorf("host client for cluster %s: %w", cluster, err)
	}
	return c, nil
}

// clusterIndex indexes the hub's cache of every routed type by the
// tenantry.dev/cluster label, so that one tenant's copies are found in time
// proportional to their number, not to every tenant's.
const clusterIndex = "tenantry.dev/cluster"

// index adds clusterIndex to the informer of gvk, once.
func (h *Hub) index(ctx context.Context, gvk schema.GroupVersionKind, obj client.Object) error {
	h.indexOnce.Lock()
	defer h.indexOnce.Unlock()
	if h.indexed[gvk] {
		return nil
	}
	if err := h.cache.IndexField(ctx, obj, clusterIndex, clusterOf); err != nil {
		return fmt.Errorf("indexing host %s by cluster: %w", gvk.Kind, err)
	}
	for _, idx := range h.indexes[gvk] {
		if err := h.cache.IndexField(ctx, obj, idx.Name, idx.Values); err != nil {
			return fmt.Errorf("indexing host %s by %s: %w", gvk.Kind, idx.Name, err)
		}
	}
	h.indexed[gvk] = true
	return nil
}

// ListBy lists into list the objects of the hub's cache that index (one
// of HubOptions.Indexes) finds under value. While no tenant routes the
// index's type, the hub has no informer of it and ListBy reports false,
// without starting one.
func (h *Hub) ListBy(ctx context.Context, list client.ObjectList, index, value string) (informed bool, err error) {
	gvk, ok := h.indexType[index]
	if !ok {
		return false, fmt.Errorf("the hub has no index %q: add it to HubOptions.Indexes", index)
	}
	h.indexOnce.Lock()
	informed = h.indexed[gvk]
	h.indexOnce.Unlock()
	if !informed {
		return false, nil
	}
	if err := h.cache.List(ctx, list, client.MatchingFields{index: value}); err != nil {
		return true, fmt.Errorf("listing host %s by %s: %w", gvk.Kind, index, err)
	}
	return true, nil
}

// clusterOf is the clusterIndex value of a host object.
func clusterOf(o client.Object) []string {
	if c, ok := o.GetLabels()[LabelCluster]; ok {
		return []string{c}
	}
	return nil
}

// route sends the events of host objects of obj's type that belong to
// cluster to handle (and to every other handler routed for them), until
// the returned cancel is called. It first hands handle every such object
// the host has now, as the informer did for the first route of the type:
// a tenant that starts late (re-spawned, or after the manager restarted)
// learns of its copies at once, orphans among them. The first route for a
// type starts its informer and waits for it to sync.
func (h *Hub) route(ctx context.Context, obj client.Object, cluster string, handle func(client.Object)) (cancel func(), err error) {
	gvk, err := gvkOf(obj, h.opts.Scheme)
	if err != nil {
		return nil, err
	}
	if err := h.inform(ctx, gvk, obj); err != nil {
		return nil, err
	}
	key := routeKey{gvk: gvk, cluster: cluster}
	h.mu.Lock()
	h.nextID++
	id := h.nextID
	if h.routes[key] == nil {
		h.routes[key] = map[int]func(client.Object){}
	}
	h.routes[key][id] = handle
	h.mu.Unlock()
	cancel = func() {
		h.mu.Lock()
		delete(h.routes[key], id)
		if len(h.routes[key]) == 0 {
			delete(h.routes, key)
		}
		h.mu.Unlock()
	}
	list := listFor(obj, gvk, h.opts.Scheme)
	if err := h.cache.List(ctx, list, client.MatchingFields{clusterIndex: cluster}); err != nil {
		cancel()
		return nil, fmt.Errorf("listing cluster %s's host %s: %w", cluster, gvk.Kind, err)
	}
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		handle(o.(client.Object))
		return nil
	})
	return cancel, nil
}

// inform makes sure the type's informer runs, indexed by cluster, with the
// hub's dispatcher, which routes each event by the object's cluster label.
func (h *Hub) inform(ctx context.Context, gvk schema.GroupVersionKind, obj client.Object) error {
	if err := h.index(ctx, gvk, obj); err != nil {
		return err
	}
	return h.handleOnce(ctx, gvk.String(), obj, func(o client.Object) {
		h.mu.RLock()
		routes := h.routes[routeKey{gvk: gvk, cluster: o.GetLabels()[LabelCluster]}]
		handlers := make([]func(client.Object), 0, len(routes))
		for _, handle := range routes {
			handlers = append(handlers, handle)
		}
		h.mu.RUnlock()
		for _, handle := range handlers {
			handle(o)
		}
	})
}

// handleOnce adds handle to the informer of obj's type, once per key, for
// every add, update and delete (tombstones unwrapped).
func (h *Hub) handleOnce(ctx context.Context, key string, obj client.Object, handle func(client.Object)) error {
	h.mu.RLock()
	done := h.informed[key]
	h.mu.RUnlock()
	if done {
		return nil
	}
	informer, err := h.cache.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("host informer for %s: %w", key, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.informed[key] {
		return nil
	}
	event := func(o any) {
		if tombstone, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = tombstone.Obj
		}
		if obj, ok := o.(client.Object); ok {
			handle(obj)
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    event,
		UpdateFunc: func(_, o any) { event(o) },
		DeleteFunc: event,
	}); err != nil {
		return fmt.Errorf("host event handler for %s: %w", key, err)
	}
	h.informed[key] = true
	return nil
}

func gvkOf(obj client.Object, scheme *runtime.Scheme) (schema.GroupVersionKind, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("type of %T: %w", obj, err)
	}
	return gvk, nil
}

// watchPublicCRDs calls handle with the name of every public host CRD now,
// and of every one that is added, changed, deleted or loses its label later,
// until the returned cancel is called.
func (h *Hub) watchPublicCRDs(ctx context.Context, handle func(name string)) (cancel func(), err error) {
	return h.watch(ctx, "public CRDs", &apiextensionsv1.CustomResourceDefinition{}, &apiextensionsv1.CustomResourceDefinitionList{}, handle)
}

// watchNodes calls handle with the name of every host node now, and of
// every one that is added, changed or deleted later, until the returned
// cancel is called. Read the nodes through
// Reader: the hub caches every host node (they carry no Tenantry label),
// without its managed fields and image list.
func (h *Hub) watchNodes(ctx context.Context, handle func(name string)) (cancel func(), err error) {
	return h.watch(ctx, "nodes", &corev1.Node{}, &corev1.NodeList{}, handle)
}

// watch tells handle the name of every object of obj's type (list is its
// list type) in the hub's cache now and of every one that changes later,
// under kind, until the returned cancel is called.
func (h *Hub) watch(ctx context.Context, kind string, obj client.Object, list client.ObjectList, handle func(name string)) (cancel func(), err error) {
	err = h.handleOnce(ctx, kind, obj, func(o client.Object) {
		h.mu.RLock()
		watchers := make([]func(string), 0, len(h.watchers[kind]))
		for _, w := range h.watchers[kind] {
			watchers = append(watchers, w)
		}
		h.mu.RUnlock()
		for _, w := range watchers {
			w(o.GetName())
		}
	})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.nextID++
	id := h.nextID
	if h.watchers[kind] == nil {
		h.watchers[kind] = map[int]func(string){}
	}
	h.watchers[kind][id] = handle
	h.mu.Unlock()
	if err := h.cache.List(ctx, list); err != nil {
		h.mu.Lock()
		delete(h.watchers[kind], id)
		h.mu.Unlock()
		return nil, fmt.Errorf("listing host %s: %w", kind, err)
	}
	if err := meta.EachListItem(list, func(o runtime.Object) error {
		handle(o.(client.Object).GetName())
		return nil
	}); err != nil {
		return nil, err
	}
	return func() {
		h.mu.Lock()
		delete(h.watchers[kind], id)
		h.mu.Unlock()
	}, nil
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
