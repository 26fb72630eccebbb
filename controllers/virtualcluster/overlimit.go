package virtualcluster

import (
	"crypto/sha256"
	"time"
)

// A tenant past its cache limits is spawned again no sooner than
// overLimitFirstRetry after, then twice as late each time, up to
// overLimitMaxRetry; at once when its spec changes (a raised limit). Each
// spawn lists the tenant until it is past its limits again: retried with
// the controller's backoff, which begins at 5 ms, a few hostile tenants
// had the manager and their API servers list hundreds of MiB a second, and
// the other tenants' sync waited behind them.
const (
	overLimitFirstRetry = 30 * time.Second
	overLimitMaxRetry   = 10 * time.Minute
)

// overLimit is when a tenant past its cache limits is spawned again.
type overLimit struct {
	// digest is what the tenant was spawned from (see respawnInputs): a
	// change is tried at once.
	digest [sha256.Size]byte
	next   time.Time
	delay  time.Duration
	// err is why, the registry's error.
	err error
}

// wentOverLimit records that cluster name, spawned from digest, went past
// its cache limits now, with err, and returns when to spawn it again.
func (r *Reconciler) wentOverLimit(name string, digest [sha256.Size]byte, err error, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.overLimit == nil {
		r.overLimit = map[string]overLimit{}
	}
	o, ok := r.overLimit[name]
	switch {
	case !ok || o.digest != digest:
		o = overLimit{digest: digest, delay: overLimitFirstRetry, err: err}
	case now.Before(o.next):
		return o.next // the same failure, told again
	default:
		o.delay, o.err = min(2*o.delay, overLimitMaxRetry), err
	}
	o.next = now.Add(o.delay)
	r.overLimit[name] = o
	return o.next
}

// overLimitUntil is when cluster name, to be spawned from digest, is
// spawned again because it went past its cache limits (zero: now), and the
// error it went past them with.
func (r *Reconciler) overLimitUntil(name string, digest [sha256.Size]byte, now time.Time) (time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.overLimit[name]
	if !ok || o.digest != digest || !now.Before(o.next) {
		return time.Time{}, nil
	}
	return o.next, o.err
}

// withinLimit forgets that cluster name went past its cache limits: it
// runs, or is gone.
func (r *Reconciler) withinLimit(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.overLimit, name)
}
