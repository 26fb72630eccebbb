// Package providers holds the fx constructors of the management app: the
// process logger, the host rest.Config, the scheme, the controller-runtime
// manager (metrics, health probes, leader election), the host's client by
// the name a cluster's app gives it (clusterregistry.ManageClientTag) and
// the cluster registry, which runs every module added with TenantModule or
// ProvideTenantModule in each tenant cluster. Module provides them
// all from an Options value supplied to the app; cmd supplies it from flags
// and tests supply it directly.
//
// Nothing here is imported by pkg/ or controllers/: the fx graph joins them.
package providers
