package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

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
		{args: []string{"help"}, wantCode: 0, wantOut: "dev"},
		{args: []string{"bogus"}, wantCode: 2, wantOut: `unknown command "bogus"`},
		{args: []string{"dev", "--help"}, wantCode: 0, wantOut: "-tenants"},
		{args: []string{"dev", "--no-such-flag"}, wantCode: 2, wantOut: "no-such-flag"},
		{args: []string{"dev", "extra"}, wantCode: 2, wantOut: `unexpected arguments ["extra"]`},
		{args: []string{"dev", "--log-level", "loud"}, wantCode: 1, wantOut: `invalid log level "loud"`},
		{args: []string{"register", "--help"}, wantCode: 0, wantOut: "Usage: tenantry register NAME"},
		{args: []string{"register"}, wantCode: 2, wantOut: "missing NAME"},
		{args: []string{"register", "Not_A_Name", "--kubeconfig", "/dev/null"}, wantCode: 1, wantOut: `NAME "Not_A_Name" is not a VirtualCluster name`},
		{args: []string{"register", "a", "b"}, wantCode: 2, wantOut: `want NAME, got ["a" "b"]`},
		{args: []string{"register", "a"}, wantCode: 1, wantOut: "--kubeconfig is required"},
		{args: []string{"register", "a", "--kubeconfig", "/no/such/file", "--host-kubeconfig", "/dev/null"}, wantCode: 1, wantOut: "/no/such/file"},
		{args: []string{"list", "extra"}, wantCode: 2, wantOut: `unexpected arguments ["extra"]`},
	} {
		var out bytes.Buffer
		if code := run(tc.args, &out, &out); code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("run(%q) = %d with %q, want %d with %q", tc.args, code, out.String(), tc.wantCode, tc.wantOut)
		}
	}
}

// The demo, end to end, with one tenant, on real nodes: what `make demo`
// runs. A page fetched through the tenant's Service, and a real
// container's log line, show that the workload runs.
func TestDemo(t *testing.T) {
	tenantrytest.RequireRealNodes(t)
	var out bytes.Buffer
	err := runDemo(t.Context(), devOptions{tenants: 1, nodes: 2, metricsBindAddress: "0", healthProbeBindAddress: "0"}, 2*time.Minute, &out)
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

// A failed run keeps a temporary directory that holds logs, and says so;
// one without logs, or a run that succeeded, leaves nothing behind.
func TestFinishKeepsLogsOfFailures(t *testing.T) {
	failure := errors.New("the Deployment did not converge")
	for _, tc := range []struct {
		name     string
		log      string
		err      error
		wantKept bool
	}{
		{"failure with logs", "started\n", failure, true},
		{"failure without logs", "", failure, false},
		{"success", "started\n", nil, false},
	} {
		dir, err := os.MkdirTemp("", "tenantry-finish-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		if err := os.WriteFile(filepath.Join(dir, "host-kube-scheduler.log"), []byte(tc.log), 0o600); err != nil {
			t.Fatal(err)
		}
		err = (&devEnv{dir: dir, ownDir: true}).finish(tc.err)
		_, statErr := os.Stat(dir)
		if kept := statErr == nil; kept != tc.wantKept {
			t.Errorf("%s: directory kept = %v, want %v", tc.name, kept, tc.wantKept)
		}
		if !errors.Is(err, tc.err) || tc.wantKept != (err != nil && strings.Contains(err.Error(), dir)) {
			t.Errorf("%s: finish = %v", tc.name, err)
		}
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(runCLIEnv) == "1" {
		// The CLI as a process of a test's own (TestDevKubectl).
		os.Exit(run(os.Args[1:], os.Stdout, os.Stdout))
	}
	// As main does: the library's own loggers are quiet.
	providers.SetProcessLoggers(logr.Discard())
	os.Exit(m.Run())
}

// A kubeconfig that names a file or a plugin is refused before the host is
// asked anything, as the manager would refuse it.
func TestRegisterRefusesWhatTheManagerRefuses(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "tenant.kubeconfig")
	data := `apiVersion: v1
kind: Config
clusters:
- name: t
  cluster: {server: "https://10.0.0.1:6443", certificate-authority: /etc/tenant/ca.pem}
users:
- name: t
  user: {token: x}
contexts:
- name: t
  context: {cluster: t, user: t}
current-context: t
`
	if err := os.WriteFile(kubeconfig, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code := run([]string{"register", "t", "--kubeconfig", kubeconfig, "--host-kubeconfig", "/no/such/host"}, &out, &out)
	if code != 1 || !strings.Contains(out.String(), "reads certificate-authority from a file") || strings.Contains(out.String(), "/no/such/host") {
		t.Errorf("register of a kubeconfig naming a CA file: exit %d, %q; want exit 1 naming the file, before reading the host's kubeconfig", code, out.String())
	}
}
