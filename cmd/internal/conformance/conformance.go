// Package conformance runs the upstream Kubernetes conformance suite
// (bin/e2e.test, with ginkgo) against a tenant of a dev environment and,
// as the control, against its host, and counts the results by tiers: what
// `tenantry-dev conformance` (and `make conformance`) runs.
// docs/conformance.md tells what the tiers hold and what they measured.
package conformance

import (
	"cmp"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenantry/tenantry/cmd/internal/devenv"
)

// Options configure a run of the suite.
type Options struct {
	// Dev is the dev environment the suite runs against.
	Dev devenv.Options
	// E2E and Ginkgo are the suite's binaries: bin/e2e.test and
	// bin/ginkgo, which make conformance builds; "" for the one beside
	// this binary.
	E2E    string
	Ginkgo string
	// Procs is how many processes run the suite's specs in parallel.
	Procs int
	// Out is the directory of the reports and logs.
	Out string
	// Tiers are the tiers reported, comma-separated ("1,2"); each cluster
	// runs the suite once, for the widest. Tier 3 runs on real nodes, the
	// others on simulated ones: it is asked for alone.
	Tiers string
	// Part, with tier 3, runs one part of it (a key of Tier3Parts); ""
	// runs all of it. Parts run apart compare as one with Reports.
	Part string
	// Focus, with tier 3 and no Part, runs only its specs whose names
	// match this regular expression (ginkgo's --focus): to look again at
	// a few specs.
	Focus string
	// Clusters are the dev environment's clusters the suite runs against,
	// comma-separated.
	Clusters string
	// Timeout bounds the suite on one cluster.
	Timeout time.Duration
	// Reports, "cluster=junit.xml,...", are reports of earlier runs to
	// count and compare as a run would, running nothing. A cluster named
	// more than once has its reports joined (the parts of tier 3, say): a
	// spec counts as it ran in any of them.
	Reports string
}

// DefaultOptions are what `make conformance` runs with: one tenant, two
// host nodes (simulated for tiers 1 and 2, which are defined on kwok's
// wherever real ones could run; real for tier 3), the suite against the
// host and the tenant.
func DefaultOptions() Options {
	dev := devenv.DefaultOptions()
	dev.Tenants = 1
	return Options{Dev: dev, Procs: 4, Out: "conformance-results", Tiers: "1,2", Clusters: devenv.HostName + ",tenant-1", Timeout: 6 * time.Hour}
}

// A conformanceTier is a share of the suite's conformance specs, chosen by
// the text of their names: those that match any of focus (all, when
// focus is empty), less those that match any of skip.
type conformanceTier struct {
	name        string
	focus, skip []string
	// realNodes: the tier's specs need containers that run.
	realNodes bool
	// labels is the suite's label filter; "": its conformance specs.
	labels string
}

// selector says whether the spec named spec (its full text, as in the
// JUnit report) is one of the tier's.
func (t conformanceTier) selector() func(spec string) bool {
	if len(t.focus) == 0 {
		return func(string) bool { return true }
	}
	return regexp.MustCompile(strings.Join(t.focus, "|")).MatchString
}

// simulatedSkip are the conformance specs of tiers 1 and 2 that cannot
// pass on simulated nodes, on a host as on a tenant: each needs a
// container that really runs. docs/conformance.md lists them with the
// reason.
var simulatedSkip = []string{
	// An API server or webhook served from a Pod: kwok runs no container.
	`Aggregator`, `AdmissionWebhook`, `CustomResourceConversionWebhook`,
}

