package clusterregistry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
)

// ErrCacheLimit is the error, wrapped with the figures, of a cluster whose
// objects are more than its manager may hold (CacheLimits): at Spawn, or
// while it runs, when the registry then reports it Failed.
var ErrCacheLimit = errors.New("cluster's objects exceed its cache limits")

// Defaults of CacheLimits.
const (
	DefaultCacheObjects int64 = 50_000
	DefaultCacheBytes   int64 = 64 << 20
)

// CacheLimits bound what one cluster's manager holds in its cache: the
// objects of every type its modules watch, together. A cluster whose
// objects go past either limit is not held: its Spawn fails, or its app is
// torn down and it is reported Failed, with an error wrapping
// ErrCacheLimit; the other clusters are untouched.
//
// Bytes are counted as the objects are encoded (protobuf for built-in
// types, JSON or a close estimate of it for others), without their managed
// fields; the Go objects of a cache take more memory, often two to three
// times as much, and more for objects of many small fields (a map of
// short keys costs tens of bytes an entry).
type CacheLimits struct {
	// Objects is the most objects. 0 takes the registry's default
	// (Options.CacheLimits, else DefaultCacheObjects); negative, no limit.
	Objects int64
	// Bytes is the most bytes. 0 takes the registry's default
	// (Options.CacheLimits, else DefaultCacheBytes); negative, no limit.
	Bytes int64
}

// over is l with each unset field taken from def.
func (l CacheLimits) over(def CacheLimits) CacheLimits {
	if l.Objects == 0 {
		l.Objects = def.Objects
	}
	if l.Bytes == 0 {
		l.Bytes = def.Bytes
	}
	return l
}

// listPageSize is the most objects a cluster's informer asks for at once
// when it lists: the list is counted page by page, so that a cluster past
// its limits is never read whole.
const listPageSize = 500

// A page of a list may take at most an eighth of the cluster's byte
// limit on the wire, between minPageBytes (more than the largest object
// an API server stores: etcd refuses requests past 1.5 MiB) and
// maxPageBytes: what a list holds in flight, its answer read and decoded,
// stays a small share of what the cluster may hold, whatever the size of
// its objects. A page past it is asked for again with fewer objects.
const (
	minPageBytes = 4 << 20
	maxPageBytes = 16 << 20
)

// pageBytes is the most bytes a page of m's cluster's lists may take on
// the wire; 0 where the cluster has no byte limit.
func (m *CacheMeter) pageBytes() int64 {
	maxB := m.maxBytes.Load()
	if maxB <= 0 {
		return 0
	}
	return min(max(maxB/8, minPageBytes), maxPageBytes)
}

// errPageTooLarge is the error of a list's page whose answer went past
// its pageAnswer's cap: the page is asked for again with fewer objects.
var errPageTooLarge = errors.New("the page's answer is larger than a page may be")

// pageAnswer is what ListWithContext and the transport (capAnswers) share
// of the page under way, through the request's context: the most bytes
// its answer may take, and the bytes it took.
type pageAnswer struct {
	limit int64
	read  atomic.Int64
	cut   atomic.Bool
}

type pageAnswerKey struct{}

// pageSizes says how many objects to ask for in each page of a list: as
// many as half a page's bytes hold at the size of the objects on the wire
// so far (a quarter of the last count after a page was cut), between 1
// and listPageSize.
type pageSizes struct {
	limit          int64 // bytes a page may take; 0: no limit
	objects, bytes int64 // listed so far, as they came on the wire
}

func (p *pageSizes) next(last int64, cut bool) int64 {
	switch {
	case p.limit <= 0:
		return listPageSize
	case cut:
		return max(1, last/4)
	case p.objects == 0 || p.bytes == 0:
		return listPageSize
	}
	return min(max(1, p.limit/2*p.objects/p.bytes), listPageSize)
}

