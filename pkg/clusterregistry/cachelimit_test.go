package clusterregistry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// hoardNamespace is a namespace of the attacker's for a test's large
// ConfigMaps, whose ConfigMaps go when the test ends.
func hoardNamespace(t *testing.T, attacker client.Client) string {
	t.Helper()
	ns := unique("hoard")
	ensureNamespace(t, attacker, ns)
	t.Cleanup(func() {
		if err := attacker.DeleteAllOf(context.Background(), &corev1.ConfigMap{}, client.InNamespace(ns)); err != nil {
			t.Errorf("deleting the hoard: %v", err)
		}
	})
	return ns
}

// limitsFor is a module that gives the named cluster its own cache limits.
func limitsFor(cluster string, limits clusterregistry.CacheLimits) fx.Option {
	return fx.Invoke(func(p clusterregistry.Tenant) {
		if p.ClusterName == cluster {
			p.CacheMeter.SetLimits(limits)
		}
	})
}

// A tenant that writes more than the manager may hold of it is stopped,
// reported Failed with the figures, and counted; another cluster of the
// same registry copies on as fast as before, during the attack and after.
// Spawned again, the tenant is refused at once, and the manager reads no
// more of it than its limits let in.
func TestAClusterPastItsCacheLimitsStopsAlone(t *testing.T) {
	const (
		limit = 1 << 20
		big   = 256 << 10
	)
	loud, quiet := unique("loud"), unique("quiet")
	r := newRegistry(t, clusterregistry.Options{}, copyModule, limitsFor(loud, clusterregistry.CacheLimits{Bytes: limit}))
	seen := subscribe(t, r)
	host := newClient(t, shared.Host)
	ensureNamespace(t, host, copiesNamespace)
	attacker, other := newClient(t, shared.Tenants[0]), newClient(t, shared.Tenants[1])
	ns := hoardNamespace(t, attacker)

	for _, name := range []string{loud, quiet} {
		cfg := shared.Tenants[0].Config()
		if name == quiet {
			cfg = shared.Tenants[1].Config()
		}
		if err := r.Spawn(name, cfg); err != nil {
			t.Fatalf("Spawn %s: %v", name, err)
		}
	}
	if v := gauge(t, "tenantry_registry_cache_objects", map[string]string{"cluster": quiet}); v < 1 {
		t.Fatalf("cache_objects{%s} = %v, want the tenant's ConfigMaps counted", quiet, v)
	}
	if v := gauge(t, "tenantry_registry_cache_limit_bytes", map[string]string{"cluster": loud}); v != limit {
		t.Fatalf("cache_limit_bytes{%s} = %v, want %d", loud, v, limit)
	}

	// The attack: 256 KiB ConfigMaps until the registry gives up on the
	// tenant; the other tenant's copies while it runs, and after.
	attack := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if s, err := r.Status(loud); err != nil || s.State != clusterregistry.StateRunning || i == 40 {
				attack <- err
				return
			}
			if err := createBig(attacker, ns, i, i+1, big); err != nil {
				attack <- err
				return
			}
		}
	}()
	for _, when := range []string{"during", "after"} {
		name := unique(when)
		began := time.Now()
		createLabelled(t, other, name, when)
		expectCopy(t, host, quiet, name, when)
		t.Logf("%s copied %s in %s %s the attack", quiet, name, time.Since(began), when)
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("%s copied in %s %s the attack on %s, want under 5s", quiet, took, when, loud)
		}
		if when == "during" {
			if err := <-attack; err != nil {
				t.Fatalf("the attack: %v", err)
			}
		}
	}
	failed := seen.waitFor(t, loud, clusterregistry.StateFailed)
	if !errors.Is(failed.Err, clusterregistry.ErrCacheLimit) || !strings.Contains(failed.Err.Error(), "ConfigMap") {
		t.Fatalf("Failed with %v, want ErrCacheLimit naming the ConfigMaps", failed.Err)
	}
	t.Logf("%s failed: %v", loud, failed.Err)
	if v := metricValue(t, "tenantry_registry_cache_limit_exceeded_total", map[string]string{"cluster": loud}); v < 1 {
		t.Errorf("cache_limit_exceeded_total{%s} = %v, want at least 1", loud, v)
	}
	if s, err := r.Status(quiet); err != nil || s.State != clusterregistry.StateRunning {
		t.Fatalf("%s is %v (%v), want Running", quiet, s.State, err)
	}

	// Holding ten times its limit and more, the tenant is refused at once when
	// spawned again, and no more than twice the limit of it is read.
	if err := createBig(attacker, ns, 40, 80, big); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(t.Context(), loud); err != nil {
		t.Fatal(err)
	}
	cfg, read := countListBytes(shared.Tenants[0].Config())
	began := time.Now()
	err := r.Spawn(loud, cfg)
	if !errors.Is(err, clusterregistry.ErrCacheLimit) {
		t.Fatalf("Spawn of a tenant holding 10 MiB under a 1 MiB limit: %v, want ErrCacheLimit", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("the refused Spawn took %s, want it well under the spawn timeout", took)
	}
	if n := read.Load(); n > 2*limit+64<<10 {
		t.Errorf("read %d bytes of list answers, want at most twice the 1 MiB limit", n)
	}
	if _, err := r.Status(loud); !errors.Is(err, clusterregistry.ErrNotExist) {
		t.Errorf("after the refused Spawn: %v, want the name free", err)
	}
}