// conformanceTiers are the tiers, the wider after the narrower. Tier 1 is
// the conformance specs of the API alone: API machinery (the garbage
// collector among them), CRDs, discovery, field validation, namespaces,
// quota, watch, leases, service accounts, endpoint slices, the Ingress and
// ServiceCIDR APIs, PodDisruptionBudgets, CronJobs, LimitRanges, events
// and authentication. Tier 2 adds those that need Pods Running and Ready
// on simulated nodes: the Pods lifecycle, Deployments, ReplicaSets,
// ReplicationControllers, DaemonSets and the scheduler's NodeSelector
// predicates. The specs that read what a container does (its output, its
// files, its network) are in neither: no container runs on a simulated
// node. Tier 3 is every conformance spec, on real nodes.
var conformanceTiers = []conformanceTier{
	{name: "tier 1", focus: tier1Focus, skip: simulatedSkip},
	{name: "tier 2", focus: append(slices.Clone(tier1Focus),
		`\[sig-node\] Pods `, `\[sig-apps\] Deployment`, `\[sig-apps\] ReplicaSet`, `\[sig-apps\] ReplicationController`,
		`\[sig-apps\] Daemon ?[Ss]et`, `\[sig-scheduling\] SchedulerPredicates`,
	), skip: simulatedSkip},
	{name: "tier 3", realNodes: true},
	// Not conformance specs: the NetworkPolicy specs of sig-network (the
	// Netpol ones of the connectivity matrix, and the older ones), on real
	// nodes, whose network plugin (kube-router in the kit) enforces them.
	// SCTP needs a kernel module this project's machines cannot load.
	{name: "netpol", realNodes: true, labels: "!Disruptive && !Flaky && !Feature:SCTPConnectivity",
		focus: []string{`\[sig-network\] Netpol`, `\[sig-network\] NetworkPolicy`}, skip: []string{`SCTP`}},
}

// Tier3Parts split tier 3 by SIG into runs that each fit into a few hours
// of this project's machine: the keys name the parts, the values select
// their specs as a tier's focus does. Together they hold every SIG with
// conformance specs in the pinned release.
var Tier3Parts = map[string][]string{
	"api":     {`\[sig-api-machinery\]`, `\[sig-architecture\]`, `\[sig-auth\]`, `\[sig-instrumentation\]`, `\[sig-cli\]`},
	"apps":    {`\[sig-apps\]`, `\[sig-scheduling\]`},
	"network": {`\[sig-network\]`},
	"node":    {`\[sig-node\]`},
	"storage": {`\[sig-storage\]`},
}

// tier1Focus selects tier 1's specs.
var tier1Focus = []string{
	`\[sig-api-machinery\]`, `\[sig-architecture\]`, `\[sig-auth\]`, `\[sig-instrumentation\]`,
	`Lease`, `EndpointSlice`, `Ingress API`, `IngressClass API`, `ServiceCIDR`, `DisruptionController`,
	`CronJob`, `LimitRange`, `PodTemplates`,
}

// tierResult is what one tier did on one cluster.
type tierResult struct {
	tier, cluster                     string
	passed, failed, skipped, selected int
	passedSpecs, failedSpecs          []string
	report                            string
}

func (r tierResult) String() string {
	return fmt.Sprintf("%-6s %-9s passed %4d  failed %4d  skipped %5d  selected %4d  (%s)",
		r.tier, r.cluster, r.passed, r.failed, r.skipped, r.selected, r.report)
}

// beside is the path of name beside this binary.
func beside(name string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(self), name), nil
}

// Run runs the suite as o says, or, with o.Reports, compares earlier
// runs' reports; it prints a line per tier and cluster to out, then the
// tenants' shares of the host's passes.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if o.Reports != "" {
		tiers, err := askedTiers(o.Tiers)
		if err != nil {
			return err
		}
		return compareReports(o.Reports, tiers, out)
	}
	tiers, run, err := plan(o)
	if err != nil {
		return err
	}
	// The suite runs in its report's directory: every path absolute.
	for _, p := range []struct {
		path *string
		name string
	}{{&o.E2E, "e2e.test"}, {&o.Ginkgo, "ginkgo"}} {
		if *p.path == "" {
			var err error
			if *p.path, err = beside(p.name); err != nil {
				return err
			}
		}
		abs, err := filepath.Abs(*p.path)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("no %s at %s (make conformance builds it): %w", p.name, abs, err)
		}
		*p.path = abs
	}
	if o.Out, err = filepath.Abs(o.Out); err != nil {
		return err
	}
	if o.Procs < 1 {
		return fmt.Errorf("--procs %d: at least one process runs the suite", o.Procs)
	}
	// Tiers 1 and 2 are defined on simulated nodes, wherever real ones
	// could run; tier 3 needs real ones.
	o.Dev.SimulatedNodes = !run.realNodes
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	if o.Dev.Dir == "" {
		o.Dev.Dir = filepath.Join(o.Out, "dev")
	}
	return devenv.With(ctx, o.Dev, out, func(d *devenv.Env) error {
		var results []tierResult
		for _, cluster := range strings.Split(o.Clusters, ",") {
			kubeconfig, ok := d.Kubeconfig(cluster)
			if !ok {
				return fmt.Errorf("no cluster %q in the dev environment", cluster)
			}
			fmt.Fprintf(out, "==> the conformance suite (%s) against %s\n", run.name, cluster)
			cases, report, err := runSuite(ctx, o, run, cluster, kubeconfig)
			if err != nil {
				return err
			}
			for _, t := range tiers {
				r := tierOf(t, cases)
				r.cluster, r.report = cluster, report
				fmt.Fprintln(out, r)
				results = append(results, r)
			}
		}
		summarize(out, results)
		return nil
	})
}