// CacheMeter counts what one cluster's cache holds, and stops the cluster
// once it holds more than its CacheLimits. Every cluster's app provides its
// meter; a module may set the cluster's own limits (SetLimits) from its
// constructor or invoke, before the manager starts.
//
// What it promises:
//   - every object an informer of the cluster's cache stores is counted
//     from the moment it is stored until it leaves the store, and so is
//     every object a Holding of the cluster counts (Hold): what the
//     cluster makes the manager hold outside its cache;
//   - a list is asked for in pages, and counted page by page, every
//     informer's lists together: a cluster over its limits is refused
//     before the list ends, so the manager holds no more than its limits
//     and a page, but while a relist replaces a store, both are held;
//   - a page takes at most pageBytes on the wire (an eighth of the byte
//     limit, 4 to 16 MiB), whatever the size of the objects: one that
//     would take more is cut and asked for again with fewer objects;
//   - with the registry's CacheBudget, what every cluster holds together
//     stays under it: past it, the largest running cluster is stopped;
//   - no single answer of the cluster's API server but a watch may be
//     larger than twice the byte limit (a server that ignores pages);
//   - once over, the cluster's watches are cut and no list or watch is
//     asked for again: what it holds stops growing until the app is down.
type CacheMeter struct {
	cluster  string
	defaults CacheLimits

	maxObjects, maxBytes atomic.Int64 // <= 0: none
	objects, bytes       atomic.Int64 // held, every informer together
	// listing and listingB are what the lists under way hold beyond the
	// stores they will replace, every informer's together.
	listing, listingB atomic.Int64

	objectsGauge, bytesGauge prometheus.Gauge

	// budget is the registry's budget of every cluster together (nil:
	// none), and budgeted what this meter counts in it.
	budget   *cacheBudget
	budgeted atomic.Int64

	mu        sync.Mutex
	informers map[*informerUsage]struct{}
	watches   map[*drainOnStop]struct{}
	err       error
	exceeded  chan struct{}
}

// informerUsage is what one informer of the cluster holds.
type informerUsage struct {
	what           string
	objects, bytes atomic.Int64
	// listed and listedB are of a list under way: only its reflector
	// writes them. extra and extraB are what they add to the meter's
	// listing totals: what they hold beyond the store they will replace.
	listed, listedB atomic.Int64
	extra, extraB   atomic.Int64
}

// held is the bytes u's informer holds, or the list under way, whichever
// is more.
func (u *informerUsage) held() int64 { return max(u.bytes.Load(), u.listedB.Load()) }

// newCacheMeter returns the meter of the named cluster, with defaults
// (already resolved against the package's) as its limits.
func newCacheMeter(cluster string, defaults CacheLimits) *CacheMeter {
	m := &CacheMeter{
		cluster:      cluster,
		defaults:     defaults,
		objectsGauge: cacheObjects.WithLabelValues(cluster),
		bytesGauge:   cacheBytes.WithLabelValues(cluster),
		informers:    map[*informerUsage]struct{}{},
		watches:      map[*drainOnStop]struct{}{},
		exceeded:     make(chan struct{}),
	}
	m.objectsGauge.Set(0)
	m.bytesGauge.Set(0)
	cacheLimitExceeded.WithLabelValues(cluster) // served at 0 until it counts
	m.SetLimits(CacheLimits{})
	return m
}

// SetLimits sets the cluster's limits; a field left 0 takes the
// registry's default. Set them before the manager starts: a lower limit
// set later is first checked at the next change of an object.
func (m *CacheMeter) SetLimits(l CacheLimits) {
	l = l.over(m.defaults)
	m.maxObjects.Store(l.Objects)
	m.maxBytes.Store(l.Bytes)
	cacheLimitBytes.WithLabelValues(m.cluster).Set(float64(max(l.Bytes, 0)))
}

// Limits are the cluster's limits in force (negative: none).
func (m *CacheMeter) Limits() CacheLimits {
	return CacheLimits{Objects: m.maxObjects.Load(), Bytes: m.maxBytes.Load()}
}

// Usage is what the cluster's cache holds now.
func (m *CacheMeter) Usage() (objects, bytes int64) {
	return m.objects.Load(), m.bytes.Load()
}

// Exceeded is closed once the cluster's objects went past its limits;
// Err then says by how much.
func (m *CacheMeter) Exceeded() <-chan struct{} { return m.exceeded }

// Err is the error, wrapping ErrCacheLimit, of a cluster past its
// limits, or nil.
func (m *CacheMeter) Err() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// forget deletes the cluster's series, once its app is down. The count of
// limits exceeded stays if it counted, as the registry's failures do,
// until the cluster is forgotten (RemoteClusterRegistry.Forget).
func (m *CacheMeter) forget() {
	m.budget.leave(m)
	cacheObjects.DeleteLabelValues(m.cluster)
	cacheBytes.DeleteLabelValues(m.cluster)
	cacheLimitBytes.DeleteLabelValues(m.cluster)
	if m.Err() == nil {
		cacheLimitExceeded.DeleteLabelValues(m.cluster)
	}
}

// newInformer is the NewInformer of the cluster's cache: a directInformer
// whose objects m counts.
func (m *CacheMeter) newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	return newMeteredInformer(m, lw, obj, resync, indexers)
}

// track adds an informer of the type what; nil for a nil meter.
func (m *CacheMeter) track(what string) *informerUsage {
	if m == nil {
		return nil
	}
	u := &informerUsage{what: what}
	m.mu.Lock()
	m.informers[u] = struct{}{}
	m.mu.Unlock()
	return u
}

