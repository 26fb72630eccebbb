package virtualcluster

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

const inlineKubeconfig = `apiVersion: v1
kind: Config
current-context: tenant
contexts:
- name: tenant
  context: {cluster: tenant, user: admin}
clusters:
- name: tenant
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: ` + "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lCQURBS0JnZ3Foa2pPUFFRREFqQWpNU0V3SHdZRFZRUUREQmhyTTNNdGMyVnkKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=" + `
users:
- name: admin
  user:
    token: hunter2-token
`

func TestRestConfigFromKubeconfig(t *testing.T) {
	cfg, err := RESTConfigFromKubeconfig([]byte(inlineKubeconfig))
	if err != nil {
		t.Fatalf("inline kubeconfig refused: %v", err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "hunter2-token" {
		t.Fatalf("config = host %q, token %q", cfg.Host, cfg.BearerToken)
	}

	for name, tc := range map[string]struct {
		kubeconfig string
		wantInErr  string
	}{
		"garbage":           {"this is: [not yaml hunter2-secret", "not a kubeconfig"},
		"scalar":            {"hunter2-secret", "not a YAML or JSON object"},
		"empty":             {"", "no current-context"},
		"unknown context":   {strings.Replace(inlineKubeconfig, "current-context: tenant", "current-context: other", 1), `"other" is not among`},
		"undefined cluster": {strings.Replace(inlineKubeconfig, "{cluster: tenant,", "{cluster: nowhere,", 1), `"nowhere"`},
		"undefined user":    {strings.Replace(inlineKubeconfig, "user: admin}", "user: nobody}", 1), `"nobody"`},
		"no server":         {strings.Replace(inlineKubeconfig, "server: https://127.0.0.1:6443", "server: ''", 1), "no server"},
		"CA file":           {strings.Replace(inlineKubeconfig, "certificate-authority-data:", "certificate-authority: /etc/ca.crt\n    x:", 1), "certificate-authority"},
		"token file":        {strings.Replace(inlineKubeconfig, "token: hunter2-token", "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token", 1), "tokenFile"},
		"client cert file":  {strings.Replace(inlineKubeconfig, "token: hunter2-token", "client-certificate: /etc/tls.crt", 1), "client-certificate"},
		"client key file":   {strings.Replace(inlineKubeconfig, "token: hunter2-token", "client-key: /etc/tls.key", 1), "client-key"},
		"exec plugin":       {strings.Replace(inlineKubeconfig, "token: hunter2-token", "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/steal}", 1), "exec plugin"},
		"auth-provider":     {strings.Replace(inlineKubeconfig, "token: hunter2-token", "auth-provider: {name: oidc}", 1), "auth-provider"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := RESTConfigFromKubeconfig([]byte(tc.kubeconfig))
			if !errors.Is(err, errInvalidKubeconfig) || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("error = %v, want errInvalidKubeconfig mentioning %q", err, tc.wantInErr)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error quotes the kubeconfig: %v", err)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	got := redact("json: invalid character 'h' in \"hunter2\" near `hunter2`")
	if strings.Contains(got, "hunter2") || strings.Contains(got, "'h'") {
		t.Fatalf("redact left a quoted span: %q", got)
	}
	long := redact(strings.Repeat("x ", 500))
	if len(long) > maxErrorLength+len("…") {
		t.Fatalf("redact kept %d bytes", len(long))
	}
}

// A tenant's kubeconfig sets no client-side limit: the tenant gets the
// manager's, not client-go's 5 requests per second.
func TestTenantClientLimits(t *testing.T) {
	cfg, err := RESTConfigFromKubeconfig([]byte(inlineKubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	(&Reconciler{}).limit(cfg, "alpha")
	if cfg.QPS != DefaultTenantQPS || cfg.Burst != DefaultTenantBurst {
		t.Errorf("QPS %v, burst %d; want the defaults", cfg.QPS, cfg.Burst)
	}
	if !strings.HasSuffix(cfg.UserAgent, " "+clusterregistry.UserAgentProduct+"/alpha") {
		t.Errorf("user agent %q: want Tenantry's, which tells its requests from people's", cfg.UserAgent)
	}
	if cfg.RateLimiter == nil || cfg.RateLimiter.QPS() != DefaultTenantQPS {
		t.Errorf("rate limiter %v: want one bucket shared by every client of the tenant", cfg.RateLimiter)
	}
	cfg.QPS, cfg.Burst, cfg.RateLimiter = 0, 0, nil
	(&Reconciler{TenantQPS: 300, TenantBurst: 600}).limit(cfg, "alpha")
	if cfg.QPS != 300 || cfg.Burst != 600 {
		t.Errorf("QPS %v, burst %d; want the flags'", cfg.QPS, cfg.Burst)
	}
	cfg.QPS, cfg.Burst = 7, 9
	(&Reconciler{TenantQPS: 300, TenantBurst: 600}).limit(cfg, "alpha")
	if cfg.QPS != 7 || cfg.Burst != 9 {
		t.Errorf("QPS %v, burst %d; want the kubeconfig's own", cfg.QPS, cfg.Burst)
	}
}

// A kubeconfig is parsed once per version of its Secret, and each caller
// gets a config of its own.
func TestKubeconfigParsedOncePerVersion(t *testing.T) {
	var s kubeconfigSecrets
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kc", ResourceVersion: "1"},
		Data:       map[string][]byte{"kubeconfig": []byte(inlineKubeconfig)},
	}
	a, sourceA, err := s.config(secret, "kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	a.QPS = 1234 // as limit does: another caller must not see it
	secret.Data["kubeconfig"] = []byte(strings.Replace(inlineKubeconfig, "127.0.0.1:6443", "10.0.0.1:6443", 1))
	b, sourceB, err := s.config(secret, "kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	if b == a || b.QPS != 0 {
		t.Fatal("two callers share one config")
	}
	if b.Host != "https://127.0.0.1:6443" || sourceB != sourceA {
		t.Fatalf("the same version was parsed again (host %q)", b.Host)
	}
	secret.ResourceVersion = "2"
	c, sourceC, err := s.config(secret, "kubeconfig")
	if err != nil || c.Host != "https://10.0.0.1:6443" {
		t.Fatalf("a new version was not parsed: host %v, %v", c, err)
	}
	if sourceC == sourceA {
		t.Fatal("a changed kubeconfig has the digest of the one before")
	}
	if len(s.parsed) != 1 {
		t.Fatalf("%d parsed versions kept, want the newest only", len(s.parsed))
	}
	secret.ResourceVersion, secret.Data["kubeconfig"] = "3", []byte("hunter2-secret")
	if _, _, err := s.config(secret, "kubeconfig"); !errors.Is(err, errInvalidKubeconfig) {
		t.Fatalf("a bad version: %v", err)
	}
}