// plan says which tiers a run reports, and the share of the suite it runs:
// the widest tier asked, or the part of tier 3 asked.
func plan(o Options) (tiers []conformanceTier, run conformanceTier, err error) {
	if tiers, err = askedTiers(o.Tiers); err != nil {
		return nil, run, err
	}
	run = tiers[len(tiers)-1]
	if run.realNodes && len(tiers) > 1 {
		return nil, run, fmt.Errorf("--tiers %s: tier 3 and netpol run on real nodes, alone; tiers 1 and 2 on simulated ones; run them apart, and compare their reports with --reports", o.Tiers)
	}
	switch {
	case o.Part != "" && o.Focus != "":
		return nil, run, fmt.Errorf("--part %q and --focus %q: ask for one", o.Part, o.Focus)
	case o.Part != "":
		focus, ok := Tier3Parts[o.Part]
		if run.name != "tier 3" || !ok {
			return nil, run, fmt.Errorf("--part %q: only tier 3 has parts: %s", o.Part, strings.Join(slices.Sorted(maps.Keys(Tier3Parts)), ", "))
		}
		run.name, run.focus = run.name+", part "+o.Part, focus
	case o.Focus != "":
		if !run.realNodes {
			return nil, run, fmt.Errorf("--focus %q: only tier 3 takes a focus", o.Focus)
		}
		if _, err := regexp.Compile(o.Focus); err != nil {
			return nil, run, fmt.Errorf("--focus %q: %w", o.Focus, err)
		}
		run.name, run.focus = run.name+", focus "+o.Focus, []string{o.Focus}
	}
	return tiers, run, nil
}

// askedTiers are the tiers named in list ("1,2"), in conformanceTiers'
// order: a suite runs the widest, the last.
func askedTiers(list string) ([]conformanceTier, error) {
	asked := strings.Split(list, ",")
	var tiers []conformanceTier
	for _, t := range conformanceTiers {
		name := strings.TrimPrefix(t.name, "tier ") // "netpol" as it is
		if slices.Contains(asked, name) {
			tiers = append(tiers, t)
			asked = slices.DeleteFunc(asked, func(a string) bool { return a == name })
		}
	}
	if len(asked) > 0 {
		return nil, fmt.Errorf("unknown tier %q: tiers are 1, 2, 3 and netpol", asked[0])
	}
	return tiers, nil
}

// compareReports counts and compares reports, "cluster=junit.xml,...", by
// tiers; a cluster's reports are joined (see joinCases).
func compareReports(reports string, tiers []conformanceTier, out io.Writer) error {
	var clusters []string
	cases, paths := map[string][]junitCase{}, map[string][]string{}
	for _, r := range strings.Split(reports, ",") {
		cluster, path, ok := strings.Cut(r, "=")
		if !ok {
			return fmt.Errorf("--reports: %q is not cluster=junit.xml", r)
		}
		read, err := readJUnit(path)
		if err != nil {
			return err
		}
		if _, seen := cases[cluster]; !seen {
			clusters = append(clusters, cluster)
		}
		cases[cluster] = joinCases(cases[cluster], read)
		paths[cluster] = append(paths[cluster], path)
	}
	var results []tierResult
	for _, cluster := range clusters {
		for _, t := range tiers {
			tr := tierOf(t, cases[cluster])
			tr.cluster, tr.report = cluster, strings.Join(paths[cluster], " ")
			results = append(results, tr)
		}
	}
	summarize(out, results)
	return nil
}

