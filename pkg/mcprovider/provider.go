package mcprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

var (
	_ multicluster.Provider         = &Provider{}
	_ multicluster.ProviderRunnable = &Provider{}
)

// errStarted is what a second Start returns.
var errStarted = errors.New("the provider was started already: it engages its clusters with one Aware")

// Provider is a multicluster-runtime provider of the clusters that a
// Tenantry registry runs. A cluster's name is the name given to the
// registry's Spawn (a VirtualCluster's name, in Tenantry's manager), and
// the cluster.Cluster it hands out is the one the registry's app for it
// holds (see clusterregistry.RemoteClusterRegistry.Cluster): its cache,
// client and connection, with the registry's cache limits and fencing.
//
// Start engages every cluster that runs (spawned, its caches synced)
// and, for as long as it runs, each that runs later. An engagement's
// context is canceled when its cluster stops, fails or is re-spawned;
// a re-spawned cluster is then engaged again as its new app. An Engage
// that returns an error is retried with backoff, with the same cluster,
// while it runs.
//
// A Provider is safe for concurrent use. It is started once.
type Provider struct {
	registry *clusterregistry.RemoteClusterRegistry
	started  atomic.Bool

	// mu guards engaged.
	mu sync.Mutex
	// engaged is every cluster engaged, by name.
	engaged map[string]*engagement

	// indexMu guards indexes and indexed, and is held while an index is
	// added to a cluster, so that each cluster gets each index once, in
	// order.
	indexMu sync.Mutex
	indexes []index
	// indexed is how many of indexes each running cluster has, by name.
	indexed map[string]indexedCluster
}

// engagement is a cluster engaged with the Aware given to Start.
type engagement struct {
	cluster cluster.Cluster
	cancel  context.CancelFunc
}

// index is one call of IndexField.
type index struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

// kind names the index's object: its Go type, and its kind where it says
// one (an unstructured object).
func (ix index) kind() string {
	if gvk := ix.obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
		return fmt.Sprintf("%T %s", ix.obj, gvk)
	}
	return fmt.Sprintf("%T", ix.obj)
}

// sameAs says whether o indexes the same field of the same kind: a cache
// refuses the second.
func (ix index) sameAs(o index) bool { return ix.field == o.field && ix.kind() == o.kind() }

// errIndexed is what IndexField returns for a field indexed already.
var errIndexed = errors.New("the field is indexed already")

// indexedCluster is a running cluster and how many indexes it has.
type indexedCluster struct {
	cluster cluster.Cluster
	applied int
}

// New returns a Provider of the clusters that registry runs.
func New(registry *clusterregistry.RemoteClusterRegistry) *Provider {
	return &Provider{
		registry: registry,
		engaged:  map[string]*engagement{},
		indexed:  map[string]indexedCluster{},
	}
}

// Get returns the named cluster if it runs, and otherwise an error that
// wraps multicluster.ErrClusterNotFound (and the registry's
// clusterregistry.ErrNotExist or ErrNotRunning). A cluster that runs is
// found whether Start has engaged it yet or not.
func (p *Provider) Get(_ context.Context, clusterName multicluster.ClusterName) (cluster.Cluster, error) {
	cl, err := p.registry.Cluster(clusterName.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", multicluster.ErrClusterNotFound, err)
	}
	return cl, nil
}

// IndexField adds the index to every cluster that runs now, and to each
// that runs later before it is engaged. A field indexed already for the
// object's type is refused at once. Otherwise the error joins those of
// the running clusters that refused it (a kind a cluster does not serve,
// say); a cluster that refuses an index is not engaged until it takes
// it.
func (p *Provider) IndexField(ctx context.Context, obj client.Object, field string, extractValue client.IndexerFunc) error {
	p.indexMu.Lock()
	defer p.indexMu.Unlock()
	ix := index{obj: obj, field: field, extract: extractValue}
	if slices.ContainsFunc(p.indexes, ix.sameAs) {
		return fmt.Errorf("indexing %s by %q: %w", ix.kind(), field, errIndexed)
	}
	p.indexes = append(p.indexes, ix)

	running := map[string]bool{}
	var errs []error
	for _, s := range p.registry.List() {
		if s.State != clusterregistry.StateRunning {
			continue
		}
		running[s.Name] = true
		cl, err := p.registry.Cluster(s.Name)
		if err != nil {
			continue // no longer running: it takes the index when it runs again
		}
		if err := p.indexLocked(ctx, s.Name, cl); !errors.Is(err, errStaleApp) {
			errs = append(errs, err)
		}
	}
	for name := range p.indexed {
		if !running[name] {
			delete(p.indexed, name)
		}
	}
	return errors.Join(errs...)
}

// index gives cl every index it does not have yet. It returns
// errStaleApp if cl is no longer the named cluster's running app.
func (p *Provider) index(ctx context.Context, name string, cl cluster.Cluster) error {
	p.indexMu.Lock()
	defer p.indexMu.Unlock()
	return p.indexLocked(ctx, name, cl)
}

// errStaleApp is index's answer for an app that no longer runs: the
// change that stopped it queues its name again.
var errStaleApp = errors.New("the cluster's app no longer runs")

// indexTimeout bounds adding the indexes to one cluster: a kind new to
// its cache asks its API server for the kind's mapping.
const indexTimeout = 30 * time.Second

