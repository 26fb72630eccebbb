package clusterregistry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// newDirectInformer builds a directInformer whose objects no meter counts.
func newDirectInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	return newMeteredInformer(nil, lw, obj, resync, indexers)
}

// newMeteredInformer is the NewInformer of every cluster's cache (through
// its CacheMeter). It builds a directInformer: client-go's reflector, whose
// changes go into the store and to every handler on the reflector's own
// goroutine, with every object it stores counted by m (when not nil).
//
// client-go's shared informer gives each handler a goroutine pair and a
// buffer of 1,024 notifications (16 KiB) that is never given back, and
// its controller a queue, a goroutine that drains it and one that closes
// it. A cluster's manager adds a handler per controller and watched type
// and runs an informer per type: at 1,000 clusters those buffers alone
// were a fifth of the manager's heap, and those goroutines' stacks a
// fifth of its resident memory. The handlers here are controller-runtime's,
// which only put requests on a queue, so they need none of it.
func newMeteredInformer(m *CacheMeter, lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	if indexers == nil {
		indexers = toolscache.Indexers{} // an Indexer, not a bare Store
	}
	i := &directInformer{
		meter: m, usage: m.track(typeName(obj)),
		objType: obj, resync: resync,
		indexer: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, indexers),
		synced:  make(chan struct{}),
	}
	i.lw = drainingListerWatcher{
		ListerWatcherWithContext: toolscache.ToListerWatcherWithContext(lw),
		given:                    lw,
		meter:                    m,
		usage:                    i.usage,
	}
	return i
}

