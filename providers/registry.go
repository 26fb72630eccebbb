package providers

import (
	"context"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// tenantModulesGroup is the fx value group of the modules that the registry
// runs in every tenant cluster's app; TenantModule and ProvideTenantModule
// add to it.
const tenantModulesGroup = "tenant-modules"

// TenantModule runs module in every tenant cluster's app: the registry
// that Module provides applies it to each cluster it spawns, where module
// asks for the cluster's values (see clusterregistry.Tenant). Adding a
// tenant reconciler to the management app is adding one such option to it.
func TenantModule(module fx.Option) fx.Option {
	return ProvideTenantModule(func() fx.Option { return module })
}

// ProvideTenantModule is TenantModule for a module built from the
// management app's own objects: constructor is an fx constructor (its
// parameters come from the management app) that returns the fx.Option to
// run in every tenant cluster, and optionally an error.
func ProvideTenantModule(constructor any) fx.Option {
	return fx.Provide(fx.Annotate(constructor, fx.ResultTags(`group:"`+tenantModulesGroup+`"`)))
}

type registryParams struct {
	fx.In

	Lifecycle fx.Lifecycle
	Options   Options
	Logger    logr.Logger
	Scheme    *runtime.Scheme
	// Fence, with Sharding, fences every tenant's requests on its Lease.
	Fence clusterregistry.Fence `optional:"true"`
}

// provideRegistry is newRegistry, given the host's client.Client by the
// name that a cluster's app gives it, and every module added with
// TenantModule or ProvideTenantModule.
var provideRegistry = fx.Annotate(newRegistry,
	fx.ParamTags(``, clusterregistry.ManageClientTag, `group:"`+tenantModulesGroup+`"`))

// newRegistry builds the cluster registry with every tenant module of the
// app, and closes it when the app stops: every tenant app is stopped before
// the management manager is.
func newRegistry(p registryParams, manageClient client.Client, modules []fx.Option) *clusterregistry.RemoteClusterRegistry {
	r := clusterregistry.NewWithOptions(clusterregistry.Options{
		Logger:                  p.Logger.WithName("registry"),
		ManageClient:            manageClient,
		Scheme:                  p.Scheme,
		SpawnTimeout:            p.Options.SpawnTimeout,
		HealthCheckInterval:     p.Options.ClusterHealthInterval,
		UnhealthyTimeout:        p.Options.ClusterUnhealthyTimeout,
		GracefulShutdownTimeout: p.Options.GracefulShutdownTimeout,
		Fence:                   p.Fence,
	}, modules...)
	p.Lifecycle.Append(fx.Hook{
		OnStop: func(ctx context.Context) error {
			p.Logger.Info("stopping every tenant cluster", "clusters", len(r.List()))
			return r.Close(ctx)
		},
	})
	return r
}
