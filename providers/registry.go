package providers

import (
	"context"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

type registryParams struct {
	fx.In

	Lifecycle    fx.Lifecycle
	Options      Options
	Logger       logr.Logger
	Scheme       *runtime.Scheme
	ManageClient client.Client `name:"manage-client"`
	// Modules are every tenant module contributed with
	// clusterregistry.AsTenantModule.
	Modules []fx.Option `group:"tenant-modules"`
	// Fence, with Sharding, fences every tenant's requests on its Lease.
	Fence clusterregistry.Fence `optional:"true"`
}

// newRegistry builds the cluster registry with every tenant module of the
// app, and closes it when the app stops: every tenant app is stopped before
// the management manager is.
func newRegistry(p registryParams) *clusterregistry.RemoteClusterRegistry {
	r := clusterregistry.NewWithOptions(clusterregistry.Options{
		Logger:                  p.Logger.WithName("registry"),
		ManageClient:            p.ManageClient,
		Scheme:                  p.Scheme,
		SpawnTimeout:            p.Options.SpawnTimeout,
		HealthCheckInterval:     p.Options.ClusterHealthInterval,
		UnhealthyTimeout:        p.Options.ClusterUnhealthyTimeout,
		GracefulShutdownTimeout: p.Options.GracefulShutdownTimeout,
		Fence:                   p.Fence,
	}, p.Modules...)
	p.Lifecycle.Append(fx.Hook{
		OnStop: func(ctx context.Context) error {
			p.Logger.Info("stopping every tenant cluster", "clusters", len(r.List()))
			return r.Close(ctx)
		},
	})
	return r
}