func (p *Provider) indexLocked(ctx context.Context, name string, cl cluster.Cluster) error {
	// Only the current app's count is kept: a late call for an app that
	// stopped must not reset its successor's.
	current, err := p.registry.Cluster(name)
	if err != nil || current != cl {
		if ic, ok := p.indexed[name]; ok && ic.cluster != current {
			delete(p.indexed, name) // the count of an app gone
		}
		return errStaleApp
	}
	ic := p.indexed[name]
	if ic.cluster != cl {
		ic = indexedCluster{cluster: cl} // new, or re-spawned: a new cache
	}
	defer func() { p.indexed[name] = ic }()
	ctx, cancel := context.WithTimeout(ctx, indexTimeout)
	defer cancel()
	for ; ic.applied < len(p.indexes); ic.applied++ {
		ix := p.indexes[ic.applied]
		if err := cl.GetFieldIndexer().IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			return fmt.Errorf("cluster %q: indexing %s by %q: %w", name, ix.kind(), ix.field, err)
		}
	}
	return nil
}

// forgetIndexed drops the named cluster's count of indexes, which holds
// its app, once the app no longer runs.
func (p *Provider) forgetIndexed(name string) {
	p.indexMu.Lock()
	defer p.indexMu.Unlock()
	if _, err := p.registry.Cluster(name); err != nil {
		delete(p.indexed, name)
	}
}

// Start engages every running cluster with aware, and keeps the
// engagements in step with the registry, until ctx ends; then it cancels
// every engagement and returns nil. It blocks. It logs, with the key
// "cluster", through the logger in ctx (logr.FromContext), else aware's
// GetLogger (a multicluster-runtime manager's). A second call returns an
// error.
func (p *Provider) Start(ctx context.Context, aware multicluster.Aware) error {
	if !p.started.CompareAndSwap(false, true) {
		return errStarted
	}
	logger := loggerFor(ctx, aware).WithName("mcprovider")
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	unsubscribe := p.registry.Subscribe(func(s clusterregistry.Status) { queue.Add(s.Name) })
	// After subscribing: a change between the two is seen twice at worst.
	for _, s := range p.registry.List() {
		queue.Add(s.Name)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		queue.ShutDown()
	}()

	for p.next(ctx, logger, queue, aware) {
	}
	unsubscribe()
	<-stopped
	p.mu.Lock()
	for name, e := range p.engaged {
		e.cancel()
		delete(p.engaged, name)
		engagedClusters.Dec()
	}
	p.mu.Unlock()
	p.indexMu.Lock()
	clear(p.indexed)
	p.indexMu.Unlock()
	logger.Info("stopped: every cluster disengaged")
	return nil
}

// loggerFor is the logger in ctx, else aware's (multicluster-runtime's
// manager hands its runnables a context without one), else
// controller-runtime's.
func loggerFor(ctx context.Context, aware multicluster.Aware) logr.Logger {
	if l, err := logr.FromContext(ctx); err == nil {
		return l
	}
	if a, ok := aware.(interface{ GetLogger() logr.Logger }); ok {
		return a.GetLogger()
	}
	return log.Log
}

// next brings one cluster's engagement in step; false once the queue is
// shut down.
func (p *Provider) next(ctx context.Context, logger logr.Logger, queue workqueue.TypedRateLimitingInterface[string], aware multicluster.Aware) bool {
	name, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(name)
	if err := p.sync(ctx, logger.WithValues("cluster", name), name, aware); err != nil {
		engageFailures.Inc()
		logger.Error(err, "engaging a cluster; retrying", "cluster", name)
		queue.AddRateLimited(name)
		return true
	}
	queue.Forget(name)
	return true
}

// sync engages the named cluster's running app, if it is not engaged yet,
// and disengages an app that no longer runs. It reads the registry's
// current state, not the change that queued the name, so a late change
// never undoes a newer one.
func (p *Provider) sync(ctx context.Context, logger logr.Logger, name string, aware multicluster.Aware) error {
	if ctx.Err() != nil {
		return nil // stopping: Start disengages everything
	}
	cl, err := p.registry.Cluster(name)
	if err != nil && !errors.Is(err, clusterregistry.ErrNotExist) && !errors.Is(err, clusterregistry.ErrNotRunning) {
		return err
	}
	p.mu.Lock()
	old := p.engaged[name]
	if old != nil && (cl == nil || old.cluster != cl) {
		old.cancel()
		delete(p.engaged, name)
		engagedClusters.Dec()
		logger.Info("cluster disengaged")
	}
	p.mu.Unlock()
	if cl == nil {
		p.forgetIndexed(name)
		return nil
	}
	if old != nil && old.cluster == cl {
		return nil
	}

	switch err := p.index(ctx, name, cl); {
	case errors.Is(err, errStaleApp):
		return nil // stopped meanwhile: its name is queued again
	case err != nil:
		return err
	}
	engageCtx, cancel := context.WithCancel(ctx)
	if err := aware.Engage(engageCtx, multicluster.ClusterName(name), cl); err != nil {
		cancel()
		return fmt.Errorf("cluster %q: engaging: %w", name, err)
	}
	p.mu.Lock()
	p.engaged[name] = &engagement{cluster: cl, cancel: cancel}
	engagedClusters.Inc()
	p.mu.Unlock()
	logger.Info("cluster engaged")
	return nil
}
