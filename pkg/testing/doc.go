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
// The harness runs the programs found in Options.BinaryAssetsDirectory, or
// else in $KUBEBUILDER_ASSETS: kube-apiserver and etcd always, and
// kube-controller-manager, kube-scheduler and kwok when the options below
// ask for them. In this repository `make envtest` builds all five from
// source into bin/ and `make test` exports the variable; elsewhere, envtest
// assets of a recent Kubernetes release and a kwok binary do.
//
// # Clusters that run workloads
//
// Bare API servers store objects and nothing else happens to them. Two
// options bring in the rest of a cluster, each process started in parallel
// with the others and reaching its API server through the same proxy as
// every client (so the fault tools below affect it too):
//
//   - Options.HostNodes > 0: the host also runs kube-scheduler,
//     kube-controller-manager and kwok, with that many Ready simulated nodes
//     (kwok-node-1, ...; each with its own pod CIDR and address). Pods are
//     scheduled and run: Running and Ready with an IP, a Job's Pods succeed,
//     deleted Pods go. kwok-stages.yaml says exactly what kwok does.
//   - Options.HostKubelets > 0: the host also runs that many real nodes
//     (kit-node-1, ...), each a kubelet with its own containerd and runc,
//     kube-proxy, CNI networking and kube-router's NetworkPolicy firewall,
//     in a network namespace of its own on a network of the kit's, with
//     images from the kit's own registry; the API servers then listen on
//     that network, where Pods reach them. It needs root and `make node`:
//     RealNodesSupported says what is missing, and RequireRealNodes skips a
//     test without it (or fails it under CI=true). See realnode.go and
//     kitnet.go, and docs/testing.md's "Real nodes".
//   - Options.TenantControllerManager: every tenant runs its own
//     kube-controller-manager, as a virtual cluster does: Deployments,
//     ReplicaSets, Jobs, StatefulSets, garbage collection, namespace
//     deletion, PodGC. Tenants have no scheduler and no nodes; their Pods
//     are meant to run in the host. The storage controllers are off: the
//     host binds volumes.
//
// A cluster that runs a controller-manager also admits Pods with the
// ServiceAccount admission plugin, as a real cluster does (envtest turns it
// off otherwise): a Pod needs its ServiceAccount to exist, which the
// controller-manager creates for every namespace a moment after the
// namespace itself.
//
// No component uses leader election: a lost lease ends the process, which
// would wedge a cluster whose API server a test stops for a while. Each
// reconnects on its own when its API server is back.
//
// Each process's output goes to Options.LogDirectory when set, and to this
// process's stderr with Options.AttachControlPlaneOutput. A process that
// fails to start is named in Start's error with its last lines of output.
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
// of memory; Start brings them up in parallel. The components cost only
// those who ask for them (see docs/testing.md for measured figures). Stop, or the
// cleanup that New registers, stops every process (components first) and
// removes all their files; no process outlives it.
package testing
