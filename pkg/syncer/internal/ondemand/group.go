package ondemand

import (
	"context"
	"sync"
)

// Group runs Controllers as one runnable: one goroutine waits for the end
// of them all, where a runnable each would need one each. A tenant's
// controllers share one.
type Group struct {
	mu          sync.Mutex
	controllers []*Controller
	// ctx is Start's, set once the group runs: a Controller added then
	// starts at once.
	ctx context.Context
	// started is set once Start's Controllers have synced and work.
	started bool
	// late counts the Controllers added after the start whose sources are
	// still starting; failed hears the first that fails.
	late   sync.WaitGroup
	failed chan error
}

// NewGroup makes an empty Group; add it to a manager.
func NewGroup() *Group { return &Group{failed: make(chan error, 1)} }

// Add adds c to the group. Added before the group starts, c starts with it
// (its sources at the group's warm-up); added later, it starts at once,
// its sources in the background: if they fail to start or sync, the group
// stops every Controller and returns the error, as the manager's own
// controllers do.
func (g *Group) Add(c *Controller) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.controllers = append(g.controllers, c)
	if g.ctx == nil {
		return
	}
	ctx := g.ctx
	g.late.Add(1)
	go func() {
		defer g.late.Done()
		// A start cut short by the group's own end is no failure.
		if err := c.run(ctx); err != nil && ctx.Err() == nil {
			select {
			case g.failed <- err:
			default: // one failure is enough to stop
			}
		}
	}()
}

// Warmup implements the manager's warm-up: every Controller's sources
// start and sync, so that a tenant counts as started once they have.
func (g *Group) Warmup(ctx context.Context) error { return startSources(ctx, g.added()) }

// startSources starts the sources of every one of controllers before it
// waits for any to sync, so that the waits overlap: the manager runs the
// warm-up and the start side by side, and either may come first.
func startSources(ctx context.Context, controllers []*Controller) error {
	for _, c := range controllers {
		if err := c.startWatches(ctx); err != nil {
			return err
		}
	}
	for _, c := range controllers {
		if err := c.waitForSync(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Start implements manager.Runnable: it starts every Controller, and each
// one added later; once ctx ends, or a late one fails, it shuts them all
// down and waits for their reconciles under way.
func (g *Group) Start(ctx context.Context) error {
	g.mu.Lock()
	g.ctx = ctx
	controllers := g.controllers[:len(g.controllers):len(g.controllers)]
	g.mu.Unlock()
	err := startSources(ctx, controllers)
	if err == nil {
		for _, c := range controllers {
			c.work(ctx)
		}
		g.mu.Lock()
		g.started = true
		g.mu.Unlock()
		select {
		case <-ctx.Done():
		case err = <-g.failed:
		}
	}
	g.mu.Lock()
	g.ctx = nil // no more starts
	g.mu.Unlock()
	g.late.Wait()
	for _, c := range g.added() {
		c.queue.ShutDown()
	}
	for _, c := range g.added() {
		c.queue.wait()
	}
	return err
}

// Settled says whether the group has started, its Controllers synced,
// and none of them has an item queued or in hand: the work that the
// start brought is done. Items waiting out a delay (a retry, a requeue
// after some time) do not count.
func (g *Group) Settled() bool {
	g.mu.Lock()
	started := g.started
	g.mu.Unlock()
	if !started {
		return false
	}
	for _, c := range g.added() {
		if c.queue.busy() {
			return false
		}
	}
	return true
}

func (g *Group) added() []*Controller {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.controllers[:len(g.controllers):len(g.controllers)]
}
