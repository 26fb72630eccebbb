package ondemand

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

func request(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "app", Name: name}}
}

// eventually polls cond until it holds, for at most 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (q *queue) runningWorkers() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.workers
}

// Workers start as items arrive, never more than the limit, never two on
// one item, and end when nothing is left: an idle queue holds no
// goroutine.
func TestQueueStartsWorkersOnDemand(t *testing.T) {
	defer goleak.VerifyNone(t)
	var mu sync.Mutex
	busy := map[reconcile.Request]bool{}
	var running, most, handled atomic.Int32
	release := make(chan struct{})
	q := newQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](), 3, func(item reconcile.Request, _ time.Time) {
		mu.Lock()
		if busy[item] {
			t.Errorf("two workers on %s at once", item)
		}
		busy[item] = true
		mu.Unlock()
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		running.Add(-1)
		mu.Lock()
		busy[item] = false
		mu.Unlock()
		handled.Add(1)
	})
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		q.Add(request(name))
	}
	if n := q.runningWorkers(); n != 0 {
		t.Fatalf("%d workers before start, want none", n)
	}
	q.start()
	eventually(t, "three workers busy", func() bool { return running.Load() == 3 })
	q.Add(request("a")) // while a worker has it: worked again after
	close(release)
	eventually(t, "six items handled", func() bool { return handled.Load() == 6 })
	eventually(t, "every worker ended", func() bool { return q.runningWorkers() == 0 })
	if most.Load() > 3 {
		t.Errorf("%d workers at once, want at most 3", most.Load())
	}
	q.Add(request("f"))
	eventually(t, "an item after idling handled", func() bool { return handled.Load() == 7 })
	eventually(t, "every worker ended again", func() bool { return q.runningWorkers() == 0 })
	q.ShutDown()
	q.Add(request("g"))
	if q.Len() != 0 {
		t.Error("an item was queued after shutdown")
	}
}

// A change is timed from its first Add until a worker takes it; a delayed
// retry carries no time unless a change arrives for it meanwhile; of two
// delays the earlier wins.
func TestQueueTimesChangesNotRetries(t *testing.T) {
	defer goleak.VerifyNone(t)
	type handled struct {
		item    reconcile.Request
		arrived time.Time
	}
	got := make(chan handled, 10)
	q := newQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](), 1, func(item reconcile.Request, at time.Time) {
		got <- handled{item, at}
	})
	defer q.ShutDownWithDrain()
	before := time.Now()
	q.Add(request("web"))
	q.Add(request("web")) // a second event while the first waits
	q.start()
	h := <-got
	if h.arrived.Before(before) || time.Since(h.arrived) > time.Minute {
		t.Errorf("arrived %s, want the first Add's time, just after %s", h.arrived, before)
	}

	q.AddAfter(request("retry"), time.Millisecond)
	if h := <-got; !h.arrived.IsZero() {
		t.Errorf("a delayed retry timed from %s, want it not timed", h.arrived)
	}

	q.AddAfter(request("twice"), time.Hour)
	q.AddAfter(request("twice"), 10*time.Millisecond)
	select {
	case h := <-got:
		if h.item != request("twice") {
			t.Errorf("got %v, want twice", h.item)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("of two delays, the later one was kept")
	}
	select {
	case h := <-got:
		t.Errorf("an item handled twice for two delays: %v", h.item)
	case <-time.After(50 * time.Millisecond): // nothing more is due: a bound on the check, not a wait for state
	}
}

type reconcileFunc func(context.Context, reconcile.Request) (reconcile.Result, error)

func (f reconcileFunc) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return f(ctx, req)
}

// The controller handles results as controller-runtime does: an error or
// a panic is retried with backoff, RequeueAfter comes back after its
// delay, success is forgotten; reconciles get the group's context, and
// the group's Start returns once they are done.
func TestControllerResults(t *testing.T) {
	defer goleak.VerifyNone(t)
	var calls sync.Map // name -> *atomic.Int32
	count := func(name string) int32 {
		v, _ := calls.LoadOrStore(name, &atomic.Int32{})
		return v.(*atomic.Int32).Load()
	}
	c := New(Options{Name: "ondemand-test", Workers: 2,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Millisecond, 10*time.Millisecond),
	}, reconcileFunc(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		v, _ := calls.LoadOrStore(req.Name, &atomic.Int32{})
		n := v.(*atomic.Int32).Add(1)
		switch {
		case req.Name == "fails" && n < 3:
			return reconcile.Result{}, errors.New("not yet")
		case req.Name == "panics" && n < 2:
			panic("boom")
		case req.Name == "later" && n < 2:
			return reconcile.Result{RequeueAfter: 20 * time.Millisecond}, nil
		case req.Name == "waits":
			<-ctx.Done()
		}
		return reconcile.Result{}, nil
	}))
	if err := c.Watch(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		for _, name := range []string{"ok", "fails", "panics", "later", "waits"} {
			q.Add(request(name))
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	g := NewGroup()
	g.Add(c)
	done := make(chan error)
	go func() { done <- g.Start(ctx) }()
	eventually(t, "fails reconciled three times", func() bool { return count("fails") == 3 })
	eventually(t, "panics reconciled twice", func() bool { return count("panics") == 2 })
	eventually(t, "later reconciled twice", func() bool { return count("later") == 2 })
	if n := count("ok"); n != 1 {
		t.Errorf("ok reconciled %d times, want once", n)
	}
	if err := c.Watch(source.Func(func(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error { return nil })); err == nil {
		t.Error("a source was taken after the start")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
	if n := count("waits"); n != 1 {
		t.Errorf("waits reconciled %d times, want once", n)
	}
}
