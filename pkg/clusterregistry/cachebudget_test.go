package clusterregistry_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// Past the registry's cache budget, the cluster that holds the most is
// stopped, as one past its own limits, and the others run on: a tenant
// that grows within its own limits but past what the manager may hold of
// every tenant together is the one stopped.
func TestTheCacheBudgetStopsTheLargestCluster(t *testing.T) {
	const (
		budget = 4 << 20
		big    = 256 << 10
	)
	loud, quiet := unique("loud"), unique("quiet")
	// Each within its own limit (64 MiB by default): only the budget
	// holds them.
	r := newRegistry(t, clusterregistry.Options{CacheBudget: budget}, copyModule)
	seen := subscribe(t, r)
	attacker := newClient(t, shared.Tenants[0])
	ns := hoardNamespace(t, attacker)
	for name, tenant := range map[string]int{loud: 0, quiet: 1} {
		if err := r.Spawn(name, shared.Tenants[tenant].Config()); err != nil {
			t.Fatalf("Spawn %s: %v", name, err)
		}
	}
	spentBefore := metricValue(t, "tenantry_registry_cache_budget_spent_total", nil)
	for i := 0; i < 40; i++ { // 10 MiB, past the budget
		if s, err := r.Status(loud); err != nil || s.State != clusterregistry.StateRunning {
			break
		}
		if err := createBig(attacker, ns, i, i+1, big); err != nil {
			t.Fatal(err)
		}
	}
	failed := seen.waitFor(t, loud, clusterregistry.StateFailed)
	if !errors.Is(failed.Err, clusterregistry.ErrCacheLimit) || !strings.Contains(failed.Err.Error(), "budget") {
		t.Fatalf("Failed with %v, want ErrCacheLimit saying the budget was spent", failed.Err)
	}
	t.Logf("%s failed: %v", loud, failed.Err)
	if s, err := r.Status(quiet); err != nil || s.State != clusterregistry.StateRunning {
		t.Fatalf("%s is %v (%v), want Running", quiet, s.State, err)
	}
	if spent := metricValue(t, "tenantry_registry_cache_budget_spent_total", nil) - spentBefore; spent < 1 {
		t.Errorf("cache_budget_spent_total rose by %v, want at least 1", spent)
	}
}
