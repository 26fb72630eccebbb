// Package testing starts real Kubernetes control planes for tests of
// multi-cluster controllers: one host (management) cluster and any number of
// tenant clusters, each its own etcd and kube-apiserver on loopback, all
// driven by the test process through controller-runtime's envtest.
//
// Import it under another name, since it shares the standard library's:
//
//	import tenantrytest "github.com/tenantry/tenantry/pkg/testing"
//
//	func TestMyController(t *testing.T) {
//		env := tenantrytest.New(t, tenantrytest.Options{Tenants: 2})
//		host, err := client.New(env.Host.Config(), client.Options{})
//		...
//		kubeconfig, err := env.Tenants[0].Kubeconfig() // e.g. for a Secret
//	}
//
// # Binaries
//
// The harness runs the kube-apiserver and etcd binaries found in
// Options.BinaryAssetsDirectory, or else in $KUBEBUILDER_ASSETS. In this
// repository `make envtest` builds both from source into bin/ and `make test`
// exports the variable; elsewhere, any envtest assets of a recent Kubernetes
// release do.
//
// # Faults
//
// Every control plane sits behind a TCP proxy on a loopback port that it
// keeps reserved for its whole life, so its address never changes and no
// other process can take it while the API server is down.
// That lets a test inject faults into one cluster while the others run on:
//
//   - ControlPlane.StopAPIServer and StartAPIServer stop the kube-apiserver
//     process (a crash: connecting is refused) and start it again on the same
//     etcd and certificates. Clients and kubeconfigs built before the stop
//     work again after the start, and every object written before is there.
//   - ControlPlane.Disconnect and Reconnect partition the cluster from its
//     clients without stopping it (requests hang until their timeouts).
//
// # Waiting
//
// Everything against a real API server happens asynchronously. Eventually
// polls a condition with a deadline and fails the test naming what it
// awaited; never sleep instead.
//
// # Cost
//
// A control plane starts in about three seconds and takes a few hundred MiB
// of memory; Start brings them up in parallel. Stop, or the cleanup that New
// registers, stops every process and removes all their files.
package testing
