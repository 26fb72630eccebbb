package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/tenantry/tenantry/cmd/internal/devenv"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

func TestRunUsage(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{args: nil, wantCode: 2, wantOut: "Commands:"},
		{args: []string{"help"}, wantCode: 0, wantOut: "'tenantry dev [flags]' runs 'tenantry-dev up [flags]'"},
		{args: []string{"bogus"}, wantCode: 2, wantOut: `tenantry-dev: unknown command "bogus"`},
		{args: []string{"dev"}, wantCode: 2, wantOut: `tenantry-dev: unknown command "dev"`},
		{args: []string{"up", "--help"}, wantCode: 0, wantOut: "Usage: tenantry-dev up [flags]"},
		{args: []string{"up", "--help"}, wantCode: 0, wantOut: "-control-planes-only"},
		{args: []string{"up", "--no-such-flag"}, wantCode: 2, wantOut: "no-such-flag"},
		{args: []string{"up", "extra"}, wantCode: 2, wantOut: `tenantry-dev up: unexpected arguments ["extra"]`},
		{args: []string{"up", "--log-level", "loud"}, wantCode: 1, wantOut: `invalid log level "loud"`},
		{args: []string{"demo", "--help"}, wantCode: 0, wantOut: "-timeout"},
		{args: []string{"bench", "--help"}, wantCode: 0, wantOut: "-scale-tenants"},
		{args: []string{"bench", "--steps", "nonsense"}, wantCode: 2, wantOut: "nonsense"},
		{args: []string{"conformance", "--help"}, wantCode: 0, wantOut: "-tiers"},
		{args: []string{"conformance", "--tiers", "4", "--reports", "host=/dev/null"}, wantCode: 1, wantOut: `unknown tier "4"`},
		{args: []string{"conformance", "--help"}, wantCode: 0, wantOut: "-part"},
		{args: []string{"conformance", "--tiers", "1", "--part", "node"}, wantCode: 1, wantOut: "only tier 3 has parts"},
		{args: []string{"bench-floor", "--help"}, wantCode: 0, wantOut: "-host-kubeconfig"},
	} {
		var out bytes.Buffer
		if code := run(tc.args, &out, &out); code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("run(%q) = %d with %q, want %d with %q", tc.args, code, out.String(), tc.wantCode, tc.wantOut)
		}
	}
	var out bytes.Buffer
	run([]string{"help"}, &out, &out)
	if strings.Contains(out.String(), "bench-floor") {
		t.Errorf("tenantry-dev help lists bench-floor, a process the bench starts:\n%s", out.String())
	}
}

// The demo, end to end, with one tenant, on real nodes: what `make demo`
// runs. A page fetched through the tenant's Service, and a real
// container's log line, show that the workload runs.
func TestDemo(t *testing.T) {
	tenantrytest.RequireRealNodes(t)
	var out bytes.Buffer
	o := devenv.DefaultOptions()
	o.Tenants = 1
	err := devenv.Demo(t.Context(), o, 2*time.Minute, &out)
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"2 real nodes", "7/7 converged", "2/2 available, Pods Running on kit-node-", "Complete, 1 Pod succeeded",
		"Pod probe fetched http://web.demo/hostname through the tenant's Service: web-",
		"(a real container): ", "GET /hostname", "demo complete",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

// The demo on simulated nodes (--simulated-nodes), as on a machine that
// cannot run real ones; a process of its own, as TestDemo's manager has
// this one's controller names.
func TestDemoSimulated(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "demo", "--tenants=1", "--nodes=2", "--simulated-nodes")
	cmd.Env = append(os.Environ(), runCLIEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{"2 simulated nodes (kwok), as --simulated-nodes asks", "7/7 converged", "cluster IP", "2/2 available, Pods Running on kwok-node-", "nodes Ready in the tenant", "Complete, 1 Pod succeeded", "demo complete"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

// Without kwok the demo stops before it starts anything, naming the missing
// binary and how to build it.
func TestDemoWithoutKwok(t *testing.T) {
	assets := t.TempDir()
	for _, bin := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler"} {
		if err := os.WriteFile(filepath.Join(assets, bin), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	code := run([]string{"demo", "--assets", assets}, &out, &out)
	if code == 0 || !strings.Contains(out.String(), filepath.Join(assets, "kwok")) || !strings.Contains(out.String(), "make envtest") {
		t.Fatalf("demo without kwok = %d, %q; want a failure naming %s and make envtest", code, out.String(), filepath.Join(assets, "kwok"))
	}
}

// runCLIEnv makes the test binary run the CLI (TestMain): a test starts
// `tenantry-dev up` or `demo` as a process of its own, as a person does.
const runCLIEnv = "TENANTRY_TEST_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(runCLIEnv) == "1" {
		// The CLI as a process of a test's own (TestDemoSimulated,
		// TestDevKubectl).
		os.Exit(run(os.Args[1:], os.Stdout, os.Stdout))
	}
	// As main does: the library's own loggers are quiet.
	providers.SetProcessLoggers(logr.Discard())
	os.Exit(m.Run())
}
