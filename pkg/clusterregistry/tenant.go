package clusterregistry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tenantry/tenantry/internal/dedup"
	"github.com/tenantry/tenantry/pkg/fxlogr"
)

// The names under which a cluster's app provides its named values.
const (
	manageClientName = "manage-client"
	clusterNameKey   = "cluster-name"
)

// The fx tags that ask for a cluster's named values, for fx.ParamTags and
// fx.ResultTags. A struct field's tag cannot name a constant: embed Tenant
// instead.
const (
	// ManageClientTag asks for the management cluster's client.Client.
	ManageClientTag = `name:"` + manageClientName + `"`
	// ClusterNameTag asks for the cluster's name, a string.
	ClusterNameTag = `name:"` + clusterNameKey + `"`
)

// Tenant is everything a cluster's app provides to its modules, with the
// tags spelled once: take it as the parameter of a constructor or an
// fx.Invoke, or embed it in a parameter struct of your own (an fx.In struct
// may embed another).
type Tenant struct {
	fx.In

	// Manager is the cluster's manager.
	Manager manager.Manager
	// Client is the cluster's client (cached reads, direct writes).
	Client client.Client
	// ManageClient is the management cluster's client given to the
	// registry.
	ManageClient client.Client `name:"manage-client"`
	// ClusterName is the name given to Spawn.
	ClusterName string `name:"cluster-name"`
	// Config is the cluster's config (a copy).
	Config *rest.Config
	// Logger is the registry's logger with the key "cluster" set.
	Logger logr.Logger
	// CacheMeter counts what the cluster's cache holds, against its
	// limits.
	CacheMeter *CacheMeter
}

const (
	// probeTimeout bounds one health check of a cluster's API server.
	probeTimeout = 5 * time.Second
	// dialTimeout bounds opening a connection, as client-go's default does.
	dialTimeout = 30 * time.Second
)

// tenant is one cluster's running app.
type tenant struct {
	app        *fx.App
	client     client.Client
	httpClient *http.Client // every request to the cluster, through dialer
	probe      func(context.Context) error
	dialer     *dialer
	meter      *CacheMeter
	cache      cache.Cache // the manager's, for Watch
	cluster    *appCluster // the manager, for Cluster

	// down is closed once the app is torn down.
	down     chan struct{}
	downOnce sync.Once

	// run is the manager's context; exited is closed, with exitErr set,
	// once its Start returned.
	cancelRun context.CancelFunc
	exited    chan struct{}
	exitErr   error
}

// startTenant reaches the cluster, builds its app and starts it, all within
// Options.SpawnTimeout and until c is stopped. On error nothing is left
// running.
func (r *RemoteClusterRegistry) startTenant(c *cluster, config *rest.Config) (_ *tenant, retErr error) {
	ctx, cancel := context.WithTimeout(c.ctx, r.opts.SpawnTimeout)
	defer cancel()
	defer func() {
		if retErr != nil && c.ctx.Err() != nil {
			retErr = fmt.Errorf("cluster %q: %w (%w)", c.name, ErrStopped, retErr)
		}
	}()

	cfg := rest.CopyConfig(config)
	if cfg.UserAgent == "" {
		cfg.UserAgent = UserAgent(c.name)
	}
	if !r.opts.EnableCompression {
		cfg.DisableCompression = true
	}
	manageClient := r.opts.ManageClient
	if r.opts.Fence != nil {
		fence(cfg, c.name, r.opts.Fence)
		if manageClient != nil {
			manageClient = fenceClient(manageClient, c.name, r.opts.Fence)
		}
	}
	// A dialer of the cluster's own: its connections are closed when the
	// cluster stops, so no idle connection (and no goroutine serving one)
	// outlives it, and no transport is shared with another cluster.
	t := &tenant{
		dialer: newDialer(cfg.Dial),
		meter:  newCacheMeter(c.name, r.opts.CacheLimits),
		exited: make(chan struct{}),
		down:   make(chan struct{}),
	}
	r.budget.join(t.meter)
	cfg.Dial = t.dialer.DialContext
	cfg.Wrap(t.meter.capAnswers)
	defer func() {
		if retErr != nil {
			t.dialer.Close()
			t.meter.forget()
		}
	}()

	// One HTTP client, so one connection (and one TLS handshake) per
	// cluster: a first check through it, before anything is built, then
	// the health checks, and the manager's cache, client, API reader and
	// REST mapper (newManager).
	var err error
	if t.httpClient, err = rest.HTTPClientFor(cfg); err != nil {
		return nil, fmt.Errorf("cluster %q: building HTTP client: %w", c.name, err)
	}
	if t.probe, err = newProbe(cfg, t.httpClient); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.name, err)
	}
	if err := t.probe(ctx); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.name, err)
	}

	t.app = fx.New(
		fxlogr.WithLogger(c.log),
		fx.RecoverFromPanics(),
		fx.StartTimeout(r.opts.SpawnTimeout),
		fx.StopTimeout(r.opts.GracefulShutdownTimeout+5*time.Second),
		fx.Supply(
			fx.Annotated{Name: clusterNameKey, Target: c.name},
			c.log,
			t.meter,
		),
		fx.Provide(
			func() *rest.Config { return rest.CopyConfig(cfg) },
			fx.Annotate(func() client.Client { return manageClient }, fx.ResultTags(ManageClientTag)),
			func(lc fx.Lifecycle, cfg *rest.Config, log logr.Logger) (manager.Manager, error) {
				return r.newManager(lc, t, cfg, log)
			},
			func(m manager.Manager) client.Client { return m.GetClient() },
		),
		fx.Options(r.modules...),
		fx.Populate(&t.client), // builds the manager even if no module asks for it
	)
	if err := t.app.Err(); err != nil {
		return nil, fmt.Errorf("cluster %q: building app: %w", c.name, err)
	}
	if err := t.app.Start(ctx); err != nil {
		return nil, fmt.Errorf("cluster %q: starting app: %w", c.name, err)
	}
	return t, nil
}