// A cluster lists in pages and stops at the page that takes it over its
// object limit, whatever is left to list.
func TestAClusterIsListedInPagesAndNoFurther(t *testing.T) {
	c := newClient(t, shared.Tenants[1])
	ns := unique("many")
	ensureNamespace(t, c, ns)
	t.Cleanup(func() {
		if err := c.DeleteAllOf(context.Background(), &corev1.ConfigMap{}, client.InNamespace(ns)); err != nil {
			t.Errorf("deleting the ConfigMaps: %v", err)
		}
	})
	if err := createBig(c, ns, 0, 1200, 16); err != nil {
		t.Fatal(err)
	}

	name := unique("paged")
	r := newRegistry(t, clusterregistry.Options{CacheLimits: clusterregistry.CacheLimits{Objects: 100}}, copyModule)
	cfg, pages := countListPages(shared.Tenants[1].Config(), "/api/v1/configmaps")
	err := r.Spawn(name, cfg)
	if !errors.Is(err, clusterregistry.ErrCacheLimit) || !strings.Contains(err.Error(), "more than the limit of 100") {
		t.Fatalf("Spawn: %v, want ErrCacheLimit over 100 objects", err)
	}
	// A list at version 0 would be served whole from the watch cache.
	if got := pages.get(); len(got) != 1 || !strings.Contains(got[0], "limit=500") || strings.Contains(got[0], "resourceVersion=0") {
		t.Errorf("ConfigMap lists asked for: %q, want one page of 500 (of at least 3), at the latest version", got)
	}
}

// A list of large objects is read in pages that each take at most a page's
// bytes on the wire (an eighth of the byte limit, at least 4 MiB): a page
// past it is cut and asked for again with fewer objects, and the cluster,
// within its limits, runs.
func TestAListOfLargeObjectsIsReadInSmallPages(t *testing.T) {
	const (
		limit    = 40 << 20 // pages of 5 MiB
		pageMost = limit / 8
		big      = 900 << 10
	)
	c := newClient(t, shared.Tenants[1])
	ns := unique("large")
	ensureNamespace(t, c, ns)
	t.Cleanup(func() {
		if err := c.DeleteAllOf(context.Background(), &corev1.ConfigMap{}, client.InNamespace(ns)); err != nil {
			t.Errorf("deleting the ConfigMaps: %v", err)
		}
	})
	if err := createBig(c, ns, 0, 24, big); err != nil { // 21 MiB
		t.Fatal(err)
	}
	cutBefore := metricValue(t, "tenantry_registry_list_pages_cut_total", nil)
	name := unique("large")
	r := newRegistry(t, clusterregistry.Options{CacheLimits: clusterregistry.CacheLimits{Bytes: limit}}, copyModule)
	cfg, largest := largestListAnswer(shared.Tenants[1].Config(), "/api/v1/configmaps")
	if err := r.Spawn(name, cfg); err != nil {
		t.Fatalf("Spawn of a cluster within its limits: %v", err)
	}
	// The transport reads a byte past a page's bytes to know the answer
	// is longer.
	if got := largest.Load(); got > pageMost+8 {
		t.Errorf("the largest answer to a ConfigMap list took %d bytes, more than a page's %d", got, pageMost)
	}
	if cut := metricValue(t, "tenantry_registry_list_pages_cut_total", nil) - cutBefore; cut < 1 {
		t.Errorf("%v pages cut: the first page of 500 objects of 900 KiB fits no page", cut)
	}
	if held := gauge(t, "tenantry_registry_cache_bytes", map[string]string{"cluster": name}); held < 24*big {
		t.Errorf("the cache holds %v bytes, want the 24 ConfigMaps of %d", held, big)
	}
}