// joinCases joins the cases of two reports of one cluster, each spec once:
// as it ran in either (a part's report lists the specs of the other parts
// as skipped), else as the first says; a setup node of each report is
// kept.
func joinCases(a, b []junitCase) []junitCase {
	at := map[string]int{}
	for i, c := range a {
		at[c.Name] = i
	}
	for _, c := range b {
		i, ok := at[c.Name]
		switch {
		case !ok || isSetup(c.Name):
			at[c.Name] = len(a)
			a = append(a, c)
		case a[i].Status == "skipped" || a[i].Status == "pending":
			a[i] = c
		}
	}
	return a
}

// isSetup says whether a case is one of the suite's own setup nodes, not a
// spec.
func isSetup(name string) bool {
	return strings.HasPrefix(name, "[") && strings.Contains(name, "Suite]")
}

// summarize prints a line per tier and cluster, then the tenants' shares
// of the host's passes.
func summarize(out io.Writer, results []tierResult) {
	fmt.Fprintln(out)
	for _, r := range results {
		fmt.Fprintln(out, r)
	}
	compareTiers(out, results)
}

// runSuite runs tier's conformance specs against one cluster, in
// o.Procs parallel processes, and reads the suite's JUnit report.
func runSuite(ctx context.Context, o Options, tier conformanceTier, cluster, kubeconfig string) ([]junitCase, string, error) {
	dir := filepath.Join(o.Out, cluster)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	args := []string{
		"--procs=" + strconv.Itoa(o.Procs), "--timeout=" + o.Timeout.String(), "--no-color",
		"--label-filter=" + cmp.Or(tier.labels, "Conformance"),
	}
	for _, f := range tier.focus {
		args = append(args, "--focus="+f)
	}
	for _, s := range tier.skip {
		args = append(args, "--skip="+s)
	}
	args = append(args, o.E2E, "--",
		"--kubeconfig="+kubeconfig, "--provider=skeleton", "--report-dir="+dir)
	log, err := os.Create(filepath.Join(dir, "e2e.log"))
	if err != nil {
		return nil, "", err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, o.Ginkgo, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = dir
	// A failed spec fails the run: the report says which.
	runErr := cmd.Run()
	report := filepath.Join(dir, "junit_01.xml")
	cases, err := readJUnit(report)
	if err != nil {
		return nil, "", fmt.Errorf("the conformance suite on %s: %w (run: %v; log: %s)", cluster, err, runErr, log.Name())
	}
	return cases, report, nil
}

// junitCase is one spec (or setup node) of a Ginkgo JUnit report.
type junitCase struct {
	Name   string `xml:"name,attr"`
	Status string `xml:"status,attr"`
}

// junitSuites is the part of a Ginkgo JUnit report read here.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

// readJUnit reads a report's cases.
func readJUnit(path string) ([]junitCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var suites junitSuites
	if err := xml.Unmarshal(data, &suites); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var cases []junitCase
	for _, s := range suites.Suites {
		cases = append(cases, s.Cases...)
	}
	return cases, nil
}

// tierOf counts a report's cases of tier by outcome: the specs the tier
// selects and that ran are its selected ones; the others, and the specs
// that skipped themselves, are skipped. The suite's own setup nodes count
// only when they failed.
func tierOf(tier conformanceTier, cases []junitCase) tierResult {
	r := tierResult{tier: tier.name}
	selects := tier.selector()
	for _, c := range cases {
		setup := isSetup(c.Name)
		switch {
		case setup && c.Status != "passed" && c.Status != "skipped":
			r.failed++
			r.failedSpecs = append(r.failedSpecs, c.Name)
		case setup:
		case !selects(c.Name) || c.Status == "skipped" || c.Status == "pending":
			r.skipped++
		case c.Status == "passed":
			r.passed++
			r.passedSpecs = append(r.passedSpecs, c.Name)
		default:
			r.failed++
			r.failedSpecs = append(r.failedSpecs, c.Name)
		}
	}
	r.selected = r.passed + r.failed
	return r
}

// compareTiers prints, for each tier run on the host and a tenant, the
// tenant's share of the host's passes and the specs that pass only on the
// host.
func compareTiers(out io.Writer, results []tierResult) {
	hosts := map[string]tierResult{}
	for _, r := range results {
		if r.cluster == devenv.HostName {
			hosts[r.tier] = r
		}
	}
	for _, r := range results {
		host, ok := hosts[r.tier]
		if r.cluster == devenv.HostName || !ok {
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
