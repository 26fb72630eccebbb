package ondemand

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/util/workqueue"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Options configure a Controller.
type Options struct {
	// Name names the controller in its metrics: controller-runtime's
	// controller_runtime_reconcile_* series, under the label controller.
	Name string
	// Workers is the most reconciles that run at once. Defaults to 1.
	Workers int
	// RateLimiter spaces the retries of a failed reconcile. Defaults to
	// controller-runtime's default.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// Logger is put in each reconcile's context. Defaults to the
	// context's logger.
	Logger func(req reconcile.Request) logr.Logger
	// CacheSyncTimeout bounds the wait for a source to sync. Defaults to
	// two minutes.
	CacheSyncTimeout time.Duration
}

// Controller runs a reconciler for the requests its sources queue, as a
// controller-runtime controller does (the same handling of results,
// errors and panics, the same metrics), with workers on demand. A Group
// runs it: its sources start when the group warms up, or starts, and its
// workers once the group starts.
type Controller struct {
	opts       Options
	reconciler reconcile.Reconciler
	queue      *queue
	metrics    *controllerMetrics

	// ctx is the running group's: each reconcile's context derives from
	// it.
	ctx context.Context

	mu      sync.Mutex
	sources []source.TypedSource[reconcile.Request]
	started bool // the sources
	synced  bool // the sources that sync
	err     error
}

// New makes a Controller of r. Give it its sources with Watch.
func New(opts Options, r reconcile.Reconciler) *Controller {
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.RateLimiter == nil {
		opts.RateLimiter = workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]()
	}
	if opts.CacheSyncTimeout <= 0 {
		opts.CacheSyncTimeout = 2 * time.Minute
	}
	c := &Controller{opts: opts, reconciler: r, metrics: metricsFor(opts.Name)}
	c.queue = newQueue(opts.RateLimiter, opts.Workers, c.reconcile)
	return c
}

// Watch adds a source of requests. It must be called before the
// controller starts.
func (c *Controller) Watch(src source.TypedSource[reconcile.Request]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return fmt.Errorf("controller %s: a source added after it started", c.opts.Name)
	}
	c.sources = append(c.sources, src)
	return nil
}

// run starts the sources if warm-up did not, and lets workers start,
// with reconciles under ctx; it does not wait for ctx to end.
func (c *Controller) run(ctx context.Context) error {
	if err := c.startSources(ctx); err != nil {
		return err
	}
	c.work(ctx)
	return nil
}

// work lets workers start, once the sources have synced, with reconciles
// under ctx.
func (c *Controller) work(ctx context.Context) {
	c.metrics.workers.Set(float64(c.opts.Workers))
	c.ctx = ctx // before the workers, its only readers, start
	c.queue.start()
}

// startSources starts every source, once, and waits for those that sync.
func (c *Controller) startSources(ctx context.Context) error {
	if err := c.startWatches(ctx); err != nil {
		return err
	}
	return c.waitForSync(ctx)
}

// startWatches starts every source, once, without waiting for any.
func (c *Controller) startWatches(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return c.err
	}
	c.started = true
	for _, src := range c.sources {
		if err := src.Start(ctx, c.queue); err != nil {
			c.err = fmt.Errorf("controller %s: starting source %v: %w", c.opts.Name, src, err)
			return c.err
		}
	}
	return nil
}

// waitForSync waits, once the sources started, for those that sync.
func (c *Controller) waitForSync(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.synced || c.err != nil {
		return c.err
	}
	for _, src := range c.sources {
		syncing, ok := src.(source.TypedSyncingSource[reconcile.Request])
		if !ok {
			continue
		}
		syncCtx, cancel := context.WithTimeout(ctx, c.opts.CacheSyncTimeout)
		err := syncing.WaitForSync(syncCtx)
		cancel()
		if err != nil {
			c.err = fmt.Errorf("controller %s: waiting for source %v to sync: %w", c.opts.Name, src, err)
			return c.err
		}
	}
	c.synced = true
	c.sources = nil // each may hold a cache: not kept longer than needed
	return nil
}

// reconcile runs one reconcile of req, as a worker, and queues it again as
// its result or error asks.
func (c *Controller) reconcile(req reconcile.Request, arrived time.Time) {
	start := time.Now()
	ctx := c.ctx
	if c.opts.Logger != nil {
		ctx = logf.IntoContext(ctx, c.opts.Logger(req))
	}
	if !arrived.IsZero() {
		ctx = context.WithValue(ctx, arrivedKey{}, arrived)
	}
	m := c.metrics
	m.active.Inc()
	result, err := c.call(ctx, req, m)
	m.active.Dec()
	m.time.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		if result.RequeueAfter > 0 || result.Requeue { //nolint:staticcheck // honoured until it is removed
			logf.FromContext(ctx).Info("Warning: Reconciler returned both a result with either RequeueAfter or Requeue set and a non-nil error. RequeueAfter and Requeue will always be ignored if the error is non-nil.")
		}
		if errors.Is(err, reconcile.TerminalError(nil)) {
			m.terminal.Inc()
		} else {
			c.queue.AddRateLimited(req)
		}
		m.errors.Inc()
		m.total(labelError).Inc()
		logf.FromContext(ctx).Error(err, "Reconciler error")
	case result.RequeueAfter > 0:
		c.queue.Forget(req)
		c.queue.AddAfter(req, result.RequeueAfter)
		m.total(labelRequeueAfter).Inc()
	case result.Requeue: //nolint:staticcheck // honoured until it is removed
		c.queue.AddRateLimited(req)
		m.total(labelRequeue).Inc()
	default:
		c.queue.Forget(req)
		m.total(labelSuccess).Inc()
	}
}

// call runs the reconciler, turning a panic into an error, after
// client-go's panic handlers have logged it with its stack.
func (c *Controller) call(ctx context.Context, req reconcile.Request, m *controllerMetrics) (result reconcile.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			m.panics.Inc()
			for _, handle := range utilruntime.PanicHandlers {
				handle(ctx, p)
			}
			err = fmt.Errorf("panic: %v [recovered]", p)
		}
	}()
	return c.reconciler.Reconcile(ctx, req)
}

type arrivedKey struct{}

// Arrived says, inside a reconcile of a Controller, when the change that
// it answers arrived (the first Add of the request that no worker had
// taken yet); ok is false for a retry or a delayed request.
func Arrived(ctx context.Context) (at time.Time, ok bool) {
	at, ok = ctx.Value(arrivedKey{}).(time.Time)
	return at, ok
}
