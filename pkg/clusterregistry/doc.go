// Package clusterregistry runs one dependency-injected controller-runtime
// manager per cluster.
//
// A RemoteClusterRegistry is built with fx modules (fx.Option values). Spawn
// builds, for the named cluster, an fx.App of its own that holds a
// controller-runtime manager made from the cluster's *rest.Config, applies
// every module to it and starts it. Stop tears that app down through its fx
// lifecycle. WithClient lends the cluster's client to code outside the app,
// such as host-side reconcilers that act inside a tenant cluster.
//
// # What a module can ask for
//
// Inside a spawned app a module's constructors and invokes can take:
//
//   - manager.Manager: the cluster's manager (no metrics or health
//     listener, no webhook server, no leader election: the management
//     manager owns those);
//   - client.Client: the cluster's client (cached reads, direct writes);
//   - client.Client tagged `name:"manage-client"`: the management cluster's
//     client given to New;
//   - string tagged `name:"cluster-name"`: the name given to Spawn;
//   - *rest.Config: the cluster's config (a copy; the caller's is never
//     changed);
//   - logr.Logger: the registry's logger with the key "cluster" set;
//   - *CacheMeter: what the cluster's cache holds, and its limits.
//
// The parameter object Tenant holds them all, with the tags spelled once,
// so that the compiler sees a typo; ManageClientTag and ClusterNameTag are
// the tags for fx.ParamTags and fx.ResultTags (see Example).
//
// A reconciler is added with fx.Invoke:
//
//	var ConfigMapLogger = fx.Module("configmap-logger",
//		fx.Invoke(func(t clusterregistry.Tenant) error {
//			return builder.ControllerManagedBy(t.Manager).
//				For(&corev1.ConfigMap{}).
//				Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
//					t.Logger.Info("configmap changed", "namespace", req.Namespace, "name", req.Name)
//					return reconcile.Result{}, nil
//				}))
//		}),
//	)
//
// The same module runs for every cluster. controller-runtime refuses two
// controllers of one name in a process, so tenant managers skip that check;
// its metrics are labelled by controller name only, so a module that wants
// them per cluster names its controllers with the cluster name, for example
// builder.Named(cluster + "-configmap").
//
// # Host-side code
//
// Code outside the clusters' apps, such as a reconciler of the host, takes
// the Clusters interface, which *RemoteClusterRegistry implements and
// clusterregistrytest.Clusters fakes: WithClient lends a running cluster's
// client; StateChanges is a controller source of the clusters' states, so
// that a reconciler that must wait for a tenant to run is told when it
// does instead of polling; and Watch makes a running cluster's object
// events requests of a host controller, read from the cluster's own
// cache, for as long as its app runs (call it from Reconcile: it is
// idempotent by name). Cluster hands out a running cluster's app as a
// controller-runtime cluster.Cluster, for code that speaks that interface:
// pkg/mcprovider builds multicluster-runtime's Provider on it.
//
// # Life of a cluster
//
// Spawn returns once the cluster's API server has answered an authenticated
// request, the modules have run and the manager's caches, including every
// controller's sources, have synced; or with an error, leaving nothing
// running, after at most Options.SpawnTimeout. A running cluster is then
// watched: if its manager exits on its own, or its API server fails health
// checks for Options.UnhealthyTimeout, the registry logs it, tears the app
// down and reports the cluster Failed (Status, List, Subscribe). The name
// stays taken until Stop, so the owner, typically the VirtualCluster
// reconciler, sees the failure and re-spawns. A cluster's failure never
// touches another's, and never ends the process.
//
// A cluster holds one connection to its API server: the first check of a
// spawn, the health checks, and the manager's cache, client, API reader,
// REST mapper and GetHTTPClient all go through one HTTP client. (Events go
// through controller-runtime's recorder, which opens a connection of its
// own with the first event.) Its cache holds objects without their
// managed fields (Options.KeepManagedFields keeps them); an update of an
// object read from it leaves the API server's managed fields as they are.
//
// A cluster's informers call their event handlers themselves, one after
// the other, as each change comes off the watch: there is no buffer and
// no goroutine per handler, which at a thousand clusters were a fifth of
// the process's memory. A handler must therefore return quickly, as
// controller-runtime's do (they put a request on a queue): it must not
// block, read the cluster's cache (a read waits for an informer to sync,
// which cannot while its handler waits), or add or remove a handler of
// the same informer. A handler added late is
// told of every object in the store before AddEventHandler returns, and
// may see an object's event twice when one arrives meanwhile; each
// handler gets the informer's resyncs, whatever period it asks for.
//
// # What a cluster may hold
//
// Every cluster's cache is bounded (CacheLimits): by default 50,000
// objects and 64 MiB of them as encoded, every watched type together.
// Options.CacheLimits changes the default, and a module can set one
// cluster's own through its CacheMeter before the manager starts. What
// the cluster makes the manager hold outside its cache (its copies in a
// cache every cluster shares, say) counts too, through a Holding
// (CacheMeter.Hold). A cluster is listed in pages, each counted as it comes and each at most
// an eighth of its byte limit on the wire (4 to 16 MiB), and no answer of
// its API server but a watch may be larger than twice its byte limit, so
// a cluster that holds more is never read whole. Options.CacheBudget
// bounds what every cluster holds together: past it, the cluster that
// holds the most is stopped as one past its own limits. A cluster past a limit,
// at Spawn or later, is torn down with an error wrapping ErrCacheLimit
// that gives the figures and the type that holds the most: Spawn fails
// with it, or the cluster is reported Failed with it. No other cluster is
// touched. A cluster's informers list rather than stream their first
// state (a streamed list enters the store only once it ends).
//
// # Metrics
//
// The registry exports, through controller-runtime's metrics registry:
// tenantry_registry_clusters{state}, tenantry_registry_cluster_state{cluster,
// state}, tenantry_registry_cluster_failures_total{cluster},
// tenantry_registry_cache_objects{cluster}, tenantry_registry_cache_bytes{cluster},
// tenantry_registry_cache_limit_bytes{cluster},
// tenantry_registry_cache_limit_exceeded_total{cluster}, and the
// histograms tenantry_registry_spawn_duration_seconds{result} and
// tenantry_registry_stop_duration_seconds{result}.
package clusterregistry
