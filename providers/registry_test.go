package providers

import (
	"context"
	"testing"

	"go.uber.org/fx"
	"k8s.io/client-go/rest"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// hostName is a value of the management app that a provided tenant module
// is built from.
type hostName string

// The registry that Module provides runs, in each cluster it spawns, every
// module added with TenantModule and ProvideTenantModule; a provided one is
// built from the management app's own objects.
func TestTenantModulesRunInEveryCluster(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 1})
	opts := quietOptions(t, env)
	type ran struct{ module, cluster, host string }
	runs := make(chan ran, 4)
	var registry *clusterregistry.RemoteClusterRegistry
	app := fx.New(fx.NopLogger, fx.Supply(opts, hostName("the-host")), Module,
		TenantModule(fx.Invoke(func(tenant clusterregistry.Tenant) {
			runs <- ran{module: "supplied", cluster: tenant.ClusterName}
		})),
		ProvideTenantModule(func(host hostName) fx.Option {
			return fx.Invoke(func(tenant clusterregistry.Tenant) {
				runs <- ran{module: "provided", cluster: tenant.ClusterName, host: string(host)}
			})
		}),
		fx.Populate(&registry),
	)
	if err := app.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Stop(context.Background()) })

	for _, name := range []string{"tenant-a", "tenant-b"} {
		if err := registry.Spawn(name, rest.CopyConfig(env.Tenants[0].Config())); err != nil {
			t.Fatalf("spawning %s: %v", name, err)
		}
	}
	// Spawn returns once the modules have run.
	got := map[ran]int{}
	for len(runs) > 0 {
		got[<-runs]++
	}
	for _, want := range []ran{
		{module: "supplied", cluster: "tenant-a"}, {module: "supplied", cluster: "tenant-b"},
		{module: "provided", cluster: "tenant-a", host: "the-host"}, {module: "provided", cluster: "tenant-b", host: "the-host"},
	} {
		if got[want] != 1 {
			t.Errorf("%+v ran %d times, want once; all runs: %v", want, got[want], got)
		}
	}
}
