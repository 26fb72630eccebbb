package main

import (
	"context"
	"flag"
	"maps"
	"slices"
	"strings"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	"github.com/tenantry/tenantry/cmd/internal/conformance"
	"github.com/tenantry/tenantry/cmd/internal/devenv"
)

// conformanceCommand binds the flags of `tenantry-dev conformance` onto
// conformance.Options and runs package conformance.
var conformanceCommand = cli.Command{
	Name: "conformance",
	Summary: "Run the upstream Kubernetes conformance suite (bin/e2e.test, built by make conformance) against a tenant " +
		"of a dev environment and, as the control, against its host, in tiers; print one line per tier and cluster, " +
		"and write the JUnit reports.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		o := conformance.DefaultOptions()
		fs.StringVar(&o.E2E, "e2e", o.E2E, "The e2e test binary (default: e2e.test beside this binary).")
		fs.StringVar(&o.Ginkgo, "ginkgo", o.Ginkgo, "The ginkgo CLI that runs the suite's specs in parallel processes (default: ginkgo beside this binary).")
		fs.IntVar(&o.Procs, "procs", o.Procs, "Parallel processes of the suite (its [Serial] specs run alone, at the end).")
		fs.StringVar(&o.Out, "out", o.Out, "Directory of the reports and logs.")
		fs.StringVar(&o.Tiers, "tiers", o.Tiers, "Comma-separated tiers to report: 1 (no container runtime needed), 2 (1 and Pods running on simulated nodes), "+
			"3 (every conformance spec, on real nodes; asked for alone); netpol (not conformance specs: sig-network's NetworkPolicy specs, on real nodes; asked for alone). Each cluster runs the suite once, for the widest tier asked.")
		fs.StringVar(&o.Part, "part", o.Part, "With --tiers 3, run one part of it: "+strings.Join(slices.Sorted(maps.Keys(conformance.Tier3Parts)), ", ")+
			" (by SIG); compare the parts' reports as one with --reports.")
		fs.StringVar(&o.Focus, "focus", o.Focus, "With --tiers 3 and no --part, run only the specs whose names match this regular expression.")
		fs.StringVar(&o.Clusters, "clusters", o.Clusters, "Comma-separated clusters to run the suite against.")
		fs.IntVar(&o.Dev.Nodes, "nodes", o.Dev.Nodes, "Number of host nodes: simulated for tiers 1 and 2, real for tier 3.")
		fs.StringVar(&o.Dev.Assets, "assets", o.Dev.Assets, "Directory holding the control-plane binaries (default: $KUBEBUILDER_ASSETS, else this binary's own directory).")
		fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "Time the suite may take on one cluster.")
		fs.BoolFunc("trusted-tenant", "Give each tenant the host policy a host grants a tenant it trusts as itself (spec.hostPolicy.pods: podSecurityLevel privileged, allowedVolumeTypes [hostPath]); "+
			"the manager's flags stay the defaults. Not the default: report its figures apart.", func(v string) error {
			if v == "true" {
				o.Dev.TenantPods = devenv.TrustedPods()
			}
			return nil
		})
		fs.StringVar(&o.Reports, "reports", o.Reports, "Comma-separated cluster=junit.xml: run nothing, and count and compare these reports of earlier runs "+
			"(of clusters or parts run apart, say) as a run would; a cluster's reports are joined.")
		return func(ctx context.Context, in cli.Invocation) error { return conformance.Run(ctx, o, in.Out) }
	},
}
