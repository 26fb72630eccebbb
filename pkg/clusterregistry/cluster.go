package clusterregistry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
)

// State is where a cluster is in its life in the registry.
type State string

const (
	// StateStarting: Spawn is building and starting the cluster's app.
	StateStarting State = "Starting"
	// StateRunning: the app runs and its caches have synced.
	StateRunning State = "Running"
	// StateStopping: Stop is tearing the app down.
	StateStopping State = "Stopping"
	// StateFailed: the manager exited on its own or the API server stopped
	// answering; the app has been torn down and the name stays taken until
	// Stop, so that the owner notices and can re-spawn.
	StateFailed State = "Failed"
	// StateStopped is only ever reported to subscribers: the cluster has left
	// the registry.
	StateStopped State = "Stopped"
)

// Status is a cluster's state as the registry sees it.
type Status struct {
	// Name is the cluster's name, as given to Spawn.
	Name string
	// State is the cluster's state.
	State State
	// Err says why a Failed cluster failed; nil in every other state.
	Err error
	// Since is when the cluster entered State.
	Since time.Time
}

// cluster is one entry of the registry. Fields marked "registry.mu" are read
// and written under the registry's lock; the channels are set at creation.
type cluster struct {
	name string
	log  logr.Logger

	// ctx is canceled by the first Stop; that cancels a Spawn in progress,
	// a health check under way, and wakes the supervisor.
	ctx        context.Context
	cancelStop context.CancelFunc
	// done is closed once nothing of the cluster runs any more.
	done chan struct{}

	status  Status          // registry.mu
	tenant  *tenant         // registry.mu; set once the app started
	watches map[string]bool // registry.mu; the names of Watch's watches
	stopCtx context.Context // registry.mu; the first Stop's context
	stopErr error           // registry.mu; how the teardown after Stop went
}

func newCluster(name string, log logr.Logger) *cluster {
	ctx, cancel := context.WithCancel(context.Background())
	return &cluster{
		name:       name,
		log:        log,
		ctx:        ctx,
		cancelStop: cancel,
		done:       make(chan struct{}),
	}
}

// supervise watches a running cluster until it is stopped or fails, then
// tears its app down. It is the only goroutine that stops a started app.
func (r *RemoteClusterRegistry) supervise(c *cluster, t *tenant) {
	defer close(c.done)

	var (
		health    <-chan time.Time
		failingAt time.Time
		lastErr   error
	)
	if r.opts.HealthCheckInterval > 0 {
		ticker := time.NewTicker(r.opts.HealthCheckInterval)
		defer ticker.Stop()
		health = ticker.C
	}

	for {
		select {
		case <-c.ctx.Done():
			r.mu.RLock()
			ctx := c.stopCtx
			r.mu.RUnlock()
			err := t.stop(ctx)
			if err != nil {
				c.log.Error(err, "cluster did not stop cleanly")
			} else {
				c.log.Info("cluster stopped")
			}
			r.mu.Lock()
			c.stopErr = err
			r.mu.Unlock()
			r.remove(c)
			return

		case <-t.meter.Exceeded():
			r.fail(c, t, fmt.Errorf("cluster %q: %w", c.name, t.meter.Err()))
			return

		case <-t.exited:
			err := t.exitErr
			if err == nil {
				err = errors.New("manager exited without an error")
			}
			r.fail(c, t, fmt.Errorf("cluster %q: manager exited: %w", c.name, err))
			return

		case <-health:
			err := t.probe(c.ctx)
			switch {
			case c.ctx.Err() != nil:
				continue // stopping: the next round handles it
			case err == nil:
				if !failingAt.IsZero() {
					c.log.Info("API server answers again", "unhealthyFor", time.Since(failingAt).String())
				}
				failingAt, lastErr = time.Time{}, nil
			case failingAt.IsZero():
				failingAt, lastErr = time.Now(), err
				c.log.Info("API server does not answer", "error", err.Error())
			default:
				lastErr = err
			}
			if lastErr != nil && time.Since(failingAt) >= r.opts.UnhealthyTimeout {
				r.fail(c, t, fmt.Errorf("cluster %q: no answer for %s: %w",
					c.name, time.Since(failingAt).Round(time.Second), lastErr))
				return
			}
		}
	}
}

// fail reports c as Failed with err and tears its app down.
func (r *RemoteClusterRegistry) fail(c *cluster, t *tenant, err error) {
	c.log.Error(err, "cluster failed")
	clusterFailures.WithLabelValues(c.name).Inc()

	r.mu.Lock()
	var change *Status
	if c.status.State == StateRunning {
		change = r.setStateLocked(c, StateFailed, err)
	}
	r.mu.Unlock()
	r.notify(change)

	ctx, cancel := context.WithTimeout(context.Background(), r.opts.GracefulShutdownTimeout+5*time.Second)
	defer cancel()
	if err := t.stop(ctx); err != nil {
		c.log.Error(err, "failed cluster did not stop cleanly")
	}
	// The cluster stays, Failed, until it is stopped or spawned again; its
	// app, and every object its cache held, go now.
	r.mu.Lock()
	if c.tenant == t {
		c.tenant = nil
	}
	r.mu.Unlock()
}
