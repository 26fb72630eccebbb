// Package ondemand runs a reconciler the way a controller-runtime
// controller does, with one difference that matters at a thousand tenants:
// its workers are goroutines started as work arrives and ended when none
// is left, and its delays are timers, so an idle controller holds no
// goroutine and no buffer at all.
//
// A controller-runtime controller keeps its MaxConcurrentReconciles
// workers, and its queue's delay loop and its 1,000-slot channel, for as
// long as it runs. A tenant runs a controller per synced type: at 1,000
// idle tenants those were about 200,000 goroutines that waited for
// nothing, and 100 MiB of buffers.
package ondemand

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// queue is a rate-limiting work queue with client-go's promises (an item
// queued twice is queued once; an item is never handed to two workers at
// once; one added while a worker has it comes back once that worker is
// done) whose workers it starts itself, up to its limit, as items arrive.
//
// It also remembers when the change that queued an item arrived: from an
// item's first Add that no worker has taken yet. Items queued again by
// AddAfter or AddRateLimited (a retry, a deliberate delay) carry no time
// of arrival, unless a change arrives for them meanwhile.
type queue struct {
	limiter workqueue.TypedRateLimiter[reconcile.Request]
	// work handles one item; arrived is when its change arrived, zero
	// for a retry. It is called by the queue's workers only.
	work func(item reconcile.Request, arrived time.Time)

	mu   sync.Mutex
	cond sync.Cond // signalled when an item is queued or the queue shuts down

	// ready are the items waiting for a worker, in order.
	ready []reconcile.Request
	// dirty holds every item queued or to be queued again once its worker
	// is done, with when its change arrived.
	dirty map[reconcile.Request]time.Time
	// processing holds the items a worker has.
	processing map[reconcile.Request]struct{}
	// delayed holds the timer of each item added with a delay, and when it
	// fires: a second delay keeps the earlier.
	delayed map[reconcile.Request]delay

	// peak is the most items held since the maps were last made anew:
	// maps keep their largest size, so a queue that held many is given
	// new ones once it is empty.
	peak int

	maxWorkers, workers int
	// running is set once workers may start: items queued before wait.
	running                bool
	shuttingDown, draining bool
	// idle is signalled when the last worker ends.
	idle sync.Cond
}

type delay struct {
	timer *time.Timer
	at    time.Time
}

func newQueue(limiter workqueue.TypedRateLimiter[reconcile.Request], maxWorkers int, work func(reconcile.Request, time.Time)) *queue {
	q := &queue{
		limiter: limiter, work: work, maxWorkers: maxWorkers,
		dirty:      map[reconcile.Request]time.Time{},
		processing: map[reconcile.Request]struct{}{},
		delayed:    map[reconcile.Request]delay{},
	}
	q.cond.L, q.idle.L = &q.mu, &q.mu
	return q
}

var _ workqueue.TypedRateLimitingInterface[reconcile.Request] = &queue{}

// Add queues item for a change that arrived now.
func (q *queue) Add(item reconcile.Request) { q.add(item, time.Now()) }

// add queues item, for a change that arrived at arrived (zero: a retry).
func (q *queue) add(item reconcile.Request, arrived time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shuttingDown {
		return
	}
	if at, queued := q.dirty[item]; queued {
		if at.IsZero() && !arrived.IsZero() {
			q.dirty[item] = arrived // a retry that a change now waits on
		}
		return
	}
	q.dirty[item] = arrived
	q.peak = max(q.peak, len(q.dirty)+len(q.processing))
	if _, busy := q.processing[item]; busy {
		return // its worker queues it again when done
	}
	q.ready = append(q.ready, item)
	q.cond.Signal()
	q.startWorkerLocked()
}

// startWorkerLocked starts a worker if items wait and fewer than the
// limit run: a worker ends only when nothing is ready, so a ready item
// with every worker running is taken by one of them.
func (q *queue) startWorkerLocked() {
	if !q.running || q.shuttingDown || len(q.ready) == 0 || q.workers >= q.maxWorkers {
		return
	}
	q.workers++
	go q.worker()
}

// worker handles items until none is ready, or the queue shuts down (a
// draining queue is worked until it is empty).
func (q *queue) worker() {
	for {
		item, arrived, ok := q.next()
		if !ok {
			return
		}
		q.work(item, arrived)
		q.Done(item)
	}
}

// next takes the next ready item for a worker, or ends the worker.
func (q *queue) next() (reconcile.Request, time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.ready) == 0 || (q.shuttingDown && !q.draining) {
		q.shrinkLocked()
		q.workers--
		if q.workers == 0 {
			q.idle.Broadcast()
		}
		return reconcile.Request{}, time.Time{}, false
	}
	return q.takeLocked()
}

