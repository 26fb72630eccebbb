package main

import (
	"context"
	"flag"
	"os"
	"strings"

	"github.com/tenantry/tenantry/cmd/internal/cli"
	"github.com/tenantry/tenantry/cmd/internal/devenv"
	"github.com/tenantry/tenantry/internal/bench"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// benchCommand binds the flags of `tenantry-dev bench` onto bench.Options and
// runs package bench, which holds the steps and what they measure.
var benchCommand = cli.Command{
	Name: "bench",
	Summary: "Measure spawn and stop times, memory per tenant, sync latency and throughput on local control planes; " +
		"print a table and write it as JSON and Markdown.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		o := bench.DefaultOptions()
		fs.StringVar(&o.Out, "out", o.Out, "Directory for results.json and results.md.")
		fs.StringVar(&o.Assets, "assets", o.Assets, "Directory holding kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok "+
			"(default: $"+tenantrytest.AssetsEnv+", else this binary's own directory).")
		fs.IntVar(&o.Nodes, "nodes", o.Nodes, "Simulated host nodes that run the Pods.")
		fs.Func("steps", "Comma-separated steps to run, in their order: "+strings.Join(bench.Steps, ", ")+
			" (starts: the test clusters' start times; dns: the tenant DNS server's latency and queries per second; control-planes: the control planes Tenantry runs, on real nodes; scale: bin/manager with many VirtualClusters; handover: sharded replicas, one killed, one added). Default: all.", func(v string) error {
			steps, err := bench.ParseSteps(v)
			o.Steps = steps
			return err
		})
		fs.Func("scale-tenants", "Comma-separated, growing VirtualCluster counts of the scale run (default 100,250,500,1000).", func(v string) error {
			counts, err := bench.ParseCounts(v)
			o.ScaleTenants = counts
			return err
		})
		fs.IntVar(&o.ScaleServers, "scale-servers", o.ScaleServers, "Tenant API servers the scale run's VirtualClusters share.")
		fs.IntVar(&o.ScaleObjects, "scale-objects", o.ScaleObjects, "ConfigMaps each VirtualCluster of the scale run syncs.")
		fs.IntVar(&o.ScaleExtraObjects, "scale-extra-objects", o.ScaleExtraObjects,
			"ConfigMaps added per tenant API server at the largest count, for the memory per synced object; 0 skips it.")
		fs.DurationVar(&o.ScaleIdleWindow, "scale-idle-window", o.ScaleIdleWindow, "How long the idle manager's request rates are measured over.")
		fs.Func("manager-args", "Extra flags for bin/manager in the scale run, space-separated (the figures are then not the defaults').", func(v string) error {
			o.ManagerArgs = strings.Fields(v)
			return nil
		})
		fs.StringVar(&o.ManagerBinary, "manager", o.ManagerBinary, "bin/manager for the scale run (default: the manager beside this binary).")
		fs.IntVar(&o.HandoverClusters, "handover-clusters", o.HandoverClusters, "VirtualClusters shared by the sharded replicas of the handover run.")
		fs.IntVar(&o.AttackTenants, "attack-tenants", o.AttackTenants, "Hostile tenants of the attack step's second round, at once (its first has one).")
		fs.IntVar(&o.SpawnClusters, "spawn-clusters", o.SpawnClusters, "Clusters spawned and stopped one by one for the spawn figures.")
		fs.IntVar(&o.MemoryClusters, "memory-clusters", o.MemoryClusters, "Clusters spawned at once for the memory figure.")
		fs.IntVar(&o.LatencySamples, "latency-samples", o.LatencySamples, "Objects created for each latency figure.")
		fs.Float64Var(&o.LatencyRate, "latency-rate", o.LatencyRate, "Objects per second while measuring latency.")
		fs.IntVar(&o.PodSamples, "pod-samples", o.PodSamples, "Pods created, at --latency-rate, for the Pod start figures.")
		fs.IntVar(&o.RealPodSamples, "real-pod-samples", o.RealPodSamples, "Pods created on each side (tenant, host) for the real-pods step's start figures.")
		fs.IntVar(&o.ControlPlanes, "control-planes", o.ControlPlanes, "Control planes the control-planes step creates at once, after one alone.")
		fs.Float64Var(&o.RealPodRate, "real-pod-rate", o.RealPodRate, "Pairs of Pods (one tenant's, one host's) created per second in the real-pods step.")
		fs.IntVar(&o.RealDNSQueries, "real-dns-queries", o.RealDNSQueries, "DNS queries a tenant container makes in the real-pods step.")
		fs.IntVar(&o.ThroughputObjects, "throughput-objects", o.ThroughputObjects, "ConfigMaps created, in all, for the throughput figure.")
		fs.IntVar(&o.ThroughputWriters, "throughput-writers", o.ThroughputWriters, "Writers creating them, spread over the tenants.")
		fs.StringVar(&o.Profiles, "profiles", o.Profiles, "Write profiles to this directory: CPU profiles of bin/manager, the floor pipeline and the host API server over the throughput runs, "+
			"and at each scale count of bin/manager, the host and a tenant API server over the start, with bin/manager's heap and goroutines once Ready; "+
			"and the goroutines around the spawn step's stops (read them with go tool pprof).")
		return func(ctx context.Context, in cli.Invocation) error {
			if o.Assets == "" {
				o.Assets = devenv.DefaultAssets()
			}
			o.Args = os.Args[2:]
			return bench.Run(ctx, o, in.Out)
		}
	},
}

// benchFloorCommand runs the floor pipeline that the bench's sync step
// measures beside bin/manager (bench.RunFloorPipeline).
var benchFloorCommand = cli.Command{
	Name:    bench.FloorCommand,
	Summary: "Run the bench's floor pipeline: copy a namespace's ConfigMaps from tenants into the host and nothing more.",
	Flags: func(fs *flag.FlagSet) func(context.Context, cli.Invocation) error {
		var o bench.FloorOptions
		o.BindFlags(fs)
		return func(ctx context.Context, in cli.Invocation) error {
			return bench.RunFloorPipeline(ctx, o, in.Out)
		}
	},
}
