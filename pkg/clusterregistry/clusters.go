package clusterregistry

import (
	"context"
	"errors"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Clusters is what code outside the clusters' apps, such as a host-side
// reconciler, needs of a registry: a running cluster's client, the
// clusters' states, and word of their changes. *RemoteClusterRegistry
// implements it; clusterregistrytest.Clusters is a fake for tests.
type Clusters interface {
	// WithClient runs f with the named cluster's client, or returns
	// ErrNotExist or ErrNotRunning.
	WithClient(name string, f func(c client.Client) error) error
	// Status is the named cluster's state, or ErrNotExist.
	Status(name string) (Status, error)
	// List is every cluster's state, sorted by name.
	List() []Status
	// Subscribe calls f with each change of a cluster's state until the
	// returned function is called; f must return quickly.
	Subscribe(f func(Status)) (cancel func())
	// Watch makes a running cluster's events of a kind requests of a
	// host-side controller, for as long as the cluster's app runs.
	Watch(ctx context.Context, cluster string, in WatchInput) error
}

var _ Clusters = &RemoteClusterRegistry{}

// StateChanges is a controller source of the clusters' states: at its
// start, every cluster's state as it is, then each change (a cluster
// Running, Failed, Stopped), each turned into the requests that
// toRequests maps it to. A host-side reconciler that acts in a tenant
// through WithClient watches it to act once the tenant runs, instead of
// polling for it:
//
//	builder.ControllerManagedBy(mgr).
//		For(&corev1.ConfigMap{}).
//		WatchesRawSource(clusterregistry.StateChanges(registry, messagesTo)).
//		Complete(r)
//
// toRequests runs on a goroutine of the source's own, one state at a
// time in the order they were told, so it may read a cache; a state it
// has not mapped yet when a newer one comes is still mapped. The source
// starts once; it ends with the context it was started with.
func StateChanges(c Clusters, toRequests func(ctx context.Context, s Status) []reconcile.Request) source.TypedSource[reconcile.Request] {
	return &stateSource{clusters: c, toRequests: toRequests, wake: make(chan struct{}, 1)}
}

type stateSource struct {
	clusters   Clusters
	toRequests func(ctx context.Context, s Status) []reconcile.Request

	once sync.Once
	mu   sync.Mutex
	told []Status // told and not yet mapped
	wake chan struct{}
}

// Start implements source.TypedSource: it subscribes until ctx ends.
func (s *stateSource) Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	started := false
	s.once.Do(func() {
		started = true
		cancel := s.clusters.Subscribe(func(st Status) {
			if ctx.Err() == nil {
				s.tell(st)
			}
		})
		// After subscribing: a change between the two is told twice at
		// worst, never missed.
		for _, st := range s.clusters.List() {
			s.tell(st)
		}
		go s.run(ctx, queue, cancel)
	})
	if !started {
		return errSourceStarted
	}
	return nil
}

// tell queues st for mapping; it never blocks the registry.
func (s *stateSource) tell(st Status) {
	s.mu.Lock()
	s.told = append(s.told, st)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run maps the states told, until ctx ends.
func (s *stateSource) run(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request], cancel func()) {
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		told := s.told
		s.told = nil
		s.mu.Unlock()
		for _, st := range told {
			for _, req := range s.toRequests(ctx, st) {
				queue.Add(req)
			}
		}
	}
}

func (s *stateSource) String() string { return "cluster states" }

var errSourceStarted = errors.New("the cluster state source was started already")
