package clusterregistry

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Watcher is what Watch adds a source to: a host-side controller
// (controller.Controller, as builder.Build returns it).
type Watcher interface {
	Watch(src source.TypedSource[reconcile.Request]) error
}

// WatchInput is a watch of one cluster's objects of a kind, for a
// host-side controller.
type WatchInput struct {
	// Name tells the cluster's watches apart: while the cluster runs, a
	// Watch of a name it has is a no-op.
	Name string
	// Watcher is the controller that gets the requests.
	Watcher Watcher
	// Kind is the type of object watched, in the cluster's cache.
	Kind client.Object
	// Handler maps the cluster's object events to the controller's
	// requests (typically handler.EnqueueRequestsFromMapFunc, to a host
	// object).
	Handler handler.TypedEventHandler[client.Object, reconcile.Request]
	// Predicates filter the events.
	Predicates []predicate.TypedPredicate[client.Object]
}

// ErrWatchInput is returned by Watch for an input without a name,
// watcher, kind or handler.
var ErrWatchInput = errors.New("a watch needs a name, a watcher, a kind and a handler")

// Watch makes the named cluster's events of in.Kind, read from the
// cluster's own cache, requests of in.Watcher, a host-side controller,
// as Cluster API's ClusterCache.Watch does, and returns once the watch has
// synced (within ctx and Options.SpawnTimeout; a watch that does not sync,
// of a kind the cluster does not serve for one, is given up and its error
// returned). It lasts as long as the cluster's app: a cluster re-spawned
// has none, so a host-side reconciler calls Watch from its Reconcile,
// while its controller runs (a name the cluster has is a no-op), and
// watches StateChanges to be called again once the cluster runs. It
// returns ErrNotExist or ErrNotRunning for a cluster that does not run.
//
// The watch adds an informer to the cluster's cache, if it has none of
// the kind: its objects count against the cluster's CacheLimits. Handler
// runs on the informer's goroutine, as every handler of a cluster's
// cache does: it must return quickly, and not read the cluster's cache.
func (r *RemoteClusterRegistry) Watch(ctx context.Context, cluster string, in WatchInput) error {
	if in.Name == "" || in.Watcher == nil || in.Kind == nil || in.Handler == nil {
		return fmt.Errorf("cluster %q: %w", cluster, ErrWatchInput)
	}
	r.mu.Lock()
	c, ok := r.clusters[cluster]
	switch {
	case !ok:
		r.mu.Unlock()
		return fmt.Errorf("cluster %q: %w", cluster, ErrNotExist)
	case c.status.State != StateRunning || c.tenant == nil:
		r.mu.Unlock()
		return fmt.Errorf("cluster %q is %s: %w", cluster, c.status.State, ErrNotRunning)
	case c.watches[in.Name]:
		r.mu.Unlock()
		return nil
	}
	if c.watches == nil {
		c.watches = map[string]bool{}
	}
	c.watches[in.Name] = true
	t := c.tenant
	r.mu.Unlock()

	src := &tenantSource{
		kind: source.TypedKind(t.cache, in.Kind, in.Handler, in.Predicates...),
		down: t.down,
		name: fmt.Sprintf("%s of cluster %s", in.Name, cluster),
	}
	err := in.Watcher.Watch(src)
	if err == nil {
		syncCtx, cancel := context.WithTimeout(ctx, r.opts.SpawnTimeout)
		err = src.WaitForSync(syncCtx)
		cancel()
	}
	if err != nil {
		src.stop()
		r.mu.Lock()
		delete(c.watches, in.Name)
		r.mu.Unlock()
		return fmt.Errorf("cluster %q: watching %s: %w", cluster, in.Name, err)
	}
	return nil
}

// tenantSource is a source on a cluster's cache that ends with the
// cluster's app, with its controller, or when given up (stop).
type tenantSource struct {
	kind source.TypedSyncingSource[reconcile.Request]
	down <-chan struct{}
	name string

	mu     sync.Mutex
	cancel context.CancelFunc
}

func (s *tenantSource) Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	ctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()
	go func() {
		defer cancel()
		select {
		case <-s.down:
		case <-ctx.Done():
		}
	}()
	return s.kind.Start(ctx, queue)
}

// stop gives the source up.
func (s *tenantSource) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		s.cancel()
	}
}

// WaitForSync implements source.TypedSyncingSource.
func (s *tenantSource) WaitForSync(ctx context.Context) error { return s.kind.WaitForSync(ctx) }

func (s *tenantSource) String() string { return s.name }
