package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"

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
		{args: []string{"help"}, wantCode: 0, wantOut: "run 'tenantry-dev help'"},
		{args: []string{"bogus"}, wantCode: 2, wantOut: `unknown command "bogus"`},
		{args: []string{"demo", "--tenants=1"}, wantCode: 2, wantOut: "demo is a development tool, in tenantry-dev: run 'tenantry-dev demo --tenants=1'"},
		{args: []string{"bench"}, wantCode: 2, wantOut: "run 'tenantry-dev bench'"},
		{args: []string{"conformance"}, wantCode: 2, wantOut: "run 'tenantry-dev conformance'"},
		{args: []string{"bench-floor"}, wantCode: 2, wantOut: `unknown command "bench-floor"`},
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
	var out bytes.Buffer
	run([]string{"help"}, &out, &out)
	for _, gone := range []string{"demo ", "bench ", "conformance ", "bench-floor"} {
		if strings.Contains(out.String(), "  "+gone) {
			t.Errorf("tenantry help lists %q, a command of tenantry-dev:\n%s", gone, out.String())
		}
	}
}

// runCLIEnv makes the test binary run the CLI (TestMain): a test starts
// `tenantry dev` as a process of its own, as a person does, since it
// replaces the process with tenantry-dev.
const runCLIEnv = "TENANTRY_TEST_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(runCLIEnv) == "1" {
		// The CLI as a process of a test's own (TestDevRunsTenantryDevUp).
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
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
