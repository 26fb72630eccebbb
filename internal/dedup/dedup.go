// Package dedup keeps one copy in memory of equal large values that
// several caches hold: a tenant's ConfigMap or Secret in the tenant's cache
// and its host copy in the host's cache carry the same data, and without
// it the manager holds every byte of it twice.
//
// A value is shared only while something holds it: the table keeps weak
// references, and an entry goes once its value is collected. Values are
// compared in full, never trusted to a hash alone.
package dedup

import (
	"hash/maphash"
	"runtime"
	"sync"
	"unsafe"
	"weak"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// MinSize is the size from which a value is shared: below it, a table
// entry would cost about as much as it saves.
const MinSize = 1 << 10

// key finds a value's entry: its hash and length.
type key struct {
	hash uint64
	size int
}

// table holds one weak reference per value shared, to its first byte.
type table struct {
	mu      sync.Mutex
	entries map[key]weak.Pointer[byte]
}

var (
	seed = maphash.MakeSeed()
	// stringValues and byteValues are apart: a string's bytes must never be written,
	// and a []byte handed out could be.
	stringValues, byteValues = &table{entries: map[key]weak.Pointer[byte]{}}, &table{entries: map[key]weak.Pointer[byte]{}}

	sharedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantry_cache_shared_bytes_total",
		Help: "Bytes of cached values (ConfigMap and Secret data of 1 KiB or more) not kept, because an equal value was held already: a host copy's data and its tenant object's.",
	})
)

func init() { metrics.Registry.MustRegister(sharedTotal) }

// share returns the first byte of a value equal to the size bytes at p
// that the table holds, or adds p's and returns p.
func (t *table) share(p *byte, size int) *byte {
	content := unsafe.Slice(p, size)
	k := key{hash: maphash.Bytes(seed, content), size: size}
	t.mu.Lock()
	defer t.mu.Unlock()
	if held := t.entries[k].Value(); held != nil {
		if held == p {
			return p
		}
		if string(unsafe.Slice(held, size)) == string(content) {
			sharedTotal.Add(float64(size))
			return held
		}
		return p // a hash collision: the entry stays the other value's
	}
	w := weak.Make(p)
	t.entries[k] = w
	runtime.AddCleanup(p, t.forget, entry{key: k, ref: w})
	return p
}

// entry is what forget needs to remove one entry, and only that one.
type entry struct {
	key key
	ref weak.Pointer[byte]
}

// forget removes e once its value is collected, unless a newer value took
// its key meanwhile.
func (t *table) forget(e entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.entries[e.key] == e.ref {
		delete(t.entries, e.key)
	}
}

// len is how many values the table holds.
func (t *table) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// sharedString returns s, or an equal string already held, for a string
// of MinSize bytes or more: whoever keeps the result, rather than s, lets
// s's bytes go. s must be on the heap, as a decoded object's values are (a
// weak reference to a constant's bytes is a fatal error).
func sharedString(s string) string {
	if len(s) < MinSize {
		return s
	}
	return unsafe.String(stringValues.share(unsafe.StringData(s), len(s)), len(s))
}

// sharedBytes is sharedString for a byte slice: the result may share its
// array with other holders, so it must be read only, as a cached object
// is. Its capacity is its length, so that an append copies.
func sharedBytes(b []byte) []byte {
	if len(b) < MinSize {
		return b
	}
	return unsafe.Slice(byteValues.share(unsafe.SliceData(b), len(b)), len(b))
}

// Transform shares the data values of a ConfigMap or a Secret in place,
// and returns every object as it is otherwise. It is a cache transform
// (client-go's TransformFunc), for objects an informer has just decoded:
// its own, on the heap, and read only once stored.
func Transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		for k, v := range o.Data {
			o.Data[k] = sharedString(v)
		}
		for k, v := range o.BinaryData {
			o.BinaryData[k] = sharedBytes(v)
		}
	case *corev1.Secret:
		for k, v := range o.Data {
			o.Data[k] = sharedBytes(v)
		}
	}
	return obj, nil
}

// After is a cache transform that runs first (nil: none), then Transform.
func After(first toolscache.TransformFunc) toolscache.TransformFunc {
	if first == nil {
		return Transform
	}
	return func(obj any) (any, error) {
		obj, err := first(obj)
		if err != nil {
			return nil, err
		}
		return Transform(obj)
	}
}