// typeName names obj's type for a person: its kind and group, else its Go
// type.
func typeName(obj runtime.Object) string {
	if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.Kind != "" {
		return gvk.GroupKind().String()
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", obj), "*")
}

// directInformer is a SharedIndexInformer that calls its event handlers
// itself, one after the other, as its reflector hands it each change,
// instead of through a queue, a buffer and a goroutine per handler.
//
// What changes for a handler:
//   - it must return quickly, and never wait for the informer: a slow
//     handler holds back every other handler of the informer, and the
//     watch; one that reads the cache (which waits for informers to sync)
//     or adds or removes a handler of the same informer can deadlock it;
//   - a handler added while events flow may see an object twice, once in
//     the replay of the informer's store that every new handler gets and
//     once as the event that put it there arrives; a level-driven handler,
//     as controller-runtime's are, does not tell the difference;
//   - a handler's own resync period is not honoured: every handler gets
//     the informer's resyncs.
type directInformer struct {
	// meter counts what the store holds, as usage; both nil when nothing
	// counts it.
	meter *CacheMeter
	usage *informerUsage

	lw        toolscache.ListerWatcher
	objType   runtime.Object
	resync    time.Duration
	indexer   toolscache.Indexer
	transform toolscache.TransformFunc
	// reflector is set by Run; LastSyncResourceVersion reads it.
	reflector atomic.Pointer[toolscache.Reflector]

	// mu is held while events are handed out, and while the handlers
	// change, so that a new handler's replay and the events that follow it
	// do not interleave.
	mu       sync.Mutex
	handlers []*directRegistration
	started  bool

	// synced is closed once the first list is in the store and every
	// handler has been told of it.
	synced   chan struct{}
	syncOnce sync.Once
	stopped  atomic.Bool
}

var _ toolscache.SharedIndexInformer = &directInformer{}

// directRegistration is a handler added to a directInformer.
type directRegistration struct {
	informer *directInformer
	handler  toolscache.ResourceEventHandler
}

// HasSynced implements toolscache.ResourceEventHandlerRegistration. A
// handler has seen everything in the initial list once the informer has
// synced: the informer's queue counts an object as handled only when every
// handler has had it, and a handler added later has the store replayed to
// it before AddEventHandler returns.
func (r *directRegistration) HasSynced() bool { return r.informer.HasSynced() }

// HasSyncedChecker implements toolscache.ResourceEventHandlerRegistration.
func (r *directRegistration) HasSyncedChecker() toolscache.DoneChecker {
	return r.informer.HasSyncedChecker()
}

// directHandlers hands the informer's events to its handlers.
type directHandlers directInformer

func (h *directHandlers) OnAdd(obj any, isInInitialList bool) {
	if h.meter != nil {
		h.meter.add(h.usage, 1, encodedSize(obj))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.handlers {
		r.handler.OnAdd(obj, isInInitialList)
	}
}

func (h *directHandlers) OnUpdate(oldObj, newObj any) {
	if h.meter != nil && oldObj != newObj {
		h.meter.add(h.usage, 0, encodedSize(newObj)-encodedSize(oldObj))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.handlers {
		r.handler.OnUpdate(oldObj, newObj)
	}
}

func (h *directHandlers) OnDelete(obj any) {
	if h.meter != nil {
		h.meter.add(h.usage, -1, -encodedSize(obj))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.handlers {
		r.handler.OnDelete(obj)
	}
}

// AddEventHandler implements toolscache.SharedInformer: handler is told
// of every object in the store (as an Add in the initial list) before it
// is told of any change.
func (i *directInformer) AddEventHandler(handler toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if i.stopped.Load() {
		return nil, fmt.Errorf("handler %v was not added to the informer, which has stopped", handler)
	}
	r := &directRegistration{informer: i, handler: handler}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, obj := range i.indexer.List() {
		handler.OnAdd(obj, true)
	}
	i.handlers = append(i.handlers, r)
	return r, nil
}

// AddEventHandlerWithResyncPeriod implements toolscache.SharedInformer;
// the handler gets the informer's resyncs, whatever its own period.
func (i *directInformer) AddEventHandlerWithResyncPeriod(handler toolscache.ResourceEventHandler, _ time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandler(handler)
}

// AddEventHandlerWithOptions implements toolscache.SharedInformer; the
// handler gets the informer's resyncs, whatever its options ask, and logs
// nothing of its own.
func (i *directInformer) AddEventHandlerWithOptions(handler toolscache.ResourceEventHandler, _ toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandler(handler)
}

// RemoveEventHandler implements toolscache.SharedInformer. Unlike
// client-go's, once it returns the handler is called no more.
func (i *directInformer) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(*directRegistration)
	if !ok || r.informer != i {
		return fmt.Errorf("registration %v does not belong to this informer", handle)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.handlers = slices.DeleteFunc(i.handlers, func(h *directRegistration) bool { return h == r })
	return nil
}

// GetStore implements toolscache.SharedInformer.
func (i *directInformer) GetStore() toolscache.Store { return i.indexer }

// GetIndexer implements toolscache.SharedIndexInformer.
func (i *directInformer) GetIndexer() toolscache.Indexer { return i.indexer }

// AddIndexers implements toolscache.SharedIndexInformer.
func (i *directInformer) AddIndexers(indexers toolscache.Indexers) error {
	return i.indexer.AddIndexers(indexers)
}

// GetController implements toolscache.SharedInformer: the informer is
// its own controller.
func (i *directInformer) GetController() toolscache.Controller { return i }

// Run implements toolscache.SharedInformer.
func (i *directInformer) Run(stopCh <-chan struct{}) {
	i.RunWithContext(wait.ContextForChannel(stopCh))
}

// RunWithContext implements toolscache.SharedInformer: it lists and
// watches, on the caller's goroutine, until ctx ends. A second call
// returns at once.
func (i *directInformer) RunWithContext(ctx context.Context) {
	i.mu.Lock()
	if i.started || i.stopped.Load() {
		i.mu.Unlock()
		return
	}
	i.started = true
	i.mu.Unlock()
	defer i.meter.untrack(i.usage) // its store goes with it
	defer i.stopped.Store(true)
	r := toolscache.NewReflectorWithOptions(i.lw, i.objType, (*directStore)(i), toolscache.ReflectorOptions{
		TypeDescription: typeName(i.objType),
		ResyncPeriod:    i.resync,
	})
	i.reflector.Store(r)
	r.RunWithContext(ctx)
}

// HasSynced implements toolscache.SharedInformer.
func (i *directInformer) HasSynced() bool { return toolscache.IsDone(i.HasSyncedChecker()) }

// HasSyncedChecker implements toolscache.SharedInformer.
func (i *directInformer) HasSyncedChecker() toolscache.DoneChecker { return syncedChecker{i} }

// syncedChecker is a directInformer's DoneChecker.
type syncedChecker struct{ i *directInformer }

func (c syncedChecker) Name() string          { return typeName(c.i.objType) + " informer" }
func (c syncedChecker) Done() <-chan struct{} { return c.i.synced }

// LastSyncResourceVersion implements toolscache.SharedInformer.
func (i *directInformer) LastSyncResourceVersion() string {
	if r := i.reflector.Load(); r != nil {
		return r.LastSyncResourceVersion()
	}
	return ""
}

// directStore is what a directInformer's reflector writes to: each change
// goes into the informer's store, then to its handlers, as client-go's
// informer does with each change it takes off its queue.
type directStore directInformer

var _ toolscache.ReflectorStore = &directStore{}

// transformed is obj as the informer's transform makes it.
func (s *directStore) transformed(obj any) (any, error) {
	if s.transform == nil {
		return obj, nil
	}
	obj, err := s.transform(obj)
	if err != nil {
		return nil, fmt.Errorf("transforming a %s: %w", typeName(s.objType), err)
	}
	return obj, nil
}

func (s *directStore) Add(obj any) error    { return s.put(obj) }
func (s *directStore) Update(obj any) error { return s.put(obj) }

// put stores obj, as an update of the object it replaces or an add.
func (s *directStore) put(obj any) error {
	obj, err := s.transformed(obj)
	if err != nil {
		return err
	}
	old, exists, err := s.indexer.Get(obj)
	if err != nil {
		return err
	}
	if exists {
		if err := s.indexer.Update(obj); err != nil {
			return err
		}
		(*directHandlers)(s).OnUpdate(old, obj)
		return nil
	}
	if err := s.indexer.Add(obj); err != nil {
		return err
	}
	(*directHandlers)(s).OnAdd(obj, false)
	return nil
}

func (s *directStore) Delete(obj any) error {
	obj, err := s.transformed(obj)
	if err != nil {
		return err
	}
	if err := s.indexer.Delete(obj); err != nil {
		return err
	}
	(*directHandlers)(s).OnDelete(obj)
	return nil
}

// Replace takes a whole list, the first or one after a watch that could
// not go on. As client-go's informer does, it tells first of what the
// list lacks, as deleted (DeletedFinalStateUnknown: the deletion itself
// was not seen), then, in the list's order, of what the store held as
// updated and of the rest as added, as in the initial list for the first.
func (s *directStore) Replace(list []any, resourceVersion string) error {
	keys := make([]string, len(list))
	listed := make(map[string]bool, len(list))
	for n, obj := range list {
		obj, err := s.transformed(obj)
		if err != nil {
			return err
		}
		if keys[n], err = toolscache.MetaNamespaceKeyFunc(obj); err != nil {
			return err
		}
		list[n], listed[keys[n]] = obj, true
	}
	before := map[string]any{}
	for _, key := range s.indexer.ListKeys() {
		if obj, ok, _ := s.indexer.GetByKey(key); ok {
			before[key] = obj
		}
	}
	if err := s.indexer.Replace(list, resourceVersion); err != nil {
		return err
	}
	handlers := (*directHandlers)(s)
	for key, obj := range before {
		if !listed[key] {
			handlers.OnDelete(toolscache.DeletedFinalStateUnknown{Key: key, Obj: obj})
		}
	}
	initial := !toolscache.IsDone(syncedChecker{(*directInformer)(s)})
	for n, obj := range list {
		if old, ok := before[keys[n]]; ok {
			handlers.OnUpdate(old, obj)
		} else {
			handlers.OnAdd(obj, initial)
		}
	}
	s.syncOnce.Do(func() { close(s.synced) })
	return nil
}

// Resync tells every handler of every object again, as an update to
// itself.
func (s *directStore) Resync() error {
	for _, obj := range s.indexer.List() {
		(*directHandlers)(s).OnUpdate(obj, obj)
	}
	return nil
}

// errWatchErrorHandler says that a directInformer takes no watch error
// handler: client-go's default one logs its watch errors.
var errWatchErrorHandler = errors.New("the informers of a cluster's cache take no watch error handler")

// SetWatchErrorHandler implements toolscache.SharedInformer; it is refused.
func (i *directInformer) SetWatchErrorHandler(toolscache.WatchErrorHandler) error {
	return errWatchErrorHandler
}

// SetWatchErrorHandlerWithContext implements toolscache.SharedInformer; it
// is refused.
func (i *directInformer) SetWatchErrorHandlerWithContext(toolscache.WatchErrorHandlerWithContext) error {
	return errWatchErrorHandler
}

// SetTransform implements toolscache.SharedInformer: before Run only.
func (i *directInformer) SetTransform(transform toolscache.TransformFunc) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.started {
		return errors.New("the informer has started: its transform can no longer change")
	}
	i.transform = transform
	return nil
}

// IsStopped implements toolscache.SharedInformer.
func (i *directInformer) IsStopped() bool { return i.stopped.Load() }

// drainingListerWatcher is a cluster informer's ListerWatcher: the one
// controller-runtime gives, whose watches, once stopped, are read until
// they close, and whose lists and watches are counted by the cluster's
// CacheMeter (when not nil).
//
// controller-runtime wraps the watch of a metadata-only informer in
// apimachinery's watch.Filter, whose goroutine hands each event on and
// only then looks for the next, or for the end. The reflector stops
// reading when the informer stops: an event on its way at that moment
// kept the filter's goroutine waiting for good, a goroutine left behind
// by a stopped cluster now and then (30 after 50 spawn-stop cycles).
type drainingListerWatcher struct {
	toolscache.ListerWatcherWithContext
	given toolscache.ListerWatcher
	meter *CacheMeter
	usage *informerUsage
}

func (d drainingListerWatcher) List(options metav1.ListOptions) (runtime.Object, error) {
	return d.ListWithContext(context.Background(), options)
}

// ListWithContext lists whole, as the reflector expects, but asks for
// the list in pages and counts each page with the meter as it comes, so
// that a cluster past its limits is refused before the list ends. A page
// is at most listPageSize objects, and at most the meter's pageBytes on
// the wire: its size follows the size of the objects so far, and a page
// whose answer goes past it is cut and asked for again with fewer. The
// reflector sees one list without a continue token, whatever it asked:
// it never pages itself (with a limit and a version but no match,
// the API server would read the version as Exact), and never falls back
// to a list of the first page only (client-go's pager does, on an expired
// token, with no limit, which would here be a page).
//
// A list at any version ("0") would be served whole from the API server's
// watch cache, so it is asked for at the latest version, which the cache
// serves in pages; a list at least as new as a version says so
// (NotOlderThan). A token that expires between pages starts the list
// again at the latest version.
func (d drainingListerWatcher) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	if d.meter == nil {
		return d.ListerWatcherWithContext.ListWithContext(ctx, options)
	}
	defer d.meter.listDone(d.usage)
	sizes := pageSizes{limit: d.meter.pageBytes()}
	opts := options
	opts.Limit, opts.Continue = sizes.next(0, false), ""
	switch {
	case opts.ResourceVersion == "" || opts.ResourceVersion == "0":
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	case opts.ResourceVersionMatch == "":
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	var (
		list  runtime.Object
		items []runtime.Object
	)
	for {
		if err := d.meter.Err(); err != nil {
			return nil, err
		}
		answer := &pageAnswer{limit: sizes.limit}
		page, err := d.ListerWatcherWithContext.ListWithContext(context.WithValue(ctx, pageAnswerKey{}, answer), opts)
		switch {
		case err != nil && d.meter.Err() != nil:
			return nil, d.meter.Err() // cut: its answer was larger than the meter lets in
		case err != nil && answer.cut.Load() && opts.Limit > 1:
			pagesCut.Inc()
			opts.Limit = sizes.next(opts.Limit, true)
			continue
		case err != nil && answer.cut.Load():
			// One object larger than a page may be: none is, that an
			// API server stores.
			return nil, d.meter.exceed(fmt.Errorf("%w: one object of %s takes more than %s on the wire", ErrCacheLimit, d.usage.what, byteSize(sizes.limit)))
		case err != nil && opts.Continue != "" && apierrors.IsResourceExpired(err):
			opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = "", "", ""
			list, items = nil, nil
			d.meter.listDone(d.usage)
			continue
		case err != nil:
			return nil, err
		}
		if err := d.meter.listed(d.usage, page); err != nil {
			return nil, err
		}
		sizes.bytes += answer.read.Load()
		pageItems, err := meta.ExtractListWithAlloc(page)
		if err != nil {
			return nil, fmt.Errorf("reading a page of %s: %w", d.usage.what, err)
		}
		items = append(items, pageItems...)
		sizes.objects += int64(len(pageItems))
		if list == nil {
			list = page
		}
		l, err := meta.ListAccessor(page)
		if err != nil {
			return nil, fmt.Errorf("reading a page of %s: %w", d.usage.what, err)
		}
		if l.GetContinue() == "" {
			break
		}
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = l.GetContinue(), "", ""
		opts.Limit = sizes.next(opts.Limit, false)
	}
	if err := meta.SetList(list, items); err != nil {
		return nil, fmt.Errorf("assembling the list of %s: %w", d.usage.what, err)
	}
	if l, err := meta.ListAccessor(list); err == nil {
		l.SetContinue("") // the first page's version is the list's
	}
	return list, nil
}

func (d drainingListerWatcher) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return d.WatchWithContext(context.Background(), options)
}

func (d drainingListerWatcher) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	if err := d.meter.Err(); err != nil {
		return nil, err
	}
	w, err := d.ListerWatcherWithContext.WatchWithContext(ctx, options)
	if err != nil {
		return nil, err
	}
	dw := &drainOnStop{Interface: w, meter: d.meter}
	if err := d.meter.watching(dw); err != nil {
		dw.Stop()
		return nil, err
	}
	return dw, nil
}

// IsWatchListSemanticsUnSupported keeps what the given ListerWatcher
// says of streaming lists (see watchlist.DoesClientNotSupportWatchListSemantics),
// but for a counted informer, which lists in pages: a streaming list is
// put in the store only once it has ended, whatever its size.
func (d drainingListerWatcher) IsWatchListSemanticsUnSupported() bool {
	return d.meter != nil || watchlist.DoesClientNotSupportWatchListSemantics(d.given)
}

// drainOnStop is a watch that, once stopped, is read until its result
// channel closes, which a watch's does after Stop: whatever was still on
// its way is dropped, and nothing waits to hand it on.
type drainOnStop struct {
	watch.Interface
	meter *CacheMeter
	once  sync.Once
}

func (w *drainOnStop) Stop() {
	w.Interface.Stop()
	w.once.Do(func() {
		w.meter.unwatch(w)
		go func() {
			for range w.ResultChan() {
			}
		}()
	})
}
