// Package bench is what `make bench` (bin/tenantry-dev bench) runs: it
// measures, on local control planes that pkg/testing starts, what Tenantry
// costs and how fast it syncs. Its steps run in the order of Steps, each in
// a file of its own:
//
//	starts    the test clusters' start times (clusters.go)
//	spawn     the registry's Spawn and Stop, in this process (library.go)
//	memory    the heap an idle tenant holds, in this process (library.go)
//	pods      Pod start through the host's scheduler and kwok (library.go)
//	dns       the tenant DNS server's latency and queries per second (dns.go)
//	sync      bin/manager's added latency and throughput (sync.go)
//	attack    bin/manager's memory under tenants of large objects, one and
//	          ten at once, and the other tenants' sync meanwhile (attack.go)
//	scale     bin/manager with many VirtualClusters (scale.go)
//	handover  sharded bin/manager replicas, one killed, one added (handover.go)
//
// The library steps end with the memory of the control-plane processes
// (clusters.go). The sync, attack, scale and handover steps run bin/manager as a
// process, as users run it (world.go); measure.go holds the timing helpers
// the steps share.
//
// Run prints a table of the results and writes it to Options.Out
// (bench/results/ for `make bench`) as results.json and results.md
// (report.go), with a chart of the scale run as scale.svg (chart.go).
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options select a bench run's steps and size them. DefaultOptions holds
// what `make bench` runs with; each field has a flag of bin/tenantry-dev
// bench.
type Options struct {
	// Out is the directory for results.json and results.md (and the scale
	// run's scale.svg).
	Out string
	// Assets is the directory holding kube-apiserver, etcd,
	// kube-controller-manager, kube-scheduler and kwok. The memory figures
	// of the control-plane processes count those run from it. Empty, the
	// test clusters take $KUBEBUILDER_ASSETS and those figures are left
	// out: bin/tenantry-dev fills it (with this binary's own directory when
	// $KUBEBUILDER_ASSETS is not set).
	Assets string
	// Nodes is how many simulated host nodes run the Pods.
	Nodes int
	// Steps are the steps to run, by name (see the package's Steps, which
	// gives their order); ParseSteps reads them.
	Steps map[string]bool
	// ScaleTenants are the scale run's VirtualCluster counts, growing;
	// ParseCounts reads them.
	ScaleTenants []int
	// ScaleServers is how many tenant API servers the scale run's (and the
	// handover run's) VirtualClusters share.
	ScaleServers int
	// ScaleObjects is how many ConfigMaps each VirtualCluster of the scale
	// run syncs.
	ScaleObjects int
	// ScaleExtraObjects is how many ConfigMaps are added per tenant API
	// server at the largest count, for the memory per synced object; 0
	// skips it.
	ScaleExtraObjects int
	// ScaleIdleWindow is how long the idle manager's request rates (and
	// the handover run's Lease writes) are measured over.
	ScaleIdleWindow time.Duration
	// HandoverClusters is how many VirtualClusters the sharded replicas of
	// the handover run share.
	HandoverClusters int
	// AttackTenants is how many hostile tenants the attack step's second
	// round runs at once (its first runs one).
	AttackTenants int
	// ManagerBinary is the bin/manager that the sync, scale and handover
	// runs start; empty, the manager beside this binary.
	ManagerBinary string
	// ManagerArgs are extra flags for bin/manager (the figures are then not
	// the defaults').
	ManagerArgs []string
	// SpawnClusters is how many clusters are spawned and stopped, one by
	// one, for the spawn figures.
	SpawnClusters int
	// MemoryClusters is how many clusters are spawned at once for the
	// memory figure.
	MemoryClusters int
	// LatencySamples is how many objects are created for each latency
	// figure.
	LatencySamples int
	// PodSamples is how many Pods are created, at LatencyRate, for the Pod
	// start figures.
	PodSamples int
	// LatencyRate is how many objects per second are created while
	// measuring latency.
	LatencyRate float64
	// RealPodSamples is how many Pods the real-pods step creates on each
	// side (the tenant, the host), RealPodRate pairs a second, and
	// RealDNSQueries how many DNS queries a tenant container makes.
	RealPodSamples int
	// ControlPlanes is how many control planes the control-planes step
	// creates at once.
	ControlPlanes  int
	RealPodRate    float64
	RealDNSQueries int
	// ThroughputObjects is how many ConfigMaps are created, in all, for the
	// throughput figure.
	ThroughputObjects int
	// ThroughputWriters is how many writers create them, spread over the
	// tenants.
	ThroughputWriters int
	// Profiles, when set, is a directory for profiles (read them with go
	// tool pprof): of the first 10 s of the throughput's synced run,
	// bin/manager's (throughput-manager.cpu) and the host API server's
	// (throughput-apiserver.cpu), and of its raw runs, the host API
	// server's (raw-apiserver.cpu, paced-apiserver.cpu); the floor
	// pipeline's from when it watches until it stops, its idle window
	// and its run (throughput-floor.cpu); at each scale
	// count N, of the start's first 30 s, bin/manager's (start-N.cpu), the
	// host API server's (start-N-host-apiserver.cpu) and one tenant API
	// server's (start-N-tenant-apiserver.cpu), and bin/manager's heap-N,
	// goroutines-N.txt and metrics-N.txt once Ready; and the bench's own
	// goroutines around the spawn step's stops
	// (goroutines-before-spawns.txt, goroutines-after-stops.txt).
	Profiles string
	// Args are the command-line flags the run was given, for the command
	// the report records: make bench (bin/tenantry-dev bench Args...).
	Args []string
}

