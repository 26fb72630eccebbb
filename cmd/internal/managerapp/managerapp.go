// Package managerapp wires Tenantry's management app, the fx app that
// bin/manager runs and that `tenantry dev` runs in-process: the providers,
// then every controller.
package managerapp

import (
	"flag"
	"time"

	"go.uber.org/fx"

	"github.com/tenantry/tenantry/controllers/controlplane"
	"github.com/tenantry/tenantry/controllers/sleep"
	"github.com/tenantry/tenantry/controllers/snapshots"
	"github.com/tenantry/tenantry/controllers/syncers"
	"github.com/tenantry/tenantry/controllers/virtualcluster"
	"github.com/tenantry/tenantry/providers"
)

// Options are every option of the management app.
type Options struct {
	providers.Options
	VirtualCluster virtualcluster.Options
	Syncers        syncers.Options
	ControlPlane   controlplane.Options
}

// BindFlags registers all the app's flags on fs, with their defaults.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	o.Options.BindFlags(fs)
	fs.IntVar(&o.VirtualCluster.MaxConcurrentReconciles, "virtualcluster-concurrency", 4,
		"VirtualClusters reconciled at once.")
	fs.Float64Var(&o.VirtualCluster.TenantQPS, "tenant-api-qps", virtualcluster.DefaultTenantQPS,
		"Requests per second Tenantry sends each tenant's API server, where its kubeconfig sets no limit.")
	fs.IntVar(&o.VirtualCluster.TenantBurst, "tenant-api-burst", virtualcluster.DefaultTenantBurst,
		"Burst of Tenantry's requests to each tenant's API server.")
	o.Syncers.BindFlags(fs)
	o.ControlPlane.BindFlags(fs)
}

// New builds the app. Adding a host-side controller is adding its module
// to App; adding a tenant one is adding a providers.TenantModule (or, for a
// syncer, a syncers.Provide). extra options join the app as given.
func New(opts Options, extra ...fx.Option) *fx.App {
	return fx.New(App(opts, extra...))
}

// App is every option of the app that New builds.
func App(opts Options, extra ...fx.Option) fx.Option {
	sharded := fx.Options()
	if opts.ShardMode == providers.ShardModeLease {
		sharded = providers.Sharding
	}
	// A control plane's claim meets its VirtualCluster's storage policy.
	opts.ControlPlane.StoragePolicy = opts.Syncers.StoragePolicyOf
	return fx.Options(
		fx.Supply(opts.Options, opts.VirtualCluster, &opts.Syncers, opts.ControlPlane),
		fx.StopTimeout(StopTimeout(opts)),
		providers.FxLogger,
		providers.Module,
		sharded,
		virtualcluster.Module,
		controlplane.Module,
		snapshots.Module,
		sleep.Module,
		syncers.Module,
		providers.ProvideTenantModule(syncers.TenantModule),
		fx.Options(extra...),
	)
}

// StopTimeout leaves room for the tenant managers to drain, then the
// management manager.
func StopTimeout(opts Options) time.Duration {
	o := opts.Options
	o.Default()
	return 2*o.GracefulShutdownTimeout + 10*time.Second
}
