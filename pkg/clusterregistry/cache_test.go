package clusterregistry_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// The notifying cache keeps controller-runtime's promises, and one more:
// WaitForCacheSync returns only once every event handler added so far has
// seen the informer's initial list, so a cluster is ready when its
// controllers have been told of every existing object.
func TestNotifyingCacheWaitsForHandlers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	tenant := newClient(t, shared.Tenants[0])
	const existing = 40
	ns := namespaceWithConfigMaps(t, tenant, "notify", existing)

	c, err := clusterregistry.NewNotifyingCache(shared.Tenants[0].Config(), cache.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatalf("building the cache: %v", err)
	}
	// Before the cache starts, GetInformer does not wait.
	informer, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatalf("GetInformer before start: %v", err)
	}
	// A handler with work to do for each object: it takes longer to see
	// the initial list than the informer takes to sync, and than the
	// 100 ms that polling waits for.
	var seen atomic.Int32
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if o.(client.Object).GetNamespace() == ns {
				time.Sleep(5 * time.Millisecond) // the handler's work, not a wait
				seen.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatalf("AddEventHandler: %v", err)
	}
	// An informer removed before it synced is not waited for.
	if _, err := c.GetInformer(ctx, &corev1.Service{}); err != nil {
		t.Fatalf("GetInformer for Services: %v", err)
	}
	if err := c.RemoveInformer(ctx, &corev1.Service{}); err != nil {
		t.Fatalf("RemoveInformer: %v", err)
	}

	cacheCtx, stopCache := context.WithCancel(ctx)
	started := make(chan error, 1)
	go func() { started <- c.Start(cacheCtx) }()
	defer func() {
		stopCache()
		if err := <-started; err != nil {
			t.Errorf("cache Start: %v", err)
		}
	}()

	if !c.WaitForCacheSync(ctx) {
		t.Fatal("WaitForCacheSync = false")
	}
	if !reg.HasSynced() {
		t.Error("WaitForCacheSync returned before the event handler synced")
	}
	if got := seen.Load(); got != existing {
		t.Errorf("the handler saw %d ConfigMaps when the cache was synced, want %d", got, existing)
	}

	// Once started, GetInformer waits for a new informer to sync.
	secrets, err := c.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		t.Fatalf("GetInformer after start: %v", err)
	}
	if !secrets.HasSynced() {
		t.Error("GetInformer after start returned an informer that has not synced")
	}
	// ...unless asked not to, and a canceled wait says so.
	canceled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if _, err := c.GetInformer(canceled, &corev1.Endpoints{}); err == nil {
		t.Error("GetInformer with a canceled context waited for nothing and returned no error")
	}
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != existing {
		t.Errorf("List from the synced cache = %d items, %v; want %d", len(list.Items), err, existing)
	}
}
