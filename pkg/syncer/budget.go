package syncer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// writeBudget is the host's request budget, shared by every tenant of a
// Hub through fair queuing: requests wait in one queue per tenant, and the
// budget's tokens go to the tenants that wait, one each in turn. It is
// work-conserving: a tenant alone gets every token, and a tenant that
// floods the host waits behind its own requests, never in front of
// another tenant's.
type writeBudget struct {
	// take waits for one token of the whole budget's rate.
	take func(ctx context.Context) error
	// tryTake takes a token if one is there now; nil: never.
	tryTake func() bool

	mu     sync.Mutex
	queues map[string][]chan struct{} // by tenant, oldest first
	turns  []string                   // tenants that wait, in turn order
	next   int                        // index in turns of the next to serve
	// queued wakes run when a request starts to wait.
	queued chan struct{}
	// stopped is closed when run returns: no token comes any more.
	stopped chan struct{}
}

// errBudgetStopped fails a request that waits for a budget no longer run.
var errBudgetStopped = errors.New("the hub that hands out the host budget has stopped")

func newWriteBudget(qps float64, burst int) *writeBudget {
	limiter := rate.NewLimiter(rate.Limit(qps), burst)
	b := newWriteBudgetTaking(limiter.Wait)
	b.tryTake = limiter.Allow
	return b
}

func newWriteBudgetTaking(take func(context.Context) error) *writeBudget {
	return &writeBudget{take: take, queues: map[string][]chan struct{}{}, queued: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// run hands the budget's tokens out until ctx ends; then requests fail
// with errBudgetStopped.
func (b *writeBudget) run(ctx context.Context) {
	defer close(b.stopped)
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.queued:
		}
		for b.waiting() {
			if err := b.take(ctx); err != nil {
				return
			}
			b.grant()
		}
	}
}

func (b *writeBudget) waiting() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.turns) > 0
}

// grant lets the oldest request of the tenant whose turn it is go.
func (b *writeBudget) grant() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.turns) == 0 {
		return // its request was cancelled meanwhile: the token is lost
	}
	b.next %= len(b.turns)
	tenant := b.turns[b.next]
	q := b.queues[tenant]
	close(q[0])
	if len(q) == 1 {
		delete(b.queues, tenant)
		b.turns = slices.Delete(b.turns, b.next, b.next+1)
		return
	}
	b.queues[tenant] = q[1:]
	b.next++
}

// wait blocks until tenant may send one request, or ctx ends. While no
// request waits and the budget has a token, a request goes at once: there
// is no turn to keep, and handing the token over through run cost a
// twentieth of the manager's CPU per synced object.
func (b *writeBudget) wait(ctx context.Context, tenant string) error {
	b.mu.Lock()
	if len(b.turns) == 0 && b.tryTake != nil {
		select {
		case <-b.stopped:
			b.mu.Unlock()
			return errBudgetStopped
		default:
		}
		if b.tryTake() {
			b.mu.Unlock()
			budgetWait.Observe(0)
			return nil
		}
	}
	queuedAt := time.Now()
	granted := make(chan struct{})
	if len(b.queues[tenant]) == 0 {
		b.turns = append(b.turns, tenant)
	}
	b.queues[tenant] = append(b.queues[tenant], granted)
	b.mu.Unlock()
	select {
	case b.queued <- struct{}{}:
	default:
	}
	var err error
	select {
	case <-granted:
		budgetWait.Observe(time.Since(queuedAt).Seconds())
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-b.stopped:
		err = errBudgetStopped
	}
	if !b.cancel(tenant, granted) {
		budgetWait.Observe(time.Since(queuedAt).Seconds())
		return nil // granted meanwhile
	}
	return err
}

// cancel takes a waiting request out of its queue; false if it was
// granted already.
func (b *writeBudget) cancel(tenant string, granted chan struct{}) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[tenant]
	i := slices.Index(q, granted)
	if i < 0 {
		return false
	}
	q = slices.Delete(q, i, i+1)
	if len(q) > 0 {
		b.queues[tenant] = q
		return true
	}
	delete(b.queues, tenant)
	t := slices.Index(b.turns, tenant)
	b.turns = slices.Delete(b.turns, t, t+1)
	if t < b.next {
		b.next--
	}
	return true
}

// tenantLimiter is one tenant's client-side rate limiter: its turn in the
// shared budget, after its own ceiling if it has one.
type tenantLimiter struct {
	budget  *writeBudget
	tenant  string
	ceiling *rate.Limiter         // nil: none
	fence   clusterregistry.Fence // nil: none
}

var _ flowcontrol.RateLimiter = tenantLimiter{}

func (l tenantLimiter) Wait(ctx context.Context) error {
	if err := l.fenced(); err != nil {
		return err
	}
	if l.ceiling != nil {
		if err := l.ceiling.Wait(ctx); err != nil {
			return err
		}
	}
	if err := l.budget.wait(ctx, l.tenant); err != nil {
		return err
	}
	return l.fenced() // the turn may have been long in coming
}

func (l tenantLimiter) fenced() error {
	if l.fence == nil {
		return nil
	}
	return l.fence(l.tenant)
}

// TryAccept is never used by client-go's REST clients, which Wait; it
// says no rather than jump the queue.
func (l tenantLimiter) TryAccept() bool { return false }
func (l tenantLimiter) Accept()         { _ = l.Wait(context.Background()) }
func (l tenantLimiter) Stop()           {}
func (l tenantLimiter) QPS() float32 {
	if l.ceiling != nil {
		return float32(l.ceiling.Limit())
	}
	return 0
}
