package syncer

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// lagQueue is a syncer's work queue that remembers when each change
// arrived: from an object's first Add that no worker has taken yet until
// its sync ends is the tenant's lag. Retries and deliberate delays
// (AddAfter, AddRateLimited: a refusal's backoff, a wait for the cache)
// are not changes waiting, and are not timed. A change that comes between a
// worker's Get and its taking the time is timed with the one before, or
// not at all: the lag is, if anything, short by that.
type lagQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]

	mu sync.Mutex
	// added holds the objects added and not yet taken, and taken those a
	// worker took, each with when its change arrived.
	added, taken map[reconcile.Request]time.Time
}

func newLagQueue(q workqueue.TypedRateLimitingInterface[reconcile.Request]) *lagQueue {
	return &lagQueue{TypedRateLimitingInterface: q, added: map[reconcile.Request]time.Time{}, taken: map[reconcile.Request]time.Time{}}
}

// Add queues item, remembering when, unless it waits already.
func (q *lagQueue) Add(item reconcile.Request) {
	q.mu.Lock()
	if _, waiting := q.added[item]; !waiting {
		q.added[item] = time.Now()
	}
	q.mu.Unlock()
	q.TypedRateLimitingInterface.Add(item)
}

// Get takes the next item for a worker.
func (q *lagQueue) Get() (reconcile.Request, bool) {
	item, shutdown := q.TypedRateLimitingInterface.Get()
	q.mu.Lock()
	if at, ok := q.added[item]; ok {
		delete(q.added, item)
		q.taken[item] = at
	}
	q.mu.Unlock()
	return item, shutdown
}

// arrived says when the change that item's sync, now ending, answered
// arrived; ok is false for a retry or a delayed sync.
func (q *lagQueue) arrived(item reconcile.Request) (at time.Time, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	at, ok = q.taken[item]
	delete(q.taken, item)
	return at, ok
}