// untrack takes a stopped informer's objects off the count.
func (m *CacheMeter) untrack(u *informerUsage) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.informers, u)
	m.mu.Unlock()
	m.listDone(u)
	m.add(u, -u.objects.Load(), -u.bytes.Load())
}

// add counts objects and bytes more (or fewer) held by u's informer, and
// stops the cluster if that takes it past its limits.
func (m *CacheMeter) add(u *informerUsage, objects, bytes int64) {
	if m == nil || (objects == 0 && bytes == 0) {
		return
	}
	// Never below nothing: a delete counts the object its event carries,
	// which a server could make larger than the one the store held.
	if n := u.objects.Add(objects); n < 0 {
		u.objects.Add(-n)
		objects -= n
	}
	if n := u.bytes.Add(bytes); n < 0 {
		u.bytes.Add(-n)
		bytes -= n
	}
	o, b := m.objects.Add(objects), m.bytes.Add(bytes)
	m.objectsGauge.Set(float64(o))
	m.bytesGauge.Set(float64(b))
	if objects > 0 || bytes > 0 {
		m.check(o, b, "")
	}
	m.budget.add(m, bytes)
}

// listed counts a page of a list under way by u's informer, which will
// replace what u holds: it fails, and stops the cluster, once the page
// takes the cluster past its limits. What counts is what every informer
// holds, and beyond it what the lists under way hold more than the stores
// they will replace, every informer's together. listDone ends the list.
func (m *CacheMeter) listed(u *informerUsage, page runtime.Object) error {
	if m == nil {
		return nil
	}
	if err := m.Err(); err != nil {
		return err
	}
	var objects, bytes int64
	if err := meta.EachListItem(page, func(o runtime.Object) error {
		objects++
		bytes += encodedSize(o)
		return nil
	}); err != nil {
		return fmt.Errorf("counting a page of %s: %w", u.what, err)
	}
	listed, listedB := u.listed.Add(objects), u.listedB.Add(bytes)
	extra, extraB := max(0, listed-u.objects.Load()), max(0, listedB-u.bytes.Load())
	o := m.objects.Load() + m.listing.Add(extra-u.extra.Swap(extra))
	moreB := extraB - u.extraB.Swap(extraB)
	b := m.bytes.Load() + m.listingB.Add(moreB)
	if err := m.check(o, b, fmt.Sprintf(" (listing %s)", u.what)); err != nil {
		return err
	}
	m.budget.add(m, moreB)
	return m.Err() // past the budget, and the largest
}

// listDone ends the list under way of u's informer, if any: its store now
// holds what it listed, or the list was given up.
func (m *CacheMeter) listDone(u *informerUsage) {
	if m == nil {
		return
	}
	// The informer's end and its reflector's last list may meet here.
	m.listing.Add(-u.extra.Swap(0))
	lessB := u.extraB.Swap(0)
	m.listingB.Add(-lessB)
	m.budget.add(m, -lessB)
	u.listed.Store(0)
	u.listedB.Store(0)
}

// check stops the cluster if objects or bytes are past its limits, and
// returns the error it stopped with.
func (m *CacheMeter) check(objects, bytes int64, while string) error {
	maxO, maxB := m.maxObjects.Load(), m.maxBytes.Load()
	switch {
	case maxO > 0 && objects > maxO:
		return m.exceed(fmt.Errorf("%w: %d objects%s, more than the limit of %d%s",
			ErrCacheLimit, objects, while, maxO, m.largest()))
	case maxB > 0 && bytes > maxB:
		return m.exceed(fmt.Errorf("%w: %s of objects%s, more than the limit of %s%s",
			ErrCacheLimit, pastSize(bytes, maxB), while, byteSize(maxB), m.largest()))
	}
	return nil
}

// largest names the type whose informer holds the most bytes.
func (m *CacheMeter) largest() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var top *informerUsage
	for u := range m.informers {
		if top == nil || u.held() > top.held() {
			top = u
		}
	}
	if top == nil {
		return ""
	}
	return fmt.Sprintf("; the most in %s: %d objects, %s", top.what,
		max(top.objects.Load(), top.listed.Load()), byteSize(top.held()))
}

// exceed records err as why the cluster is over its limits (the first
// error stays), cuts its watches and tells Exceeded; it returns the error
// recorded.
func (m *CacheMeter) exceed(err error) error {
	m.mu.Lock()
	if m.err != nil {
		err = m.err
		m.mu.Unlock()
		return err
	}
	m.err = err
	close(m.exceeded)
	watches := make([]*drainOnStop, 0, len(m.watches))
	for w := range m.watches {
		watches = append(watches, w)
	}
	m.mu.Unlock()
	cacheLimitExceeded.WithLabelValues(m.cluster).Inc()
	for _, w := range watches {
		w.Stop()
	}
	return err
}

