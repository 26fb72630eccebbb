package syncer

import (
	"sync"
	"time"
)

// recentCreateTTL is how long a create is taken for the truth while the
// hub's cache does not show the object: far longer than a cache lags, and
// short enough that an object deleted before the cache ever saw it is
// created again soon.
const recentCreateTTL = 30 * time.Second

// recentCreates remembers the host objects a tenant created until the
// hub's cache shows them. Several syncs of a new tenant namespace (one per
// synced type, and the namespace policy controller) ask for its host
// namespace and policy objects within a few milliseconds: each read the
// cache, found nothing yet, created, met AlreadyExists and read the host
// to find the object another had just made. At 1,000 new tenants that was
// a third of the syncers' requests to the host.
//
// Its mutex serializes the creates that consult it, so that the second of
// two creates of one object sees the first's.
type recentCreates struct {
	sync.Mutex
	at map[string]time.Time // guarded by the Mutex
}

// has says whether key was created less than recentCreateTTL ago and the
// cache has not shown it since. Call it with the mutex held.
func (r *recentCreates) has(key string) bool {
	at, ok := r.at[key]
	if ok && time.Since(at) >= recentCreateTTL {
		delete(r.at, key)
		return false
	}
	return ok
}

// add records that key was just created. Call it with the mutex held.
func (r *recentCreates) add(key string) {
	if r.at == nil {
		r.at = map[string]time.Time{}
	}
	r.at[key] = time.Now()
}

// forget forgets key once the cache shows it. Call it with the mutex
// held.
func (r *recentCreates) forget(key string) { delete(r.at, key) }

// seen is forget, taking the mutex.
func (r *recentCreates) seen(key string) {
	r.Lock()
	r.forget(key)
	r.Unlock()
}

// keys are the keys created less than recentCreateTTL ago that the cache
// has not shown since. Call it with the mutex held.
func (r *recentCreates) keys() []string {
	var out []string
	for k := range r.at {
		if r.has(k) {
			out = append(out, k)
		}
	}
	return out
}
