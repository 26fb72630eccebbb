package devenv

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tenantry/tenantry/examples/configmapcount"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// DefaultOptions are what `tenantry-dev up` and `demo` run with when no
// flag says otherwise.
func DefaultOptions() Options {
	return Options{Tenants: 2, Nodes: 2, MetricsBindAddress: "0", HealthProbeBindAddress: "0"}
}

// BindFlags binds the flags that `tenantry-dev up` and `demo` share to o,
// o's values their defaults. ControlPlanesOnly is up's alone: its command
// binds it.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Tenants, "tenants", o.Tenants, "Number of tenant clusters, each run as processes of this machine.")
	fs.IntVar(&o.Provisioned, "provisioned", o.Provisioned, "Number of further tenant clusters whose control planes Tenantry runs as host Pods on the real nodes (spec.controlPlane).")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "Number of host nodes that run the tenants' Pods.")
	fs.BoolVar(&o.SimulatedNodes, "simulated-nodes", o.SimulatedNodes,
		"Simulated nodes (kwok) even where this machine can run real ones (kubelet, containerd and runc; they need root and `make node`): "+
			"Pods are Running at once, and nothing runs in them.")
	fs.StringVar(&o.Dir, "dir", o.Dir, "Directory for the kubeconfigs and the logs of the manager and of every control-plane process "+
		"(default: a new temporary directory, removed on exit unless something failed).")
	fs.StringVar(&o.Assets, "assets", o.Assets, "Directory holding kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok, and what `make node` builds "+
		"(default: $"+tenantrytest.AssetsEnv+", else this binary's own directory).")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, `Address of the manager's metrics endpoint; "0" turns it off.`)
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, `Address of the manager's /healthz and /readyz; "0" turns them off.`)
	o.Logger.BindFlags(fs)
}

// Up runs a dev environment until ctx ends, printing each step and then
// where the clusters are to out: what `tenantry-dev up` (and so
// `tenantry dev`) runs.
func Up(ctx context.Context, o Options, out io.Writer) error {
	return With(ctx, o, out, func(e *Env) error {
		return show(ctx, e, o, out)
	})
}

// With runs f in a dev environment, reporting each step to out, and stops
// the environment when f returns. Its error is f's, or the start's, with
// the stop's; after a failure it names the directory that keeps the logs.
func With(ctx context.Context, o Options, out io.Writer, f func(*Env) error) error {
	if o.Assets == "" {
		o.Assets = DefaultAssets()
	}
	e, err := start(ctx, o, func(step string) { fmt.Fprintln(out, "==>", step) })
	if err != nil {
		return err
	}
	err = f(e)
	fmt.Fprintln(out, "==> stopping")
	return e.finish(err)
}

// show prints where the clusters are and waits for ctx to end.
func show(ctx context.Context, e *Env, o Options, out io.Writer) error {
	fmt.Fprintln(out)
	for _, cp := range e.env.ControlPlanes() {
		fmt.Fprintf(out, "%-10s https://%-21s KUBECONFIG=%s\n", cp.Name(), cp.Address(), e.kubeconfigs[cp.Name()])
	}
	for _, name := range e.provisioned {
		fmt.Fprintf(out, "%-10s (control plane run by Tenantry) KUBECONFIG=%s\n", name, e.kubeconfigs[name])
	}
	if !o.ControlPlanesOnly {
		fmt.Fprintf(out, "\nEvery tenant is a Ready VirtualCluster; try:\n  kubectl --kubeconfig %s get virtualclusters\n", e.kubeconfigs[HostName])
		if o.ExampleConfigMapCount {
			fmt.Fprintf(out, "Each tenant's ConfigMaps, counted by the multicluster-runtime example:\n  kubectl --kubeconfig %s -n %s get configmaps -l %s -o custom-columns=TENANT:.metadata.name,CONFIGMAPS:.data.%s\n",
				e.kubeconfigs[HostName], configmapcount.Namespace, configmapcount.LabelCluster, configmapcount.CountKey)
		}
	}
	fmt.Fprintln(out, "Ready. Press Ctrl-C to stop.")
	<-ctx.Done()
	return nil
}

// DefaultAssets is $KUBEBUILDER_ASSETS, or else the directory of this
// binary when kube-apiserver sits beside it, as `make build envtest` leaves
// them in bin/.
func DefaultAssets() string {
	if dir := os.Getenv(tenantrytest.AssetsEnv); dir != "" {
		return dir
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	dir := filepath.Dir(self)
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return ""
	}
	return dir
}
