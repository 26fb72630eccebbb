package clusterregistry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
)

var (
	// ErrAlreadyExist is returned by Spawn for a name that is already in the
	// registry, whatever its state (a failed cluster keeps its name until
	// Stop).
	ErrAlreadyExist = errors.New("controllers of cluster has already been started")

	// ErrNotExist is returned for a name that is not in the registry.
	ErrNotExist = errors.New("controllers of cluster doesn't exist")

	// ErrNotRunning is returned by WithClient and Cluster for a cluster that is in the
	// registry but starting, stopping or failed.
	ErrNotRunning = errors.New("controllers of cluster are not running")

	// ErrUnreachable wraps the error of a cluster whose API server did not
	// answer an authenticated request: at Spawn, or for longer than
	// Options.UnhealthyTimeout while running.
	ErrUnreachable = errors.New("cluster API server is unreachable")

	// ErrStopped is returned by a Spawn that a Stop of the same name ended
	// before it finished.
	ErrStopped = errors.New("controllers of cluster were stopped while starting")

	// ErrClosed is returned by Spawn once Close has been called.
	ErrClosed = errors.New("cluster registry is closed")
)

// Defaults of Options.
const (
	DefaultSpawnTimeout            = 30 * time.Second
	DefaultHealthCheckInterval     = 10 * time.Second
	DefaultUnhealthyTimeout        = time.Minute
	DefaultGracefulShutdownTimeout = 30 * time.Second
)

// Options configure a RemoteClusterRegistry. The zero value of every field
// but Logger and ManageClient is a sensible default.
type Options struct {
	// Logger is the registry's logger. Every cluster's app and manager log
	// through it with the key "cluster" set to the cluster's name.
	Logger logr.Logger

	// ManageClient is the management cluster's client, handed to modules as
	// the client.Client named "manage-client".
	ManageClient client.Client

	// Scheme is the scheme of every tenant manager. Defaults to client-go's
	// scheme with the built-in Kubernetes types.
	Scheme *runtime.Scheme

	// SpawnTimeout bounds a Spawn: reaching the API server, building the app,
	// starting the manager and syncing its caches. Defaults to 30s.
	SpawnTimeout time.Duration

	// HealthCheckInterval is how often the registry checks that each running
	// cluster's API server answers. Defaults to 10s; negative turns health
	// checks off.
	HealthCheckInterval time.Duration

	// UnhealthyTimeout is how long a running cluster's API server may fail
	// its health checks before the registry declares the cluster Failed and
	// tears its app down. Defaults to 1m.
	UnhealthyTimeout time.Duration

	// GracefulShutdownTimeout bounds how long a tenant manager waits for its
	// controllers to drain when it stops. Defaults to 30s.
	GracefulShutdownTimeout time.Duration

	// Fence, if set, is asked before every request a cluster's app sends:
	// its tenant client's, its manager's, and the writes of the
	// manage-client handed to its modules. A fenced request fails with the
	// Fence's error; the app is meant to be stopped soon after. Sharded
	// replicas fence each cluster on its Lease.
	Fence Fence

	// KeepManagedFields keeps server-side apply's managed fields on the
	// objects of the tenant managers' caches. By default they are dropped:
	// they are often most of a small object's memory, times every tenant.
	// An update of an object read from the cache still leaves them as the
	// API server has them.
	KeepManagedFields bool

	// EnableCompression lets the tenant API servers gzip their responses.
	// By default Tenantry asks for them uncompressed: an API server that
	// compresses does so for watch streams too, so that every open watch
	// holds a decompressor of about 40 KiB in the manager (at 16 watches
	// per tenant, most of an idle tenant's memory) and costs the server
	// and the manager CPU at every event. Set it for tenant API servers
	// behind a slow link, where bandwidth costs more than both.
	EnableCompression bool

	// CacheLimits bound what each cluster's manager holds in its cache,
	// unless a module of the cluster sets the cluster's own
	// (CacheMeter.SetLimits). A field left 0 takes DefaultCacheObjects or
	// DefaultCacheBytes; negative turns that limit off.
	CacheLimits CacheLimits

	// CacheBudget bounds the bytes every cluster's cache holds together,
	// their lists under way with them, counted as CacheLimits' bytes are:
	// past it, the cluster that holds the most is stopped as one past its
	// own limits (its error wrapping ErrCacheLimit says the budget was
	// spent), then the next, until the running clusters hold less. Many
	// clusters that grow at once are so stopped one after another while
	// the others run on. 0 or negative: none.
	CacheBudget int64
}

