package providers

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A manager started while the host is away waits for it, alive but not
// ready, and goes on once the host answers, with the probe address free
// for its own probes.
func TestWaitForHost(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{})
	path, err := env.Host.NewPath()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := path.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(t.TempDir(), "host.kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := path.Disconnect(); err != nil {
		t.Fatal(err)
	}
	probeAddr, err := tenantrytest.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- WaitForHost(t.Context(), Options{Kubeconfig: kubeconfigPath, HealthProbeBindAddress: probeAddr}, logr.Discard())
	}()

	get := func(ctx context.Context, what string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+probeAddr+what, nil)
		if err != nil {
			return 0, "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	tenantrytest.Eventually(t, 10*time.Second, "alive, not ready, saying why", func(ctx context.Context) (bool, error) {
		live, _, err := get(ctx, "/healthz")
		if err != nil {
			return false, err
		}
		ready, why, err := get(ctx, "/readyz")
		if err != nil {
			return false, err
		}
		return live == http.StatusOK && ready == http.StatusServiceUnavailable && strings.Contains(why, "waiting for the host API server"),
			nil
	})
	select {
	case err := <-done:
		t.Fatalf("returned while the host is away: %v", err)
	default:
	}

	if err := path.Reconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second): // the longest backoff is 5 s
		t.Fatal("still waiting 20 s after the host came back")
	}
	l, err := net.Listen("tcp", probeAddr)
	if err != nil {
		t.Fatalf("the probe address is still taken: %v", err)
	}
	_ = l.Close()
}

// A kubeconfig that cannot be loaded is an error at once, not a wait.
func TestWaitForHostRefusesABadKubeconfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := WaitForHost(ctx, Options{Kubeconfig: filepath.Join(t.TempDir(), "missing"), HealthProbeBindAddress: "0"}, logr.Discard())
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a missing kubeconfig: %v (waited: %v)", err, ctx.Err())
	}
}
