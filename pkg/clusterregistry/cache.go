package clusterregistry

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// newNotifyingCache is the NewCache of every cluster's manager: it builds
// controller-runtime's cache, with directInformers unless opts name their
// own NewInformer, and wraps it in a notifyingCache. A cache
// restricted to some namespaces is returned as it is: it hands out a new
// informer value at each call, which a notifyingCache could not tell
// apart (a cluster's manager watches every namespace).
func newNotifyingCache(config *rest.Config, opts cache.Options) (cache.Cache, error) {
	if opts.NewInformer == nil {
		opts.NewInformer = newDirectInformer
	}
	c, err := cache.New(config, opts)
	if err != nil || len(opts.DefaultNamespaces) > 0 {
		return c, err
	}
	return &notifyingCache{Cache: c, started: make(chan struct{}), synced: map[any]syncNotice{}}, nil
}

// notifyingCache is controller-runtime's cache, but every wait for informers
// to sync is told by client-go's sync notifications (DoneChecker) instead of
// polling for it every 100 ms: GetInformer that blocks, and
// WaitForCacheSync, which first waits for the informers and event handlers
// handed out so far, so that the check controller-runtime then makes of its
// own passes at once. A controller's Kind source waits for its informer
// and then its handler, and Spawn waits for every controller's sources: with
// polling a cluster could not be ready in less than two or three polls,
// whatever its size.
type notifyingCache struct {
	cache.Cache

	// started is closed once the cache starts: before that, no informer
	// syncs, and a GetInformer does not wait, as controller-runtime's
	// does not.
	started   chan struct{}
	startOnce sync.Once

	mu sync.Mutex
	// synced holds the sync notification of every informer and event
	// handler handed out, by informer or handler registration.
	synced map[any]syncNotice
}

// syncNotice tells when an informer, or an event handler of it, has synced.
type syncNotice struct {
	informer cache.Informer
	done     toolscache.DoneChecker
}

// Start implements cache.Cache.
func (c *notifyingCache) Start(ctx context.Context) error {
	c.startOnce.Do(func() { close(c.started) })
	return c.Cache.Start(ctx)
}

// WaitForCacheSync implements cache.Cache. It waits for every informer
// and handler handed out, those handed out while it waits included: one
// that controller-runtime's own check found unsynced would cost a poll of
// 100 ms.
func (c *notifyingCache) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-c.started:
	case <-ctx.Done():
		return false
	}
	waited := map[any]bool{}
	for {
		c.mu.Lock()
		var checkers []toolscache.DoneChecker
		for key, n := range c.synced {
			if !waited[key] && !n.informer.IsStopped() { // removed: it will never sync
				waited[key] = true
				checkers = append(checkers, n.done)
			}
		}
		c.mu.Unlock()
		if len(checkers) == 0 {
			return c.Cache.WaitForCacheSync(ctx)
		}
		if !toolscache.WaitFor(ctx, "", checkers...) {
			return false
		}
	}
}

// GetInformer implements cache.Cache.
func (c *notifyingCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformer(ctx, obj, append(opts, cache.BlockUntilSynced(false))...)
	if err != nil {
		return nil, err
	}
	return c.informer(ctx, i, fmt.Sprintf("%T", obj), opts)
}

// GetInformerForKind implements cache.Cache.
func (c *notifyingCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformerForKind(ctx, gvk, append(opts, cache.BlockUntilSynced(false))...)
	if err != nil {
		return nil, err
	}
	return c.informer(ctx, i, gvk.String(), opts)
}

// RemoveInformer implements cache.Cache. The removed informer and its
// handlers are waited for no more: an informer removed before the cache
// started never runs, so it would never sync.
func (c *notifyingCache) RemoveInformer(ctx context.Context, obj client.Object) error {
	// The informer to forget; asking for it makes none that the removal
	// would not delete at once.
	i, err := c.Cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	if err := c.Cache.RemoveInformer(ctx, obj); err != nil {
		return err
	}
	c.mu.Lock()
	for key, n := range c.synced {
		if n.informer == i {
			delete(c.synced, key)
		}
	}
	c.mu.Unlock()
	return nil
}

// IndexField implements cache.Cache. The informer it makes is waited for
// as any other.
func (c *notifyingCache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	if _, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false)); err != nil {
		return err
	}
	return c.Cache.IndexField(ctx, obj, field, extract)
}

// informer records i's sync notification, waits for it if opts ask to block
// (the default) and the cache runs, and returns i with its handlers'
// notifications recorded too.
func (c *notifyingCache) informer(ctx context.Context, i cache.Informer, what string, opts []cache.InformerGetOption) (cache.Informer, error) {
	c.track(i, syncNotice{informer: i, done: i.HasSyncedChecker()})
	var o cache.InformerGetOptions
	for _, opt := range opts {
		opt(&o)
	}
	block := o.BlockUntilSynced == nil || *o.BlockUntilSynced
	select {
	case <-c.started:
	default:
		block = false
	}
	if block && !toolscache.WaitFor(ctx, "", i.HasSyncedChecker()) {
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("failed waiting for %s Informer to sync", what), 0)
	}
	return &notifyingInformer{Informer: i, cache: c}, nil
}

func (c *notifyingCache) track(key any, n syncNotice) {
	c.mu.Lock()
	c.synced[key] = n
	c.mu.Unlock()
}

func (c *notifyingCache) forget(key any) {
	c.mu.Lock()
	delete(c.synced, key)
	c.mu.Unlock()
}

// notifyingInformer records the sync notification of every event handler
// added to it with its cache, until the handler is removed.
type notifyingInformer struct {
	cache.Informer
	cache *notifyingCache
}

func (i *notifyingInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandler(h))
}

func (i *notifyingInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandlerWithResyncPeriod(h, resync))
}

func (i *notifyingInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandlerWithOptions(h, opts))
}

func (i *notifyingInformer) RemoveEventHandler(reg toolscache.ResourceEventHandlerRegistration) error {
	i.cache.forget(reg)
	return i.Informer.RemoveEventHandler(reg)
}

func (i *notifyingInformer) tracked(reg toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		i.cache.track(reg, syncNotice{informer: i.Informer, done: reg.HasSyncedChecker()})
	}
	return reg, err
}
