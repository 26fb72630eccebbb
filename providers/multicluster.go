package providers

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/mcprovider"
)

// newMulticlusterManager gives the management app multicluster-runtime's
// manager over the host's manager and an mcprovider.Provider of the
// registry's clusters. The app starts the host's manager, not the
// multicluster one, so the provider is added to it here, as
// mcmanager.Manager's Start would add it: it runs with the manager's
// leader election (after the lease is won, where elected), and engages the
// clusters that this replica's registry runs (with sharding, the tenants
// it owns).
func newMulticlusterManager(mgr manager.Manager, registry *clusterregistry.RemoteClusterRegistry, logger logr.Logger) (mcmanager.Manager, *mcprovider.Provider, error) {
	provider := mcprovider.New(registry)
	mc, err := mcmanager.WithMultiCluster(mgr, provider)
	if err != nil {
		return nil, nil, fmt.Errorf("the multicluster manager: %w", err)
	}
	run := func(ctx context.Context) error { return provider.Start(log.IntoContext(ctx, logger), mc) }
	if err := mgr.Add(manager.RunnableFunc(run)); err != nil {
		return nil, nil, fmt.Errorf("adding the multicluster provider to the manager: %w", err)
	}
	return appMulticlusterManager{mc}, provider, nil
}

// appMulticlusterManager is the app's mcmanager.Manager. The app starts
// the host's manager, and the provider with it; mcmanager.Manager's own
// Start would add the provider a second time to a manager that runs, and
// its failure would stop the manager. So Start refuses.
type appMulticlusterManager struct {
	mcmanager.Manager
}

// errStartedByApp is what appMulticlusterManager's Start returns.
var errStartedByApp = errors.New("the management app starts this multicluster manager (with the host's manager): do not call Start")

// Start implements mcmanager.Manager: it returns an error at once.
func (appMulticlusterManager) Start(context.Context) error { return errStartedByApp }
