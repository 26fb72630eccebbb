// Package hostcache is the host side of syncing that every tenant shares:
// one informer per host type over the objects a selector picks, whose
// events go to the tenant that a label names; indexes by tenant and more;
// watches of every object of a kind by name; and, for each tenant, a host
// client that takes its turn in a fair request budget (package
// fairqueue).
package hostcache

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/tenantry/tenantry/internal/dedup"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/syncer/internal/fairqueue"
)

// Options configure a Cache.
type Options struct {
	// Scheme knows every routed type. Required.
	Scheme *runtime.Scheme
	// Selector picks the host objects of every type the cache holds but
	// those of ByObject, which are held by selectors (and transforms) of
	// their own.
	Selector labels.Selector
	ByObject map[client.Object]cache.ByObject
	// ClusterLabel is the label whose value names the tenant a host object
	// belongs to: routes and ClusterIndex go by it.
	ClusterLabel string

	// HostQPS and HostBurst (both required) are the budget of requests
	// that the tenants' host clients send, shared in turn by the tenants
	// that wait; TenantQPS
	// and TenantBurst, if TenantQPS is set, a ceiling on each tenant's.
	HostQPS     float64
	HostBurst   int
	TenantQPS   float64
	TenantBurst int
	// Fence, if set, is asked before every request of a tenant's host
	// client, and RequestTimeout, if set, bounds each.
	Fence          clusterregistry.Fence
	RequestTimeout time.Duration

	// Indexes are more indexes of the cache, each added to its type's
	// informer with ClusterIndex, when a tenant first routes the type.
	// Read through them with ListBy.
	Indexes []Index
}

// Index is an index of the cache of one type: Values gives the values
// under which an object of Object's type is found by Name (as
// client.MatchingFields{Name: value}).
type Index struct {
	Object client.Object
	Name   string
	Values client.IndexerFunc
}

// NewList is an empty list of obj's type gvk: typed where scheme knows the
// list, unstructured otherwise.
func NewList(obj client.Object, gvk schema.GroupVersionKind, scheme *runtime.Scheme) client.ObjectList {
	listGVK := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	if _, unstructuredObj := obj.(*unstructured.Unstructured); !unstructuredObj {
		if o, err := scheme.New(listGVK); err == nil {
			return o.(client.ObjectList)
		}
	}
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(listGVK)
	return l
}

// Cache is the host side of syncing, shared by every tenant: one host
// informer per synced type, for all tenants, that sees only the objects
// Options.Selector picks, and whose events it routes to the tenant they
// belong to by Options.ClusterLabel. It also hands each tenant a host
// client with a rate limit of its own.
//
// Run a Cache with Start before tenants route through it.
type Cache struct {
	mapper     meta.RESTMapper
	httpClient *http.Client
	uncached   client.Client
	requests   *fairqueue.Queue
	config     *rest.Config
	opts       Options
	cache      cache.Cache

	mu sync.RWMutex
	// routes hold, by type and cluster, the handlers of host events, each
	// under the id it was given: a cluster re-spawned while its old app
	// still shuts down has two, and cancelling one leaves the other.
	routes map[routeKey]map[int]func(client.Object)
	nextID int
	// informed holds the informers that have the cache's handler, by type
	// (and by watched kind: "public CRDs", "nodes").
	informed map[string]bool
	// watchers get, by watched kind and then by id, the name of every
	// watched host object that changes.
	watchers map[string]map[int]func(name string)
	// counters are told, by cluster, of every routed host object of the
	// cluster the cache holds (Count).
	counters map[string]Counter

	// indexOnce guards indexed: the routed types whose informer has the
	// cluster index.
	indexOnce sync.Mutex
	indexed   map[schema.GroupVersionKind]client.Object // an object of the type, as informed
	// indexes are Options.Indexes by type, and indexType their types by
	// name.
	indexes   map[schema.GroupVersionKind][]Index
	indexType map[string]schema.GroupVersionKind
}

type routeKey struct {
	gvk     schema.GroupVersionKind
	cluster string
}