// shrinkLocked gives back the room of a burst once nothing is held.
func (q *queue) shrinkLocked() {
	if len(q.ready) == 0 {
		q.ready = nil
	}
	if q.peak > shrinkAbove && len(q.dirty) == 0 && len(q.processing) == 0 {
		q.dirty, q.processing, q.peak = map[reconcile.Request]time.Time{}, map[reconcile.Request]struct{}{}, 0
	}
}

// shrinkAbove is the most items whose room a queue keeps once empty.
const shrinkAbove = 64

func (q *queue) takeLocked() (reconcile.Request, time.Time, bool) {
	item := q.ready[0]
	q.ready[0] = reconcile.Request{}
	q.ready = q.ready[1:]
	arrived := q.dirty[item]
	delete(q.dirty, item)
	q.processing[item] = struct{}{}
	return item, arrived, true
}

// start lets workers run, and starts them for the items already queued.
func (q *queue) start() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running = true
	for range len(q.ready) {
		q.startWorkerLocked()
	}
}

// Get implements workqueue.TypedInterface, for a caller that works the
// queue itself: it waits for an item and takes it, beside the queue's own
// workers. The queue never calls it.
func (q *queue) Get() (reconcile.Request, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 && !q.shuttingDown {
		q.cond.Wait()
	}
	if len(q.ready) == 0 {
		return reconcile.Request{}, true
	}
	item, _, _ := q.takeLocked()
	return item, false
}

// Done implements workqueue.TypedInterface: item's worker is done with
// it, and it is queued again if it was added meanwhile.
func (q *queue) Done(item reconcile.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, item)
	if _, again := q.dirty[item]; again {
		q.ready = append(q.ready, item)
		q.cond.Signal()
		q.startWorkerLocked()
	}
}

// Len implements workqueue.TypedInterface: the items ready for a worker.
func (q *queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready)
}

// busy says whether an item is queued or in a worker's hands; items
// waiting out a delay are not.
func (q *queue) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.dirty) > 0 || len(q.processing) > 0
}

// AddAfter implements workqueue.TypedDelayingInterface, with a timer that
// exists only while the item waits.
func (q *queue) AddAfter(item reconcile.Request, d time.Duration) {
	if d <= 0 {
		q.add(item, time.Time{})
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shuttingDown {
		return
	}
	at := time.Now().Add(d)
	if w, waiting := q.delayed[item]; waiting {
		if !at.Before(w.at) {
			return
		}
		w.timer.Stop()
	}
	q.delayed[item] = delay{at: at, timer: time.AfterFunc(d, func() { q.fire(item, at) })}
}

// fire queues item when its delay, the one set for at, is over.
func (q *queue) fire(item reconcile.Request, at time.Time) {
	q.mu.Lock()
	if w, ok := q.delayed[item]; !ok || !w.at.Equal(at) {
		q.mu.Unlock()
		return // replaced by an earlier delay, or the queue shut down
	}
	delete(q.delayed, item)
	q.mu.Unlock()
	q.add(item, time.Time{})
}

// AddRateLimited implements workqueue.TypedRateLimitingInterface.
func (q *queue) AddRateLimited(item reconcile.Request) { q.AddAfter(item, q.limiter.When(item)) }

// Forget implements workqueue.TypedRateLimitingInterface.
func (q *queue) Forget(item reconcile.Request) { q.limiter.Forget(item) }

// NumRequeues implements workqueue.TypedRateLimitingInterface.
func (q *queue) NumRequeues(item reconcile.Request) int { return q.limiter.NumRequeues(item) }

// ShutDown implements workqueue.TypedInterface: nothing more is queued,
// delays are dropped, and workers end once done with their items.
func (q *queue) ShutDown() { q.shutDown(false) }

// ShutDownWithDrain implements workqueue.TypedInterface: as ShutDown, but
// the items already ready are worked first; it returns once every worker
// has ended.
func (q *queue) ShutDownWithDrain() {
	q.shutDown(true)
	q.wait()
}

func (q *queue) shutDown(drain bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shuttingDown, q.draining = true, drain
	for item, w := range q.delayed {
		w.timer.Stop()
		delete(q.delayed, item)
	}
	q.cond.Broadcast()
}

// wait returns once no worker runs.
func (q *queue) wait() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.workers > 0 {
		q.idle.Wait()
	}
}

// ShuttingDown implements workqueue.TypedInterface.
func (q *queue) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shuttingDown
}
