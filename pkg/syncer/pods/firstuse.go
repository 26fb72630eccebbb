package pods

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// errNotStarted is use's error before the controller started the source.
var errNotStarted = errors.New("the controller has not started this source yet")

// onFirstUse is a source of requests whose watch begins only when a
// reconcile first needs it: a kind that few tenants have (ClusterTrustBundles
// and PodCertificateRequests, read only for Pods that project them) then
// costs an idle tenant no watch, no informer and no goroutines, of which
// the manager holds thousands at a thousand tenants.
//
// The controller starts it as any source; use starts the watch it wraps and
// waits for its cache to sync, once. A reconcile that calls use before it
// reads the kind misses no change: the watch's first list brings every
// object, and so every request that depends on one, again.
type onFirstUse struct {
	watch source.TypedSource[reconcile.Request]

	mu      sync.Mutex
	ctx     context.Context
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	started bool
}

var _ source.TypedSource[reconcile.Request] = &onFirstUse{}

// Start implements source.TypedSource: it keeps the controller's context
// and queue for use.
func (s *onFirstUse) Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx, s.queue = ctx, queue
	return nil
}

// use starts the wrapped watch, unless it runs, and waits (at most as long
// as ctx allows) for it to sync.
func (s *onFirstUse) use(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return nil
	}
	if s.ctx == nil {
		return errNotStarted
	}
	// The watch lives as long as the controller, not as this reconcile.
	if err := s.watch.Start(s.ctx, s.queue); err != nil {
		return fmt.Errorf("starting the watch: %w", err)
	}
	s.started = true
	if syncing, ok := s.watch.(source.TypedSyncingSource[reconcile.Request]); ok {
		if err := syncing.WaitForSync(ctx); err != nil {
			return fmt.Errorf("waiting for the watch to sync: %w", err)
		}
	}
	return nil
}