// watching records a watch to cut once the cluster is over its limits; it
// fails if the cluster is over already.
func (m *CacheMeter) watching(w *drainOnStop) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	m.watches[w] = struct{}{}
	return nil
}

func (m *CacheMeter) unwatch(w *drainOnStop) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.watches, w)
	m.mu.Unlock()
}

// encodedSize is about how many bytes obj takes encoded, without its
// managed fields: a cache drops them, unless Options.KeepManagedFields,
// and a list's objects still have them.
func encodedSize(obj any) int64 {
	switch o := obj.(type) {
	case toolscache.DeletedFinalStateUnknown:
		return encodedSize(o.Obj)
	case *unstructured.Unstructured:
		return jsonSize(o.Object, true)
	case interface{ Size() int }: // protobuf: every built-in type, and metadata
		n := int64(o.Size())
		if m, ok := obj.(metav1.Object); ok {
			for i := range m.GetManagedFields() {
				// Each entry: its bytes, their length, and the field's
				// two-byte tag (ObjectMeta's field 17).
				e := m.GetManagedFields()[i].Size()
				n -= int64(e + varintSize(e) + 2)
			}
		}
		return max(n, 0)
	case runtime.Object: // a Go type of a module's own scheme
		if data, err := json.Marshal(o); err == nil {
			return int64(len(data))
		}
	}
	return 0
}

// varintSize is how many bytes n takes as a protobuf varint.
func varintSize(n int) int {
	size := 1
	for ; n >= 0x80; n >>= 7 {
		size++
	}
	return size
}

// jsonSize estimates how many bytes v takes as JSON, leaving out
// metadata.managedFields when top is set.
func jsonSize(v any, top bool) int64 {
	switch v := v.(type) {
	case map[string]any:
		n := int64(2)
		for k, e := range v {
			if top && k == "metadata" {
				if md, ok := e.(map[string]any); ok {
					n += int64(len(k)) + 4 + metadataSize(md)
					continue
				}
			}
			n += int64(len(k)) + 4 + jsonSize(e, false)
		}
		return n
	case []any:
		n := int64(2)
		for _, e := range v {
			n += jsonSize(e, false) + 1
		}
		return n
	case string:
		return int64(len(v)) + 2
	case nil:
		return 4
	default: // numbers and booleans
		return 8
	}
}

func metadataSize(md map[string]any) int64 {
	n := int64(2)
	for k, e := range md {
		if k != "managedFields" {
			n += int64(len(k)) + 4 + jsonSize(e, false)
		}
	}
	return n
}

// pastSize writes n, past limit, for a person to read: in bytes where
// both round to the same.
func pastSize(n, limit int64) string {
	if byteSize(n) == byteSize(limit) {
		return fmt.Sprintf("%d bytes", n) // over by less than the rounding
	}
	return byteSize(n)
}

// byteSize writes n bytes for a person to read.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// capAnswers bounds every answer of the cluster's API server but a watch
// to twice m's byte limit, read at the request: a list that a server sends
// whole, pages asked for or not, is cut there, and the cluster is over its
// limits.
func (m *CacheMeter) capAnswers(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		maxB := m.maxBytes.Load()
		if err != nil || maxB <= 0 || req.Method != http.MethodGet || isWatch(req) {
			return resp, err
		}
		body := &cappedBody{ReadCloser: resp.Body, left: 2 * maxB, meter: m, url: req.URL.Path}
		if page, ok := req.Context().Value(pageAnswerKey{}).(*pageAnswer); ok && page.limit > 0 && page.limit < body.left {
			body.left, body.page = page.limit, page
		}
		resp.Body = body
		return resp, nil
	})
}

func isWatch(req *http.Request) bool {
	q := req.URL.Query().Get("watch")
	return q == "true" || q == "1"
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// cappedBody is an answer's body that fails past left bytes: a page of a
// list past its pageAnswer's limit with errPageTooLarge, any other answer
// as a cluster over its limits.
type cappedBody struct {
	io.ReadCloser
	left  int64
	meter *CacheMeter
	url   string
	page  *pageAnswer // nil: not a page
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.ReadCloser.Read(one[:]); n == 0 && err != nil {
			return 0, err // the answer ends right at the cap
		}
		if b.page != nil {
			b.page.cut.Store(true)
			return 0, fmt.Errorf("GET %s: %w (%s)", b.url, errPageTooLarge, byteSize(b.page.limit))
		}
		return 0, b.meter.exceed(fmt.Errorf("%w: the answer to GET %s is larger than %s, twice the byte limit",
			ErrCacheLimit, b.url, byteSize(2*b.meter.maxBytes.Load())))
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.page != nil {
		b.page.read.Add(int64(n))
	}
	return n, err
}
