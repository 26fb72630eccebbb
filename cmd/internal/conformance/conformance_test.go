package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// One run of the suite reports every tier: a tier counts the specs it
// selects that ran, a failed setup node fails every tier, and the specs
// that skipped themselves or that the tier does not select are skipped.
func TestTierOf(t *testing.T) {
	cases := []junitCase{
		{Name: "[SynchronizedBeforeSuite]", Status: "passed"},
		{Name: "[It] [sig-api-machinery] Watchers should observe add, update, and delete watch notifications on configmaps [Conformance]", Status: "passed"},
		{Name: "[It] [sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a pod. [Conformance]", Status: "failed"},
		{Name: "[It] [sig-apps] Deployment deployment should support rollover [Conformance]", Status: "passed"},
		{Name: "[It] [sig-apps] DaemonSet should run and stop simple daemon [Conformance]", Status: "timedout"},
		{Name: "[It] [sig-network] Services should serve a basic endpoint from pods [Conformance]", Status: "skipped"},
		{Name: "[It] [sig-apps] CronJob should schedule multiple jobs concurrently [Conformance]", Status: "passed"},
		{Name: "[It] [sig-storage] ConfigMap should be consumable from pods in volume [NodeConformance] [Conformance]", Status: "failed"},
		{Name: "[ReportAfterSuite] Kubernetes e2e suite report", Status: "failed"},
	}
	tier1, tier2 := tierOf(conformanceTiers[0], cases), tierOf(conformanceTiers[1], cases)
	for _, c := range []struct {
		got                               tierResult
		passed, failed, skipped, selected int
	}{
		{tier1, 2, 2, 4, 4}, // the watch and the CronJob pass; quota and the report fail
		{tier2, 3, 3, 2, 6}, // the ConfigMap volume spec reads a container's files: in neither tier
	} {
		r := c.got
		if r.passed != c.passed || r.failed != c.failed || r.skipped != c.skipped || r.selected != c.selected {
			t.Errorf("%s: passed %d failed %d skipped %d selected %d, want %d %d %d %d",
				r.tier, r.passed, r.failed, r.skipped, r.selected, c.passed, c.failed, c.skipped, c.selected)
		}
	}
	if !slices.Contains(tier2.failedSpecs, cases[4].Name) || slices.Contains(tier1.failedSpecs, cases[4].Name) {
		t.Errorf("the DaemonSet spec that timed out is tier 2's failure only: tier 1 %q, tier 2 %q", tier1.failedSpecs, tier2.failedSpecs)
	}
}

// Reports of runs made apart compare as one run's: a line per tier and
// cluster, and the tenant's share of the host's passes, naming what passes
// on the host only.
func TestCompareReports(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, cases ...junitCase) string {
		t.Helper()
		var b strings.Builder
		b.WriteString(`<testsuites><testsuite>`)
		for _, c := range cases {
			fmt.Fprintf(&b, `<testcase name=%q status=%q></testcase>`, c.Name, c.Status)
		}
		b.WriteString(`</testsuite></testsuites>`)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	watch := "[It] [sig-api-machinery] Watchers should observe add, update, and delete watch notifications on configmaps [Conformance]"
	rollover := "[It] [sig-apps] Deployment deployment should support rollover [Conformance]"
	host := write("host.xml", junitCase{Name: watch, Status: "passed"}, junitCase{Name: rollover, Status: "passed"})
	tenant := write("tenant.xml", junitCase{Name: watch, Status: "passed"}, junitCase{Name: rollover, Status: "failed"})
	var out strings.Builder
	err := Run(context.Background(), Options{Tiers: "1,2", Reports: "tenant-1=" + tenant + ",host=" + host}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"tier 1: tenant-1 passes 1 of the 1 specs the host passes (100.0%)",
		"tier 2: tenant-1 passes 1 of the 2 specs the host passes (50.0%)",
		"only on the host: " + rollover,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output\n%s\nwant a line %q", out.String(), want)
		}
	}
	// Parts of one cluster join: the rollover that failed in one part and
	// is skipped in the other still fails.
	part := write("tenant-part.xml", junitCase{Name: watch, Status: "skipped"}, junitCase{Name: rollover, Status: "skipped"})
	out.Reset()
	if err := Run(context.Background(), Options{Tiers: "3", Reports: "tenant-1=" + tenant + ",host=" + host + ",tenant-1=" + part}, &out); err != nil {
		t.Fatal(err)
	}
	if want := "tier 3: tenant-1 passes 1 of the 2 specs the host passes (50.0%)"; !strings.Contains(out.String(), want) {
		t.Errorf("output\n%s\nwant a line %q", out.String(), want)
	}
	if err := Run(context.Background(), Options{Tiers: "1", Reports: "tenant-1"}, &out); err == nil {
		t.Error("a report without its cluster: want an error")
	}
}

