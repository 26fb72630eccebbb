package syncer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A tenant's copies in the hub's host cache, which every tenant shares,
// count against the tenant's own cache limits with its cache: a large
// ConfigMap counts twice (the tenant's object and its host copy) once it
// is copied, and no more once it is deleted.
func TestHostCopiesCountAgainstTheTenantsLimits(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	held := func() float64 {
		m := tenantrytest.Metric(t, "tenantry_registry_cache_bytes", map[string]string{"cluster": "tenant-1"})
		if m == nil {
			t.Fatal("no tenantry_registry_cache_bytes for tenant-1")
		}
		return m.GetGauge().GetValue()
	}
	const size = 300 << 10
	before := held()
	cm := configMap(unique("large"), map[string]string{"data": strings.Repeat("x", size)})
	if err := tenant.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), cm) })
	expectHostConfigMap(t, "tenant-1", cm.Name, cm.Data)
	eventually(t, 10*time.Second, "the tenant's object and its host copy counted", func(context.Context) (bool, error) {
		return held() >= before+2*size, nil
	})

	if err := tenant.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "both taken off the count once deleted", func(ctx context.Context) (bool, error) {
		err := shared.Host.Get(ctx, client.ObjectKey{Namespace: hostNS("tenant-1", "default"), Name: cm.Name}, cm)
		return client.IgnoreNotFound(err) == nil && err != nil && held() < before+size/2, nil
	})
}
