package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

var devCommand = cli.Command{
	Name: "dev",
	Summary: "Start a local host that runs Pods on real nodes (simulated ones where this machine cannot run real ones), tenants with their own kube-controller-manager, " +
		"Tenantry's controller-manager with every built-in syncer, and a VirtualCluster per tenant; " +
		"print a kubeconfig per cluster and run until interrupted.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		o := bindDevFlags(fs)
		fs.BoolVar(&o.controlPlanesOnly, "control-planes-only", false,
			"Start only the clusters: no CRDs, no Tenantry controller-manager, no VirtualClusters (to run bin/manager yourself).")
		return func(ctx context.Context, in cli.Invocation) error { return runDev(ctx, *o, in.Out) }
	},
}

// bindDevFlags registers the flags that dev and demo share.
func bindDevFlags(fs *flag.FlagSet) *devOptions {
	o := &devOptions{}
	fs.IntVar(&o.tenants, "tenants", 2, "Number of tenant clusters.")
	fs.IntVar(&o.nodes, "nodes", 2, "Number of host nodes that run the tenants' Pods.")
	fs.BoolVar(&o.simulatedNodes, "simulated-nodes", false,
		"Simulated nodes (kwok) even where this machine can run real ones (kubelet, containerd and runc; they need root and `make node`): "+
			"Pods are Running at once, and nothing runs in them.")
	fs.StringVar(&o.dir, "dir", "", "Directory for the kubeconfigs and the logs of the manager and of every control-plane process "+
		"(default: a new temporary directory, removed on exit unless something failed).")
	fs.StringVar(&o.assets, "assets", "", "Directory holding kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok, and what `make node` builds "+
		"(default: $"+tenantrytest.AssetsEnv+", else this binary's own directory).")
	fs.StringVar(&o.metricsBindAddress, "metrics-bind-address", "0", `Address of the manager's metrics endpoint; "0" turns it off.`)
	fs.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", "0", `Address of the manager's /healthz and /readyz; "0" turns them off.`)
	o.logger.BindFlags(fs)
	return o
}

func runDev(ctx context.Context, o devOptions, out io.Writer) error {
	return withDev(ctx, o, out, func(d *devEnv) error {
		return showDev(ctx, d, o, out)
	})
}

// withDev runs f in a dev environment, reporting each step to out, and
// stops the environment when f returns.
func withDev(ctx context.Context, o devOptions, out io.Writer, f func(*devEnv) error) error {
	if o.assets == "" {
		o.assets = defaultAssets()
	}
	d, err := startDev(ctx, o, func(step string) { fmt.Fprintln(out, "==>", step) })
	if err != nil {
		return err
	}
	err = f(d)
	fmt.Fprintln(out, "==> stopping")
	return d.finish(err)
}

// showDev prints where the clusters are and waits for ctx to end.
func showDev(ctx context.Context, d *devEnv, o devOptions, out io.Writer) error {
	fmt.Fprintln(out)
	for _, cp := range d.env.ControlPlanes() {
		fmt.Fprintf(out, "%-10s https://%-21s KUBECONFIG=%s\n", cp.Name(), cp.Address(), d.kubeconfigs[cp.Name()])
	}
	if !o.controlPlanesOnly {
		fmt.Fprintf(out, "\nEvery tenant is a Ready VirtualCluster; try:\n  kubectl --kubeconfig %s get virtualclusters\n", d.kubeconfigs["host"])
	}
	fmt.Fprintln(out, "Ready. Press Ctrl-C to stop.")
	<-ctx.Done()
	return nil
}

// defaultAssets is $KUBEBUILDER_ASSETS, or else the directory of this
// binary when kube-apiserver sits beside it, as `make build envtest` leaves
// them in bin/.
func defaultAssets() string {
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
