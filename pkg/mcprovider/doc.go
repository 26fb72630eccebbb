// Package mcprovider is a multicluster-runtime provider of the tenant
// clusters that a Tenantry cluster registry runs.
//
// A [Provider] serves the clusters of one
// clusterregistry.RemoteClusterRegistry by the names given to its Spawn:
// in Tenantry's controller-manager, the VirtualClusters' names. A cluster
// is engaged once its app runs (spawned, its caches synced) and
// disengaged, its engagement's context canceled, when the app stops,
// fails or is re-spawned; a re-spawned cluster is engaged again as its
// new app. The cluster.Cluster handed out is the one the registry's app
// holds: no second cache and no second connection per cluster, and the
// registry's cache limits, health checks and, with sharding, its fencing
// apply to what a multicluster controller does through it.
//
// Use it like any other multicluster-runtime provider:
//
//	provider := mcprovider.New(registry)
//	mgr, err := mcmanager.New(hostConfig, provider, manager.Options{})
//	if err != nil {
//		return err
//	}
//	err = mcbuilder.ControllerManagedBy(mgr).
//		Named("multicluster-configmaps").
//		For(&corev1.ConfigMap{}).
//		Complete(mcreconcile.Func(func(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
//			cl, err := mgr.GetCluster(ctx, req.ClusterName)
//			if err != nil {
//				return ctrl.Result{}, err
//			}
//			// read and write through cl.GetClient()
//			return ctrl.Result{}, nil
//		}))
//	if err != nil {
//		return err
//	}
//	// mgr.Start starts the provider: it is a multicluster.ProviderRunnable.
//	return mgr.Start(ctx)
//
// The registry spawns and stops the clusters, not the provider: in
// Tenantry's controller-manager, the VirtualCluster controller does; in a
// main of your own, your code does. The provider follows.
//
// Inside Tenantry's controller-manager, the providers package gives the
// management app an mcmanager.Manager over the host's manager and this
// provider: a module that asks for it and registers an mcbuilder
// controller runs that controller over every tenant of the replica, with
// the manager's leader election and sharding. See the library guide
// (docs/library.md) for both ways, and when to take a registry module
// per cluster instead.
package mcprovider