// New builds the host cache on the host cluster's config. It asks the
// host for uncompressed responses whatever config says: its watches carry
// an event for every synced object, and gzipping each would cost the host
// API server more CPU than the event itself.
func New(config *rest.Config, opts Options) (*Cache, error) {
	if opts.Scheme == nil {
		return nil, fmt.Errorf("the host cache needs a scheme")
	}
	if opts.HostQPS <= 0 || opts.HostBurst <= 0 {
		return nil, fmt.Errorf("the host cache needs a request budget: HostQPS %v and HostBurst %d must be positive", opts.HostQPS, opts.HostBurst)
	}
	config = rest.CopyConfig(config)
	config.DisableCompression = true
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
		DefaultLabelSelector: opts.Selector,
		// Nothing reads managed fields, and they would be most of a
		// small copy's memory; an update leaves the API server's as they
		// are. A copy's ConfigMap or Secret data is held as a digest when
		// large (see DigestFrom), and shares its memory with its tenant
		// object's otherwise.
		DefaultTransform: dedup.After(func(obj any) (any, error) {
			obj, err := cache.TransformStripManagedFields()(obj)
			if err != nil {
				return nil, err
			}
			return digestLargeData(obj)
		}),
		ByObject: opts.ByObject,
	})
	if err != nil {
		return nil, fmt.Errorf("building host cache: %w", err)
	}
	indexes, indexType := map[schema.GroupVersionKind][]Index{}, map[string]schema.GroupVersionKind{}
	for _, idx := range opts.Indexes {
		gvk, err := GVKOf(idx.Object, opts.Scheme)
		if err != nil {
			return nil, fmt.Errorf("host cache index %s: %w", idx.Name, err)
		}
		if _, taken := indexType[idx.Name]; taken || idx.Name == ClusterIndex || idx.Values == nil {
			return nil, fmt.Errorf("host cache index %q: a name of its own and a Values function are required", idx.Name)
		}
		indexes[gvk] = append(indexes[gvk], idx)
		indexType[idx.Name] = gvk
	}
	uncached, err := client.New(config, client.Options{HTTPClient: httpClient, Scheme: opts.Scheme, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("host client: %w", err)
	}
	return &Cache{
		uncached:   uncached,
		mapper:     mapper,
		httpClient: httpClient,
		requests:   fairqueue.New(opts.HostQPS, opts.HostBurst),
		config:     rest.CopyConfig(config),
		opts:       opts,
		cache:      c,
		routes:     map[routeKey]map[int]func(client.Object){},
		informed:   map[string]bool{},
		watchers:   map[string]map[int]func(string){},
		counters:   map[string]Counter{},
		indexed:    map[schema.GroupVersionKind]client.Object{},
		indexes:    indexes,
		indexType:  indexType,
	}, nil
}

// Reader reads the cache: the objects Options.Selector picks, and those
// of Options.ByObject, whole (what the cache holds as a digest is read
// from the host).
func (hc *Cache) Reader() client.Reader { return wholeReader{held: hc.cache, host: hc.uncached} }

// HeldReader reads the cache as it holds objects: a large ConfigMap's or
// Secret's data as a digest (HeldAsDigest). For what counts or compares
// (with AsHeld), never for what is written back.
func (hc *Cache) HeldReader() client.Reader { return hc.cache }

// Start runs the cache's informers and hands out the host budget until ctx
// ends.
func (hc *Cache) Start(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		hc.requests.Run(ctx)
	}()
	err := hc.cache.Start(ctx)
	<-done
	return err
}

// Uncached reads the host itself, through the cache's connections.
func (hc *Cache) Uncached() client.Reader { return hc.uncached }

// Mapper is the host's REST mapper.
func (hc *Cache) Mapper() meta.RESTMapper { return hc.mapper }

