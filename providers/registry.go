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

// provideRegistry is newRegistry, given the host's client.Client by the
// name that a cluster's app gives it, every module added with TenantModule
// or ProvideTenantModule, and, with Sharding, the Fence.
var provideRegistry = fx.Annotate(newRegistry, fx.ParamTags(
	``, ``, ``, ``, clusterregistry.ManageClientTag, `group:"`+tenantModulesGroup+`"`, `optional:"true"`))

// newRegistry builds the cluster registry with every tenant module of the
// app, and closes it when the app stops: every tenant app is stopped before
// the management manager is. fence, with Sharding, fences every tenant's
// requests on its Lease.
func newRegistry(lc fx.Lifecycle, o Options, log logr.Logger, scheme *runtime.Scheme,
	manageClient client.Client, modules []fx.Option, fence clusterregistry.Fence) *clusterregistry.RemoteClusterRegistry {
	r := clusterregistry.NewWithOptions(clusterregistry.Options{
		Logger:                  log.WithName("registry"),
		ManageClient:            manageClient,
		Scheme:                  scheme,
		SpawnTimeout:            o.SpawnTimeout,
		HealthCheckInterval:     o.ClusterHealthInterval,
		UnhealthyTimeout:        o.ClusterUnhealthyTimeout,
		GracefulShutdownTimeout: o.GracefulShutdownTimeout,
		Fence:                   fence,
		CacheBudget:             max(o.CacheBudget, 0),
	}, modules...)
	lc.Append(fx.Hook{
		OnStop: func(ctx context.Context) error {
			log.Info("stopping every tenant cluster", "clusters", len(r.List()))
			return r.Close(ctx)
		},
	})
	return r
}
