package syncer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A tenant's copies in the hub's host cache, which every tenant shares,
// count against the tenant's own cache limits with its cache: a large
// ConfigMap counts twice (the tenant's object and its host copy) once it
// is copied, and no more once it is deleted. The hub holds a large copy's
// data as a digest, yet counts it in full, and syncs it as any: a change
// of the tenant's goes down, a change made in the host is repaired.
func TestHostCopiesCountAgainstTheTenantsLimits(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	held := func() float64 {
		return metricValue(t, "tenantry_registry_cache_bytes", map[string]string{"cluster": "tenant-1"})
	}
	digested := func() float64 { return metricValue(t, "tenantry_hub_copies_digested_bytes_total", nil) }
	const size = 300 << 10
	before, digestedBefore := held(), digested()
	cm := configMap(unique("large"), map[string]string{"data": strings.Repeat("x", size)})
	if err := tenant.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), cm) })
	expectHostConfigMap(t, "tenant-1", cm.Name, cm.Data)
	eventually(t, 10*time.Second, "the tenant's object and its host copy counted", func(context.Context) (bool, error) {
		return held() >= before+2*size, nil
	})
	if got := digested() - digestedBefore; got < size {
		t.Errorf("the hub held %v bytes of the copy's data as a digest, want %d", got, size)
	}

	cm.Data = map[string]string{"data": strings.Repeat("y", size)}
	if err := tenant.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	copied := expectHostConfigMap(t, "tenant-1", cm.Name, cm.Data)
	copied.Data = map[string]string{"data": "changed in the host"}
	if err := shared.Host.Update(ctx, copied); err != nil {
		t.Fatal(err)
	}
	expectHostConfigMap(t, "tenant-1", cm.Name, cm.Data)

	if err := tenant.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "both taken off the count once deleted", func(ctx context.Context) (bool, error) {
		err := shared.Host.Get(ctx, client.ObjectKey{Namespace: hostNS("tenant-1", "default"), Name: cm.Name}, cm)
		return client.IgnoreNotFound(err) == nil && err != nil && held() < before+size/2, nil
	})
}

// A copy small enough to be held whole shares its data's memory with its
// tenant object's.
func TestHostCopiesShareTheirTenantObjectsData(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	sharedBytes := func() float64 { return metricValue(t, "tenantry_cache_shared_bytes_total", nil) }
	const size = 8 << 10
	before := sharedBytes()
	// Data of its own: an equal value held elsewhere would be shared too.
	cm := configMap(unique("shared"), map[string]string{"data": unique("data") + strings.Repeat("x", size)})
	if err := tenant.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), cm) })
	expectHostConfigMap(t, "tenant-1", cm.Name, cm.Data)
	eventually(t, 10*time.Second, "the copy's data shared with its tenant object's", func(context.Context) (bool, error) {
		return sharedBytes()-before >= size, nil
	})
}

// A tenant's copies outlive its app (the host keeps them), and count
// before its next app's caches list: a tenant stopped with a copy of 300
// KiB, which made two more ConfigMaps of 300 KiB meanwhile, is refused at
// its next Spawn under a limit of 1 MiB, which its cache alone would fit.
func TestHostCopiesCountBeforeTheCachesList(t *testing.T) {
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Tenants: 1, Syncers: []syncer.Syncer{builtin.ConfigMaps()},
		Syncer: syncer.Options{CacheLimits: clusterregistry.CacheLimits{Bytes: 1 << 20}},
	})
	ctx := t.Context()
	tenant := w.Tenants["tenant-1"]
	large := func() *corev1.ConfigMap {
		cm := configMap(unique("large"), map[string]string{"data": strings.Repeat("x", 300<<10)})
		if err := tenant.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	first := large()
	eventually(t, 10*time.Second, "the first ConfigMap's host copy", func(ctx context.Context) (bool, error) {
		err := w.Host.Get(ctx, client.ObjectKey{Namespace: hostNS("tenant-1", "default"), Name: first.Name}, &corev1.ConfigMap{})
		return err == nil, client.IgnoreNotFound(err)
	})
	if err := w.Registry.Stop(ctx, "tenant-1"); err != nil {
		t.Fatal(err)
	}
	large()
	large()
	err := w.Registry.Spawn("tenant-1", w.Env.Tenants[0].Config())
	if !errors.Is(err, clusterregistry.ErrCacheLimit) {
		t.Fatalf("Spawn with 900 KiB in the cache and a 300 KiB copy, under 1 MiB: %v; want ErrCacheLimit", err)
	}
}

// metricValue is the value of a gauge or counter of the manager's
// metrics, which must be there.
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	m := tenantrytest.Metric(t, name, labels)
	switch {
	case m == nil:
		t.Fatalf("no %s %v", name, labels)
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}