// DefaultOptions are the options `make bench` runs with: every step, at
// full size.
func DefaultOptions() Options {
	return Options{
		Out:               "bench/results",
		Nodes:             2,
		Steps:             parseStepsDefault(),
		ScaleTenants:      []int{100, 250, 500, 1000},
		ScaleServers:      4,
		ScaleObjects:      3,
		ScaleExtraObjects: 10,
		ScaleIdleWindow:   20 * time.Second,
		HandoverClusters:  300,
		AttackTenants:     10,
		SpawnClusters:     50,
		MemoryClusters:    100,
		LatencySamples:    300,
		LatencyRate:       50,
		PodSamples:        200,
		RealPodSamples:    30,
		ControlPlanes:     20,
		RealPodRate:       1,
		RealDNSQueries:    1000,
		ThroughputObjects: 5000,
		ThroughputWriters: 16,
	}
}

// Steps are the bench's steps, in the order they run.
var Steps = []string{"starts", "spawn", "memory", "pods", "dns", "real-pods", "control-planes", "sync", "attack", "scale", "handover"}

// ParseSteps reads a comma-separated list of step names, for
// Options.Steps.
func ParseSteps(v string) (map[string]bool, error) {
	steps := map[string]bool{}
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(Steps, f) {
			return nil, fmt.Errorf("unknown step %q: the steps are %s", f, strings.Join(Steps, ", "))
		}
		steps[f] = true
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no step named: the steps are %s", strings.Join(Steps, ", "))
	}
	return steps, nil
}

func parseStepsDefault() map[string]bool {
	steps, _ := ParseSteps(strings.Join(Steps, ","))
	return steps
}

// ParseCounts reads a comma-separated list of VirtualCluster counts, for
// Options.ScaleTenants.
func ParseCounts(s string) ([]int, error) {
	var counts []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		if len(counts) > 0 && n <= counts[len(counts)-1] {
			return nil, fmt.Errorf("counts must grow: %d after %d", n, counts[len(counts)-1])
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// Run runs the steps that o selects, in the order of Steps, and tells out
// what it measures; then it prints the results table to out and writes it
// to o.Out.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if o.Profiles != "" {
		if err := os.MkdirAll(o.Profiles, 0o755); err != nil {
			return fmt.Errorf("the profiles' directory: %w", err)
		}
	}
	var results []result
	if o.Steps["starts"] {
		fmt.Fprintln(out, "==> measuring the start of the test clusters")
		rs, err := clusterStart(ctx, o)
		if err != nil {
			return fmt.Errorf("cluster start: %w", err)
		}
		results = append(results, rs...)
	}
	if libraryStepsIn(o.Steps) {
		rs, err := runLibrarySteps(ctx, o, out)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	if o.Steps["dns"] {
		fmt.Fprintln(out, "==> measuring the tenant DNS server")
		rs, err := runDNS(ctx, o)
		if err != nil {
			return fmt.Errorf("dns: %w", err)
		}
		results = append(results, rs...)
	}
	if o.Steps["real-pods"] {
		fmt.Fprintln(out, "==> measuring Pod start and DNS on real nodes through bin/manager")
		rs, err := runRealPods(ctx, o, out)
		if err != nil {
			return fmt.Errorf("real-pods: %w", err)
		}
		results = append(results, rs...)
	}
	if o.Steps["control-planes"] {
		fmt.Fprintln(out, "==> measuring the control planes Tenantry runs, on real nodes")
		rs, err := runControlPlanes(ctx, o, out)
		if err != nil {
			return fmt.Errorf("control-planes: %w", err)
		}
		results = append(results, rs...)
	}
	if o.Steps["sync"] {
		fmt.Fprintln(out, "==> measuring sync latency and throughput through bin/manager")
		rs, err := runSync(ctx, o, out)
		if err != nil {
			return fmt.Errorf("sync: %w", err)
		}
		results = append(results, rs...)
	}
	if o.Steps["attack"] {
		fmt.Fprintln(out, "==> attacking bin/manager's memory with tenants of large objects")
		rs, err := runAttack(ctx, o, out)
		if err != nil {
			return fmt.Errorf("attack: %w", err)
		}
		results = append(results, rs...)
	}
	var points []scalePoint
	if o.Steps["scale"] {
		fmt.Fprintln(out, "==> measuring bin/manager at scale")
		rs, ps, err := runScale(ctx, o, out)
		if err != nil {
			return fmt.Errorf("scale: %w", err)
		}
		results, points = append(results, rs...), ps
	}

	if o.Steps["handover"] {
		fmt.Fprintln(out, "==> measuring handovers between sharded bin/manager replicas")
		rs, err := runHandover(ctx, o, out)
		if err != nil {
			return fmt.Errorf("handover: %w", err)
		}
		results = append(results, rs...)
	}

	rep := report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Command: "make bench (bin/tenantry-dev bench " + strings.Join(o.Args, " ") + ")",
		Machine: machine(),
		Results: results,
		Scale:   points,
	}
	table := rep.table()
	fmt.Fprint(out, "\n"+table)
	return rep.write(o.Out)
}
