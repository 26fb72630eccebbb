package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// agnhost is the image of the Pods the provisioned test runs: a real
// container that serves HTTP, logs, and has a shell.
const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"

// What a person does with the control planes Tenantry runs in
// `tenantry dev` on real nodes: one made by `--provisioned 1`, and one
// made by `tenantry create` in the running environment and reached
// through `tenantry connect`, as the README says. Against each, with the
// real kubectl: logs, exec with stdin, attach and port-forward of a real
// container, each through the virtual node's kubelet API, which the API
// server in a host Pod reaches on the kit network.
func TestDevProvisionedKubectl(t *testing.T) {
	tenantrytest.RequireRealNodes(t)
	metricsAddr, err := tenantrytest.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	dir := startDev(t, "--tenants=0", "--provisioned=1", "--nodes=2", "--metrics-bind-address="+metricsAddr)
	host := filepath.Join(dir, "host.kubeconfig")

	tenantry := filepath.Join(t.TempDir(), "tenantry")
	if out, err := exec.Command("go", "build", "-o", tenantry, "github.com/tenantry/tenantry/cmd/tenantry").CombinedOutput(); err != nil {
		t.Fatalf("building tenantry: %v\n%s", err, out)
	}
	if out, err := exec.CommandContext(t.Context(), tenantry, "create", "created", "--wait", "--host-kubeconfig", host).CombinedOutput(); err != nil {
		t.Fatalf("tenantry create created --wait: %v\n%s", err, out)
	}
	created := connect(t, tenantry, host, "created")

	for cluster, kubeconfig := range map[string]string{
		"provisioned-1": filepath.Join(dir, "provisioned-1.kubeconfig"),
		"created":       created,
	} {
		t.Run(cluster, func(t *testing.T) {
			k := newKubectl(t, kubeconfig)
			// A new cluster's controller-manager makes the namespace's
			// ServiceAccount soon after it is Ready; a Pod waits for it.
			tenantrytest.Eventually(t, time.Minute, "the default ServiceAccount", func(ctx context.Context) (bool, error) {
				out, err := k.command(ctx, "get", "serviceaccount", "default", "-o", "name").CombinedOutput()
				return err == nil, fmt.Errorf("%v: %s", err, out)
			})
			k.run("", "run", "web", "--image="+agnhost, "--", "netexec", "--http-port=8080")
			k.run("", "wait", "--for=condition=Ready", "pod/web", "--timeout=3m")
			// Ready says the container started, not that it has logged yet.
			tenantrytest.Eventually(t, 30*time.Second, "netexec's start in kubectl logs web", func(ctx context.Context) (bool, error) {
				out, err := k.command(ctx, "logs", "web").CombinedOutput()
				return err == nil && strings.Contains(string(out), "Started HTTP server on port 8080"), fmt.Errorf("%v: %q", err, out)
			})
			k.execStdin("web")
			k.attach("web", metricsAddr, cluster)

			conn, stop := k.portForward("pod/web", 8080)
			defer stop()
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := fmt.Fprint(conn, "GET /hostname HTTP/1.0\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("through kubectl port-forward: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(body) != "web" {
				t.Errorf("GET /hostname through kubectl port-forward: %d %q, %v; want 200 web", resp.StatusCode, body, err)
			}
			expectKubeletRequests(t, metricsAddr, cluster)
		})
	}
}

// connect runs `tenantry connect NAME` until the test ends, and returns
// the kubeconfig it wrote, pointed at the port it forwards.
func connect(t *testing.T, tenantry, host, name string) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), name+".kubeconfig")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, tenantry, "connect", name, "--out", kubeconfig, "--host-kubeconfig", host)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	var out tenantrytest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("tenantry connect %s:\n%s", name, out.String())
		}
	})
	forwarding := regexp.MustCompile(`^forwarding \S+ to virtualcluster/` + name + `'s API server`)
	tenantrytest.Eventually(t, time.Minute, "tenantry connect forwards", func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			t.Fatalf("tenantry connect %s exited: %v\n%s", name, err, out.String())
		default:
		}
		return forwarding.MatchString(out.String()), errors.New(out.String())
	})
	return kubeconfig
}
