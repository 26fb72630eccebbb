package providers

import (
	"context"
	"testing"
	"time"

	"go.uber.org/fx"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// engagements is an mcmanager.Runnable that tells each engagement.
type engagements chan multicluster.ClusterName

func (e engagements) Start(ctx context.Context) error { <-ctx.Done(); return nil }

func (e engagements) Engage(_ context.Context, name multicluster.ClusterName, _ cluster.Cluster) error {
	e <- name
	return nil
}

// The app's multicluster manager engages what the registry spawns, with
// the provider that the host's manager runs; its own Start refuses, and
// the host's manager runs on.
func TestMulticlusterManagerEngagesTheRegistrysClusters(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 1})
	opts := quietOptions(t, env)
	engaged := make(engagements, 4)
	var (
		registry *clusterregistry.RemoteClusterRegistry
		mc       mcmanager.Manager
	)
	app := fx.New(fx.NopLogger, fx.Supply(opts), Module,
		fx.Invoke(func(mgr mcmanager.Manager) error { return mgr.Add(engaged) }),
		fx.Populate(&registry, &mc),
	)
	if err := app.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Stop(context.Background()) })

	expect := func(name string) {
		t.Helper()
		select {
		case got := <-engaged:
			if got.String() != name {
				t.Fatalf("engaged %q, want %q", got, name)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s was not engaged", name)
		}
	}
	if err := registry.Spawn("tenant-a", rest.CopyConfig(env.Tenants[0].Config())); err != nil {
		t.Fatal(err)
	}
	expect("tenant-a")
	if err := mc.Start(t.Context()); err == nil {
		t.Fatal("the app's multicluster manager started a second time")
	}
	if err := registry.Spawn("tenant-b", rest.CopyConfig(env.Tenants[0].Config())); err != nil {
		t.Fatal(err)
	}
	expect("tenant-b")
}
