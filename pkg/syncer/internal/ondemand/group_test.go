package ondemand

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// counting is a Controller that counts its reconciles, fed one request by
// its source at start.
func counting(name string, n *atomic.Int32) *Controller {
	c := New(Options{Name: name}, reconcileFunc(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		n.Add(1)
		return reconcile.Result{}, nil
	}))
	if err := c.Watch(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(request(name))
		return nil
	})); err != nil {
		panic(err)
	}
	return c
}

// A Group starts its Controllers, and one added while it runs at once;
// it ends them all with its context, and a late one that cannot start
// stops the group with its error.
func TestGroup(t *testing.T) {
	defer goleak.VerifyNone(t)
	var first, late atomic.Int32
	g := NewGroup()
	g.Add(counting("first", &first))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := g.Warmup(ctx); err != nil {
		t.Fatalf("Warmup: %v", err)
	}
	if first.Load() != 0 {
		t.Error("a reconcile ran at warm-up")
	}
	done := make(chan error, 1)
	go func() { done <- g.Start(ctx) }()
	eventually(t, "the first controller reconciled", func() bool { return first.Load() == 1 })
	g.Add(counting("late", &late))
	eventually(t, "the late controller reconciled", func() bool { return late.Load() == 1 })

	broken := New(Options{Name: "broken"}, reconcileFunc(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, nil
	}))
	refused := errors.New("no such type")
	if err := broken.Watch(source.Func(func(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		return refused
	})); err != nil {
		t.Fatal(err)
	}
	g.Add(broken)
	select {
	case err := <-done:
		if !errors.Is(err, refused) {
			t.Errorf("Start returned %v, want the late source's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a late controller that cannot start did not stop the group")
	}
}

// A Group is settled once it has started and no Controller has an item
// queued or in hand; an item waiting out a delay does not count.
func TestGroupSettled(t *testing.T) {
	defer goleak.VerifyNone(t)
	release := make(chan struct{})
	var reconciles atomic.Int32
	c := New(Options{Name: "held"}, reconcileFunc(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if reconciles.Add(1) == 1 {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return reconcile.Result{}, nil
	}))
	if err := c.Watch(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(request("first"))
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	g := NewGroup()
	g.Add(c)
	if g.Settled() {
		t.Fatal("settled before it started")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	eventually(t, "the first item in hand", func() bool { return reconciles.Load() == 1 })
	if g.Settled() {
		t.Error("settled with an item in a worker's hands")
	}
	c.queue.Add(request("second"))
	close(release)
	eventually(t, "settled once both items are done", func() bool { return g.Settled() && reconciles.Load() == 2 })
	c.queue.AddAfter(request("later"), time.Hour)
	if !g.Settled() {
		t.Error("an item waiting out a delay of an hour counts as work in hand")
	}
}
