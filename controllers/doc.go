// Package controllers is the home of Tenantry's reconcilers. Each one lives
// in a sub-package of its own and is exported as a single fx.Option: a small
// fx.Module whose one fx.Invoke registers the reconciler with the manager it
// is given. Host-side controllers (virtualcluster/) run in the management
// app; tenant-side ones (the syncers) are handed to the cluster registry and
// run once per tenant cluster.
//
// Controllers build on pkg/ and never import providers/ or cmd/: the fx graph
// joins them.
package controllers