// Tier 3 is every conformance spec, run on real nodes, alone or by parts;
// the parts' reports of a cluster join into one, each spec counted as it
// ran in its part.
func TestTier3Parts(t *testing.T) {
	for _, o := range []Options{
		{Tiers: "1,3"},
		{Tiers: "2", Part: "node"},
		{Tiers: "3", Part: "kubelet"},
		{Tiers: "4"},
		{Tiers: "1", Focus: "DNS"},
		{Tiers: "3", Focus: "DNS", Part: "network"},
		{Tiers: "3", Focus: "DNS ("},
	} {
		if _, _, err := plan(o); err == nil {
			t.Errorf("tiers %q, part %q: want an error", o.Tiers, o.Part)
		}
	}
	tiers, run, err := plan(Options{Tiers: "3", Part: "storage"})
	if err != nil || len(tiers) != 1 || !run.realNodes || run.name != "tier 3, part storage" {
		t.Fatalf("tier 3, part storage: %v, %+v, %v", tiers, run, err)
	}
	if _, focused, err := plan(Options{Tiers: "3", Focus: "ClusterTrustBundle"}); err != nil || !focused.selector()("[It] [sig-auth] [Feature:ClusterTrustBundle] should be able to mount a single ClusterTrustBundle by name [Conformance]") ||
		focused.selector()("[It] [sig-network] DNS should provide DNS for services [Conformance]") {
		t.Errorf("tier 3, focus ClusterTrustBundle: %+v, %v", focused, err)
	}
	configMap := "[It] [sig-storage] ConfigMap should be consumable from pods in volume [NodeConformance] [Conformance]"
	dns := "[It] [sig-network] DNS should provide DNS for services [Conformance]"
	if !run.selector()(configMap) || run.selector()(dns) {
		t.Error("part storage selects sig-storage's specs only")
	}
	if !tiers[0].selector()(dns) || len(tiers[0].skip) > 0 {
		t.Error("tier 3 selects every spec, and skips none")
	}

	storage := []junitCase{{Name: "[SynchronizedBeforeSuite]", Status: "passed"}, {Name: configMap, Status: "passed"}, {Name: dns, Status: "skipped"}}
	network := []junitCase{{Name: "[SynchronizedBeforeSuite]", Status: "failed"}, {Name: configMap, Status: "skipped"}, {Name: dns, Status: "failed"}}
	r := tierOf(tiers[0], joinCases(storage, network))
	if r.passed != 1 || r.failed != 2 || r.selected != 3 || r.skipped != 0 {
		t.Errorf("joined parts: passed %d failed %d skipped %d selected %d, want 1 2 0 3 (the second part's setup failed)", r.passed, r.failed, r.skipped, r.selected)
	}
}

// The netpol tier is sig-network's NetworkPolicy specs, which are not
// conformance specs, on real nodes and alone; SCTP's are left out.
func TestNetpolTier(t *testing.T) {
	for _, o := range []Options{{Tiers: "3,netpol"}, {Tiers: "netpol", Part: "network"}} {
		if _, _, err := plan(o); err == nil {
			t.Errorf("tiers %q, part %q: want an error", o.Tiers, o.Part)
		}
	}
	_, run, err := plan(Options{Tiers: "netpol"})
	if err != nil || !run.realNodes || run.labels == "" || strings.Contains(run.labels, "Conformance") {
		t.Fatalf("netpol: %+v, %v", run, err)
	}
	for spec, want := range map[string]bool{
		"[It] [sig-network] Netpol NetworkPolicy between server and client should deny ingress access to updated pod [Feature:NetworkPolicy]": true,
		"[It] [sig-network] NetworkPolicyLegacy [LinuxOnly] NetworkPolicy between server and client should support a 'default-deny' policy":   true,
		"[It] [sig-network] DNS should provide DNS for services [Conformance]":                                                                false,
	} {
		if got := run.selector()(spec); got != want {
			t.Errorf("netpol selects %q: %v, want %v", spec, got, want)
		}
	}
}