func (o *Options) setDefaults() {
	if o.Scheme == nil {
		o.Scheme = scheme.Scheme
	}
	if o.SpawnTimeout <= 0 {
		o.SpawnTimeout = DefaultSpawnTimeout
	}
	if o.HealthCheckInterval == 0 {
		o.HealthCheckInterval = DefaultHealthCheckInterval
	}
	if o.UnhealthyTimeout <= 0 {
		o.UnhealthyTimeout = DefaultUnhealthyTimeout
	}
	if o.GracefulShutdownTimeout <= 0 {
		o.GracefulShutdownTimeout = DefaultGracefulShutdownTimeout
	}
	o.CacheLimits = o.CacheLimits.over(CacheLimits{Objects: DefaultCacheObjects, Bytes: DefaultCacheBytes})
}

// RemoteClusterRegistry runs one dependency-injected controller-runtime
// manager per cluster. It is safe for concurrent use: Spawn, Stop and
// WithClient for any names may be called from any goroutines, no lock is held
// across network I/O or a WithClient callback, and one cluster's failure
// never affects another's.
type RemoteClusterRegistry struct {
	opts    Options
	modules []fx.Option
	// mappers are the built-in groups' REST mappings, by API server
	// version, that every cluster's manager shares.
	mappers builtinMappers
	// budget is Options.CacheBudget's, nil for none.
	budget *cacheBudget

	mu          sync.RWMutex
	closed      bool
	clusters    map[string]*cluster
	subscribers map[int]func(Status)
	nextSub     int
}

// New returns a registry whose clusters are built with the given fx modules
// and default Options. See NewWithOptions.
func New(logger logr.Logger, manageClient client.Client, modules ...fx.Option) *RemoteClusterRegistry {
	return NewWithOptions(Options{Logger: logger, ManageClient: manageClient}, modules...)
}

// NewWithOptions returns a registry whose clusters are built with the given
// fx modules. Each module is applied to every cluster's app; see the package
// documentation for what a module can ask for.
func NewWithOptions(opts Options, modules ...fx.Option) *RemoteClusterRegistry {
	opts.setDefaults()
	r := &RemoteClusterRegistry{
		opts:        opts,
		modules:     slices.Clone(modules),
		clusters:    map[string]*cluster{},
		subscribers: map[int]func(Status){},
	}
	if opts.CacheBudget > 0 {
		r.budget = newCacheBudget(opts.CacheBudget)
	}
	return r
}

// Spawn builds and starts the app of the named cluster from config, which it
// copies and never changes. It returns once the cluster's API server has
// answered, every module's constructors and invokes have run, and the
// manager's caches (including those of the controllers registered by then)
// have synced. On any error, nothing of the cluster is left running and the
// name is free again.
//
// Spawn fails with ErrAlreadyExist if the name is in the registry, with
// ErrUnreachable if the API server does not answer within
// Options.SpawnTimeout, and with ErrStopped if Stop is called meanwhile.
func (r *RemoteClusterRegistry) Spawn(name string, config *rest.Config) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("invalid cluster name %q: %s", name, strings.Join(errs, "; "))
	}
	if config == nil {
		return fmt.Errorf("cluster %q: rest.Config is nil", name)
	}
	began := time.Now()

	c := newCluster(name, r.opts.Logger.WithValues("cluster", name))
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return fmt.Errorf("cluster %q: %w", name, ErrClosed)
	}
	if _, ok := r.clusters[name]; ok {
		r.mu.Unlock()
		return fmt.Errorf("cluster %q: %w", name, ErrAlreadyExist)
	}
	r.clusters[name] = c
	change := r.setStateLocked(c, StateStarting, nil)
	r.mu.Unlock()
	r.notify(change)
	c.log.V(1).Info("spawning cluster", "host", config.Host)

	t, err := r.startTenant(c, config)
	spawnDuration.WithLabelValues(result(err)).Observe(time.Since(began).Seconds())
	if err != nil {
		c.log.Error(err, "cluster did not start")
		close(c.done)
		r.remove(c)
		return err
	}

	r.mu.Lock()
	c.tenant = t
	if c.status.State == StateStarting { // not Stopping: a Stop came in meanwhile
		change = r.setStateLocked(c, StateRunning, nil)
	}
	r.mu.Unlock()
	r.notify(change)
	c.log.Info("cluster started", "duration", time.Since(began).String())

	go r.supervise(c, t)
	return nil
}