// ClientFor returns a host client for one tenant's writes, whose requests
// wait for the tenant's turn in the host budget. It shares the cache's
// connections and REST mapper. Reads belong to Reader.
func (hc *Cache) ClientFor(cluster string) (client.Client, error) {
	cfg := rest.CopyConfig(hc.config)
	limiter := fairqueue.Limiter{Queue: hc.requests, Tenant: cluster, Fence: hc.opts.Fence}
	if hc.opts.TenantQPS > 0 {
		limiter.Ceiling = rate.NewLimiter(rate.Limit(hc.opts.TenantQPS), hc.opts.TenantBurst)
	}
	cfg.RateLimiter = limiter
	// The shared connections, under the tenant's own User-Agent, which the
	// host's audit log shows (the shared transport's own is set only where
	// a request has none).
	httpClient := *hc.httpClient
	if hc.opts.RequestTimeout > 0 {
		httpClient.Timeout = hc.opts.RequestTimeout
	}
	httpClient.Transport = transport.NewUserAgentRoundTripper(
		rest.DefaultKubernetesUserAgent()+" tenantry-syncer/"+cluster, hc.httpClient.Transport)
	c, err := client.New(cfg, client.Options{Scheme: hc.opts.Scheme, Mapper: hc.mapper, HTTPClient: &httpClient})
	if err != nil {
		return nil, fmt.Errorf("host client for cluster %s: %w", cluster, err)
	}
	return c, nil
}

// ClusterIndex indexes the cache of every routed type by
// Options.ClusterLabel, so that one tenant's objects are found in time
// proportional to their number, not to every tenant's: list them with
// client.MatchingFields{ClusterIndex: cluster}.
const ClusterIndex = "tenantry.dev/cluster"

// index adds ClusterIndex to the informer of gvk, once.
func (hc *Cache) index(ctx context.Context, gvk schema.GroupVersionKind, obj client.Object) error {
	hc.indexOnce.Lock()
	defer hc.indexOnce.Unlock()
	if hc.indexed[gvk] != nil {
		return nil
	}
	if err := hc.cache.IndexField(ctx, obj, ClusterIndex, hc.clusterOf); err != nil {
		return fmt.Errorf("indexing host %s by cluster: %w", gvk.Kind, err)
	}
	for _, idx := range hc.indexes[gvk] {
		if err := hc.cache.IndexField(ctx, obj, idx.Name, idx.Values); err != nil {
			return fmt.Errorf("indexing host %s by %s: %w", gvk.Kind, idx.Name, err)
		}
	}
	hc.indexed[gvk] = obj
	return nil
}

// ListBy lists into list the objects in the cache that index (one
// of Options.Indexes) finds under value. While no tenant routes the
// index's type, the cache has no informer of it and ListBy reports false,
// without starting one.
func (hc *Cache) ListBy(ctx context.Context, list client.ObjectList, index, value string) (informed bool, err error) {
	gvk, ok := hc.indexType[index]
	if !ok {
		return false, fmt.Errorf("the cache has no index %q: add it to the hub's Indexes", index)
	}
	hc.indexOnce.Lock()
	informed = hc.indexed[gvk] != nil
	hc.indexOnce.Unlock()
	if !informed {
		return false, nil
	}
	if err := hc.cache.List(ctx, list, client.MatchingFields{index: value}); err != nil {
		return true, fmt.Errorf("listing host %s by %s: %w", gvk.Kind, index, err)
	}
	return true, nil
}

// clusterOf is the ClusterIndex value of a host object.
func (hc *Cache) clusterOf(o client.Object) []string {
	if c, ok := o.GetLabels()[hc.opts.ClusterLabel]; ok {
		return []string{c}
	}
	return nil
}

