package main

import (
	"context"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

var conformanceCommand = command{
	name: "conformance",
	summary: "Run the upstream Kubernetes conformance suite (bin/e2e.test, built by make conformance) against a tenant " +
		"of a dev environment and, as the control, against its host, in tiers; print one line per tier and cluster, " +
		"and write the JUnit reports.",
	flags: func(fs *flag.FlagSet) func(context.Context) error {
		o := conformanceOptions{dev: devOptions{tenants: 1, metricsBindAddress: "0", healthProbeBindAddress: "0"}}
		fs.StringVar(&o.e2e, "e2e", "", "The e2e test binary (default: e2e.test beside this binary).")
		fs.StringVar(&o.out, "out", "conformance-results", "Directory of the reports and logs.")
		fs.StringVar(&o.tiers, "tiers", "1,2", "Comma-separated tiers to run: 1 (no container runtime needed), 2 (1 and Pods running on simulated nodes).")
		fs.StringVar(&o.clusters, "clusters", "host,tenant-1", "Comma-separated clusters to run each tier against.")
		fs.IntVar(&o.dev.nodes, "nodes", 2, "Number of simulated host nodes.")
		fs.StringVar(&o.dev.assets, "assets", "", "Directory holding the control-plane binaries (default: $KUBEBUILDER_ASSETS, else this binary's own directory).")
		fs.DurationVar(&o.timeout, "timeout", 6*time.Hour, "Time a tier may take on one cluster.")
		return func(ctx context.Context) error { return runConformance(ctx, o, os.Stdout) }
	},
}

type conformanceOptions struct {
	dev      devOptions
	e2e      string
	out      string
	tiers    string
	clusters string
	timeout  time.Duration
}

// A conformanceTier selects conformance specs by the text of their names.
type conformanceTier struct {
	name        string
	focus, skip []string
}

// conformanceSkip are the conformance specs that cannot pass on simulated
// nodes, on a host as on a tenant: each needs a container that really runs.
// The README lists them with the reason.
var conformanceSkip = []string{
	// An API server or webhook served from a Pod: kwok runs no container.
	`Aggregator`, `AdmissionWebhook`, `CustomResourceConversionWebhook`,
}

// conformanceTiers are the tiers. Tier 1 is the conformance specs of the
// API alone: API machinery, CRDs, discovery, field validation, namespaces,
// quota, watch, leases, service accounts, endpoint slices, the Ingress and
// ServiceCIDR APIs, PodDisruptionBudgets, CronJobs, LimitRanges, events
// and authentication. Tier 2 is every conformance spec, those that need
// Pods Running and Ready on simulated nodes included.
var conformanceTiers = map[string]conformanceTier{
	"1": {name: "tier 1", focus: []string{
		`\[sig-api-machinery\]`, `\[sig-architecture\]`, `\[sig-auth\]`, `\[sig-instrumentation\]`,
		`Lease`, `EndpointSlice`, `Ingress API`, `IngressClass API`, `ServiceCIDR`, `DisruptionController`,
		`CronJob`, `LimitRange`, `PodTemplates`,
	}, skip: conformanceSkip},
	"2": {name: "tier 2", skip: conformanceSkip},
}

// tierResult is what one tier did on one cluster.
type tierResult struct {
	tier, cluster                     string
	passed, failed, skipped, selected int
	passedSpecs                       []string
	report                            string
}

func (r tierResult) String() string {
	return fmt.Sprintf("%-6s %-9s passed %4d  failed %4d  skipped %5d  selected %4d  (%s)",
		r.tier, r.cluster, r.passed, r.failed, r.skipped, r.selected, r.report)
}

func runConformance(ctx context.Context, o conformanceOptions, out io.Writer) error {
	if o.e2e == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		o.e2e = filepath.Join(filepath.Dir(self), "e2e.test")
	}
	// The suite runs in its report's directory: every path absolute.
	var err error
	if o.e2e, err = filepath.Abs(o.e2e); err != nil {
		return err
	}
	if o.out, err = filepath.Abs(o.out); err != nil {
		return err
	}
	if _, err := os.Stat(o.e2e); err != nil {
		return fmt.Errorf("no e2e test binary at %s (make conformance builds it): %w", o.e2e, err)
	}
	var tiers []string
	for _, t := range strings.Split(o.tiers, ",") {
		if _, ok := conformanceTiers[t]; !ok {
			return fmt.Errorf("unknown tier %q: tiers are 1 and 2", t)
		}
		tiers = append(tiers, t)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if o.dev.dir == "" {
		o.dev.dir = filepath.Join(o.out, "dev")
	}
	return withDev(ctx, o.dev, out, func(d *devEnv) error {
		var results []tierResult
		for _, tier := range tiers {
			for _, cluster := range strings.Split(o.clusters, ",") {
				kubeconfig, ok := d.kubeconfigs[cluster]
				if !ok {
					return fmt.Errorf("no cluster %q in the dev environment", cluster)
				}
				fmt.Fprintf(out, "==> %s against %s\n", conformanceTiers[tier].name, cluster)
				r, err := runTier(ctx, o, conformanceTiers[tier], cluster, kubeconfig)
				if err != nil {
					return err
				}
				fmt.Fprintln(out, r)
				results = append(results, r)
			}
		}
		fmt.Fprintln(out)
		for _, r := range results {
			fmt.Fprintln(out, r)
		}
		compareTiers(out, results)
		return nil
	})
}

// runTier runs one tier's specs against one cluster and reads its report.
func runTier(ctx context.Context, o conformanceOptions, tier conformanceTier, cluster, kubeconfig string) (tierResult, error) {
	dir := filepath.Join(o.out, strings.ReplaceAll(tier.name, " ", "")+"-"+cluster)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return tierResult{}, err
	}
	args := []string{
		"--kubeconfig=" + kubeconfig, "--provider=skeleton", "--report-dir=" + dir,
		"--ginkgo.label-filter=Conformance", "--ginkgo.no-color", "--ginkgo.timeout=" + o.timeout.String(),
	}
	for _, f := range tier.focus {
		args = append(args, "--ginkgo.focus="+f)
	}
	for _, s := range tier.skip {
		args = append(args, "--ginkgo.skip="+s)
	}
	log, err := os.Create(filepath.Join(dir, "e2e.log"))
	if err != nil {
		return tierResult{}, err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, o.e2e, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = dir
	// A failed spec fails the run: the report says which.
	runErr := cmd.Run()
	report := filepath.Join(dir, "junit_01.xml")
	r, err := readJUnit(report)
	if err != nil {
		return tierResult{}, fmt.Errorf("%s on %s: %w (run: %v; log: %s)", tier.name, cluster, err, runErr, log.Name())
	}
	r.tier, r.cluster = tier.name, cluster
	return r, nil
}

// junitSuites is the part of a Ginkgo JUnit report read here.
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name   string `xml:"name,attr"`
			Status string `xml:"status,attr"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// readJUnit counts a report's specs by outcome; the suite's own setup
// nodes count only when they failed.
func readJUnit(path string) (tierResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return tierResult{}, err
	}
	var suites junitSuites
	if err := xml.Unmarshal(data, &suites); err != nil {
		return tierResult{}, fmt.Errorf("reading %s: %w", path, err)
	}
	r := tierResult{report: path}
	for _, s := range suites.Suites {
		for _, c := range s.Cases {
			setup := strings.HasPrefix(c.Name, "[") && strings.Contains(c.Name, "Suite]")
			switch c.Status {
			case "passed":
				if !setup {
					r.passed++
					r.passedSpecs = append(r.passedSpecs, c.Name)
				}
			case "skipped", "pending":
				r.skipped++
			default:
				r.failed++
			}
		}
	}
	r.selected = r.passed + r.failed
	return r, nil
}

// compareTiers prints, for each tier run on the host and a tenant, the
// tenant's share of the host's passes and the specs that pass only on the
// host.
func compareTiers(out io.Writer, results []tierResult) {
	hosts := map[string]tierResult{}
	for _, r := range results {
		if r.cluster == hostName {
			hosts[r.tier] = r
		}
	}
	for _, r := range results {
		host, ok := hosts[r.tier]
		if r.cluster == hostName || !ok {
			continue
		}
		var missing []string
		for _, spec := range host.passedSpecs {
			if !slices.Contains(r.passedSpecs, spec) {
				missing = append(missing, spec)
			}
		}
		share := 100.0
		if host.passed > 0 {
			share = 100 * float64(host.passed-len(missing)) / float64(host.passed)
		}
		fmt.Fprintf(out, "%s: %s passes %d of the %d specs the host passes (%s%%)\n",
			r.tier, r.cluster, host.passed-len(missing), host.passed, strconv.FormatFloat(share, 'f', 1, 64))
		for _, m := range missing {
			fmt.Fprintf(out, "  only on the host: %s\n", m)
		}
	}
}

// hostName is the host's name in a dev environment.
const hostName = "host"