// largestListAnswer is cfg, and the most bytes read of one answer to its
// list requests to path.
func largestListAnswer(cfg *rest.Config, path string) (*rest.Config, *atomic.Int64) {
	var most atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && req.Method == http.MethodGet && req.URL.Path == path && req.URL.Query().Get("watch") == "" {
				resp.Body = &countingBody{ReadCloser: resp.Body, n: new(atomic.Int64), most: &most}
			}
			return resp, err
		})
	})
	return cfg, &most
}

// createBig creates ConfigMaps big-<from> ... big-<to-1> in ns, each with
// size bytes of data, eight at a time; a name taken already is skipped.
func createBig(c client.Client, ns string, from, to, size int) error {
	data := strings.Repeat("x", size)
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		errs = make(chan error, 8)
	)
	next.Store(int64(from))
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < to; i = int(next.Add(1) - 1) {
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("big-%d", i)},
					Data:       map[string]string{"data": data},
				}
				if err := c.Create(context.Background(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("creating ConfigMap %s/%s: %w", ns, cm.Name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs)
}

// countListBytes is cfg, and the bytes read of the answers to its list
// requests (GETs that are not watches).
func countListBytes(cfg *rest.Config) (*rest.Config, *atomic.Int64) {
	var n atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && req.Method == http.MethodGet && req.URL.Query().Get("watch") == "" {
				resp.Body = &countingBody{ReadCloser: resp.Body, n: &n}
			}
			return resp, err
		})
	})
	return cfg, &n
}

// pageLog records the queries of a cluster's requests to one path.
type pageLog struct {
	mu    sync.Mutex
	pages []string
}

func (l *pageLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.pages...)
}

// countListPages is cfg, and the queries of its list requests to path.
func countListPages(cfg *rest.Config, path string) (*rest.Config, *pageLog) {
	l := &pageLog{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && req.URL.Path == path && req.URL.Query().Get("watch") == "" {
				l.mu.Lock()
				l.pages = append(l.pages, req.URL.RawQuery)
				l.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg, l
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// countingBody counts the bytes read into n, and, if most is set, keeps
// there the most that n came to.
type countingBody struct {
	io.ReadCloser
	n    *atomic.Int64
	most *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	total := b.n.Add(int64(n))
	for b.most != nil {
		if m := b.most.Load(); total <= m || b.most.CompareAndSwap(m, total) {
			break
		}
	}
	return n, err
}

// A cluster that failed stays in the registry, Failed, until it is stopped
// or spawned again; its app, and every object its cache held, do not: a
// value its app alone holds is collected once it failed.
func TestAFailedClusterLetsItsAppGo(t *testing.T) {
	loud := unique("failed")
	var collected atomic.Int32
	held := fx.Invoke(func(lc fx.Lifecycle, p clusterregistry.Tenant) {
		if p.ClusterName != loud {
			return
		}
		v := new([64]byte) // held by the app's lifecycle, as its caches are
		lc.Append(fx.Hook{OnStop: func(context.Context) error { v[0]++; return nil }})
		runtime.AddCleanup(v, func(*atomic.Int32) { collected.Add(1) }, &collected)
	})
	r := newRegistry(t, clusterregistry.Options{}, copyModule, held, limitsFor(loud, clusterregistry.CacheLimits{Bytes: 1 << 20}))
	seen := subscribe(t, r)
	attacker := newClient(t, shared.Tenants[0])
	ns := hoardNamespace(t, attacker)
	if err := r.Spawn(loud, shared.Tenants[0].Config()); err != nil {
		t.Fatal(err)
	}
	if err := createBig(attacker, ns, 0, 8, 256<<10); err != nil {
		t.Fatal(err)
	}
	seen.waitFor(t, loud, clusterregistry.StateFailed)
	deadline := time.Now().Add(30 * time.Second)
	for collected.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the failed cluster's app is still held 30s after it failed")
		}
		runtime.GC()
		time.Sleep(50 * time.Millisecond) // cleanups run on a goroutine of their own
	}
	if s, err := r.Status(loud); err != nil || s.State != clusterregistry.StateFailed {
		t.Errorf("the failed cluster is %v (%v), want Failed still", s.State, err)
	}
}