// Route sends the events of host objects of obj's type that belong to
// cluster to handle (and to every other handler routed for them), until
// the returned cancel is called. It first hands handle every such object
// the host has now, as the informer did for the first route of the type:
// a tenant that starts late (re-spawned, or after the manager restarted)
// learns of its copies at once, orphans among them. The first route for a
// type starts its informer and waits for it to sync.
func (hc *Cache) Route(ctx context.Context, obj client.Object, cluster string, handle func(client.Object)) (cancel func(), err error) {
	gvk, err := GVKOf(obj, hc.opts.Scheme)
	if err != nil {
		return nil, err
	}
	if err := hc.Inform(ctx, gvk, obj); err != nil {
		return nil, err
	}
	key := routeKey{gvk: gvk, cluster: cluster}
	hc.mu.Lock()
	hc.nextID++
	id := hc.nextID
	if hc.routes[key] == nil {
		hc.routes[key] = map[int]func(client.Object){}
	}
	hc.routes[key][id] = handle
	hc.mu.Unlock()
	cancel = func() {
		hc.mu.Lock()
		delete(hc.routes[key], id)
		if len(hc.routes[key]) == 0 {
			delete(hc.routes, key)
		}
		hc.mu.Unlock()
	}
	list := NewList(obj, gvk, hc.opts.Scheme)
	if err := hc.cache.List(ctx, list, client.MatchingFields{ClusterIndex: cluster}); err != nil {
		cancel()
		return nil, fmt.Errorf("listing cluster %s's host %s: %w", cluster, gvk.Kind, err)
	}
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		handle(o.(client.Object))
		return nil
	})
	return cancel, nil
}

// A Counter is told of every routed host object of one cluster that the
// cache holds, as it comes, changes and goes (see Count). It must return
// quickly: it is told on the informers' goroutines.
type Counter interface {
	// Hold tells of obj, of type gvk, new or changed.
	Hold(gvk schema.GroupVersionKind, obj client.Object)
	// Drop tells that obj, of type gvk, is gone.
	Drop(gvk schema.GroupVersionKind, obj client.Object)
}

// Count tells counter of every host object of cluster that the cache
// holds of a routed type (Route, Inform), those it holds now first, and of
// every change of them, until the returned cancel is called: so that what
// a cluster's copies hold in this cache, which every cluster shares, can
// count against the cluster's own limits. A cluster has one counter at a
// time: a second replaces the first (a cluster re-spawned while its old
// app still stops); a cancel removes only its own.
func (hc *Cache) Count(ctx context.Context, cluster string, counter Counter) (cancel func(), err error) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	hc.counters[cluster] = counter
	cancel = func() {
		hc.mu.Lock()
		if hc.counters[cluster] == counter {
			delete(hc.counters, cluster)
		}
		hc.mu.Unlock()
	}
	hc.indexOnce.Lock()
	informed := maps.Clone(hc.indexed)
	hc.indexOnce.Unlock()
	for gvk, obj := range informed {
		held, err := hc.heldBy(ctx, gvk, obj, cluster)
		if err != nil {
			delete(hc.counters, cluster)
			return nil, fmt.Errorf("counting cluster %s's host %s: %w", cluster, gvk.Kind, err)
		}
		for _, o := range held {
			counter.Hold(gvk, o)
		}
	}
	return cancel, nil
}

// heldBy is what the cache holds now of cluster's objects of type gvk
// (obj is one), as stored, not copied: through the cluster index once the
// type's informer has synced, and from its store as it is before, since a
// read of the cache would wait for the sync while Count holds back every
// event (an object the store does not have yet is told once it does).
func (hc *Cache) heldBy(ctx context.Context, gvk schema.GroupVersionKind, obj client.Object, cluster string) ([]client.Object, error) {
	informer, err := hc.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, err
	}
	var held []client.Object
	if informer.HasSynced() {
		list := NewList(obj, gvk, hc.opts.Scheme)
		if err := hc.cache.List(ctx, list, client.MatchingFields{ClusterIndex: cluster}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		err := meta.EachListItem(list, func(o runtime.Object) error {
			held = append(held, o.(client.Object))
			return nil
		})
		return held, err
	}
	stored, ok := informer.(interface{ GetStore() toolscache.Store })
	if !ok {
		return nil, fmt.Errorf("its informer, a %T, has no store to read", informer)
	}
	for _, o := range stored.GetStore().List() {
		if o, ok := o.(client.Object); ok && o.GetLabels()[hc.opts.ClusterLabel] == cluster {
			held = append(held, o)
		}
	}
	return held, nil
}