// newManager builds the cluster's controller-runtime manager and hooks its
// start and stop into the app's lifecycle.
func (r *RemoteClusterRegistry) newManager(lc fx.Lifecycle, t *tenant, cfg *rest.Config, log logr.Logger) (manager.Manager, error) {
	var strip toolscache.TransformFunc
	if !r.opts.KeepManagedFields {
		strip = cache.TransformStripManagedFields()
	}
	// A ConfigMap's or Secret's data shares its memory with its copies.
	cacheOpts := cache.Options{DefaultTransform: dedup.After(strip)}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                 r.opts.Scheme,
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		WebhookServer:          noWebhookServer{},
		// Waits for sync are notified, not polled: see notifyingCache.
		// The cache, the client and the REST mapper share the cluster's
		// one HTTP client (manager.Options has no field for it).
		NewCache: func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
			opts.HTTPClient = t.httpClient
			opts.NewInformer = t.meter.newInformer
			return newNotifyingCache(cfg, opts)
		},
		NewClient: func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			opts.HTTPClient = t.httpClient
			return client.New(cfg, opts)
		},
		// Built-in groups are discovered once per API server version.
		MapperProvider: func(cfg *rest.Config, _ *http.Client) (meta.RESTMapper, error) {
			return r.mappers.mapperFor(r.opts.SpawnTimeout)(cfg, t.httpClient)
		},
		Cache:                   cacheOpts,
		GracefulShutdownTimeout: ptr.To(r.opts.GracefulShutdownTimeout),
		Controller: ctrlconfig.Controller{
			// Every cluster runs the same modules, so the same controller
			// names: controller-runtime's process-wide uniqueness check would
			// refuse the second cluster.
			SkipNameValidation: ptr.To(true),
			// Warm-up starts each controller's sources before its workers,
			// which lets Spawn wait until they have synced.
			EnableWarmup:     ptr.To(true),
			CacheSyncTimeout: r.opts.SpawnTimeout,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("building manager: %w", err)
	}
	// controller-runtime builds its API reader on an HTTP client of its own.
	apiReader, err := client.New(cfg, client.Options{HTTPClient: t.httpClient, Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("building the API reader: %w", err)
	}
	tracked := &tenantManager{Manager: mgr, httpClient: t.httpClient, apiReader: apiReader}
	t.cache = mgr.GetCache()
	t.cluster = &appCluster{Cluster: tracked}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error { return t.startManager(ctx, tracked) },
		OnStop:  func(ctx context.Context) error { return t.stopManager(ctx) },
	})
	return tracked, nil
}

// startManager starts mgr and waits until it is ready, it fails, or ctx ends.
func (t *tenant) startManager(ctx context.Context, mgr *tenantManager) error {
	runCtx, cancel := context.WithCancel(context.Background())
	t.cancelRun = cancel
	go func() {
		defer close(t.exited)
		t.exitErr = mgr.Start(runCtx)
	}()

	readyCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	ready := make(chan error, 1)
	go func() { ready <- mgr.waitReady(readyCtx) }()
	select {
	case err := <-ready:
		if err == nil {
			return nil
		}
		cancel()
		<-t.exited
		return fmt.Errorf("waiting for caches to sync: %w", errors.Join(err, t.exitErr))
	case <-t.meter.Exceeded():
		cancel()
		stopWaiting()
		<-ready
		<-t.exited
		return t.meter.Err()
	case <-t.exited:
		cancel()
		stopWaiting()
		<-ready
		if t.exitErr == nil {
			return errors.New("manager exited while starting")
		}
		return fmt.Errorf("manager exited while starting: %w", t.exitErr)
	}
}

// stopManager cancels the manager and waits, until ctx ends, for it to
// drain its controllers and stop its caches.
func (t *tenant) stopManager(ctx context.Context) error {
	t.cancelRun()
	select {
	case <-t.exited:
		if t.exitErr != nil && !errors.Is(t.exitErr, context.Canceled) {
			return fmt.Errorf("manager stopped with an error: %w", t.exitErr)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("manager did not stop in time: %w", ctx.Err())
	}
}

// stop tears the app down and closes the cluster's connections.
func (t *tenant) stop(ctx context.Context) error {
	defer t.downOnce.Do(func() { close(t.down) })
	err := t.app.Stop(ctx)
	t.dialer.Close()
	t.meter.forget()
	if t.meter.Err() != nil {
		// It held more than it may: what it held goes back to the
		// system now, not when the heap next grows as large.
		debug.FreeOSMemory()
	}
	if err != nil {
		return fmt.Errorf("stopping app: %w", err)
	}
	return nil
}

// newProbe returns a health check of the API server behind cfg, through
// httpClient: an authenticated discovery request (GET /api), so that it
// fails on a stopped server, a cut network and rejected credentials alike.
// It waits for no client-side rate limiter.
func newProbe(cfg *rest.Config, httpClient *http.Client) (func(context.Context) error, error) {
	pcfg := rest.CopyConfig(cfg)
	pcfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(pcfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building health check client: %w", err)
	}
	host := cfg.Host
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		if err := dc.RESTClient().Get().AbsPath("/api").Do(ctx).Error(); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrUnreachable, host, err)
		}
		return nil
	}, nil
}
