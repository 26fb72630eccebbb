package providers

import (
	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/tenantry/tenantry/pkg/fxlogr"
)

// Module provides the management app's shared objects from the Options
// supplied to the app: logr.Logger, *rest.Config (host), *runtime.Scheme,
// manager.Manager (host; its GetAPIReader reads uncached), client.Client
// tagged clusterregistry.ManageClientTag (the manager's cached client) and
// the *clusterregistry.RemoteClusterRegistry, which runs every module added
// with TenantModule or ProvideTenantModule in each cluster it spawns. Add FxLogger at the app's root for fx's
// own logs; the process-wide loggers of controller-runtime and klog are the
// binary's to set (SetProcessLoggers), once, not a module's.
var Module = fx.Module("providers",
	fx.Decorate(func(o Options) Options { o.Default(); return o }),
	fx.Provide(
		func(o Options) (logr.Logger, error) { return NewLogger(o.Logger) },
		NewRestConfig,
		NewScheme,
		newManager,
		newManageClient,
		provideRegistry,
	),
)

// FxLogger sends fx's own events to the app's logr.Logger. fx applies a
// logger to the module it is given in, so give this one at the app's root.
var FxLogger = fx.WithLogger(func(log logr.Logger) fxevent.Logger { return fxlogr.New(log) })