// Inform makes sure the type's informer runs, indexed by cluster, with the
// cache's dispatcher, which routes each event by the object's cluster label.
func (hc *Cache) Inform(ctx context.Context, gvk schema.GroupVersionKind, obj client.Object) error {
	if err := hc.index(ctx, gvk, obj); err != nil {
		return err
	}
	return hc.handleOnce(ctx, gvk.String(), obj, func(o client.Object, deleted bool) {
		cluster := o.GetLabels()[hc.opts.ClusterLabel]
		hc.mu.RLock()
		routes := hc.routes[routeKey{gvk: gvk, cluster: cluster}]
		handlers := make([]func(client.Object), 0, len(routes))
		for _, handle := range routes {
			handlers = append(handlers, handle)
		}
		// Told under the lock, so that Count's first count of what the
		// cache holds comes wholly before or after.
		if counter := hc.counters[cluster]; counter != nil {
			if deleted {
				counter.Drop(gvk, o)
			} else {
				counter.Hold(gvk, o)
			}
		}
		hc.mu.RUnlock()
		for _, handle := range handlers {
			handle(o)
		}
	})
}

// handleOnce adds handle to the informer of obj's type, once per key, for
// every add, update and delete (tombstones unwrapped; deleted says which).
func (hc *Cache) handleOnce(ctx context.Context, key string, obj client.Object, handle func(o client.Object, deleted bool)) error {
	hc.mu.RLock()
	done := hc.informed[key]
	hc.mu.RUnlock()
	if done {
		return nil
	}
	informer, err := hc.cache.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("host informer for %s: %w", key, err)
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.informed[key] {
		return nil
	}
	event := func(o any, deleted bool) {
		if tombstone, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = tombstone.Obj
		}
		if obj, ok := o.(client.Object); ok {
			handle(obj, deleted)
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { event(o, false) },
		UpdateFunc: func(_, o any) { event(o, false) },
		DeleteFunc: func(o any) { event(o, true) },
	}); err != nil {
		return fmt.Errorf("host event handler for %s: %w", key, err)
	}
	hc.informed[key] = true
	return nil
}

// GVKOf is the type of obj, resolved against scheme (an unstructured
// object brings its own).
func GVKOf(obj client.Object, scheme *runtime.Scheme) (schema.GroupVersionKind, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("type of %T: %w", obj, err)
	}
	return gvk, nil
}

// Watch tells handle the name of every object of obj's type (list is its
// list type) in the cache's cache now and of every one that changes later,
// under kind, until the returned cancel is called.
func (hc *Cache) Watch(ctx context.Context, kind string, obj client.Object, list client.ObjectList, handle func(name string)) (cancel func(), err error) {
	err = hc.handleOnce(ctx, kind, obj, func(o client.Object, _ bool) {
		hc.mu.RLock()
		watchers := make([]func(string), 0, len(hc.watchers[kind]))
		for _, w := range hc.watchers[kind] {
			watchers = append(watchers, w)
		}
		hc.mu.RUnlock()
		for _, w := range watchers {
			w(o.GetName())
		}
	})
	if err != nil {
		return nil, err
	}
	hc.mu.Lock()
	hc.nextID++
	id := hc.nextID
	if hc.watchers[kind] == nil {
		hc.watchers[kind] = map[int]func(string){}
	}
	hc.watchers[kind][id] = handle
	hc.mu.Unlock()
	if err := hc.cache.List(ctx, list); err != nil {
		hc.mu.Lock()
		delete(hc.watchers[kind], id)
		hc.mu.Unlock()
		return nil, fmt.Errorf("listing host %s: %w", kind, err)
	}
	if err := meta.EachListItem(list, func(o runtime.Object) error {
		handle(o.(client.Object).GetName())
		return nil
	}); err != nil {
		return nil, err
	}
	return func() {
		hc.mu.Lock()
		delete(hc.watchers[kind], id)
		hc.mu.Unlock()
	}, nil
}
