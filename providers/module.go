package providers

import (
	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/tenantry/tenantry/pkg/fxlogr"
)

// Module provides the management app's shared objects from the Options
// supplied to the app: logr.Logger, *rest.Config (host), *runtime.Scheme,
// manager.Manager (host; its GetAPIReader reads uncached), client.Client
// tagged clusterregistry.ManageClientTag (the manager's cached client) and
// the *clusterregistry.RemoteClusterRegistry, which runs every module added
// with TenantModule or ProvideTenantModule in each cluster it spawns, and,
// for a module that asks for them, multicluster-runtime's mcmanager.Manager
// over the host's manager and the *mcprovider.Provider of the registry's
// clusters (an mcbuilder controller registered on it runs over every
// tenant this replica runs; the provider runs in any case). Add FxLogger at the app's root for fx's
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
		newMulticlusterManager,
	),
	// The provider runs whether or not a module registers a multicluster
	// controller: its engagements are then no-ops, and its log lines and
	// metrics still say which tenants this replica would serve.
	fx.Invoke(func(mcmanager.Manager) {}),
)

// FxLogger sends fx's own events to the app's logr.Logger. fx applies a
// logger to the module it is given in, so give this one at the app's root.
var FxLogger = fx.WithLogger(func(log logr.Logger) fxevent.Logger { return fxlogr.New(log) })
