package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// clusterStartRuns is how many times each kind of environment is started
// for its start-time figure (the median is reported).
const clusterStartRuns = 3

// clusterStart measures what the test clusters' components cost to start:
// an environment of a host and one tenant, bare, with the tenant's
// controller-manager, and with the host's nodes too. It runs before the
// bench's own clusters, on an otherwise idle machine.
func clusterStart(ctx context.Context, o Options) ([]result, error) {
	var results []result
	kinds := []struct {
		what string
		opts tenantrytest.Options
	}{
		{"API servers only", tenantrytest.Options{}},
		{"+ tenant kube-controller-manager", tenantrytest.Options{TenantControllerManager: true}},
		{fmt.Sprintf("+ host kube-scheduler, kube-controller-manager, kwok, %d nodes Ready", o.Nodes),
			tenantrytest.Options{TenantControllerManager: true, HostNodes: o.Nodes}},
	}
	if tenantrytest.RealNodesSupported(o.Assets) == nil {
		kinds = append(kinds, struct {
			what string
			opts tenantrytest.Options
		}{fmt.Sprintf("+ host kube-scheduler, kube-controller-manager, %d real nodes Ready (kubelet, containerd, kube-proxy, kube-router)", o.Nodes),
			tenantrytest.Options{TenantControllerManager: true, HostKubelets: o.Nodes}})
	}
	for _, k := range kinds {
		k.opts.Tenants, k.opts.BinaryAssetsDirectory = 1, o.Assets
		var took []time.Duration
		for range clusterStartRuns {
			began := time.Now()
			env, err := tenantrytest.Start(ctx, k.opts)
			if err != nil {
				return nil, err
			}
			took = append(took, time.Since(began))
			if err := env.Stop(); err != nil {
				return nil, err
			}
		}
		results = append(results, ms("start: host + 1 tenant, "+k.what, percentile(took, 50), "",
			fmt.Sprintf("median of %d starts, to every component ready", clusterStartRuns)))
	}
	return results, nil
}

// processMemory reports the resident memory of the control-plane processes
// running from assets (the bench's own clusters, after its runs), per
// program: the mean over its processes.
func processMemory(assets string) []result {
	rss := map[string][]float64{}
	exes, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, exe := range exes {
		target, err := os.Readlink(exe)
		if err != nil || filepath.Dir(target) != filepath.Clean(assets) || filepath.Dir(exe) == fmt.Sprintf("/proc/%d", os.Getpid()) {
			continue // not a control-plane process (or this one)
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(exe), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			var kb float64
			if _, err := fmt.Sscanf(line, "VmRSS: %g kB", &kb); err == nil {
				rss[filepath.Base(target)] = append(rss[filepath.Base(target)], kb/1024)
			}
		}
	}
	var results []result
	for _, name := range slices.Sorted(maps.Keys(rss)) {
		sum := 0.0
		for _, v := range rss[name] {
			sum += v
		}
		results = append(results, result{
			Name: "memory (RSS) of " + name, Value: round(sum/float64(len(rss[name])), 0), Unit: "MiB",
			Note: fmt.Sprintf("mean of %d processes, after the bench's runs", len(rss[name])),
		})
	}
	return results
}
