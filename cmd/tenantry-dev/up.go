package main

import (
	"context"
	"flag"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	"github.com/tenantry/tenantry/cmd/internal/devenv"
	"github.com/tenantry/tenantry/examples/configmapcount"
)

// upCommand is the dev environment until interrupted; `tenantry dev`
// runs it with the flags it was given.
var upCommand = cli.Command{
	Name: "up",
	Summary: "Start a local host that runs Pods on real nodes (simulated ones where this machine cannot run real ones), tenants with their own kube-controller-manager, " +
		"Tenantry's controller-manager with every built-in syncer, and a VirtualCluster per tenant; " +
		"print a kubeconfig per cluster and run until interrupted. `tenantry dev` runs it.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		o := devenv.DefaultOptions()
		o.BindFlags(fs)
		fs.BoolVar(&o.ControlPlanesOnly, "control-planes-only", false,
			"Start only the clusters: no CRDs, no Tenantry controller-manager, no VirtualClusters (to run bin/manager yourself).")
		fs.BoolVar(&o.ExampleConfigMapCount, "example-configmap-count", false,
			"Also run the multicluster-runtime example controller (examples/configmapcount) in the manager: "+
				"it counts each tenant's ConfigMaps into the host's namespace "+configmapcount.Namespace+".")
		return func(ctx context.Context, in cli.Invocation) error { return devenv.Up(ctx, o, in.Out) }
	},
}
