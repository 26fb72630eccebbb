package main

import (
	"context"
	"flag"
	"time"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	"github.com/tenantry/tenantry/cmd/internal/devenv"
)

var demoCommand = cli.Command{
	Name: "demo",
	Summary: "Run the dev environment, apply a sample workload (a Deployment, Service, ConfigMap, Secret, Job and Foo) " +
		"in each tenant, show what syncs where and runs on which host node, then exit (non-zero naming what did not converge).",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		o := devenv.DefaultOptions()
		o.BindFlags(fs)
		timeout := fs.Duration("timeout", 2*time.Minute, "How long the workload may take to converge.")
		return func(ctx context.Context, in cli.Invocation) error { return devenv.Demo(ctx, o, *timeout, in.Out) }
	},
}