// Stop stops the named cluster's app through its fx lifecycle: the manager's
// context is canceled, its controllers drain (up to
// Options.GracefulShutdownTimeout), its caches stop and its connections close.
// When Stop returns nil, no goroutine of the cluster is left and the name is
// free. If ctx ends first, Stop returns ctx's error and the teardown goes on.
//
// Stop of a cluster that is still starting makes that Spawn fail with
// ErrStopped; Stop of a failed cluster frees its name. Stop of a name that is
// not in the registry returns ErrNotExist.
func (r *RemoteClusterRegistry) Stop(ctx context.Context, name string) error {
	began := time.Now()
	r.mu.Lock()
	c, ok := r.clusters[name]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("cluster %q: %w", name, ErrNotExist)
	}
	var change *Status
	if c.stopCtx == nil {
		c.stopCtx = ctx
		c.cancelStop()
		if c.status.State != StateFailed {
			change = r.setStateLocked(c, StateStopping, nil)
		}
	}
	r.mu.Unlock()
	r.notify(change)

	select {
	case <-c.done:
	case <-ctx.Done():
		err := fmt.Errorf("cluster %q: waiting for it to stop: %w", name, context.Cause(ctx))
		stopDuration.WithLabelValues(result(err)).Observe(time.Since(began).Seconds())
		return err
	}
	r.remove(c) // a failed cluster's supervisor has left it to us
	r.mu.RLock()
	err := c.stopErr
	r.mu.RUnlock()
	stopDuration.WithLabelValues(result(err)).Observe(time.Since(began).Seconds())
	return err
}

// Close stops every cluster in parallel, as Stop does, and makes every later
// Spawn fail with ErrClosed. Call it when the process shuts down. It returns
// the errors of the Stops that failed, and ctx's error if it ends first.
func (r *RemoteClusterRegistry) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	names := make([]string, 0, len(r.clusters))
	for name := range r.clusters {
		names = append(names, name)
	}
	r.mu.Unlock()

	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			if err := r.Stop(ctx, name); !errors.Is(err, ErrNotExist) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WithClient runs f with the named cluster's client, the same one its modules
// get: reads come from the manager's cache, writes go to the API server.
// It returns ErrNotExist for an unknown name, ErrNotRunning for a cluster
// that is not running, and otherwise what f returns. No registry lock is
// held while f runs.
func (r *RemoteClusterRegistry) WithClient(name string, f func(c client.Client) error) error {
	t, err := r.running(name)
	if err != nil {
		return err
	}
	return f(t.client)
}

// running is the named cluster's running app, or ErrNotExist or
// ErrNotRunning.
func (r *RemoteClusterRegistry) running(name string) (*tenant, error) {
	r.mu.RLock()
	c, ok := r.clusters[name]
	var (
		t     *tenant
		state State
	)
	if ok {
		t, state = c.tenant, c.status.State
	}
	r.mu.RUnlock()
	switch {
	case !ok:
		return nil, fmt.Errorf("cluster %q: %w", name, ErrNotExist)
	case state != StateRunning || t == nil:
		return nil, fmt.Errorf("cluster %q is %s: %w", name, state, ErrNotRunning)
	}
	return t, nil
}

