package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// createPaced creates n objects, object(0) to object(n-1), at rate per
// second through c, and returns when the API server answered each create,
// by name.
func createPaced(ctx context.Context, c client.Client, n int, rate float64, object func(i int) client.Object) (map[string]time.Time, error) {
	created := make(map[string]time.Time, n)
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := range n {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		obj := object(i)
		if err := c.Create(ctx, obj); err != nil {
			return nil, err
		}
		created[obj.GetName()] = time.Now()
	}
	return created, nil
}

// arrivals records when each object first satisfied a condition.
type arrivals struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// watchArrivals watches objects like obj in namespaces and records when
// each name first satisfied cond.
func watchArrivals(ctx context.Context, cfg *rest.Config, obj client.Object, namespaces []string, cond func(client.Object) bool) (*arrivals, func(), error) {
	watched := map[string]ctrlcache.Config{}
	for _, ns := range namespaces {
		watched[ns] = ctrlcache.Config{}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.DisableCompression = true // what the bench observes should cost the API server little
	c, err := ctrlcache.New(cfg, ctrlcache.Options{DefaultNamespaces: watched})
	if err != nil {
		return nil, nil, err
	}
	a := &arrivals{seen: map[string]time.Time{}}
	informer, err := c.GetInformer(ctx, obj, ctrlcache.BlockUntilSynced(false))
	if err != nil {
		return nil, nil, err
	}
	record := func(o any) {
		if co, ok := o.(client.Object); ok && cond(co) {
			a.mu.Lock()
			if _, dup := a.seen[co.GetName()]; !dup {
				a.seen[co.GetName()] = time.Now()
			}
			a.mu.Unlock()
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: record, UpdateFunc: func(_, o any) { record(o) },
	}); err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Start(cctx) }()
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return nil, nil, fmt.Errorf("watch did not sync")
	}
	return a, func() { cancel(); <-done }, nil
}

// times waits until every name in names has arrived, and returns when each
// did.
func (a *arrivals) times(ctx context.Context, names map[string]time.Time, timeout time.Duration) (map[string]time.Time, error) {
	if _, err := a.wait(ctx, names, timeout); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	at := make(map[string]time.Time, len(names))
	for name := range names {
		at[name] = a.seen[name]
	}
	return at, nil
}

// wait returns, for each name in since, how long after its time it arrived.
func (a *arrivals) wait(ctx context.Context, since map[string]time.Time, timeout time.Duration) ([]time.Duration, error) {
	var lat []time.Duration
	err := tenantrytest.Poll(ctx, 20*time.Millisecond, timeout, func(context.Context) (bool, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		lat = lat[:0]
		for name, t := range since {
			if at, ok := a.seen[name]; ok {
				lat = append(lat, at.Sub(t))
			}
		}
		return len(lat) == len(since), fmt.Errorf("%d of %d arrived", len(lat), len(since))
	})
	return lat, err
}

func waitGet(ctx context.Context, c client.Client, key client.ObjectKey, obj client.Object) error {
	return tenantrytest.Poll(ctx, 20*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, obj)
		return err == nil, err
	})
}

func parallel(workers, n int, f func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

func parallelNames(names []string, f func(i int, name string) error) error {
	return parallel(len(names), len(names), func(i int) error { return f(i, names[i]) })
}

// settledGoroutines waits, up to a few seconds, for the goroutine count to
// come down to target, and returns it.
func settledGoroutines(target int) int {
	n := runtime.NumGoroutine()
	if target == 0 {
		return n
	}
	_ = tenantrytest.Poll(context.Background(), 50*time.Millisecond, 5*time.Second, func(context.Context) (bool, error) {
		n = runtime.NumGoroutine()
		return n <= target, nil
	})
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}
