package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// gatedBudget is a Queue whose tokens the test hands out one by one.
func gatedBudget(t *testing.T) (*Queue, chan<- struct{}) {
	tokens := make(chan struct{})
	b := newTaking(func(ctx context.Context) error {
		select {
		case <-tokens:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b, tokens
}

// queue starts n requests of tenant, each telling served its tenant once
// let through, and waits until they all wait.
func queue(t *testing.T, ctx context.Context, b *Queue, tenant string, n int, served chan<- string) {
	t.Helper()
	for range n {
		go func() {
			if b.Wait(ctx, tenant) == nil {
				served <- tenant
			}
		}()
	}
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queues[tenant]) == n, nil
	})
	if err != nil {
		t.Fatalf("%d requests of %s queued: %v", n, tenant, err)
	}
}

// next hands out one token and says who got it.
func next(t *testing.T, tokens chan<- struct{}, served <-chan string) string {
	t.Helper()
	tokens <- struct{}{}
	select {
	case who := <-served:
		return who
	case <-time.After(5 * time.Second):
		t.Fatal("a token went to no one")
		return ""
	}
}

// A tenant that floods waits behind its own requests: one that sends a
// single request is served at its turn, not after the flood.
func TestQueueServesTenantsInTurn(t *testing.T) {
	b, tokens := gatedBudget(t)
	served := make(chan string, 20)
	queue(t, t.Context(), b, "flood", 10, served)
	queue(t, t.Context(), b, "quiet", 1, served)
	var order []string
	for range 4 {
		order = append(order, next(t, tokens, served))
	}
	if fmt.Sprint(order) != "[flood quiet flood flood]" {
		t.Fatalf("served %v; want the quiet tenant second", order)
	}
}

// A request given up (its context ended) leaves the queue and takes no
// token from the others.
func TestQueueForgetsCancelledRequests(t *testing.T) {
	b, tokens := gatedBudget(t)
	served := make(chan string, 20)
	ctx, cancel := context.WithCancel(t.Context())
	queue(t, ctx, b, "gone", 3, served)
	queue(t, t.Context(), b, "stays", 2, served)
	cancel()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queues["gone"]) == 0 && len(b.turns) == 1, nil
	})
	if err != nil {
		t.Fatalf("cancelled requests still queued: %v", err)
	}
	for range 2 {
		if who := next(t, tokens, served); who != "stays" {
			t.Fatalf("a token went to %s", who)
		}
	}
}

// Requests waiting when the budget stops fail, rather than wait for good.
func TestQueueStoppedFailsWaiters(t *testing.T) {
	b := newTaking(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	failed := make(chan error, 1)
	go func() { failed <- b.Wait(t.Context(), "late") }()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return b.waiting(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	select {
	case err := <-failed:
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("a request waiting at the stop: %v; want ErrStopped", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a request still waits for a stopped budget")
	}
	if err := b.Wait(t.Context(), "later"); !errors.Is(err, ErrStopped) {
		t.Fatalf("a request after the stop: %v; want ErrStopped", err)
	}
}

// A fenced tenant's request fails before it waits for its turn, and one
// fenced while it waited fails when its turn comes, unsent.
func TestTenantLimiterAsksTheFence(t *testing.T) {
	b, tokens := gatedBudget(t)
	var fenced atomic.Bool
	l := Limiter{Queue: b, Tenant: "a", Fence: func(cluster string) error {
		if fenced.Load() {
			return fmt.Errorf("%w: %s", clusterregistry.ErrFenced, cluster)
		}
		return nil
	}}
	done := make(chan error, 1)
	go func() { done <- l.Wait(t.Context()) }()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queues["a"]) == 1, nil
	})
	if err != nil {
		t.Fatalf("the request never waited for its turn: %v", err)
	}
	fenced.Store(true)
	tokens <- struct{}{}
	if err := <-done; !errors.Is(err, clusterregistry.ErrFenced) {
		t.Errorf("a request fenced while it waited: %v; want ErrFenced", err)
	}
	if err := l.Wait(t.Context()); !errors.Is(err, clusterregistry.ErrFenced) {
		t.Errorf("a fenced request: %v; want ErrFenced", err)
	}
}

// While no request waits, a request that finds a token goes at once, even
// before the budget runs; one that finds none waits its turn.
func TestQueueGrantsAtOnceWhenNobodyWaits(t *testing.T) {
	b := New(0.001, 2) // a burst of 2, then nothing for long
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	for i := range 2 {
		if err := b.Wait(ctx, "a"); err != nil {
			t.Fatalf("request %d with a token there: %v", i, err)
		}
	}
	if err := b.Wait(ctx, "b"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request without a token went: %v", err)
	}
	if b.waiting() {
		t.Fatal("a cancelled request is still queued")
	}
}