// Cluster returns the named running cluster as a controller-runtime
// cluster.Cluster, for code outside its app that speaks that interface
// (a multicluster-runtime provider, say): its client, cache, field
// indexer, API reader, REST mapper, event recorders and config are the
// ones the app's modules use, so it adds no cache and no connection. It
// is one value for as long as the app runs, and a new one after a
// re-spawn; once the app stops, its cache and client stop with it. Its
// Start returns an error: the registry runs the app. Cluster returns
// ErrNotExist for an unknown name and ErrNotRunning for a cluster that is
// not running.
func (r *RemoteClusterRegistry) Cluster(name string) (ctrlcluster.Cluster, error) {
	t, err := r.running(name)
	if err != nil {
		return nil, err
	}
	return t.cluster, nil
}

// Forget drops what the registry keeps of a cluster gone for good (its
// VirtualCluster deleted) beyond its app: the series of its failures
// and cache-limit metrics. A cluster that runs keeps them.
func (r *RemoteClusterRegistry) Forget(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.clusters[name]; ok {
		return
	}
	clusterFailures.DeleteLabelValues(name)
	cacheLimitExceeded.DeleteLabelValues(name)
}

// Status reports the named cluster's state, or ErrNotExist.
func (r *RemoteClusterRegistry) Status(name string) (Status, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, ok := r.clusters[name]
	if !ok {
		return Status{}, fmt.Errorf("cluster %q: %w", name, ErrNotExist)
	}
	return c.status, nil
}

// List reports every cluster in the registry, sorted by name.
func (r *RemoteClusterRegistry) List() []Status {
	r.mu.RLock()
	list := make([]Status, 0, len(r.clusters))
	for _, c := range r.clusters {
		list = append(list, c.status)
	}
	r.mu.RUnlock()
	slices.SortFunc(list, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return list
}

// Subscribe calls f with a cluster's new Status whenever its state changes,
// and with State Stopped when it leaves the registry. f is called with no
// lock held, from the goroutine that made the change; it must return quickly
// (hand the event to a channel or a work queue) and must not block on the
// registry. The returned function ends the subscription.
func (r *RemoteClusterRegistry) Subscribe(f func(Status)) (cancel func()) {
	r.mu.Lock()
	id := r.nextSub
	r.nextSub++
	r.subscribers[id] = f
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.subscribers, id)
		r.mu.Unlock()
	}
}

// setStateLocked moves c to state, keeps the metrics in step, and returns
// the change to hand to notify once the lock is released.
func (r *RemoteClusterRegistry) setStateLocked(c *cluster, state State, err error) *Status {
	recordTransition(c.name, c.status.State, state)
	c.status = Status{Name: c.name, State: state, Err: err, Since: time.Now()}
	s := c.status
	return &s
}

// remove takes c out of the registry, if it is still the entry for its name.
func (r *RemoteClusterRegistry) remove(c *cluster) {
	r.mu.Lock()
	if r.clusters[c.name] != c {
		r.mu.Unlock()
		return
	}
	delete(r.clusters, c.name)
	c.cancelStop()
	recordTransition(c.name, c.status.State, "")
	c.status = Status{Name: c.name, State: StateStopped, Since: time.Now()}
	change := c.status
	r.mu.Unlock()
	r.notify(&change)
}

func (r *RemoteClusterRegistry) notify(change *Status) {
	if change == nil {
		return
	}
	r.mu.RLock()
	subs := make([]func(Status), 0, len(r.subscribers))
	for _, f := range r.subscribers {
		subs = append(subs, f)
	}
	r.mu.RUnlock()
	for _, f := range subs {
		f(*change)
	}
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}

// UserAgentProduct marks the user agent of Tenantry's requests to tenant
// clusters: UserAgent.
const UserAgentProduct = "tenantry-cluster"

// UserAgent is the user agent of Tenantry's requests to cluster: client-go's,
// and UserAgentProduct/cluster. A tenant cluster's app sends it unless its
// config says otherwise, and so do the manager's other clients of
// tenants, so that a tenant's API server can tell Tenantry's requests from
// people's (spec.sleep.afterInactivity).
func UserAgent(cluster string) string {
	return rest.DefaultKubernetesUserAgent() + " " + UserAgentProduct + "/" + cluster
}
