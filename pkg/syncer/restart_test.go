package syncer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A tenant that starts after others already route its type (re-spawned,
// or after the manager restarted) learns of its existing host copies at
// once: one whose tenant object went while it was stopped is removed
// without a patroller.
func TestRestartedTenantRemovesItsOrphansAtOnce(t *testing.T) {
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Tenants: 2, Syncers: []syncer.Syncer{builtin.ConfigMaps()},
		Syncer: syncer.Options{PatrolPeriod: -1},
	})
	ctx := t.Context()
	tenant := w.Tenants["tenant-2"]
	kept, gone := configMap(unique("kept"), map[string]string{"k": "v"}), configMap(unique("gone"), map[string]string{"k": "v"})
	for _, cm := range []*corev1.ConfigMap{kept, gone} {
		if err := tenant.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	for _, cm := range []*corev1.ConfigMap{kept, gone} {
		eventually(t, 20*time.Second, "host copy of "+cm.Name, func(ctx context.Context) (bool, error) {
			err := w.Host.Get(ctx, w.HostKey("tenant-2", cm.Namespace, cm.Name), &corev1.ConfigMap{})
			return err == nil, err
		})
	}

	if err := w.Registry.Stop(ctx, "tenant-2"); err != nil {
		t.Fatal(err)
	}

	if err := tenant.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	var cp = w.Env.Tenants[1]
	if err := w.Registry.Spawn("tenant-2", cp.Config()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the orphaned host copy removed", func(ctx context.Context) (bool, error) {
		err := w.Host.Get(ctx, w.HostKey("tenant-2", gone.Namespace, gone.Name), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), fmt.Errorf("host copy: %v", err)
	})
	if err := w.Host.Get(ctx, w.HostKey("tenant-2", kept.Namespace, kept.Name), &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the host copy of a tenant object still there: %v", err)
	}
}

// A stopped tenant's metric series go with it. (A cluster name of its own:
// the shared world's tenants have the same names as this world's.)
func TestStoppedTenantsSeriesGo(t *testing.T) {
	w := syncertest.NewWorld(t, syncertest.WorldOptions{Tenants: 1, Syncers: []syncer.Syncer{builtin.ConfigMaps()}})
	ctx := t.Context()
	const cluster = "series-probe"
	if err := w.Registry.Spawn(cluster, w.Env.Tenants[0].Config()); err != nil {
		t.Fatal(err)
	}
	cm := configMap(unique("counted"), map[string]string{"k": "v"})
	if err := w.Tenants["tenant-1"].Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	series := map[string]string{"cluster": cluster, "resource": "configmaps", "direction": "down", "verb": "create"}
	running := map[string]string{"cluster": "tenant-1", "resource": "configmaps"}
	eventually(t, 20*time.Second, "the probe's writes counted, and the running tenant's", func(context.Context) (bool, error) {
		return tenantrytest.Metric(t, "tenantry_syncer_writes_total", series) != nil &&
			tenantrytest.Metric(t, "tenantry_syncer_writes_total", running) != nil, nil
	})
	if err := w.Registry.Stop(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families { // Tenantry's and controller-runtime's
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), cluster) {
					t.Errorf("a stopped tenant's series stayed: %s{%s=%q}", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
	if m := tenantrytest.Metric(t, "tenantry_syncer_writes_total", running); m == nil {
		t.Error("a running tenant's series went")
	}
}
