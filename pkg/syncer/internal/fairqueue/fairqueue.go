// Package fairqueue shares a budget of requests among tenants by fair
// queuing: each tenant waits in a queue of its own, and the budget's
// tokens go to the tenants that wait, one each in turn. A tenant alone
// gets every token; a tenant that floods waits behind its own requests,
// never in front of another's. The hub's host clients wait here
// (HubOptions.HostQPS).
package fairqueue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// Queue is a request budget shared by tenants through fair queuing: requests wait in one queue per tenant, and the
// budget's tokens go to the tenants that wait, one each in turn. It is
// work-conserving: a tenant alone gets every token, and a tenant that
// floods the host waits behind its own requests, never in front of
// another tenant's.
type Queue struct {
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

// ErrStopped fails a request that waits for a Queue no longer run.
var ErrStopped = errors.New("the queue that hands out the host budget has stopped")

// New is a Queue that hands out qps requests a second, burst at once.
// It hands out nothing until Run.
func New(qps float64, burst int) *Queue {
	limiter := rate.NewLimiter(rate.Limit(qps), burst)
	b := newTaking(limiter.Wait)
	b.tryTake = limiter.Allow
	return b
}

func newTaking(take func(context.Context) error) *Queue {
	return &Queue{take: take, queues: map[string][]chan struct{}{}, queued: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// Run hands the budget's tokens out until ctx ends; then requests fail
// with ErrStopped.
func (b *Queue) Run(ctx context.Context) {
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

func (b *Queue) waiting() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.turns) > 0
}

// grant lets the oldest request of the tenant whose turn it is go.
func (b *Queue) grant() {
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

// Wait blocks until tenant may send one request, or ctx ends. While no
// request waits and the budget has a token, a request goes at once: there
// is no turn to keep, and handing the token over through run cost a
// twentieth of the manager's CPU per synced object.
func (b *Queue) Wait(ctx context.Context, tenant string) error {
	b.mu.Lock()
	if len(b.turns) == 0 && b.tryTake != nil {
		select {
		case <-b.stopped:
			b.mu.Unlock()
			return ErrStopped
		default:
		}
		if b.tryTake() {
			b.mu.Unlock()
			waitSeconds.Observe(0)
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
		waitSeconds.Observe(time.Since(queuedAt).Seconds())
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-b.stopped:
		err = ErrStopped
	}
	if !b.cancel(tenant, granted) {
		waitSeconds.Observe(time.Since(queuedAt).Seconds())
		return nil // granted meanwhile
	}
	return err
}

// cancel takes a waiting request out of its queue; false if it was
// granted already.
func (b *Queue) cancel(tenant string, granted chan struct{}) bool {
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

// Limiter is one tenant's client-side rate limiter (a client-go
// flowcontrol.RateLimiter, for rest.Config.RateLimiter): its turn in the
// shared Queue, after its own ceiling if it has one.
type Limiter struct {
	Queue  *Queue
	Tenant string
	// Ceiling, if set, is the tenant's own rate, below its share.
	Ceiling *rate.Limiter
	// Fence, if set, is asked before a request waits and again when its
	// turn comes: an error fails the request unsent.
	Fence clusterregistry.Fence
}

var _ flowcontrol.RateLimiter = Limiter{}

func (l Limiter) Wait(ctx context.Context) error {
	if err := l.fenced(); err != nil {
		return err
	}
	if l.Ceiling != nil {
		if err := l.Ceiling.Wait(ctx); err != nil {
			return err
		}
	}
	if err := l.Queue.Wait(ctx, l.Tenant); err != nil {
		return err
	}
	return l.fenced() // the turn may have been long in coming
}

func (l Limiter) fenced() error {
	if l.Fence == nil {
		return nil
	}
	return l.Fence(l.Tenant)
}

// TryAccept is never used by client-go's REST clients, which Wait; it
// says no rather than jump the queue.
func (l Limiter) TryAccept() bool { return false }
func (l Limiter) Accept()         { _ = l.Wait(context.Background()) }
func (l Limiter) Stop()           {}
func (l Limiter) QPS() float32 {
	if l.Ceiling != nil {
		return float32(l.Ceiling.Limit())
	}
	return 0
}

// waitSeconds has no cluster label: a histogram per tenant would be a
// dozen series per tenant.
var waitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "tenantry_syncer_host_budget_wait_seconds",
	Help:    "How long a syncer's request to the host waited for the host budget (--host-qps, shared fairly among tenants); 0 when a token was there.",
	Buckets: []float64{0.001, 0.005, 0.025, 0.1, 0.25, 1, 2.5, 10, 30},
})

func init() { metrics.Registry.MustRegister(waitSeconds) }
