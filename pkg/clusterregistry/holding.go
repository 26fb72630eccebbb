package clusterregistry

import "sync"

// A Holding counts, against a cluster's limits and with its cache, objects
// that the cluster makes the manager hold outside its own cache: its
// copies in a cache that every cluster shares, say. What it counts shows
// in the cluster's usage (CacheMeter.Usage, the tenantry_registry_cache_*
// metrics), and going past the limits with it stops the cluster as its
// own cache would.
//
// A nil Holding (of a nil meter) counts nothing. Its methods may be called
// from any goroutine.
type Holding struct {
	meter *CacheMeter
	usage *informerUsage

	mu       sync.Mutex
	sizes    map[string]int64 // by key
	released bool
}

// Hold returns a Holding of the cluster, named what in the limit's error
// ("the most in what: ...").
func (m *CacheMeter) Hold(what string) *Holding {
	if m == nil {
		return nil
	}
	return &Holding{meter: m, usage: m.track(what), sizes: map[string]int64{}}
}

// Set counts obj under key, in place of what key held: once however often
// it is set.
func (h *Holding) Set(key string, obj any) { h.SetPart(key, obj, 0) }

// SetPart is Set for obj held in part: left more bytes, which obj stands
// for but does not hold (data held as a digest), count as if it did.
func (h *Holding) SetPart(key string, obj any, left int64) {
	if h == nil {
		return
	}
	size := encodedSize(obj) + max(left, 0)
	// Counted under the lock, so that no count comes after Release.
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return
	}
	old, had := h.sizes[key]
	h.sizes[key] = size
	objects := int64(1)
	if had {
		objects = 0
	}
	h.meter.add(h.usage, objects, size-old)
}

// Forget takes what key held off the count.
func (h *Holding) Forget(key string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, had := h.sizes[key]; had {
		delete(h.sizes, key)
		h.meter.add(h.usage, -1, -old)
	}
}

// Release takes everything the Holding counts off, and it counts no more.
func (h *Holding) Release() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.released {
		h.released, h.sizes = true, nil
		h.meter.untrack(h.usage)
	}
}
