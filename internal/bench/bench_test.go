package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

func TestParseSteps(t *testing.T) {
	steps, err := ParseSteps(" sync, scale ,,")
	if err != nil || len(steps) != 2 || !steps["sync"] || !steps["scale"] {
		t.Errorf("ParseSteps = %v, %v; want sync and scale", steps, err)
	}
	for _, bad := range []string{"", " , ", "sync,bogus"} {
		if _, err := ParseSteps(bad); err == nil {
			t.Errorf("ParseSteps(%q) did not fail", bad)
		}
	}
	if all := DefaultOptions().Steps; len(all) != len(Steps) {
		t.Errorf("default steps %v, want all of %v", all, Steps)
	}
}

func TestParseCounts(t *testing.T) {
	counts, err := ParseCounts("100, 250,,1000")
	if err != nil || !slices.Equal(counts, []int{100, 250, 1000}) {
		t.Errorf("ParseCounts = %v, %v; want [100 250 1000]", counts, err)
	}
	for _, bad := range []string{"0", "-3", "ten", "250,100", "100,100"} {
		if _, err := ParseCounts(bad); err == nil {
			t.Errorf("ParseCounts(%q) did not fail", bad)
		}
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0, time.Millisecond}, {50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}} {
		if got := percentile(d, tc.p); got != tc.want {
			t.Errorf("percentile(1..100 ms, %g) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if d[0] != 100*time.Millisecond {
		t.Error("percentile sorted its argument")
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
}

// The benchmark program, at a tiny size: every measure but the clusters'
// start times runs, through a bin/manager built for it, and is written.
func TestBenchSmall(t *testing.T) {
	out := t.TempDir()
	manager := buildManager(t)
	steps, err := ParseSteps("spawn,memory,pods,dns,sync,scale,handover")
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	err = Run(t.Context(), Options{
		Out: out, Assets: os.Getenv(tenantrytest.AssetsEnv), Steps: steps, Nodes: 1, SpawnClusters: 2, MemoryClusters: 2, LatencySamples: 5, PodSamples: 5, LatencyRate: 50,
		ThroughputObjects: 20, ThroughputWriters: 4, ManagerBinary: manager,
		ScaleTenants: []int{2, 4}, ScaleServers: 2, ScaleObjects: 1, ScaleExtraObjects: 1, ScaleIdleWindow: time.Second,
		// Enough that the fourth replica wins some: each VirtualCluster goes
		// to it with a chance of one in four, so none with 0.75^24 (0.1%);
		// at 9 that was 7.5%, and the step failed.
		HandoverClusters: 24,
	}, &log)
	if err != nil {
		t.Fatalf("bench failed: %v\n%s", err, log.String())
	}
	rep := readReport(t, out)
	names := map[string]bool{}
	for _, r := range rep.Results {
		names[r.Name] = true
		// Growths over a handful of objects or tenants are within the
		// heap's noise at this size, and may come out below zero; so may
		// CPU per object less the idle rate, over 20 objects; and the
		// last copy after the last create, whose copy can be in the
		// host's watch before the create's answer is in the writer's
		// hands.
		if r.Value < 0 && !strings.Contains(r.Name, "per synced object") && !strings.Contains(r.Name, "per idle tenant") && !strings.Contains(r.Name, "CPU") &&
			!strings.Contains(r.Name, "after the last tenant create") {
			t.Errorf("%s = %v", r.Name, r.Value)
		}
	}
	for _, want := range []string{"spawn p50 (to caches synced)", "heap per idle tenant", "added latency p99", "throughput ratio synced/raw",
		"scale: 4 VirtualClusters Ready after a manager start", "scale: goroutines per idle tenant",
		"scale: manager CPU per tenant start", "scale: manager RSS at 4 idle tenants",
		"host requests per synced object", "manager CPU per synced object", "floor pipeline CPU per copied object",
		"manager CPU per synced object over the floor pipeline's", "host API server CPU per object copied by the floor pipeline", "host API server CPU per synced object", "host API server CPU per raw create",
		"manager CPU per synced object, against the host API server's CPU per raw create", "host API server CPU per synced object, against per raw create", "scale: memory per synced object",
		"Pod start p50 (tenant create -> Running in the tenant)", "up-sync p99",
		"memory (RSS) of kube-controller-manager", "memory (RSS) of kwok",
		"dns: a tenant Service name, latency p50", "dns: tenant Service names answered per second",
		"sharded: takeover after a replica is killed, all its VirtualClusters' Leases", "sharded: handover after a replica is killed, all its VirtualClusters Ready", "sharded: VirtualCluster Lease writes at steady state"} {
		if !names[want] {
			t.Errorf("results lack %q", want)
		}
	}
	t.Logf("results:\n%s", log.String())
	if md, err := os.ReadFile(filepath.Join(out, "results.md")); err != nil || !strings.Contains(string(md), "| spawn p99 |") {
		t.Errorf("results.md: %v", err)
	}
	if len(rep.Scale) != 2 || rep.Scale[1].Tenants != 4 || rep.Scale[1].ReadySeconds <= 0 || rep.Scale[1].HeapMiB <= 0 {
		t.Errorf("scale points: %+v", rep.Scale)
	}
	if svg, err := os.ReadFile(filepath.Join(out, "scale.svg")); err != nil || !strings.Contains(string(svg), "<polyline") {
		t.Errorf("scale.svg: %v", err)
	}
}

func TestMain(m *testing.M) {
	// As bin/tenantry-dev does: the library's own loggers are quiet.
	providers.SetProcessLoggers(logr.Discard())
	// The sync step starts the floor pipeline from this binary, as it
	// does from bin/tenantry-dev.
	if len(os.Args) > 1 && os.Args[1] == FloorCommand {
		var o FloorOptions
		fs := flag.NewFlagSet(FloorCommand, flag.ExitOnError)
		o.BindFlags(fs)
		_ = fs.Parse(os.Args[2:])
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		err := RunFloorPipeline(ctx, o, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The real-pods step at a tiny size, on real nodes: Pod starts on both
// sides and DNS from a container, measured and written.
func TestBenchRealPods(t *testing.T) {
	tenantrytest.RequireRealNodes(t)
	manager := buildManager(t)
	steps, err := ParseSteps("real-pods")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var log bytes.Buffer
	err = Run(t.Context(), Options{
		Out: out, Assets: os.Getenv(tenantrytest.AssetsEnv), Steps: steps, ManagerBinary: manager,
		RealPodSamples: 3, RealPodRate: 2, RealDNSQueries: 50,
	}, &log)
	if err != nil {
		t.Fatalf("bench failed: %v\n%s", err, log.String())
	}
	rep := readReport(t, out)
	values := map[string]float64{}
	for _, r := range rep.Results {
		values[r.Name] = r.Value
	}
	for _, want := range []string{
		"real Pod start p50, tenant (create in the tenant -> container running, seen in the tenant)",
		"real Pod start p50, host (create in the host -> container running)",
		"real Pod start p99, tenant", "real Pod start p99, host",
	} {
		if v, ok := values[want]; !ok || v <= 0 {
			t.Errorf("%q = %v (reported: %v); want a positive time", want, v, ok)
		}
	}
	for _, want := range []string{
		"real Pod start overhead p50 (tenant p50 - host p50)",
		"DNS from a container, mean per query (dig's own work included; the clock's resolution 10 ms over the run)",
		"DNS from a container p50 (dig's query time, 1 ms resolution)", "DNS from a container p99 (dig's query time, 1 ms resolution)",
	} {
		if _, ok := values[want]; !ok {
			t.Errorf("no %q in %v", want, values)
		}
	}
}

// buildManager builds bin/manager for a bench run of the test's.
func buildManager(t *testing.T) string {
	t.Helper()
	manager := filepath.Join(t.TempDir(), "manager")
	if b, err := exec.Command("go", "build", "-o", manager, "github.com/tenantry/tenantry/cmd/manager").CombinedOutput(); err != nil {
		t.Fatalf("building bin/manager: %v\n%s", err, b)
	}
	return manager
}

// readReport reads the results.json a bench run wrote into dir.
func readReport(t *testing.T, dir string) report {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}
