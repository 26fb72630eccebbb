package providers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testKubeconfig = `apiVersion: v1
kind: Config
current-context: a
contexts:
- {name: a, context: {cluster: a, user: u}}
- {name: b, context: {cluster: b, user: u}}
clusters:
- {name: a, cluster: {server: "https://a.example:6443"}}
- {name: b, cluster: {server: "https://b.example:6443"}}
users:
- {name: u, user: {token: t}}
`

func TestNewRestConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg, err := NewRestConfig(Options{Kubeconfig: path})
	if err != nil || cfg.Host != "https://a.example:6443" {
		t.Fatalf("--kubeconfig: %v, %v", cfg, err)
	}
	if !strings.Contains(cfg.UserAgent, "tenantry-manager") {
		t.Errorf("user agent %q does not name the manager", cfg.UserAgent)
	}
	if cfg.QPS != DefaultHostAPIQPS || cfg.Burst != DefaultHostAPIBurst {
		t.Errorf("host client limits %g/%d, want the defaults %d/%d (client-go's own 5/10 starves a thousand tenants)",
			cfg.QPS, cfg.Burst, DefaultHostAPIQPS, DefaultHostAPIBurst)
	}
	cfg, err = NewRestConfig(Options{Kubeconfig: path, HostAPIQPS: 7, HostAPIBurst: 9})
	if err != nil || cfg.QPS != 7 || cfg.Burst != 9 {
		t.Errorf("--kube-api-qps 7 --kube-api-burst 9: %g/%d, %v", cfg.QPS, cfg.Burst, err)
	}
	cfg, err = NewRestConfig(Options{Kubeconfig: path, KubeContext: "b"})
	if err != nil || cfg.Host != "https://b.example:6443" {
		t.Fatalf("--context b: %v, %v", cfg, err)
	}

	t.Setenv("KUBECONFIG", path)
	cfg, err = NewRestConfig(Options{})
	if err != nil || cfg.Host != "https://a.example:6443" {
		t.Fatalf("$KUBECONFIG: %v, %v", cfg, err)
	}

	missing := filepath.Join(dir, "missing")
	if _, err := NewRestConfig(Options{Kubeconfig: missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing --kubeconfig: error %v does not name the file", err)
	}
}
