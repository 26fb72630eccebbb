package clusterregistry

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// cacheBudget bounds what every cluster's cache of a registry holds
// together (Options.CacheBudget): the bytes of their stores and of their
// lists under way, as their meters count them. Past it, the cluster that
// holds the most is stopped as one past its own limits, then the next,
// until what the running clusters hold is under it: many clusters that
// grow at once are stopped one after another, the largest first, and the
// others run on.
type cacheBudget struct {
	limit int64 // <= 0: none
	held  atomic.Int64

	mu     sync.Mutex
	meters map[*CacheMeter]struct{}
}

func newCacheBudget(limit int64) *cacheBudget {
	return &cacheBudget{limit: limit, meters: map[*CacheMeter]struct{}{}}
}

// join makes m's bytes count against the budget.
func (b *cacheBudget) join(m *CacheMeter) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.meters[m] = struct{}{}
	b.mu.Unlock()
	m.budget = b
}

// leave takes m off, with what it still holds.
func (b *cacheBudget) leave(m *CacheMeter) {
	if b == nil {
		return
	}
	b.mu.Lock()
	_, ok := b.meters[m]
	delete(b.meters, m)
	b.mu.Unlock()
	if ok {
		b.held.Add(-m.budgeted.Swap(0))
	}
}

// add counts bytes more (or fewer) held by m, and, past the budget, stops
// the largest running cluster.
func (b *cacheBudget) add(m *CacheMeter, bytes int64) {
	if b == nil || bytes == 0 {
		return
	}
	m.budgeted.Add(bytes)
	if held := b.held.Add(bytes); bytes > 0 && b.limit > 0 && held > b.limit {
		b.spent()
	}
}

// spent stops the largest running cluster while what the running ones
// hold is past the budget: a stopped cluster's bytes go only when its app
// is down, and must not stop another meanwhile.
func (b *cacheBudget) spent() {
	b.mu.Lock()
	var (
		largest *CacheMeter
		running int64
	)
	for m := range b.meters {
		if m.Err() != nil {
			continue
		}
		held := m.budgeted.Load()
		running += held
		if largest == nil || held > largest.budgeted.Load() {
			largest = m
		}
	}
	b.mu.Unlock()
	if largest == nil || running <= b.limit {
		return
	}
	cacheBudgetSpent.Inc()
	largest.exceed(fmt.Errorf("%w: every cluster's cache together holds %s, past the manager's budget of %s (--cache-budget), and this cluster holds the most of it, %s",
		ErrCacheLimit, pastSize(running, b.limit), byteSize(b.limit), byteSize(largest.budgeted.Load())))
}
