// Package providers holds the fx constructors of the management app: the
// process logger, and as the controller-manager grows the host rest.Config,
// the scheme, the controller-runtime manager, the named clients and the
// cluster registry. Each constructor takes its options as a plain value, so
// that cmd can supply them from flags and tests can supply them directly.
//
// Nothing here is imported by pkg/ or controllers/: the fx graph joins them.
package providers
