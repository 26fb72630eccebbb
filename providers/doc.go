// Package providers holds the fx constructors of the management app: the
// process logger, the host rest.Config, the scheme, the controller-runtime
// manager (metrics, health probes, leader election), the named clients
// ("manage-client", "no-cache") and the cluster registry, built from the
// tenant modules of the "tenant-modules" value group. Module provides them
// all from an Options value supplied to the app; cmd supplies it from flags
// and tests supply it directly.
//
// Nothing here is imported by pkg/ or controllers/: the fx graph joins them.
package providers
